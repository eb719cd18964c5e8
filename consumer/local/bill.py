"""What each environment's workers cost, as an estimate: ``make run``'s "What it costs (estimate)" table.

Read from the synthesized templates (``cdk.out``), as every local tool here reads the stack (what is priced is what
``cdk deploy`` would create), and multiplied by the list prices of :mod:`consumer.local.prices`:

* **per month at min_tasks** (730 h): each worker's ``min_tasks`` tasks (the scalable target's MinCapacity), split
  on-demand / Spot by the service's capacity provider strategy as :meth:`Capacity.split` says ECS places them,
  priced per vCPU (``cpu / 1024``) and GB (``memory_mib / 1024``) hour by ``architecture``; plus the long polls
  those tasks make with an empty queue (each receive loop asks once every 20 s) and their network: the polls' NAT
  data (:data:`SQS_CALL_BYTES` each) where the tasks reach SQS through a NAT gateway, or each task's public IPv4
  address where it runs in a public subnet (``nat_gateways: 0``);
* **per million messages**: SQS requests (the consumers' measured requests per message, plus the producer's
  SendMessageBatch of 10, each request billed once per 64 KiB chunk of a message: past 64 KiB an upper bound, as
  if every request carried one message), Fargate task-hours at the contract's declared throughput per task
  (``concurrency * messages_per_call / average_duration``, the figure the scaling target is made of,
  :attr:`consumer.contract.WorkerContract.scaling_target_backlog_per_task`) on the strategy's marginal task, and
  the idempotency guard's DynamoDB writes (:data:`GUARD_WRITES_PER_MESSAGE`), and the network again: the NAT data of
  the consumers' calls and the messages they carry (:func:`nat_bytes_per_message`), or the public IPv4 address of the
  task-hours the messages take;
* **fixed per environment**, on lines of their own: NAT gateways and their public IPv4 addresses, alarms (per alarm
  metric; a composite per alarm), dashboards and KMS keys, counted in the template, and Container Insights on the
  cluster the stack creates: its metrics (:func:`insights_metrics`) and performance log events
  (:func:`insights_events_per_minute`) at min_tasks; and, for an environment with NAT gateways, what
  ``nat_gateways: 0`` would change (:class:`WithoutNat`).

Left out: free tiers, CloudWatch Logs of the workers and the flow log, the consumer's own metrics (embedded metric
format), Container Insights' metrics of a worker at zero tasks in the hours a task runs, DynamoDB storage and reads,
the handlers' own traffic (a webhook's call through the NAT gateway), image pulls (their layers come through the S3
gateway endpoint, free), retries (a failed attempt adds a release and a second claim), heartbeat renewals (one
DynamoDB write per extension of a guarded message), taxes and discounts.
:func:`estimate` does no I/O; :func:`load_environments` reads the templates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from consumer.contract import WorkerContract
from consumer.limits import SQS_MAX_BATCH, SQS_MAX_WAIT_SECONDS
from consumer.local.demo_lane import DemoResult
from consumer.local.prices import HOURS_PER_MONTH, PRICES, SQS_CHUNK_BYTES, PriceTable
from consumer.stack_outputs import WORKER_METADATA_KEY, consumer_container

#: The idempotency guard's DynamoDB writes for a message processed once (consumer/runtime/idempotency.py): the
#: claim, a conditional PutItem, and the completion, one put of a BatchWriteItem; each item is under 1 KB (a
#: ``sha256:`` key), so one write request unit each. A worker declared ``idempotent`` has no guard: none.
#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html
GUARD_WRITES_PER_MESSAGE = 2
#: The producer's sends per message: consumer.producer sends SendMessageBatch calls of 10 (a producer sending one at
#: a time pays 1). The consumers' own requests are measured (their ``sqs_requests`` metric); the producer's are not.
PRODUCER_SENDS_PER_MESSAGE = 1 / SQS_MAX_BATCH
#: The network line of a worker whose tasks reach SQS through a NAT gateway (:attr:`WorkerCost.network`).
NAT_DATA = "NAT data"
#: The message size when the run measured none: 1 KiB (one chunk).
DEFAULT_MESSAGE_BYTES = 1024
#: The prefix of a stack's name before its environment's (infra.settings.stack_name_of; tests/unit/test_bill.py).
STACK_PREFIX = "SqsWorker-"
MILLION = 1_000_000
SECONDS_PER_HOUR = 3600
#: Fargate runs a task on x86_64 unless its task definition's RuntimePlatform says otherwise.
_ARCHITECTURES = {"X86_64": "x86_64", "ARM64": "arm64"}
#: The binary gigabyte of AWS's pricing examples; a decimal one would raise the per-GB lines by 7 %.
BYTES_PER_GB = 2**30
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60
#: What one SQS call puts through a NAT gateway besides the messages it carries, an assumption rounded up: a
#: ReceiveMessage as botocore signs it with a task role's session credentials is about 1.9 KB of request line,
#: headers and JSON (tests/unit/test_bill.py measures it), its response's headers and envelope a few hundred bytes, and
#: TCP, IP and TLS framing add a little to each.
SQS_CALL_BYTES = 3 * 1024
#: What one message adds to the calls that carry it besides its body, an assumption: its receipt handle, id, MD5 and
#: attributes in the receive's response, and the receipt handle again in its delete.
SQS_MESSAGE_ENVELOPE_BYTES = 2 * 1024
#: Container Insights (a cluster's ``containerInsights`` setting ``enabled``) publishes custom metrics, one per metric
#: name and set of dimensions (the Amazon ECS table of the CloudWatch user guide,
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-ECS.html): ten resource
#: metrics (CPU, memory and ephemeral storage reserved and used, network received and sent, storage read and written)
#: for the cluster, for each service and for each task definition family, from the tasks' events, so only while a
#: task runs; five counts per service (desired, running and pending tasks, deployments, task sets) and three for the
#: cluster (tasks, services, container instances), whatever runs.
INSIGHTS_RESOURCE_METRICS = 10
INSIGHTS_SERVICE_COUNTS = 5
INSIGHTS_CLUSTER_COUNTS = 3
#: Container Insights' performance log events, one a minute for the cluster, each service, each task and each of its
#: containers, ingested into /aws/ecs/containerinsights/<cluster>/performance: 1.5 KiB each, an assumption, above the
#: largest of the user guide's examples (a Task event, 1.3 KB as compact JSON; Container 0.65, Service 0.54, Cluster
#: 0.37: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-reference-performance-logs-ECS.html).
INSIGHTS_EVENT_BYTES = 1536


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """A service's capacity provider strategy: ``on_demand_base`` tasks on FARGATE, the rest split
    ``on_demand_weight``:``spot_weight`` between FARGATE and FARGATE_SPOT.
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html"""

    on_demand_base: int = 0
    on_demand_weight: int = 0
    spot_weight: int = 0

    def split(self, tasks: int) -> tuple[int, int]:
        """``(on-demand, spot)`` of ``tasks``: the base first, then by weight, rounded toward on-demand (the rule of
        infra.capacity_settings.SpotSettings.split, which tests/unit/test_bill.py holds this to)."""
        base = min(tasks, self.on_demand_base)
        total = self.on_demand_weight + self.spot_weight
        spot = ((tasks - base) * self.spot_weight) // total if total else 0
        return tasks - spot, spot

    @property
    def spot_share(self) -> float:
        """The share of a task beyond the base that runs on Spot (what a scale-out adds)."""
        total = self.on_demand_weight + self.spot_weight
        return self.spot_weight / total if total else 0.0


@dataclass(frozen=True, kw_only=True)
class WorkerPlan:
    """One worker as its stack deploys it."""

    worker: str
    handler: str
    cpu: int
    memory_mib: int
    architecture: str
    min_tasks: int
    #: The service's MaxCapacity: the fleet whose throughput bounds the comparison of targets (consumer.local.targets).
    max_tasks: int
    #: None: every task on-demand (the FARGATE launch type).
    capacity: Capacity | None
    contract: WorkerContract
    #: Its tasks run in a public subnet with a public IPv4 address (``nat_gateways: 0``).
    public_ip: bool = False
    #: Containers in its task (the consumer, and a tracing collector where the environment traces).
    containers: int = 1
    #: On Lambda, the event source mapping's ``(minimum, maximum)`` provisioned pollers; None: on-demand polling. No
    #: stack declares them yet, so the template reader leaves it None; the Lambda estimate prices it where set.
    provisioned_pollers: tuple[int, int] | None = None


@dataclass(frozen=True, kw_only=True)
class EnvironmentPlan:
    """One environment's stack: its workers and what it runs whatever the traffic."""

    environment: str
    workers: tuple[WorkerPlan, ...]
    nat_gateways: int = 0
    public_ipv4: int = 0
    alarm_metrics: int = 0
    high_resolution_alarm_metrics: int = 0
    composite_alarms: int = 0
    dashboards: int = 0
    kms_keys: int = 0
    #: The stack creates its cluster with Container Insights (an existing cluster's settings are not in the template).
    container_insights: bool = False


