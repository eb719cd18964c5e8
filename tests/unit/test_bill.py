"""The bill's estimate (consumer/local/bill.py): each figure against a hand computation written out with the list
prices as literals, so a change of a price or a formula shows here. The plans come from cdk.json settings this module
writes (:func:`plan_of`); tests/infra/test_bill.py holds the template reader to the same plans."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.stub import ANY, Stubber
from rich.console import Console

from consumer.local.bill import (
    GUARD_WRITES_PER_MESSAGE,
    SQS_CALL_BYTES,
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
from infra.settings import parse_environment, stack_name_of
from tests.unit.support import ENVIRONMENT, FIVE_MINUTES, ORDERED, UPSERTS, lane_of, plan_of

#: What the demo measured: five_minutes ran (250 requests for 100 messages of 1,000 bytes); upserts did not, so it
#: takes the run's mean over every handler that ran: (250 + 50) / (100 + 100) = 1.5 requests, 400,000 / 200 = 2,000 B.
FIGURES = Measured({FIVE_MINUTES: (250, 100, 100_000, 100), "consumer.examples.demo:handle": (50, 100, 300_000, 100)})
#: Receives a month by one receive loop of an idle task: 730 h of one long poll every 20 s.
IDLE_POLLS = 730 * 3600 / 20
#: A GB as the bill counts it, and the NAT data price per byte.
GB = 2**30
NAT_PER_BYTE = 0.045 / GB


def worker_plan(**overrides: object) -> WorkerPlan:
    """The ``resize`` worker of :data:`ENVIRONMENT`, changed by ``overrides`` (settings keys)."""
    raw = {**ENVIRONMENT["workers"]["resize"], **overrides}  # type: ignore[index]
    return plan_of(parse_environment("test", {"workers": {"resize": raw}})).workers[0]


def test_estimate_one_environment_equals_the_hand_computation() -> None:
    """Two workers: each month at min_tasks and each cost per million messages, by hand with the list prices."""
    plan = plan_of(parse_environment("test", ENVIRONMENT))

    bill = estimate([plan], PRICES, FIGURES)

    resize, upsert = bill.workers
    # resize: 2 arm64 tasks of 0.25 vCPU and 0.5 GB, on-demand; 1 receive loop each (concurrency 4 of 10 a receive),
    # each poll 3 KiB through the NAT gateway.
    assert resize.month == pytest.approx(
        2 * 730 * (0.25 * 0.03238 + 0.5 * 0.00356) + 2 * 1 * IDLE_POLLS * (0.40 / 1e6 + 3072 * NAT_PER_BYTE)
    )
    assert resize.sqs_per_million == pytest.approx((2.5 + 0.1) * 1 * 0.40)  # measured + the producer's batch of 10
    assert resize.fargate_per_million == pytest.approx(1e6 / (4 * 1 / 150 * 3600) * (0.25 * 0.03238 + 0.5 * 0.00356))
    assert resize.dynamodb_per_million == pytest.approx(2 * 0.625)  # a claim and a completion
    # Through the NAT gateway: 2.5 calls of 3 KiB, the message's 2 KiB envelope and its 1,000-byte body.
    assert resize.network == "NAT data"
    assert resize.network_per_million == pytest.approx(1e6 * (2.5 * 3072 + 2048 + 1000) * NAT_PER_BYTE)  # 0.45
    assert resize.per_million == pytest.approx(1.04 + 102.8645833 + 1.25 + 0.4496)
    # upsert: 3 x86_64 tasks of 0.5 vCPU and 1 GB: the base's 1 on-demand, 2 on Spot at 70 % off.
    on_demand_hour = 0.5 * 0.04048 + 1 * 0.004445
    assert (upsert.on_demand, upsert.spot) == (1, 2)
    assert upsert.month == pytest.approx(
        730 * (1 * on_demand_hour + 2 * 0.3 * on_demand_hour) + 3 * 1 * IDLE_POLLS * (0.40 / 1e6 + 3072 * NAT_PER_BYTE)
    )
    assert upsert.usage.requests_source == "run mean"
    assert upsert.sqs_per_million == pytest.approx((1.5 + 0.1) * 1 * 0.40)
    # A scale-out task lands on Spot (weights 0:1 beyond the base).
    assert upsert.fargate_per_million == pytest.approx(1e6 / (8 * 1 / 15 * 3600) * 0.3 * on_demand_hour)
    assert upsert.dynamodb_per_million == 0  # idempotent: no guard, no table
    assert upsert.network_per_million == pytest.approx(1e6 * (1.5 * 3072 + 2048 + 2000) * NAT_PER_BYTE)  # run mean
    # Container Insights: the cluster's 3 counts and 10 resource metrics, each service's 5 counts, and 10 resource
    # metrics for each service and each task family (both workers run tasks at min_tasks); events a minute: the
    # cluster's, 2 services', and a task and a container event for each of 5 tasks.
    metrics, events_gb = 3 + 10 + 2 * 5 + 2 * 2 * 10, (1 + 2 + 5 * 2) * 730 * 60 * 1536 / GB
    assert [line[:2] for line in bill.fixed[0].lines] == [
        ("NAT gateways", 1),
        ("public IPv4 addresses", 1),
        ("Container Insights metrics", metrics),
        ("Container Insights events", pytest.approx(events_gb)),  # 0.81 GB
    ]
    assert bill.fixed[0].month == pytest.approx(730 * 0.045 + 730 * 0.005 + metrics * 0.30 + events_gb * 0.50)


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


def test_estimate_tasks_with_a_public_ip_pay_their_address_and_no_nat_data() -> None:
    """Without NAT (tasks in a public subnet) each task-hour pays a public IPv4 address, at rest and per message."""
    (cost,) = estimate(
        [EnvironmentPlan(environment="test", workers=(replace(worker_plan(), public_ip=True),))], PRICES, FIGURES
    ).workers

    assert cost.plan.public_ip is True
    assert (cost.network, cost.network_month) == ("public IPv4", pytest.approx(2 * 730 * 0.005))  # 2 tasks: 7.30
    assert cost.network_per_million == pytest.approx(1e6 / (4 * 1 / 150 * 3600) * 0.005)  # 10,417 task-hours
    assert cost.month == pytest.approx(cost.fargate_month + cost.polls_month + 7.30)


def test_estimate_tasks_behind_nat_pay_its_data_for_polls_and_messages() -> None:
    """Behind a NAT gateway each idle poll and each message's calls, envelope and body are NAT data."""
    (cost,) = estimate(
        [EnvironmentPlan(environment="test", workers=(worker_plan(),), nat_gateways=1)], PRICES, FIGURES
    ).workers

    assert cost.network == "NAT data"
    assert cost.network_month == pytest.approx(2 * IDLE_POLLS * 3072 * NAT_PER_BYTE)  # 2 tasks' polls: 0.03
    assert cost.network_per_million == pytest.approx(1e6 * (2.5 * 3072 + 2048 + 1000) * NAT_PER_BYTE)


