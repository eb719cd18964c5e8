"""ECS or Lambda (consumer/local/targets.py): each bill as a month at a steady rate, the crossover where the cheaper
target changes, and the report that shows both targets for every worker. The worker plans are the unit bill's
(tests/unit/support.py), whatever their handlers declare; :class:`Line` curves pin the crossover's own logic."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
from rich.console import Console

from consumer.local.bill import EnvironmentPlan, Measured, WorkerPlan, estimate
from consumer.local.demo_report import render_bill
from consumer.local.lambda_bill import LambdaCost, NotOnLambda, estimate_lambda
from consumer.local.prices import PRICES
from consumer.local.targets import ECS, LAMBDA, Crossover, EcsCurve, LambdaCurve, compare, crossover
from infra.settings import parse_environment
from tests.unit.support import ENVIRONMENT, UPSERTS, plan_of

#: What a demo measured for the upserts handler: 150 requests for 100 messages of 1,000 bytes.
FIGURES = Measured({UPSERTS: (150, 100, 100_000, 100)})
#: The crossover is reported to a hundredth of a message a second.
STEP = 0.01


def upsert(**overrides: object) -> WorkerPlan:
    """The unit bill's ``upsert`` worker (x86_64, Spot beyond one on-demand task, 3..6 tasks), changed by
    ``overrides`` (settings keys)."""
    raw = {**ENVIRONMENT["workers"]["upsert"], **overrides}  # type: ignore[index]
    return plan_of(parse_environment("test", {"workers": {"upsert": raw}})).workers[0]


def curves(worker: WorkerPlan) -> tuple[EcsCurve, LambdaCurve, LambdaCurve]:
    """``worker``'s ECS curve and its Lambda curves at full batches and at one message an invocation."""
    (cost,) = estimate([EnvironmentPlan(environment="test", workers=(worker,))], PRICES, FIGURES).workers
    on_lambda = estimate_lambda("test", worker, PRICES, cost.usage)
    assert isinstance(on_lambda, LambdaCost), on_lambda
    return (
        EcsCurve(cost, PRICES),
        LambdaCurve(on_lambda, on_lambda.full, PRICES),
        LambdaCurve(on_lambda, on_lambda.single, PRICES),
    )


@pytest.mark.parametrize("batches", ["full", "single"])
def test_crossover_is_where_the_ecs_and_lambda_bills_meet(batches: str) -> None:
    """At the crossover the two bills are within one step (0.01 msg/s) of each other; a step below, Lambda is
    cheaper, a step above, ECS."""
    ecs, full, single = curves(upsert(min_tasks=1, max_tasks=6))
    on_lambda = full if batches == "full" else single

    found = crossover(ecs, on_lambda, ecs.capacity)

    assert (found.cheaper, found.above is not None) == (ECS, True)
    assert found.above is not None
    slope = max(abs(curve.month(found.above + STEP) - curve.month(found.above)) for curve in (ecs, on_lambda))
    assert abs(ecs.month(found.above) - on_lambda.month(found.above)) <= slope
    assert ecs.month(found.above - STEP) > on_lambda.month(found.above - STEP)
    assert ecs.month(found.above + STEP) < on_lambda.month(found.above + STEP)


def test_crossover_at_full_batches_is_above_the_one_at_one_message_an_invocation() -> None:
    """A full batch spreads a request over ten messages and runs them in parallel rounds: Lambda stays cheaper to a
    higher rate than with one message an invocation."""
    ecs, full, single = curves(upsert(min_tasks=1))

    at_full, at_single = crossover(ecs, full, ecs.capacity).above, crossover(ecs, single, ecs.capacity).above

    assert at_full is not None and at_single is not None
    assert at_full > at_single


@dataclass(frozen=True)
class Line:
    """A bill of ``fixed`` a month, ``slope`` per msg/s, and ``per_unit`` for each of the ``ceil(rate / unit_rate)``
    units a rate keeps (none without ``unit_rate``)."""

    fixed: float = 0.0
    slope: float = 0.0
    per_unit: float = 0.0
    unit_rate: float = 0.0

    def units(self, rate: float) -> int:
        return math.ceil(rate / self.unit_rate) if self.unit_rate else 0

    def steps(self, upto: float) -> list[float]:
        return [k * self.unit_rate for k in range(1, math.ceil(upto / self.unit_rate))] if self.unit_rate else []

    def month(self, rate: float, units: int | None = None) -> float:
        return self.fixed + self.slope * rate + self.per_unit * (self.units(rate) if units is None else units)


def test_crossover_says_lambda_is_cheaper_at_every_rate_when_it_is() -> None:
    """A fleet of $100 a month against $10 per msg/s, up to 5 msg/s: Lambda is cheaper all the way."""
    found = crossover(Line(fixed=100), Line(slope=10), 5)

    assert found == Crossover(LAMBDA, None, 5)
    assert str(found) == "Lambda is cheaper at every rate up to the worker's max_tasks capacity (5.00 msg/s)"


def test_crossover_says_ecs_is_cheaper_at_every_rate_when_it_is() -> None:
    """$1 a task (a task a msg/s) against $50 of provisioned pollers: ECS is cheaper from the first message."""
    assert crossover(Line(per_unit=1, unit_rate=1), Line(fixed=50), 20) == Crossover(ECS, None, 20)


def test_crossover_between_steps_is_where_the_lines_cross() -> None:
    """$10 a task (a task a msg/s) against $12 per msg/s up to 3 msg/s: the bills cross at 5/6, 5/3 and 2.5 msg/s;
    above the last, ECS stays cheaper."""
    found = crossover(Line(per_unit=10, unit_rate=1), Line(slope=12), 3)

    assert (found.cheaper, found.above) == (ECS, pytest.approx(2.5))
    assert str(found) == "ECS is cheaper above 2.50 msg/s"