@dataclass(frozen=True)
class Usage:
    """What a message costs in requests and bytes, and where each figure came from (the report says)."""

    requests_per_message: float
    requests_source: str
    message_bytes: float
    size_source: str


class Figures(Protocol):
    """Where a handler's SQS requests per message and message size come from (:class:`Measured`: a demo run)."""

    def usage(self, handler: str) -> Usage: ...


@dataclass(frozen=True)
class Measured:
    """The demo's figures: per handler that ran, (consumers' SQS requests, messages processed, body bytes,
    messages produced)."""

    by_handler: Mapping[str, tuple[int, int, int, int]]

    def usage(self, handler: str) -> Usage:
        """``handler``'s own figures if it ran in the demo (and processed something), else the run's."""
        own = self.by_handler.get(handler)
        if own is not None and own[1] and own[3]:
            return Usage(own[0] / own[1], "measured", own[2] / own[3], "measured")
        every = list(self.by_handler.values())
        requests, processed, size, produced = (sum(figures[i] for figures in every) for i in range(4))
        if not processed or not produced:
            return Usage(0.0, "not measured", DEFAULT_MESSAGE_BYTES, "default")
        return Usage(requests / processed, "run mean", size / produced, "run mean")


def measured(result: DemoResult) -> Measured:
    """The figures of each handler that ran in ``result`` (several workers of one handler pooled)."""
    figures: dict[str, tuple[int, int, int, int]] = {}
    for lane in result.workers:
        produced = sum(lane.accounting.produced.values())
        before = figures.get(lane.handler, (0, 0, 0, 0))
        figures[lane.handler] = (
            before[0] + lane.sqs_requests,
            before[1] + lane.processed,
            before[2] + lane.body_bytes,
            before[3] + produced,
        )
    return Measured(figures)