def test_estimate_counts_container_insights_metrics_where_tasks_run_and_events_per_container() -> None:
    """A worker at zero tasks publishes its service's counts only; one at two traced tasks (two containers each) its
    service's and task family's resource metrics too, and the cluster's; events: cluster, services, tasks, containers."""
    traced = replace(worker_plan(), containers=2)
    plan = EnvironmentPlan(environment="test", workers=(worker_plan(min_tasks=0), traced), container_insights=True)

    (fixed,) = estimate([plan], PRICES, FIGURES).fixed

    metrics, events_gb = 3 + 10 + 2 * 5 + 2 * 10, (1 + 2 + 2 * (1 + 2)) * 730 * 60 * 1536 / GB
    assert fixed.lines == (
        ("Container Insights metrics", metrics, metrics * 0.30, ""),  # 43: $12.90
        ("Container Insights events", pytest.approx(events_gb), pytest.approx(events_gb * 0.50), "GB"),
    )
    assert fixed.without_nat is None  # no NAT gateway to go without


def test_estimate_without_nat_saves_the_gateways_and_idle_data_and_adds_the_task_addresses() -> None:
    """Two NAT gateways and their addresses go, with the idle polls' NAT data; the two tasks take an address each."""
    plan = EnvironmentPlan(environment="test", workers=(worker_plan(),), nat_gateways=2, public_ipv4=2)

    (fixed,) = estimate([plan], PRICES, FIGURES).fixed

    change = fixed.without_nat
    assert change is not None
    assert change.gateways == pytest.approx(2 * 730 * 0.045 + 2 * 730 * 0.005)  # 73.00
    assert change.idle_data == pytest.approx(2 * IDLE_POLLS * 3072 * NAT_PER_BYTE)
    assert (change.tasks, change.task_addresses) == (2, pytest.approx(2 * 730 * 0.005))  # 7.30
    assert change.saving == pytest.approx(73.00 + change.idle_data - 7.30)


