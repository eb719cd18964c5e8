"""The bill's estimate (consumer/local/bill.py): each figure against a hand computation written out with the list
prices as literals, so a change of a price or a formula shows here. The plans come from cdk.json settings this module
writes (:func:`plan_of`); tests/infra/test_bill.py holds the template reader to the same plans."""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest
from botocore.stub import ANY, Stubber
from rich.console import Console

from consumer.local.bill import (
    GUARD_WRITES_PER_MESSAGE,
    STACK_PREFIX,
    Bill,
    Capacity,
    EnvironmentPlan,
    Measured,
    WorkerPlan,
    estimate,
    measured,
)
from consumer.local.demo_lane import Accounting, DemoResult
from consumer.local.demo_report import render_bill, render_report
from consumer.local.prices import PRICES
from consumer.runtime.idempotency import Claim, DynamoDBStore
from infra.capacity_settings import SpotSettings
from infra.settings import EnvironmentSettings, parse_environment, stack_name_of
from tests.unit.test_demo import lane_of

FIVE_MINUTES = "tests.infra.handlers:five_minutes"  # max 300 s, concurrency 4: average 150 s; guarded
UPSERTS = "tests.infra.handlers:upserts"  # max 30 s, concurrency 8: average 15 s; idempotent (no guard)
ORDERED = "tests.infra.handlers:ordered"  # FIFO, max 30 s, concurrency 1
#: Two workers: one on Graviton at two tasks, one on x86_64 with one on-demand task and the rest on Spot, at three.
ENVIRONMENT = {
    "nat_gateways": 1,
    "workers": {
        "resize": {
            "handler": FIVE_MINUTES,
            "architecture": "arm64",
            "min_tasks": 2,
            "max_tasks": 4,
            "cpu": 256,
            "memory_mib": 512,
        },
        "upsert": {
            "handler": UPSERTS,
            "spot": {"on_demand_base": 1},
            "min_tasks": 3,
            "max_tasks": 6,
            "cpu": 512,
            "memory_mib": 1024,
        },
    },
}
#: What the demo measured: five_minutes ran (250 requests for 100 messages of 1,000 bytes); upserts did not, so it
#: takes the run's mean over every handler that ran: (250 + 50) / (100 + 100) = 1.5 requests, 400,000 / 200 = 2,000 B.
FIGURES = Measured({FIVE_MINUTES: (250, 100, 100_000, 100), "consumer.examples.demo:handle": (50, 100, 300_000, 100)})
#: Receives a month by one receive loop of an idle task: 730 h of one long poll every 20 s.
IDLE_POLLS = 730 * 3600 / 20


def plan_of(settings: EnvironmentSettings) -> EnvironmentPlan:
    """The plan the template of ``settings`` deploys, from the settings (tests/infra/test_bill.py checks the template
    reader gives the same)."""
    workers = tuple(
        WorkerPlan(
            worker=worker.name,
            handler=worker.handler,
            cpu=worker.cpu,
            memory_mib=worker.memory_mib,
            architecture=worker.architecture,
            min_tasks=worker.min_tasks,
            capacity=None
            if worker.spot is None
            else Capacity(
                on_demand_base=worker.spot.on_demand_base,
                on_demand_weight=worker.spot.on_demand_weight,
                spot_weight=worker.spot.spot_weight,
            ),
            contract=settings.contract(worker),
        )
        for worker in settings.workers
    )
    return EnvironmentPlan(environment=settings.name, workers=workers, nat_gateways=settings.nat_gateways)


def worker_plan(**overrides: object) -> WorkerPlan:
    """The ``resize`` worker of :data:`ENVIRONMENT`, changed by ``overrides`` (settings keys)."""
    raw = {**ENVIRONMENT["workers"]["resize"], **overrides}  # type: ignore[index]
    return plan_of(parse_environment("test", {"workers": {"resize": raw}})).workers[0]