@dataclass(frozen=True, kw_only=True)
class WorkerCost:
    """One worker's estimate, in US dollars."""

    environment: str
    plan: WorkerPlan
    on_demand: int
    spot: int
    fargate_month: float
    polls_month: float
    usage: Usage
    chunks: int
    messages_per_task_hour: float
    sqs_per_million: float
    fargate_per_million: float
    dynamodb_per_million: float
    #: "NAT data" (its tasks reach SQS through a NAT gateway), "public IPv4" (its tasks have their own address) or ""
    #: (neither known: an existing VPC's egress is not in the template).
    network: str = ""
    network_month: float = 0.0
    network_per_million: float = 0.0

    @property
    def month(self) -> float:
        return self.fargate_month + self.polls_month + self.network_month

    @property
    def per_million(self) -> float:
        return self.sqs_per_million + self.fargate_per_million + self.dynamodb_per_million + self.network_per_million


class FixedLine(NamedTuple):
    """One fixed cost: what, how many (in ``unit``, or a count where it has none), its month in US dollars."""

    what: str
    quantity: float
    cost: float
    unit: str = ""


@dataclass(frozen=True)
class WithoutNat:
    """What ``nat_gateways: 0`` would change in an environment with NAT gateways, a month at min_tasks: the gateways,
    their addresses and the idle polls' NAT data go; each task at min_tasks takes a public IPv4 address of its own.
    Per million messages each worker's NAT data goes too, and its task-hours take an address each."""

    gateways: float
    idle_data: float
    tasks: int
    task_addresses: float

    @property
    def saving(self) -> float:
        return self.gateways + self.idle_data - self.task_addresses


