"""What a worker would cost on AWS Lambda, beside its ECS estimate (:mod:`consumer.local.bill`): the function its
:class:`~consumer.lambda_target.LambdaTarget` derives from the same contract, fed by an SQS event source mapping and
outside any VPC (so no NAT gateway, no public IPv4 address and no Fargate: the function is not put in the VPC).

Priced from the declaration and the settings, at the list prices of :mod:`consumer.local.prices`:

* **per month at rest**: the mapping's long polls of an empty queue, billed as SQS requests to the account. On-demand
  polling keeps :data:`IDLE_POLLERS` pollers when traffic is low: AWS's scaling page says Lambda "scales back the
  processing to five concurrent batches, and can optimize to as few as 2 ... However, this optimization is not
  available when you enable the maximum concurrency setting", which the mapping always sets
  (:attr:`~consumer.lambda_target.LambdaTarget.maximum_concurrency`). In provisioned mode, the minimum pollers poll,
  and each is an Event Poller Unit by the hour. Each poller is taken to long-poll for SQS's longest wait, 20 s (AWS
  documents long polling but not the wait it uses; a shorter wait would poll more often): 3 receives a minute each.
  https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html
* **per million messages**, for a stated number of messages per invocation (:class:`Invocations`): the mapping's
  BatchSize is an upper bound, so the report prices a full batch (a busy queue) and one message per invocation (a
  queue that hardly ever holds two). Lambda's requests, one per invocation; its duration in GB-seconds,
  ``memory_mib / 1024`` times the invocation's billed seconds: ``rounds_for(messages) * average_duration`` (a batch
  handler's one call, a FIFO batch's calls in order, else ``min(concurrency, messages)`` at once), whole seconds, so
  Lambda's rounding up to the millisecond never adds; priced by architecture. SQS requests: the mapping's receives
  and its DeleteMessageBatch calls, one of each per 10 messages of a batch (as consumer/local/mapping.py models the
  mapping), the producer's batch of 10, each per 64 KiB chunk of the message as for ECS; the idempotency guard's
  DynamoDB writes as for ECS; in provisioned mode, the Event Poller Units the rate adds beyond the minimum, at what
  one poller carries (:data:`POLLER_CONCURRENT_INVOKES` invocations at once, :data:`POLLER_POLLS_PER_SECOND` receives
  a second, :data:`POLLER_BYTES_PER_SECOND`).
  https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html

The environment's alarms, dashboard and KMS key stay whichever target runs the worker (the report's environment
lines); NAT gateways and Container Insights serve ECS tasks only. Left out, beside what the ECS estimate leaves out:
cold starts (a new execution environment's initialization is billed duration), the flush an invocation keeps at its
end, a handler's ``max_rate`` (not in the template: a paced handler's invocations wait, billed), the function's logs,
Lambda's free tier (a million requests and 400,000 GB-seconds a month per account) and retries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from consumer.errors import ContractError
from consumer.lambda_target import LambdaTarget
from consumer.limits import SQS_MAX_BATCH, SQS_MAX_WAIT_SECONDS
from consumer.local.bill import (
    GUARD_WRITES_PER_MESSAGE,
    MILLION,
    PRODUCER_SENDS_PER_MESSAGE,
    SECONDS_PER_HOUR,
    Usage,
    WorkerPlan,
    chunks_of,
)
from consumer.local.prices import HOURS_PER_MONTH, PriceTable

#: On-demand polling's pollers at low traffic with MaximumConcurrency set (services-sqs-scaling.html).
IDLE_POLLERS = 5
#: What one event poller of a mapping in provisioned mode handles at most: "up to 1 MB/sec of throughput and 10
#: concurrent invokes" (services-sqs-parameters.html), "or up to 10 SQS polling API calls per second"
#: (services-sqs-scaling.html). A megabyte of 10**6 bytes, the lower reading.
POLLER_CONCURRENT_INVOKES = 10
POLLER_POLLS_PER_SECOND = 10
POLLER_BYTES_PER_SECOND = 1_000_000
#: Receives a minute of one poller at an empty queue: a long poll every SQS_MAX_WAIT_SECONDS.
POLLS_PER_MINUTE = 60 / SQS_MAX_WAIT_SECONDS
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60


@dataclass(frozen=True, kw_only=True)
class Invocations:
    """A million messages on Lambda when each invocation carries ``messages`` of them, in US dollars."""

    messages: int
    #: One invocation's billed duration.
    seconds: int
    requests_per_million: float
    duration_per_million: float
    sqs_per_million: float
    dynamodb_per_million: float
    #: Provisioned mode: the Event Poller Units the messages add beyond the minimum pollers (0 on-demand).
    pollers_per_million: float
    #: The messages a second one event poller carries at most with this batch (what the EPUs above are sized by).
    poller_rate: float

    @property
    def per_million(self) -> float:
        return (
            self.requests_per_million
            + self.duration_per_million
            + self.sqs_per_million
            + self.dynamodb_per_million
            + self.pollers_per_million
        )


@dataclass(frozen=True, kw_only=True)
class LambdaCost:
    """One worker's estimate on Lambda."""

    environment: str
    plan: WorkerPlan
    target: LambdaTarget
    usage: Usage
    chunks: int
    #: The pollers that poll an empty queue: the minimum provisioned ones, else :data:`IDLE_POLLERS`.
    idle_pollers: int
    idle_polls_month: float
    #: Provisioned mode: the minimum pollers' Event Poller Units all month (0 on-demand).
    pollers_month: float
    #: A full batch (the mapping's BatchSize) per invocation, and one message per invocation.
    full: Invocations
    single: Invocations

    @property
    def month(self) -> float:
        return self.idle_polls_month + self.pollers_month