def test_crossover_at_a_step_is_the_rate_that_adds_the_unit() -> None:
    """$10 a month against $6 a poller (a poller a msg/s) up to 2 msg/s: one poller is cheaper up to 1 msg/s, the
    second one a rate above it needs is not: the crossover is 1 msg/s itself."""
    found = crossover(Line(fixed=10), Line(per_unit=6, unit_rate=1), 2)

    assert (found.cheaper, found.above) == (ECS, pytest.approx(1))


def test_ecs_curve_at_rest_is_the_bill_at_min_tasks() -> None:
    """At no traffic, the ECS month is the bill's month at min_tasks (its tasks, their idle polls and network)."""
    ecs, _, _ = curves(upsert())

    assert ecs.month(0) == pytest.approx(ecs.cost.month)


@pytest.mark.parametrize(("tasks_of_throughput", "tasks"), [(0.0, 0), (0.001, 1), (1.0, 1), (1.001, 2), (3.0, 3)])
def test_ecs_curve_adds_a_task_past_each_task_s_throughput(tasks_of_throughput: float, tasks: int) -> None:
    """At zero tasks at rest: none at no traffic, one for any trickle, another just past each task's throughput."""
    ecs, _, _ = curves(upsert(min_tasks=0))

    assert ecs.units(tasks_of_throughput * ecs.task_rate) == tasks


def test_ecs_curve_never_runs_fewer_than_min_tasks() -> None:
    """Three tasks at rest stay three while the rate needs fewer."""
    ecs, _, _ = curves(upsert(min_tasks=3))

    assert ecs.units(ecs.task_rate) == 3


def test_lambda_curve_at_rest_is_the_lambda_bill_at_rest() -> None:
    """At no traffic, the Lambda month is its idle polls (and the minimum pollers' EPUs where provisioned)."""
    _, full, _ = curves(replace(upsert(), provisioned_pollers=(2, 10)))

    assert full.month(0) == pytest.approx(full.cost.month)
    assert full.cost.pollers_month > 0


@pytest.mark.parametrize(
    ("pollers_of_throughput", "pollers"), [(0.0, 2), (2.0, 2), (2.001, 3), (5.0, 5), (10.0, 10), (10.001, 10)]
)
def test_lambda_curve_keeps_the_minimum_pollers_and_adds_one_past_each_poller_s_throughput(
    pollers_of_throughput: float, pollers: int
) -> None:
    """Provisioned (2, 10): two pollers up to two pollers' throughput, a third just past it, never an eleventh."""
    _, full, _ = curves(replace(upsert(), provisioned_pollers=(2, 10)))

    assert full.units(pollers_of_throughput * full.invocations.poller_rate) == pollers


def test_lambda_curve_steps_are_where_a_poller_is_added_between_minimum_and_maximum() -> None:
    """Provisioned (2, 10): the third to the tenth poller are added past 2 to 9 pollers' throughput, none after."""
    _, full, _ = curves(replace(upsert(), provisioned_pollers=(2, 10)))
    per_poller = full.invocations.poller_rate

    assert full.steps(100 * per_poller) == [pytest.approx(k * per_poller) for k in range(2, 10)]


def test_compare_prices_every_worker_on_both_targets() -> None:
    """Each worker of the bill gets its Lambda estimate, or the reason it has none, and a crossover per assumption."""
    bill = estimate([plan_of(parse_environment("test", ENVIRONMENT))], PRICES, FIGURES)

    resize, upsert_ = compare(bill)

    assert isinstance(resize.on_lambda, NotOnLambda)  # five_minutes: three rounds of 300 s are past 900 s
    assert (resize.full, resize.single) == (None, None)
    assert isinstance(upsert_.on_lambda, LambdaCost)
    assert upsert_.ecs.plan.handler == UPSERTS
    ecs, on_lambda = EcsCurve(upsert_.ecs, PRICES), upsert_.on_lambda
    assert (upsert_.full, upsert_.single) == (
        crossover(ecs, LambdaCurve(on_lambda, on_lambda.full, PRICES), ecs.capacity),
        crossover(ecs, LambdaCurve(on_lambda, on_lambda.single, PRICES), ecs.capacity),
    )
    assert upsert_.full != upsert_.single  # the two assumptions cross at different rates


def test_render_bill_shows_each_worker_on_both_targets() -> None:
    """The report's targets table has a row per worker with its ECS and Lambda figures and crossovers; a worker
    Lambda cannot run says why."""
    bill = estimate([plan_of(parse_environment("test", ENVIRONMENT))], PRICES, FIGURES)
    console = Console(record=True, width=400)

    render_bill(bill, console)

    text = console.export_text()
    _, upsert_ = compare(bill)
    assert isinstance(upsert_.on_lambda, LambdaCost)
    row = next(line for line in text.splitlines() if "upsert" in line and "cheaper" in line)
    assert f"${upsert_.ecs.month:,.2f}; ${upsert_.ecs.per_million:,.2f}" in row
    full, single = upsert_.on_lambda.full, upsert_.on_lambda.single
    assert f"${upsert_.on_lambda.month:,.2f}; ${full.per_million:,.2f} (10) / ${single.per_million:,.2f}" in row
    assert f"{upsert_.full}; {upsert_.single}" in row
    assert 'test resize cannot run on Lambda: "max_duration_seconds" must be at most' in text
    assert "Lambda's read on 2026-11-30" in text