@dataclass(frozen=True)
class FixedCost:
    """One environment's costs that do not depend on its workers' traffic, and what going without NAT would change."""

    environment: str
    lines: tuple[FixedLine, ...]
    without_nat: WithoutNat | None = None

    @property
    def month(self) -> float:
        return sum(line.cost for line in self.lines)


@dataclass(frozen=True)
class Bill:
    workers: tuple[WorkerCost, ...]
    fixed: tuple[FixedCost, ...]
    prices: PriceTable


def chunks_of(usage: Usage) -> int:
    """The requests SQS bills a call carrying one of ``usage``'s messages: one per 64 KiB chunk of its body."""
    return max(1, math.ceil(usage.message_bytes / SQS_CHUNK_BYTES))


def nat_bytes_per_message(usage: Usage) -> float:
    """What a message puts through a NAT gateway: the consumers' calls per message (:data:`SQS_CALL_BYTES` each), its
    envelope in them (:data:`SQS_MESSAGE_ENVELOPE_BYTES`) and its body, received once. The producer's sends leave from
    wherever the producer runs, and DynamoDB's calls take the gateway endpoint."""
    return usage.requests_per_message * SQS_CALL_BYTES + SQS_MESSAGE_ENVELOPE_BYTES + usage.message_bytes


def task_hours(plan: WorkerPlan, prices: PriceTable) -> tuple[float, float]:
    """``(on-demand, Spot)``: the hour of one of ``plan``'s tasks on each (on-demand twice without a Spot strategy)."""
    on_demand_hour = prices.fargate_rate(plan.architecture).task_hour(plan.cpu, plan.memory_mib)
    if plan.capacity is None:
        return on_demand_hour, on_demand_hour
    return on_demand_hour, prices.fargate_rate(plan.architecture, spot=True).task_hour(plan.cpu, plan.memory_mib)


def fleet_hour(plan: WorkerPlan, prices: PriceTable, tasks: int) -> float:
    """An hour of ``tasks`` of ``plan``'s tasks, split between on-demand and Spot as its strategy places them."""
    on_demand, spot = (plan.capacity or Capacity(on_demand_weight=1)).split(tasks)
    on_demand_hour, spot_hour = task_hours(plan, prices)
    return on_demand * on_demand_hour + spot * spot_hour


def idle_polls_per_task(contract: WorkerContract) -> float:
    """The receives a month one task's loops make at an empty queue: one long poll each every SQS_MAX_WAIT_SECONDS."""
    return contract.pollers * HOURS_PER_MONTH * SECONDS_PER_HOUR / SQS_MAX_WAIT_SECONDS