def test_estimate_one_environment_equals_the_hand_computation() -> None:
    """Two workers: each month at min_tasks and each cost per million messages, by hand with the list prices."""
    plan = plan_of(parse_environment("test", ENVIRONMENT))

    bill = estimate([plan], PRICES, FIGURES)

    resize, upsert = bill.workers
    # resize: 2 arm64 tasks of 0.25 vCPU and 0.5 GB, on-demand; 1 receive loop each (concurrency 4 of 10 a receive).
    assert resize.month == pytest.approx(2 * 730 * (0.25 * 0.03238 + 0.5 * 0.00356) + 2 * 1 * IDLE_POLLS * 0.40 / 1e6)
    assert resize.sqs_per_million == pytest.approx((2.5 + 0.1) * 1 * 0.40)  # measured + the producer's batch of 10
    assert resize.fargate_per_million == pytest.approx(1e6 / (4 * 1 / 150 * 3600) * (0.25 * 0.03238 + 0.5 * 0.00356))
    assert resize.dynamodb_per_million == pytest.approx(2 * 0.625)  # a claim and a completion
    assert resize.per_million == pytest.approx(1.04 + 102.8645833 + 1.25)
    # upsert: 3 x86_64 tasks of 0.5 vCPU and 1 GB: the base's 1 on-demand, 2 on Spot at 70 % off.
    on_demand_hour = 0.5 * 0.04048 + 1 * 0.004445
    assert (upsert.on_demand, upsert.spot) == (1, 2)
    assert upsert.month == pytest.approx(
        730 * (1 * on_demand_hour + 2 * 0.3 * on_demand_hour) + 3 * 1 * IDLE_POLLS * 0.40 / 1e6
    )
    assert upsert.usage.requests_source == "run mean"
    assert upsert.sqs_per_million == pytest.approx((1.5 + 0.1) * 1 * 0.40)
    # A scale-out task lands on Spot (weights 0:1 beyond the base).
    assert upsert.fargate_per_million == pytest.approx(1e6 / (8 * 1 / 15 * 3600) * 0.3 * on_demand_hour)
    assert upsert.dynamodb_per_million == 0  # idempotent: no guard, no table
    assert [line[:2] for line in bill.fixed[0].lines] == [("NAT gateways", 1)]
    assert bill.fixed[0].month == pytest.approx(730 * 0.045)


def test_estimate_fixed_costs_of_an_environment_are_their_own_lines() -> None:
    """NAT gateways, their addresses, alarms per metric, composites, dashboards and keys, each at its list price."""
    plan = EnvironmentPlan(
        environment="test",
        workers=(),
        nat_gateways=2,
        public_ipv4=2,
        alarm_metrics=20,
        high_resolution_alarm_metrics=1,
        composite_alarms=4,
        dashboards=1,
        kms_keys=1,
    )

    (fixed,) = estimate([plan], PRICES, FIGURES).fixed

    assert fixed.month == pytest.approx(2 * 730 * 0.045 + 2 * 730 * 0.005 + 20 * 0.10 + 0.30 + 4 * 0.50 + 3.00 + 1.00)


def test_estimate_min_tasks_zero_costs_nothing_in_fargate_at_rest() -> None:
    """A worker scaled to zero pays no task and no long poll at rest; its messages still cost what they cost."""
    (cost,) = estimate(
        [EnvironmentPlan(environment="test", workers=(worker_plan(min_tasks=0),))], PRICES, FIGURES
    ).workers

    assert (cost.fargate_month, cost.polls_month, cost.month) == (0, 0, 0)
    assert cost.per_million == pytest.approx((2.5 + 0.1) * 0.40 + 1e6 / 96 * 0.009875 + 2 * 0.625)


def test_estimate_fifo_queue_uses_the_fifo_request_price() -> None:
    """A FIFO worker's requests are priced at SQS's FIFO price, $0.50 a million, idle polls included."""
    (cost,) = estimate(
        [EnvironmentPlan(environment="test", workers=(worker_plan(handler=ORDERED),))], PRICES, FIGURES
    ).workers

    assert cost.plan.contract.fifo is True
    assert cost.sqs_per_million == pytest.approx((1.5 + 0.1) * 0.50)  # ordered did not run: the run's mean
    assert cost.polls_month == pytest.approx(2 * 1 * IDLE_POLLS * 0.50 / 1e6)


def test_estimate_a_100_kib_message_bills_two_chunks_a_request() -> None:
    """Each 64 KiB chunk of a payload is a billed request: 100 KiB is two."""
    figures = Measured({FIVE_MINUTES: (250, 100, 100 * 102_400, 100)})
    (cost,) = estimate([EnvironmentPlan(environment="test", workers=(worker_plan(),))], PRICES, figures).workers

    assert cost.chunks == 2
    assert cost.sqs_per_million == pytest.approx((2.5 + 0.1) * 2 * 0.40)


def test_estimate_a_message_of_exactly_64_kib_is_one_chunk() -> None:
    """The chunk boundary: 65,536 bytes is one request's worth, 65,537 two."""
    one = Measured({FIVE_MINUTES: (100, 100, 65_536, 1)})
    two = Measured({FIVE_MINUTES: (100, 100, 65_537, 1)})
    plan = [EnvironmentPlan(environment="test", workers=(worker_plan(),))]

    assert [estimate(plan, PRICES, figures).workers[0].chunks for figures in (one, two)] == [1, 2]