def test_sqs_call_bytes_cover_a_signed_receive_and_its_response_headers() -> None:
    """A long-poll ReceiveMessage as botocore signs it with a task role's session credentials (a 1,024-character
    token), with 512 bytes of response headers and an empty result, fits in the bytes the bill counts per call."""
    sent: list[int] = []

    def measure(request: AWSPreparedRequest, **_: object) -> AWSResponse:
        head = f"{request.method} {request.url} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items()
        )
        sent.append(len(head.encode()) + 2 + len(request.body or b""))
        return AWSResponse(request.url, 200, {}, _Raw())

    client = boto3.client(
        "sqs",
        region_name="eu-west-1",
        aws_access_key_id="ASIA" + "X" * 16,
        aws_secret_access_key="x" * 40,
        aws_session_token="t" * 1024,
    )
    client.meta.events.register("before-send.sqs.ReceiveMessage", measure)
    client.receive_message(
        QueueUrl="https://sqs.eu-west-1.amazonaws.com/123456789012/SqsWorker-prod-notifications-source",
        MaxNumberOfMessages=10,
        WaitTimeSeconds=20,
        VisibilityTimeout=100,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )

    (request_bytes,) = sent
    assert request_bytes > 1024  # the signature and the token are most of it
    assert request_bytes + 512 + len(b"{}") <= SQS_CALL_BYTES


class _Raw:
    """An empty JSON body as urllib3 would stream it."""

    def stream(self, *_: object, **__: object) -> Iterator[bytes]:
        yield b"{}"


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
    polls_nat = 2 * IDLE_POLLS * 3072 * NAT_PER_BYTE  # 0.03
    resize_month = 2 * 730 * (0.25 * 0.03238 + 0.5 * 0.00356) + 2 * IDLE_POLLS * 0.40 / 1e6 + polls_nat  # 14.56
    resize_row = next(line for line in text.splitlines() if "resize" in line)
    assert f"${resize_month:,.2f}" in resize_row
    assert f"${1.04 + 102.8645833 + 1.25 + 0.4496:,.2f}" in resize_row
    assert f"NAT data: ${polls_nat:,.2f}; $0.45" in resize_row
    assert "2 (0.25 vCPU, 0.5 GB, arm64)" in resize_row
    upsert_row = next(line for line in text.splitlines() if "upsert" in line)
    assert "3: 1 on-demand + 2 Spot (0.5 vCPU, 1 GB, x86_64)" in upsert_row
    assert "1.50 (run mean)" in upsert_row
    assert "NAT gateways x1: $32.85" in text  # on the environment's own line
    assert "Container Insights metrics x63: $18.90; Container Insights events 0.81 GB: $0.41" in text
    # Without NAT: the gateway and its address go, the 5 tasks at min_tasks take an address each.
    assert "saves $36.50 of NAT gateways and their addresses" in text
    assert "adds $18.25 for the public IPv4 addresses of its 5 task(s) at min_tasks" in text
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