def estimate_worker(
    environment: str, plan: WorkerPlan, prices: PriceTable, usage: Usage, *, through_nat: bool = False
) -> WorkerCost:
    """``plan``'s month at ``min_tasks`` and its cost per million messages (the module's docstring says how);
    ``through_nat``: its tasks reach SQS through a NAT gateway."""
    contract = plan.contract
    capacity = plan.capacity or Capacity(on_demand_weight=1)
    on_demand, spot = capacity.split(plan.min_tasks)
    on_demand_hour, spot_hour = task_hours(plan, prices)
    sqs_price = prices.sqs_per_million(fifo=contract.fifo)
    # An empty queue still answers each receive loop's long poll, once every SQS_MAX_WAIT_SECONDS.
    polls = plan.min_tasks * idle_polls_per_task(contract)
    assert contract.average_duration_seconds is not None  # resolved by WorkerContract
    per_task_hour = contract.messages_in_flight / contract.average_duration_seconds * SECONDS_PER_HOUR
    # The task a scale-out adds: on Spot in the strategy's weights (beyond its base), else on-demand.
    marginal_hour = on_demand_hour + capacity.spot_share * (spot_hour - on_demand_hour)
    chunks = chunks_of(usage)
    task_hours_per_million = MILLION / per_task_hour
    network, network_month, network_per_million = "", 0.0, 0.0
    if plan.public_ip:
        network = "public IPv4"
        network_month = plan.min_tasks * HOURS_PER_MONTH * prices.public_ipv4_hour
        network_per_million = task_hours_per_million * prices.public_ipv4_hour
    elif through_nat:
        network = NAT_DATA
        network_month = polls * SQS_CALL_BYTES / BYTES_PER_GB * prices.nat_gateway_gb
        network_per_million = MILLION * nat_bytes_per_message(usage) / BYTES_PER_GB * prices.nat_gateway_gb
    return WorkerCost(
        environment=environment,
        plan=plan,
        on_demand=on_demand,
        spot=spot,
        fargate_month=HOURS_PER_MONTH * fleet_hour(plan, prices, plan.min_tasks),
        polls_month=polls * sqs_price / MILLION,
        usage=usage,
        chunks=chunks,
        messages_per_task_hour=per_task_hour,
        sqs_per_million=(usage.requests_per_message + PRODUCER_SENDS_PER_MESSAGE) * chunks * sqs_price,
        fargate_per_million=task_hours_per_million * marginal_hour,
        dynamodb_per_million=0.0
        if contract.idempotent
        else GUARD_WRITES_PER_MESSAGE * prices.dynamodb_write_per_million,
        network=network,
        network_month=network_month,
        network_per_million=network_per_million,
    )


def insights_metrics(plan: EnvironmentPlan) -> int:
    """The Container Insights metrics ``plan``'s cluster publishes all month at min_tasks: the counts always, the
    resource metrics of the cluster, and of each worker's service and task definition family, where a task runs."""
    running = [worker for worker in plan.workers if worker.min_tasks]
    return (
        INSIGHTS_CLUSTER_COUNTS
        + (INSIGHTS_RESOURCE_METRICS if running else 0)
        + INSIGHTS_SERVICE_COUNTS * len(plan.workers)
        + 2 * INSIGHTS_RESOURCE_METRICS * len(running)
    )


def insights_events_per_minute(plan: EnvironmentPlan) -> int:
    """Container Insights' performance log events a minute at min_tasks: the cluster's, each service's, and each
    task's with one per container of it."""
    return 1 + len(plan.workers) + sum(worker.min_tasks * (1 + worker.containers) for worker in plan.workers)


