"""A worker's bill on Lambda (consumer/local/lambda_bill.py): each line from a known declaration against a hand
computation with the list prices written out as literals, and both edges of every rounding in it (receives per 10
messages, rounds per ``concurrency`` messages, the 64 KiB chunk)."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.contract import WorkerContract
from consumer.local.bill import Usage, WorkerPlan
from consumer.local.lambda_bill import LambdaCost, NotOnLambda, estimate_lambda
from consumer.local.prices import PRICES

#: A 1,000-byte body (one chunk); the requests figure is the ECS consumers' and plays no part on Lambda.
USAGE = Usage(2.5, "measured", 1000, "measured")
#: Receives a month by one idle poller: 730 h of one long poll every 20 s.
IDLE_POLLS = 730 * 3600 / 20


def plan(*, architecture: str = "x86_64", memory_mib: int = 1024, **declared: Any) -> WorkerPlan:
    """The shipped notifications example's shape (90 s, eight at a time, 2 s on average) unless ``declared`` says
    otherwise, at 1 GB on x86_64 and up to 20 tasks."""
    contract = WorkerContract(
        **{"max_duration_seconds": 90, "concurrency": 8, "average_duration_seconds": 2, **declared}
    )
    return WorkerPlan(
        worker="w",
        handler="h",
        cpu=512,
        memory_mib=memory_mib,
        architecture=architecture,
        min_tasks=2,
        max_tasks=20,
        capacity=None,
        contract=contract,
    )


def on_lambda(worker: WorkerPlan, usage: Usage = USAGE) -> LambdaCost:
    cost = estimate_lambda("test", worker, PRICES, usage)
    assert isinstance(cost, LambdaCost), cost
    return cost


def test_estimate_lambda_full_batch_equals_the_hand_computation() -> None:
    """A batch of 10 at concurrency 8 is two 2 s rounds: per million messages 100,000 requests, 4 GB-s each, a
    receive and a delete per batch plus the producer's send, and the guard's two writes."""
    full = on_lambda(plan()).full

    assert (full.messages, full.seconds) == (10, 4)
    assert full.requests_per_million == pytest.approx(100_000 * 0.20 / 1e6)  # 0.02
    assert full.duration_per_million == pytest.approx(100_000 * 4 * 1.0 * 0.0000166667)  # 6.67
    assert full.sqs_per_million == pytest.approx((2 / 10 + 0.1) * 0.40)  # 0.12
    assert full.dynamodb_per_million == pytest.approx(2 * 0.625)
    assert full.pollers_per_million == 0  # on-demand polling: no event poller unit
    assert full.per_million == pytest.approx(0.02 + 6.666680 + 0.12 + 1.25)


def test_estimate_lambda_one_message_an_invocation_equals_the_hand_computation() -> None:
    """One message per invocation: a million requests of one 2 s round, a receive and a delete per message."""
    single = on_lambda(plan()).single

    assert (single.messages, single.seconds) == (1, 2)
    assert single.requests_per_million == pytest.approx(0.20)
    assert single.duration_per_million == pytest.approx(1e6 * 2 * 1.0 * 0.0000166667)  # 33.33
    assert single.sqs_per_million == pytest.approx((2 + 0.1) * 0.40)  # 0.84


def test_estimate_lambda_at_rest_is_five_pollers_long_polls() -> None:
    """On-demand polling with MaximumConcurrency set keeps five pollers, each a long poll every 20 s: 657,000
    ReceiveMessage requests a month, and no event poller unit."""
    cost = on_lambda(plan())

    assert cost.idle_pollers == 5
    assert cost.idle_polls_month == pytest.approx(5 * IDLE_POLLS * 0.40 / 1e6)  # 0.26
    assert (cost.pollers_month, cost.month) == (0, pytest.approx(0.2628))


def test_estimate_lambda_arm64_prices_the_duration_at_arm_s_rate() -> None:
    """arm64's GB-second is $0.0000133334, x86_64's $0.0000166667; nothing else changes."""
    arm, x86 = on_lambda(plan(architecture="arm64")).full, on_lambda(plan()).full

    assert arm.duration_per_million == pytest.approx(100_000 * 4 * 1.0 * 0.0000133334)  # 5.33
    assert arm.per_million - arm.duration_per_million == pytest.approx(x86.per_million - x86.duration_per_million)


def test_estimate_lambda_memory_is_the_worker_s_in_gb() -> None:
    """The function's memory is the worker's memory_mib: 512 MiB is half a GB-second per second."""
    assert on_lambda(plan(memory_mib=512)).full.duration_per_million == pytest.approx(100_000 * 4 * 0.5 * 0.0000166667)


@pytest.mark.parametrize(("concurrency", "rounds"), [(5, 2), (4, 3), (10, 1), (9, 2)])
def test_estimate_lambda_rounds_are_the_batch_over_concurrency_rounded_up(concurrency: int, rounds: int) -> None:
    """A full batch of 10 runs ceil(10 / concurrency) rounds of the average duration: 5 and 10 divide it, 4 and 9
    leave one round more."""
    full = on_lambda(plan(concurrency=concurrency)).full

    assert full.seconds == rounds * 2


@pytest.mark.parametrize(("max_batch", "calls"), [(10, 2), (11, 4), (20, 4), (21, 6)])
def test_estimate_lambda_receives_and_deletes_one_each_per_ten_messages(max_batch: int, calls: int) -> None:
    """A batch handler's batch of ``max_batch`` takes ceil(max_batch / 10) receives and as many DeleteMessageBatch
    calls: 10 and 20 fill them, 11 and 21 need one more of each."""
    batch = plan(max_batch=max_batch, batch_window_seconds=1, concurrency=1, average_duration_seconds=1)

    full = on_lambda(batch).full

    assert full.messages == max_batch
    assert full.seconds == 1  # one call takes the whole batch
    assert full.sqs_per_million == pytest.approx((calls / max_batch + 0.1) * 0.40)


@pytest.mark.parametrize(("body_bytes", "chunks"), [(65_536, 1), (65_537, 2)])
def test_estimate_lambda_bills_each_64_kib_chunk_as_a_request(body_bytes: int, chunks: int) -> None:
    """A message of exactly 64 KiB is one chunk a request, a byte more two."""
    cost = on_lambda(plan(), Usage(0.0, "not measured", body_bytes, "measured"))

    assert cost.chunks == chunks
    assert cost.single.sqs_per_million == pytest.approx((2 + 0.1) * chunks * 0.40)


def test_estimate_lambda_fifo_queue_uses_the_fifo_request_price() -> None:
    """A FIFO worker's mapping polls and deletes at SQS's FIFO price, $0.50 a million, idle polls included."""
    cost = on_lambda(plan(fifo=True, concurrency=1, max_duration_seconds=30))

    assert cost.full.sqs_per_million == pytest.approx((2 / 10 + 0.1) * 0.50)
    assert cost.idle_polls_month == pytest.approx(5 * IDLE_POLLS * 0.50 / 1e6)


def test_estimate_lambda_fifo_batch_runs_its_messages_one_after_another() -> None:
    """A FIFO batch may be one message group: its 10 messages are 10 rounds, whatever the concurrency."""
    assert on_lambda(plan(fifo=True, concurrency=1, max_duration_seconds=30)).full.seconds == 10 * 2


def test_estimate_lambda_idempotent_worker_writes_no_guard() -> None:
    """A handler declared idempotent has no guard on Lambda either: no DynamoDB line."""
    assert on_lambda(plan(idempotent=True)).full.dynamodb_per_million == 0


def test_estimate_lambda_provisioned_pollers_bill_their_minimum_and_what_the_rate_adds() -> None:
    """Provisioned (2, 10) pollers: two EPUs all month, their long polls at rest, and per million messages the EPU
    hours of the pollers they need: one carries 25 msg/s (10 invocations at once of 10 messages in 4 s)."""
    worker = plan()
    provisioned = WorkerPlan(**{**vars(worker), "provisioned_pollers": (2, 10)})

    cost = on_lambda(provisioned)

    assert cost.idle_pollers == 2
    assert cost.pollers_month == pytest.approx(2 * 730 * 0.00925)  # 13.51
    assert cost.idle_polls_month == pytest.approx(2 * IDLE_POLLS * 0.40 / 1e6)
    assert cost.full.poller_rate == pytest.approx(25)
    assert cost.full.pollers_per_million == pytest.approx(1e6 / (25 * 3600) * 0.00925)  # 0.10


def test_estimate_lambda_poller_throughput_is_bounded_by_a_megabyte_a_second() -> None:
    """A 200 KB message: one poller carries 5 a second (1 MB/s), under its 25 invocations' worth."""
    provisioned = WorkerPlan(**{**vars(plan()), "provisioned_pollers": (2, 10)})

    cost = on_lambda(provisioned, Usage(0.0, "not measured", 200_000, "measured"))

    assert cost.full.poller_rate == pytest.approx(5)


def test_estimate_lambda_says_why_a_worker_cannot_run_on_lambda() -> None:
    """A 300 s handler in rounds of 4 needs a function timeout past 900 s: not on Lambda, with LambdaTarget's line."""
    cost = estimate_lambda("test", plan(max_duration_seconds=300, concurrency=4), PRICES, USAGE)

    assert isinstance(cost, NotOnLambda)
    assert cost.reason.startswith('"max_duration_seconds" must be at most 288 to target Lambda with this shape')
