"""List prices for the bill's estimate (:mod:`consumer.local.bill`): one region, one date, each with its source.

**An estimate, to be checked before use.** These figures were entered by hand on :data:`ENTERED` from the AWS list
prices for :data:`REGION` as last known to whoever typed them: the pricing pages below could not be opened from the
machine the table was written on, so nothing here was read off them that day. Open each page and compare before
relying on a figure; prices change, differ per region and leave out taxes, discounts and savings plans.

What is left out on purpose: every free tier (the first million SQS requests a month, Lambda's million requests and
400,000 GB-seconds, three dashboards, ten alarm metrics, ...), so a small account pays less than this says; volume
tiers (SQS past 100 billion requests a month, Lambda past 6 billion GB-seconds, custom metrics past 10,000).

**Lambda's figures** are the exception: read on :data:`LAMBDA_READ` off a stored copy of the Lambda pricing page, from
its worked examples for US East (N. Virginia), as its own table renders prices only in a browser: $0.20 per million
requests, $0.0000166667 per GB-second on x86 and $0.0000133334 on Arm, and $0.00925 per Event Poller Unit hour for an
SQS mapping in provisioned mode (one EPU per event poller, billed per second with a one-minute minimum). The SQS
request prices here agree with that day's published summaries of the SQS page.

Operator tooling: it never ships in the image (``consumer/local/``), and it reads no file and calls nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

REGION = "us-east-1"
#: The day the figures were typed in (not a day they were read off the pages: see the module's docstring).
ENTERED = "2026-11-28"
#: The day Lambda's figures were read off its pricing page (see the module's docstring).
LAMBDA_READ = "2026-11-30"
#: AWS bills a month of an hourly resource as 730 hours (365 * 24 / 12), the figure its pricing pages use.
HOURS_PER_MONTH = 730
#: SQS bills "each 64 KB chunk of a payload" as one request (a 256 KB payload is 4 requests).
#: https://aws.amazon.com/sqs/pricing/
SQS_CHUNK_BYTES = 64 * 1024
SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "Fargate": "https://aws.amazon.com/fargate/pricing/",
        "SQS": "https://aws.amazon.com/sqs/pricing/",
        "DynamoDB": "https://aws.amazon.com/dynamodb/pricing/on-demand/",
        "CloudWatch": "https://aws.amazon.com/cloudwatch/pricing/",
        "VPC (NAT gateway hours and data, public IPv4)": "https://aws.amazon.com/vpc/pricing/",
        "KMS": "https://aws.amazon.com/kms/pricing/",
        "Lambda (requests, GB-seconds per architecture, SQS event poller units)": "https://aws.amazon.com/lambda/pricing/",
    }
)


@dataclass(frozen=True)
class FargateRate:
    """Fargate's price of one task's resources: per vCPU-hour and per GB-hour of memory."""

    vcpu_hour: float
    gb_hour: float

    def task_hour(self, cpu_units: int, memory_mib: int) -> float:
        """One task's hour: ``cpu_units / 1024`` vCPU and ``memory_mib / 1024`` GB (ECS's units)."""
        return cpu_units / 1024 * self.vcpu_hour + memory_mib / 1024 * self.gb_hour


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    """The list prices the estimate multiplies by, in US dollars; see the module's docstring for their status."""

    region: str
    entered: str
    #: The day Lambda's prices were read off their page.
    lambda_read: str
    sources: Mapping[str, str]
    #: On-demand Fargate, Linux, by cdk.json's ``architecture`` (x86_64, arm64).
    fargate: Mapping[str, FargateRate]
    #: Fargate Spot's discount off on-demand x86_64 (Spot runs no ARM64 task). Spot prices move with spare capacity;
    #: this is the typical discount the Fargate pricing page advertises ("up to 70 %"), not a quoted price.
    fargate_spot_discount: float
    #: Per million requests (a request being each 64 KiB chunk of its payload), standard and FIFO queues.
    sqs_standard_per_million: float
    sqs_fifo_per_million: float
    #: On-demand DynamoDB, per million write request units (one per 1 KB of item written).
    dynamodb_write_per_million: float
    #: CloudWatch, per month: a standard-resolution alarm metric (a metric-math alarm pays per metric in it), a
    #: high-resolution one (period under 60 s), a composite alarm, a dashboard.
    alarm_metric_month: float
    alarm_high_resolution_metric_month: float
    composite_alarm_month: float
    dashboard_month: float
    #: A NAT gateway's hour and the data it processes, per GB; a public IPv4 address's hour, whether a NAT gateway's
    #: or a task's (AWS bills every in-use public IPv4 address, a Fargate task's included).
    nat_gateway_hour: float
    nat_gateway_gb: float
    public_ipv4_hour: float
    #: A custom metric's month (the first 10,000 metrics' tier, billed by the hour it is published): what Container
    #: Insights' metrics are billed as. CloudWatch Logs' standard ingestion, per GB: its performance log events.
    custom_metric_month: float
    logs_ingestion_gb: float
    #: A customer managed KMS key's month (its requests are left out: SQS reuses a data key for 5 minutes).
    kms_key_month: float
    #: Lambda, on-demand: per million requests (an invocation each: one per batch an SQS mapping delivers), and per
    #: GB-second of duration by the function's architecture (x86_64, arm64), the first tier (6 billion GB-seconds a
    #: month): memory in GB (``memory_mib / 1024``, as the page's examples divide) times the billed seconds.
    lambda_requests_per_million: float
    lambda_gb_second: Mapping[str, float]
    #: An Event Poller Unit's hour for an SQS mapping in provisioned mode (one EPU per event poller).
    sqs_epu_hour: float

    def fargate_rate(self, architecture: str, *, spot: bool = False) -> FargateRate:
        """The price of ``architecture``'s resources, on Fargate Spot if ``spot`` (x86_64 only)."""
        rate = self.fargate[architecture]
        if not spot:
            return rate
        # https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html
        if architecture != "x86_64":
            raise ValueError(f'"architecture" must be x86_64 on Fargate Spot (it runs no ARM64 task): {architecture}')
        keep = 1 - self.fargate_spot_discount
        return FargateRate(rate.vcpu_hour * keep, rate.gb_hour * keep)

    def sqs_per_million(self, *, fifo: bool) -> float:
        return self.sqs_fifo_per_million if fifo else self.sqs_standard_per_million


#: us-east-1, entered on :data:`ENTERED` (check each figure on its page before use: an estimate).
PRICES = PriceTable(
    region=REGION,
    entered=ENTERED,
    lambda_read=LAMBDA_READ,
    sources=SOURCES,
    fargate=MappingProxyType(
        {
            "x86_64": FargateRate(vcpu_hour=0.04048, gb_hour=0.004445),
            "arm64": FargateRate(vcpu_hour=0.03238, gb_hour=0.00356),
        }
    ),
    fargate_spot_discount=0.70,
    sqs_standard_per_million=0.40,
    sqs_fifo_per_million=0.50,
    dynamodb_write_per_million=0.625,
    alarm_metric_month=0.10,
    alarm_high_resolution_metric_month=0.30,
    composite_alarm_month=0.50,
    dashboard_month=3.00,
    nat_gateway_hour=0.045,
    nat_gateway_gb=0.045,
    public_ipv4_hour=0.005,
    custom_metric_month=0.30,
    logs_ingestion_gb=0.50,
    kms_key_month=1.00,
    lambda_requests_per_million=0.20,
    lambda_gb_second=MappingProxyType({"x86_64": 0.0000166667, "arm64": 0.0000133334}),
    sqs_epu_hour=0.00925,
)