def estimate_fixed(plan: EnvironmentPlan, prices: PriceTable, workers: Sequence[WorkerCost] = ()) -> FixedCost:
    """``plan``'s monthly costs whatever its traffic, a line only for what the stack has; with its ``workers``' costs,
    what ``nat_gateways: 0`` would change where it has NAT gateways."""
    metrics = insights_metrics(plan) if plan.container_insights else 0
    lines = [
        ("NAT gateways", plan.nat_gateways, plan.nat_gateways * prices.nat_gateway_hour * HOURS_PER_MONTH),
        ("public IPv4 addresses", plan.public_ipv4, plan.public_ipv4 * prices.public_ipv4_hour * HOURS_PER_MONTH),
        ("alarm metrics", plan.alarm_metrics, plan.alarm_metrics * prices.alarm_metric_month),
        (
            "high-resolution alarm metrics",
            plan.high_resolution_alarm_metrics,
            plan.high_resolution_alarm_metrics * prices.alarm_high_resolution_metric_month,
        ),
        ("composite alarms", plan.composite_alarms, plan.composite_alarms * prices.composite_alarm_month),
        ("dashboards", plan.dashboards, plan.dashboards * prices.dashboard_month),
        ("KMS keys", plan.kms_keys, plan.kms_keys * prices.kms_key_month),
        ("Container Insights metrics", metrics, metrics * prices.custom_metric_month),
    ]
    fixed = [FixedLine(what, count, cost) for what, count, cost in lines if count]
    if plan.container_insights:
        events = insights_events_per_minute(plan) * MINUTES_PER_MONTH * INSIGHTS_EVENT_BYTES / BYTES_PER_GB
        fixed.append(FixedLine("Container Insights events", events, events * prices.logs_ingestion_gb, "GB"))
    without_nat = None
    if plan.nat_gateways:
        private = [cost for cost in workers if not cost.plan.public_ip]
        tasks = sum(cost.plan.min_tasks for cost in private)
        without_nat = WithoutNat(
            gateways=HOURS_PER_MONTH
            * (plan.nat_gateways * prices.nat_gateway_hour + plan.public_ipv4 * prices.public_ipv4_hour),
            idle_data=sum(cost.network_month for cost in private if cost.network == NAT_DATA),
            tasks=tasks,
            task_addresses=tasks * HOURS_PER_MONTH * prices.public_ipv4_hour,
        )
    return FixedCost(plan.environment, tuple(fixed), without_nat)


def estimate(environments: Iterable[EnvironmentPlan], prices: PriceTable, figures: Figures) -> Bill:
    """Every environment's workers and fixed costs, each worker with its handler's figures (:meth:`Measured.usage`)."""
    plans = list(environments)
    workers = {
        env.environment: tuple(
            estimate_worker(
                env.environment,
                worker,
                prices,
                figures.usage(worker.handler),
                through_nat=env.nat_gateways > 0 and not worker.public_ip,
            )
            for worker in env.workers
        )
        for env in plans
    }
    return Bill(
        workers=tuple(cost for env in plans for cost in workers[env.environment]),
        fixed=tuple(estimate_fixed(env, prices, workers[env.environment]) for env in plans),
        prices=prices,
    )


def bill_of_run(result: DemoResult, cdk_out: Path, prices: PriceTable = PRICES) -> Bill | str:
    """The estimate for every stack in ``cdk_out`` with ``result``'s figures, or why there is none (one line)."""
    try:
        return estimate(load_environments(cdk_out), prices, measured(result))
    except (OSError, ValueError, KeyError, TypeError) as error:  # ContractError is a ValueError
        return f"the templates in {cdk_out} could not be read: {type(error).__name__}: {error}"


# --------------------------------------------------------------------------- reading the templates