@dataclass(frozen=True, kw_only=True)
class NotOnLambda:
    """A worker Lambda cannot run as declared, and why (LambdaTarget's refusal, one line)."""

    environment: str
    plan: WorkerPlan
    reason: str


def estimate_lambda(environment: str, plan: WorkerPlan, prices: PriceTable, usage: Usage) -> LambdaCost | NotOnLambda:
    """``plan`` as a Lambda function (the module's docstring says how), or why it cannot be one."""
    try:
        target = LambdaTarget(
            contract=plan.contract,
            max_tasks=plan.max_tasks,
            memory_mib=plan.memory_mib,
            provisioned_pollers=plan.provisioned_pollers,
        )
    except ContractError as refusal:
        return NotOnLambda(environment=environment, plan=plan, reason=str(refusal))
    pollers = plan.provisioned_pollers
    idle_pollers = pollers[0] if pollers else IDLE_POLLERS
    sqs_price = prices.sqs_per_million(fifo=plan.contract.fifo)
    return LambdaCost(
        environment=environment,
        plan=plan,
        target=target,
        usage=usage,
        chunks=chunks_of(usage),
        idle_pollers=idle_pollers,
        idle_polls_month=idle_pollers * POLLS_PER_MINUTE * MINUTES_PER_MONTH * sqs_price / MILLION,
        pollers_month=idle_pollers * HOURS_PER_MONTH * prices.sqs_epu_hour if pollers else 0.0,
        full=invocations(target, target.esm_batch_size, prices, usage, plan.architecture),
        single=invocations(target, 1, prices, usage, plan.architecture),
    )


def invocations(
    target: LambdaTarget, messages: int, prices: PriceTable, usage: Usage, architecture: str
) -> Invocations:
    """A million messages at ``messages`` per invocation of ``target``'s function on ``architecture``."""
    contract = target.contract
    assert contract.average_duration_seconds is not None  # resolved by WorkerContract
    seconds = target.rounds_for(messages) * contract.average_duration_seconds
    invocations_per_million = MILLION / messages
    gigabytes = target.memory_mib / 1024  # as the pricing page's examples divide
    # One receive and one DeleteMessageBatch per 10 messages of the batch.
    calls = 2 * math.ceil(messages / SQS_MAX_BATCH)
    poller_rate = min(
        POLLER_CONCURRENT_INVOKES * messages / seconds,
        POLLER_POLLS_PER_SECOND * messages / math.ceil(messages / SQS_MAX_BATCH),
        POLLER_BYTES_PER_SECOND / max(1.0, usage.message_bytes),
    )
    epu_hours = MILLION / (poller_rate * SECONDS_PER_HOUR) if target.provisioned_pollers else 0.0
    return Invocations(
        messages=messages,
        seconds=seconds,
        requests_per_million=invocations_per_million * prices.lambda_requests_per_million / MILLION,
        duration_per_million=invocations_per_million * seconds * gigabytes * prices.lambda_gb_second[architecture],
        sqs_per_million=(calls / messages + PRODUCER_SENDS_PER_MESSAGE)
        * chunks_of(usage)
        * prices.sqs_per_million(fifo=contract.fifo),
        dynamodb_per_million=0.0
        if contract.idempotent
        else GUARD_WRITES_PER_MESSAGE * prices.dynamodb_write_per_million,
        pollers_per_million=epu_hours * prices.sqs_epu_hour,
        poller_rate=poller_rate,
    )