def test_measured_takes_a_handler_s_own_figures_else_the_run_s_mean() -> None:
    """From the demo's result: the lane's requests per processed message and mean body; others get the pooled mean."""
    produced_four = Accounting({"ok": 4}, 4, {}, {}, 0, [], [], [], [], 0)
    lane = replace(lane_of(produced_four), sqs_requests=10, processed=4, body_bytes=1_000)

    figures = measured(DemoResult(workers=[lane], elapsed_seconds=1.0))

    own, other = figures.usage("consumer.examples.demo:handle"), figures.usage(UPSERTS)
    assert (own.requests_per_message, own.message_bytes, own.requests_source) == (2.5, 250, "measured")
    assert (other.requests_per_message, other.message_bytes, other.requests_source) == (2.5, 250, "run mean")


@pytest.mark.parametrize("weights", [(0, 0, 1), (1, 0, 1), (2, 1, 3), (0, 3, 1), (5, 1, 1), (1, 2, 0)])
def test_capacity_split_is_the_settings_split(weights: tuple[int, int, int]) -> None:
    """The bill splits tasks between on-demand and Spot as infra.capacity_settings does, for any count."""
    base, on_demand, spot = weights
    settings = SpotSettings(on_demand_base=base, on_demand_weight=on_demand, spot_weight=spot)
    capacity = Capacity(on_demand_base=base, on_demand_weight=on_demand, spot_weight=spot)

    assert [capacity.split(tasks) for tasks in range(12)] == [settings.split(tasks) for tasks in range(12)]


def test_stack_prefix_is_the_stack_name_s() -> None:
    """An environment's name is its stack's name after the prefix infra.settings gives every stack."""
    assert stack_name_of("dev") == f"{STACK_PREFIX}dev"


def test_guard_writes_per_message_are_the_store_s_claim_and_completion() -> None:
    """A guarded message processed once makes exactly a PutItem (the claim) and one put of a BatchWriteItem."""
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    store = DynamoDBStore("table", client=client, clock=lambda: 1_000.0)
    with Stubber(client) as stubber:
        stubber.add_response("put_item", {}, {"TableName": "table", **{k: ANY for k in _PUT_KEYS}})
        stubber.add_response("batch_write_item", {"UnprocessedItems": {}}, {"RequestItems": ANY})

        assert store.claim("sha256:ab", owner="w:1", lease_seconds=60) is Claim.ACQUIRED
        store.complete_many([("sha256:ab", "w:1")], keep_seconds=3600)

        stubber.assert_no_pending_responses()
    assert GUARD_WRITES_PER_MESSAGE == 2


_PUT_KEYS = (
    "Item",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ReturnValuesOnConditionCheckFailure",
)


def a_bill() -> Bill:
    return estimate([plan_of(parse_environment("test", ENVIRONMENT))], PRICES, FIGURES)


def test_render_bill_shows_each_worker_s_figures_and_where_the_prices_come_from() -> None:
    """The table's rows carry the hand-computed figures; the footer names the region, the date and the sources."""
    console = Console(record=True, width=300)

    render_bill(a_bill(), console)

    text = console.export_text()
    resize_month = 2 * 730 * (0.25 * 0.03238 + 0.5 * 0.00356) + 2 * IDLE_POLLS * 0.40 / 1e6  # 14.52
    resize_row = next(line for line in text.splitlines() if "resize" in line)
    assert f"${resize_month:,.2f}" in resize_row
    assert f"${1.04 + 102.8645833 + 1.25:,.2f}" in resize_row
    assert "2 (0.25 vCPU, 0.5 GB, arm64)" in resize_row
    upsert_row = next(line for line in text.splitlines() if "upsert" in line)
    assert "3: 1 on-demand + 2 Spot (0.5 vCPU, 1 GB, x86_64)" in upsert_row
    assert "1.50 (run mean)" in upsert_row
    assert f"${730 * 0.045:,.2f}" in text  # the NAT gateway, on the environment's own line
    assert "us-east-1 list prices entered by hand on 2026-11-28" in text
    assert all(url in text for url in PRICES.sources.values())
    assert "An estimate" in text


def test_render_report_says_why_there_is_no_estimate() -> None:
    """Without templates to read, the report says so in one line and still gives the verdict."""
    console = Console(record=True, width=300)
    lane = lane_of(Accounting({"ok": 1}, 1, {}, {}, 0, [], [], [], [], 0))

    render_report(DemoResult(workers=[lane], elapsed_seconds=1.0), console, "no manifest.json in cdk.out")

    assert "What it costs (estimate): not estimated: no manifest.json in cdk.out" in console.export_text()


def test_measured_with_nothing_run_says_so_and_takes_the_default_size() -> None:
    """No lane processed anything: no requests figure (labelled), the stated default message size."""
    usage = Measured({}).usage(UPSERTS)

    assert (usage.requests_per_message, usage.requests_source, usage.message_bytes) == (0.0, "not measured", 1024)
