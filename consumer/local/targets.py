"""ECS or Lambda, worker by worker: both bills as a month at a steady message rate, and the rate at which the other
target becomes cheaper (the crossover), computed from the two curves.

At a steady ``rate`` (messages a second), a month:

* **on ECS**: the tasks the rate needs, ``max(min_tasks, ceil(rate / task_rate))`` with ``task_rate`` the contract's
  declared throughput per task (``concurrency * messages_per_call / average_duration``), priced as the bill prices
  its min_tasks (Fargate by the strategy's split, the tasks' idle polls, their NAT data or public addresses:
  :func:`consumer.local.bill.estimate_worker`), plus each message's SQS requests, guard writes and NAT data. A steady
  rate above zero keeps at least one task running, ``min_tasks: 0`` or not. The tasks' idle polls are counted whatever
  the rate (an upper bound: a busy loop's receives bring messages, which its measured requests count already);
* **on Lambda** (:mod:`consumer.local.lambda_bill`), for one assumption of messages per invocation: the mapping's idle
  polls, the Event Poller Units the rate needs in provisioned mode, ``max(minimum, ceil(rate / poller_rate))`` up to
  the maximum pollers, plus each message's requests, duration, SQS requests and guard writes.

:func:`crossover` walks the two curves (straight between the rates where a task or a poller is added) from the
worker's capacity at ``max_tasks`` down, and finds the lowest rate above which the target cheaper at that capacity
stays cheaper. The environment's own lines (NAT gateways, Container Insights, alarms, the key) are left out of both:
they are shared by the environment's workers. docs/targets.md's tables come from :mod:`consumer.local.targets_docs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

from consumer.local.bill import MILLION, NAT_DATA, SECONDS_PER_HOUR, Bill, WorkerCost, estimate_worker
from consumer.local.lambda_bill import Invocations, LambdaCost, NotOnLambda, estimate_lambda
from consumer.local.prices import HOURS_PER_MONTH, PriceTable

SECONDS_PER_MONTH = HOURS_PER_MONTH * SECONDS_PER_HOUR
ECS, LAMBDA = "ECS", "Lambda"


class Curve(Protocol):
    """A bill as a month at a steady rate, straight between the rates where a unit (a task, a poller) is added."""

    def units(self, rate: float) -> int:
        """The units ``rate`` keeps running."""
        ...

    def steps(self, upto: float) -> list[float]:
        """The rates below ``upto`` where a unit is added."""
        ...

    def month(self, rate: float, units: int | None = None) -> float:
        """A month at ``rate`` with ``units`` units (None: those the rate keeps)."""
        ...


@dataclass(frozen=True)
class EcsCurve:
    """A worker's ECS bill as a month at a steady rate."""

    cost: WorkerCost
    prices: PriceTable

    @property
    def task_rate(self) -> float:
        """Messages a second one task handles at the declared throughput."""
        return self.cost.messages_per_task_hour / SECONDS_PER_HOUR

    @property
    def capacity(self) -> float:
        """Messages a second the worker handles at ``max_tasks``."""
        return self.cost.plan.max_tasks * self.task_rate

    def units(self, rate: float) -> int:
        """The tasks ``rate`` keeps running."""
        return max(self.cost.plan.min_tasks, math.ceil(rate / self.task_rate))

    def steps(self, upto: float) -> list[float]:
        """The rates below ``upto`` where a task is added."""
        return [k * self.task_rate for k in range(1, math.ceil(upto / self.task_rate))]

    def month(self, rate: float, units: int | None = None) -> float:
        """A month at ``rate`` with ``units`` tasks (None: those the rate keeps running)."""
        cost = self.cost
        tasks = self.units(rate) if units is None else units
        through_nat = cost.network == NAT_DATA
        fleet = estimate_worker(
            cost.environment, replace(cost.plan, min_tasks=tasks), self.prices, cost.usage, through_nat=through_nat
        )
        per_message = cost.sqs_per_million + cost.dynamodb_per_million
        per_message += cost.network_per_million if through_nat else 0.0
        return fleet.month + rate * SECONDS_PER_MONTH * per_message / MILLION