def environment_plan(environment: str, template: Mapping[str, Any]) -> EnvironmentPlan:
    """What ``template`` (a synthesized stack) deploys, for the estimate."""
    resources: Mapping[str, Any] = template["Resources"]

    def of_type(kind: str) -> list[tuple[str, Mapping[str, Any]]]:
        return [(key, r.get("Properties", {})) for key, r in resources.items() if r["Type"] == kind]

    services = {_ref(p.get("TaskDefinition")): (key, p) for key, p in of_type("AWS::ECS::Service")}
    targets = [(_service_of(p.get("ResourceId")), p) for _, p in of_type(_SCALABLE_TARGET)]
    minimum: dict[str, Any] = {service: p.get("MinCapacity") for service, p in targets}
    maximum: dict[str, Any] = {service: p.get("MaxCapacity") for service, p in targets}
    workers = []
    for key, definition in resources.items():
        if definition["Type"] != "AWS::ECS::TaskDefinition":
            continue
        properties, name = definition["Properties"], definition.get("Metadata", {}).get(WORKER_METADATA_KEY)
        service_id, service = services.get(key, ("", {}))
        env = {e["Name"]: e["Value"] for e in consumer_container(definition).get("Environment", [])}
        network = service.get("NetworkConfiguration", {}).get("AwsvpcConfiguration", {})
        min_tasks = int(minimum.get(service_id, service.get("DesiredCount", 1)))
        workers.append(
            WorkerPlan(
                worker=name or "default",
                handler=str(env.get("CONSUMER_HANDLER", "?")),
                cpu=int(properties["Cpu"]),
                memory_mib=int(properties["Memory"]),
                architecture=_ARCHITECTURES[properties.get("RuntimePlatform", {}).get("CpuArchitecture", "X86_64")],
                min_tasks=min_tasks,
                max_tasks=int(maximum.get(service_id, min_tasks)),
                capacity=_capacity(service.get("CapacityProviderStrategy")),
                contract=WorkerContract.from_env({k: v for k, v in env.items() if isinstance(v, str)}),
                public_ip=network.get("AssignPublicIp") == "ENABLED",
                containers=len(properties["ContainerDefinitions"]),
            )
        )
    alarms = [p for _, p in of_type("AWS::CloudWatch::Alarm")]
    periods = [period for alarm in alarms for period in _alarm_metric_periods(alarm)]
    return EnvironmentPlan(
        environment=environment,
        workers=tuple(workers),
        nat_gateways=len(of_type("AWS::EC2::NatGateway")),
        public_ipv4=len(of_type("AWS::EC2::EIP")),
        alarm_metrics=sum(1 for period in periods if period >= 60),
        high_resolution_alarm_metrics=sum(1 for period in periods if period < 60),
        composite_alarms=len(of_type("AWS::CloudWatch::CompositeAlarm")),
        dashboards=len(of_type("AWS::CloudWatch::Dashboard")),
        kms_keys=len(of_type("AWS::KMS::Key")),
        container_insights=any(
            {"Name": "containerInsights", "Value": "enabled"} in p.get("ClusterSettings", [])
            for _, p in of_type("AWS::ECS::Cluster")
        ),
    )


def load_environments(cdk_out: Path) -> list[EnvironmentPlan]:
    """Every stack of the cloud assembly in ``cdk_out`` (its manifest's order), named by environment."""
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    plans = []
    for stack, artifact in manifest.get("artifacts", {}).items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template = json.loads((cdk_out / artifact["properties"]["templateFile"]).read_text())
        plans.append(environment_plan(stack.removeprefix(STACK_PREFIX), template))
    return plans


_SCALABLE_TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"


def _ref(value: object) -> str:
    return str(value["Ref"]) if isinstance(value, Mapping) and "Ref" in value else ""


def _service_of(resource_id: object) -> str:
    """The service a scalable target's ResourceId names (``service/<cluster>/<GetAtt Service.Name>``)."""
    if isinstance(resource_id, Mapping):
        if "Fn::GetAtt" in resource_id:
            return str(resource_id["Fn::GetAtt"][0])
        return next((s for s in map(_service_of, resource_id.values()) if s), "")
    if isinstance(resource_id, list):
        return next((s for s in map(_service_of, resource_id) if s), "")
    return ""


def _capacity(strategy: Sequence[Mapping[str, Any]] | None) -> Capacity | None:
    if not strategy:
        return None
    by_provider = {item["CapacityProvider"]: item for item in strategy}
    on_demand, spot = by_provider.get("FARGATE", {}), by_provider.get("FARGATE_SPOT", {})
    return Capacity(
        on_demand_base=int(on_demand.get("Base", 0)),
        on_demand_weight=int(on_demand.get("Weight", 0)),
        spot_weight=int(spot.get("Weight", 0)),
    )


def _alarm_metrics(alarm: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """An alarm's metrics: its one metric, or each metric of its math (an expression is not billed)."""
    if "Metrics" in alarm:
        return [query["MetricStat"] for query in alarm["Metrics"] if "MetricStat" in query]
    return [alarm]


def _alarm_metric_periods(alarm: Mapping[str, Any]) -> list[int]:
    """The period of each metric an alarm is billed for: CloudWatch bills an alarm per metric it evaluates, a metric
    math alarm per metric in its expression, at the high-resolution price under a 60 s period.
    https://aws.amazon.com/cloudwatch/pricing/"""
    return [int(metric.get("Period", 60)) for metric in _alarm_metrics(alarm)]