@dataclass(frozen=True)
class LambdaCurve:
    """A worker's Lambda bill as a month at a steady rate, at ``invocations``' messages per invocation."""

    cost: LambdaCost
    invocations: Invocations
    prices: PriceTable

    def units(self, rate: float) -> int:
        """The event pollers ``rate`` keeps provisioned, from the minimum to the maximum (0 on-demand: no Event
        Poller Unit); a rate past the maximum's throughput waits in the queue."""
        pollers = self.cost.plan.provisioned_pollers
        if not pollers:
            return 0
        return min(pollers[1], max(pollers[0], math.ceil(rate / self.invocations.poller_rate)))

    def steps(self, upto: float) -> list[float]:
        """The rates below ``upto`` where a provisioned poller is added (none past the maximum)."""
        pollers = self.cost.plan.provisioned_pollers
        if not pollers:
            return []
        per_poller = self.invocations.poller_rate
        return [k * per_poller for k in range(pollers[0], min(pollers[1], math.ceil(upto / per_poller)))]

    def month(self, rate: float, units: int | None = None) -> float:
        """A month at ``rate`` with ``units`` provisioned pollers (None: those the rate keeps)."""
        pollers = self.units(rate) if units is None else units
        invocations = self.invocations
        per_message = invocations.per_million - invocations.pollers_per_million
        return (
            self.cost.idle_polls_month
            + pollers * HOURS_PER_MONTH * self.prices.sqs_epu_hour
            + rate * SECONDS_PER_MONTH * per_message / MILLION
        )

    def concurrency(self, rate: float) -> float:
        """The invocations at once ``rate`` keeps running (arrivals times duration)."""
        return rate * self.invocations.seconds / self.invocations.messages


@dataclass(frozen=True)
class Crossover:
    """``cheaper`` is the cheaper target at every rate above ``above`` up to ``capacity`` (None: at every rate)."""

    cheaper: str
    above: float | None
    capacity: float

    def __str__(self) -> str:
        if self.above is None:
            return (
                f"{self.cheaper} is cheaper at every rate up to the worker's max_tasks capacity ({rate(self.capacity)})"
            )
        return f"{self.cheaper} is cheaper above {rate(self.above)}"


def rate(value: float) -> str:
    """``2.47 msg/s``: a rate as the report and the docs write it."""
    return f"{value:,.2f} msg/s"


def crossover(ecs: Curve, on_lambda: Curve, capacity: float) -> Crossover:
    """The rate above which the target cheaper at ``capacity`` stays cheaper up to it (the module's docstring)."""
    points = sorted({0.0, capacity, *(r for r in ecs.steps(capacity) + on_lambda.steps(capacity) if r < capacity)})
    segments = list(zip(points, points[1:], strict=False))

    def difference(low: float, high: float, at: float) -> float:
        """ECS less Lambda at ``at``, with the tasks and pollers of the rates in (low, high]."""
        middle = (low + high) / 2
        return ecs.month(at, ecs.units(middle)) - on_lambda.month(at, on_lambda.units(middle))

    ecs_cheaper = difference(*segments[-1], capacity) < 0
    cheaper = ECS if ecs_cheaper else LAMBDA
    for low, high in reversed(segments):
        at_high, at_low = difference(low, high, high), difference(low, high, low)
        if (at_high < 0) != ecs_cheaper:  # a task or a poller added just above ``high`` turned it
            return Crossover(cheaper, high, capacity)
        if (at_low < 0) != ecs_cheaper:  # straight between: where the two lines meet
            return Crossover(cheaper, high - at_high * (high - low) / (at_high - at_low), capacity)
    return Crossover(cheaper, None, capacity)


@dataclass(frozen=True)
class TargetComparison:
    """One worker on both targets, and the crossover for each assumption of messages per invocation."""

    ecs: WorkerCost
    on_lambda: LambdaCost | NotOnLambda
    #: A full batch per invocation, and one message per invocation (None: the worker cannot run on Lambda).
    full: Crossover | None = None
    single: Crossover | None = None


def compare(bill: Bill) -> tuple[TargetComparison, ...]:
    """Each worker of ``bill`` on Lambda beside its ECS estimate, with the crossovers."""
    found = []
    for cost in bill.workers:
        on_lambda = estimate_lambda(cost.environment, cost.plan, bill.prices, cost.usage)
        if isinstance(on_lambda, NotOnLambda):
            found.append(TargetComparison(cost, on_lambda))
            continue
        ecs = EcsCurve(cost, bill.prices)
        full, single = (
            crossover(ecs, LambdaCurve(on_lambda, invocations, bill.prices), ecs.capacity)
            for invocations in (on_lambda.full, on_lambda.single)
        )
        found.append(TargetComparison(cost, on_lambda, full, single))
    return tuple(found)
