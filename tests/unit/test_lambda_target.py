"""Unit tests for the Lambda target: every derived value against its documented rule, every refusal at both edges.

Rule for this folder: no network, no CDK, no boto3 calls.
"""

from __future__ import annotations

import dataclasses
import doctest

import pytest

from consumer import lambda_target
from consumer.contract import WorkerContract
from consumer.errors import ContractError
from consumer.lambda_target import LAMBDA_DERIVED_FORMULAS, LambdaTarget
from consumer.limits import MAX_BATCH, MAX_BATCH_WINDOW_SECONDS, SQS_MAX_BATCH, SQS_MAX_VISIBILITY_SECONDS

TARGET_FIELDS = frozenset({"max_tasks", "memory_mib", "provisioned_pollers", "max_rate"})


def make(**overrides: object) -> LambdaTarget:
    """A target of a 90 s handler, 10 calls at once (one round of a 10-message batch), on 4 tasks of 512 MiB; the
    overrides go to the target or to its contract by name."""
    contract: dict[str, object] = {"max_duration_seconds": 90, "concurrency": 10}
    target: dict[str, object] = {"max_tasks": 4, "memory_mib": 512}
    for name, value in overrides.items():
        (target if name in TARGET_FIELDS else contract)[name] = value
    return LambdaTarget(contract=WorkerContract(**contract), **target)  # type: ignore[arg-type]


def refusal(**overrides: object) -> ContractError:
    with pytest.raises(ContractError) as raised:
        make(**overrides)
    return raised.value


def test_lambda_target_docstring_example_holds() -> None:
    """The module's example computes what it shows."""
    assert doctest.testmod(lambda_target).failed == 0


# --- derived values -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("messages", "rounds"), [(1, 1), (3, 1), (4, 2), (6, 2), (7, 3)])
def test_lambda_target_rounds_for_a_partial_batch_are_its_messages_over_concurrency(messages: int, rounds: int) -> None:
    """At concurrency 3, an invocation of ``messages`` runs ceil(messages / min(3, messages)) rounds: 3 and 6 fill
    them, 4 and 7 need one more."""
    assert make(concurrency=3).rounds_for(messages) == rounds


def test_lambda_target_rounds_for_a_full_batch_are_its_rounds() -> None:
    """rounds is rounds_for(esm_batch_size): the bill's full batch is the function timeout's."""
    target = make(concurrency=4)

    assert (target.rounds, target.rounds_for(target.esm_batch_size)) == (3, 3)


@pytest.mark.parametrize("shape", [{"concurrency": 10}, {"concurrency": 4}, {"concurrency": 1, "batch_size": 3}])
def test_lambda_target_longest_max_duration_is_accepted_and_one_second_more_is_refused(shape: dict[str, int]) -> None:
    """longest_max_duration_seconds is the last max_duration the shape fits in 900 s: it is accepted, one more is not."""
    longest = make(**shape).longest_max_duration_seconds

    assert make(**shape, max_duration_seconds=longest).function_timeout_seconds <= 900
    assert refusal(**shape, max_duration_seconds=longest + 1).parameter == "max_duration_seconds"


@pytest.mark.parametrize(
    ("shape", "rounds", "parallelism"),
    [
        ({"concurrency": 1}, 10, 1),
        ({"concurrency": 3}, 4, 3),
        ({"concurrency": 8}, 2, 8),
        ({"concurrency": 10}, 1, 10),
        ({"concurrency": 256}, 1, 10),
        ({"concurrency": 8, "batch_size": 1}, 1, 1),
        ({"concurrency": 1_000, "asynchronous": True}, 1, 10),
        ({"concurrency": 3, "asynchronous": True}, 4, 3),
        ({"concurrency": 8, "fifo": True}, 10, 8),
        ({"concurrency": 8, "fifo": True, "batch_size": 3}, 3, 3),
        ({"concurrency": 4, "max_batch": 100, "batch_window_seconds": 5}, 1, 1),
    ],
    ids=["one", "three", "eight", "ten", "256", "batch-1", "async-1000", "async-3", "fifo", "fifo-3", "batch"],
)
def test_lambda_target_rounds_follow_the_handler_shape(shape: dict, rounds: int, parallelism: int) -> None:
    """Standard queue: ceil(batch_size / min(concurrency, batch_size)) rounds (an async def handler too); FIFO: one
    round per message (a batch may be one group, run in order); a batch handler: one call."""
    target = make(max_duration_seconds=30, **shape)
    assert (rounds, parallelism) == (target.rounds, target.per_invocation_parallelism)


@pytest.mark.parametrize(
    ("shape", "batch_size", "window"),
    [
        ({}, 10, 0),
        ({"batch_size": 4}, 4, 0),
        ({"fifo": True, "batch_size": 7}, 7, 0),
        ({"max_batch": 100, "batch_window_seconds": 5}, 100, 5),
        ({"max_batch": 3}, 3, 0),
    ],
)
def test_lambda_target_mapping_batch_follows_the_handler_shape(shape: dict, batch_size: int, window: int) -> None:
    """BatchSize is max_batch for a batch handler, batch_size otherwise; only a batch handler has a window."""
    target = make(**shape)
    assert (batch_size, window) == (target.esm_batch_size, target.batching_window_seconds)


@pytest.mark.parametrize(
    ("shape", "timeout"),
    [
        ({}, 1 * 90 + 10 + 0 + 5),
        ({"concurrency": 8}, 2 * 90 + 10 + 0 + 5),
        ({"max_duration_seconds": 300, "concurrency": 5, "batch_size": 5}, 300 + 30 + 5),
        ({"concurrency": 1, "batch_size": 1, "max_rate": 0.5}, 90 + 10 + 2 + 5),
        ({"fifo": True, "batch_size": 3}, 3 * 90 + 10 + 5),
        ({"max_batch": 50, "batch_window_seconds": 20}, 90 + 10 + 5),
    ],
)
def test_lambda_target_function_timeout_sums_rounds_margin_rate_wait_and_flush(shape: dict, timeout: int) -> None:
    """function_timeout = rounds x max_duration + visibility_margin + rate_wait + 5 s of flush."""
    assert timeout == make(**shape).function_timeout_seconds


@pytest.mark.parametrize(("batch_size", "max_rate", "wait"), [(9, 0.072, 125), (10, 3, 4), (10, 10, 1), (1, None, 0)])
def test_lambda_target_rate_wait_rounds_up_from_the_decimal_rate(batch_size: int, max_rate: float, wait: int) -> None:
    """rate_wait = ceil(esm_batch_size / max_rate), from the rate as written (9 / 0.072 is 125, not the float's 126)."""
    assert (
        wait == make(batch_size=batch_size, concurrency=1, max_duration_seconds=10, max_rate=max_rate).rate_wait_seconds
    )


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"max_duration_seconds": 1, "concurrency": 1, "batch_size": 1},
        {"max_duration_seconds": 813, "concurrency": 1, "batch_size": 1},
        {"fifo": True, "batch_size": 5},
        {"max_batch": 500, "batch_window_seconds": 299, "acceptable_latency_seconds": 300},
    ],
)
def test_lambda_target_queue_visibility_follows_its_documented_rule(shape: dict) -> None:
    """The source's visibility is at least 6 x the function timeout and the timeout plus the window, at most 12 h."""
    target = make(**shape)
    timeout, visibility = target.function_timeout_seconds, target.queue_visibility_seconds
    assert visibility == max(6 * timeout, timeout + target.batching_window_seconds)
    assert 6 * timeout <= visibility <= SQS_MAX_VISIBILITY_SECONDS
    assert timeout + target.batching_window_seconds <= visibility


@pytest.mark.parametrize(("window", "visibility"), [(80, 6 * 16), (81, 16 + 81)])
def test_lambda_target_queue_visibility_covers_a_window_longer_than_five_timeouts(window: int, visibility: int) -> None:
    """A 16 s function behind a window over 5 x 16 s gets timeout + window, not 6 x timeout."""
    target = make(max_duration_seconds=1, max_batch=20, batch_window_seconds=window, acceptable_latency_seconds=300)
    assert target.function_timeout_seconds == 16
    assert visibility == target.queue_visibility_seconds


@pytest.mark.parametrize(
    ("max_tasks", "shape", "maximum"),
    [
        (4, {}, 4),
        (10, {"concurrency": 8}, 10),
        (3, {"concurrency": 4, "batch_size": 1}, 12),
        (2, {"concurrency": 5, "batch_size": 3}, 4),
        (4, {"concurrency": 2, "max_batch": 20, "batch_window_seconds": 1}, 8),
    ],
)
def test_lambda_target_maximum_concurrency_keeps_to_the_fleets_calls(max_tasks: int, shape: dict, maximum: int) -> None:
    """maximum_concurrency = ceil(max_tasks x concurrency / per_invocation_parallelism): no more calls at once."""
    assert maximum == make(max_tasks=max_tasks, max_duration_seconds=30, **shape).maximum_concurrency


@pytest.mark.parametrize(("max_tasks", "maximum"), [(1, 2), (2, 2), (3, 3)])
def test_lambda_target_maximum_concurrency_raises_one_to_awss_minimum(max_tasks: int, maximum: int) -> None:
    """One single-call task would be MaximumConcurrency 1, below AWS's minimum: it is raised to 2."""
    assert maximum == make(max_tasks=max_tasks, concurrency=1, batch_size=1).maximum_concurrency


def test_lambda_target_provisioned_pollers_replace_maximum_concurrency() -> None:
    """With provisioned pollers the mapping has no MaximumConcurrency, and derived() leaves it out."""
    target = make(provisioned_pollers=(2, 20))
    assert target.maximum_concurrency is None
    assert set(target.derived()) == set(LAMBDA_DERIVED_FORMULAS) - {"maximum_concurrency"}


def test_lambda_target_provisioned_pollers_list_is_the_pair() -> None:
    """cdk.json's [2, 20] is taken as the pair (2, 20)."""
    assert (2, 20) == make(provisioned_pollers=[2, 20]).provisioned_pollers


def test_lambda_target_redrive_and_retry_horizon() -> None:
    """The contract's redrive policy; retry horizon = redrive x queue visibility + the backoffs before the last receive."""
    target = make()
    assert target.redrive_max_receive_count == target.contract.redrive_max_receive_count == 7
    assert (7 * 630 + (2 + 4 + 8 + 16)) == target.retry_horizon_seconds


def test_lambda_target_queue_attributes_differ_only_in_source_visibility() -> None:
    """The queue pair is the container's, with the source's visibility the Lambda target's queue visibility."""
    target = make()
    container = target.contract.queue_attributes()
    pair = target.queue_attributes()
    assert (630, 100) == (pair.source.visibility_timeout_seconds, container.source.visibility_timeout_seconds)
    assert container.source == dataclasses.replace(pair.source, visibility_timeout_seconds=100)
    assert container.dead_letter == pair.dead_letter


def test_lambda_target_derived_names_every_formula() -> None:
    """derived() holds each property named in LAMBDA_DERIVED_FORMULAS, with its value."""
    target = make(concurrency=8)
    assert {name: getattr(target, name) for name in LAMBDA_DERIVED_FORMULAS} == target.derived()


def test_lambda_target_is_frozen_and_keyword_only() -> None:
    """A target cannot be changed after validation, nor built positionally."""
    target = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.max_tasks = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        LambdaTarget(target.contract, 4, 512)  # type: ignore[misc]


# --- refusals ---------------------------------------------------------------------------------------------------------

TIMEOUT_WHY = (
    " is more than Lambda's 900 s; Lambda stops the function there, and an event source mapping cannot extend a"
    " message's visibility as the ECS consumer's heartbeat does"
)


@pytest.mark.parametrize(
    ("shape", "largest", "message"),
    [
        (
            {"concurrency": 1, "batch_size": 1},
            813,
            '"max_duration_seconds" must be at most 813 to target Lambda with this shape: its function timeout, rounds'
            " 1 x max_duration 814 + visibility_margin 82 + rate_wait 0 + flush 5 = 901 s," + TIMEOUT_WHY + ": 814",
        ),
        (
            {"concurrency": 5},
            426,
            '"max_duration_seconds" must be at most 426 to target Lambda with this shape: its function timeout, rounds'
            " 2 x max_duration 427 + visibility_margin 43 + rate_wait 0 + flush 5 = 902 s,"
            + TIMEOUT_WHY
            + " (a lower batch_size or a higher concurrency means fewer rounds, and room for a longer max_duration): 427",
        ),
        (
            {"fifo": True},
            88,
            '"max_duration_seconds" must be at most 88 to target Lambda with this shape: its function timeout, rounds'
            " 10 x max_duration 89 + visibility_margin 10 + rate_wait 0 + flush 5 = 905 s,"
            + TIMEOUT_WHY
            + " (a lower batch_size means fewer rounds, and room for a longer max_duration): 89",
        ),
        (
            {"concurrency": 1, "batch_size": 1, "max_rate": 0.01},
            722,
            '"max_duration_seconds" must be at most 722 to target Lambda with this shape: its function timeout, rounds'
            " 1 x max_duration 723 + visibility_margin 73 + rate_wait 100 + flush 5 = 901 s," + TIMEOUT_WHY + ": 723",
        ),
        (
            {"max_batch": 100, "batch_window_seconds": 5},
            813,
            '"max_duration_seconds" must be at most 813 to target Lambda with this shape: its function timeout, rounds'
            " 1 x max_duration 814 + visibility_margin 82 + rate_wait 0 + flush 5 = 901 s," + TIMEOUT_WHY + ": 814",
        ),
    ],
    ids=["one-round", "two-rounds", "fifo", "rate", "batch-handler"],
)
def test_lambda_target_refuses_a_function_timeout_over_900_s(shape: dict, largest: int, message: str) -> None:
    """The longest max_duration of the shape fits in 900 s; one more second is refused, naming the longest that fits."""
    assert make(max_duration_seconds=largest, **shape).function_timeout_seconds <= 900
    error = refusal(max_duration_seconds=largest + 1, **shape)
    assert message == str(error)
    assert ("max_duration_seconds", largest + 1) == (error.parameter, error.value)


RATE_EDGE = {"max_duration_seconds": 1, "concurrency": 1, "batch_size": 1}


def test_lambda_target_accepts_a_rate_wait_that_leaves_a_1_s_handler_its_room() -> None:
    """884 s of pacing (1 message at 0.00113125 a second) + 1 s + 10 s margin + 5 s flush is exactly 900 s."""
    target = make(max_rate=0.00113125, **RATE_EDGE)
    assert (884, 900) == (target.rate_wait_seconds, target.function_timeout_seconds)


def test_lambda_target_refuses_a_rate_that_leaves_no_max_duration() -> None:
    """885 s of pacing leaves no max_duration that fits: refused naming max_rate, not max_duration."""
    assert (
        "\"max_rate\" must start an invocation's batch (esm_batch_size 1) within Lambda's 900 s function timeout,"
        " which even a 1 s max_duration exceeds: rounds 1 x max_duration 1 + visibility_margin 10 + rate_wait 885 +"
        " flush 5 = 901 s: 0.0011312"
    ) == str(refusal(max_rate=0.0011312, **RATE_EDGE))


@pytest.mark.parametrize(("max_batch", "window"), [(10, 0), (11, 1), (MAX_BATCH, 1)])
def test_lambda_target_accepts_a_batch_within_the_window_rule(max_batch: int, window: int) -> None:
    """Up to 10 messages need no window; above 10, a 1 s window suffices."""
    target = make(concurrency=1, max_batch=max_batch, batch_window_seconds=window)
    assert (max_batch, window) == (target.esm_batch_size, target.batching_window_seconds)


def test_lambda_target_refuses_a_batch_above_10_without_a_window() -> None:
    """max_batch 11 with no window is refused: the mapping requires a window of at least 1 s above 10 messages."""
    error = refusal(concurrency=1, max_batch=11)
    assert (
        '"batch_window_seconds" must be at least 1 on Lambda for a batch of more than 10 messages (max_batch 11): the'
        " event source mapping requires MaximumBatchingWindowInSeconds >= 1 when BatchSize > 10: 0"
    ) == str(error)


def test_lambda_target_contract_bounds_fit_the_mappings_limits() -> None:
    """The contract's largest batch and window, and SQS's receive of 10, are within the mapping's limits (so the
    batch-size refusal below guards a future contract bound, not today's)."""
    assert MAX_BATCH <= lambda_target.ESM_MAX_BATCH_SIZE_STANDARD
    assert SQS_MAX_BATCH <= lambda_target.ESM_MAX_BATCH_SIZE_FIFO
    assert MAX_BATCH_WINDOW_SECONDS <= lambda_target.ESM_MAX_WINDOW_SECONDS


@pytest.mark.parametrize(
    ("limit", "lowered", "field", "shape", "message"),
    [
        (
            "ESM_MAX_BATCH_SIZE_STANDARD",
            100,
            "max_batch",
            {"concurrency": 1, "batch_window_seconds": 1},
            '"max_batch" must be at most 100 for a standard queue\'s event source mapping: 101',
        ),
        (
            "ESM_MAX_BATCH_SIZE_FIFO",
            5,
            "batch_size",
            {"fifo": True, "max_duration_seconds": 30},
            '"batch_size" must be at most 5 for a FIFO queue\'s event source mapping: 6',
        ),
    ],
    ids=["standard", "fifo"],
)
def test_lambda_target_refuses_a_batch_above_the_mappings_limit(
    monkeypatch: pytest.MonkeyPatch, limit: str, lowered: int, field: str, shape: dict, message: str
) -> None:
    """With the mapping's limit lowered to what the contract allows, the limit is accepted and one more is refused,
    naming the limit (today's contract cannot reach AWS's: see the test above)."""
    monkeypatch.setattr(lambda_target, limit, lowered)
    assert lowered == make(**shape, **{field: lowered}).esm_batch_size
    assert message == str(refusal(**shape, **{field: lowered + 1}))


@pytest.mark.parametrize("max_lease", [899, 901])
def test_lambda_target_refuses_a_declared_max_lease(max_lease: int) -> None:
    """Any max_lease but the 900 s default is refused: the lease on Lambda is the queue's visibility."""
    assert (
        f'"max_lease_seconds" must be left at its default (900) on Lambda: its promise, a crashed task\'s messages back'
        " within the lease, cannot hold where the lease is the queue's visibility (630 s here), at least 6 x the"
        f" function timeout: {max_lease}"
    ) == str(refusal(max_lease_seconds=max_lease))


def test_lambda_target_accepts_the_default_max_lease() -> None:
    """The contract's default lease (900 s, declared or not) is accepted."""
    assert 900 == make(max_lease_seconds=900).contract.max_lease_seconds


def test_lambda_target_refuses_fewer_than_3_receives() -> None:
    """max_receive_count 3 is accepted; 2 is refused, as throttles and the window spend receives unseen."""
    assert 3 == make(max_receive_count=3).contract.max_receive_count
    assert (
        '"max_receive_count" must be at least 3 on Lambda: throttled invocations and the batching window spend'
        " receives the function never sees (AWS recommends at least 5 on a Lambda source): 2"
    ) == str(refusal(max_receive_count=2))


def test_lambda_target_refuses_a_retention_within_the_retry_horizon() -> None:
    """A 16 s function: horizon 7 x 96 + 30 = 702 s; a 703 s retention is accepted, 702 s refused."""
    shape = {"max_duration_seconds": 1, "concurrency": 1, "batch_size": 1}
    assert 702 == make(source_retention_seconds=703, **shape).retry_horizon_seconds
    error = refusal(source_retention_seconds=702, **shape)
    assert (
        '"source_retention_seconds" must exceed the Lambda target\'s retry horizon (702 s = redrive_max_receive_count'
        " x queue_visibility + backoffs), or a failing message could expire before it reaches the DLQ: 702"
    ) == str(error)


def test_lambda_target_refuses_a_maximum_concurrency_above_1000() -> None:
    """1000 tasks of 8 calls, 8 calls an invocation, are 1000 invocations; 1001 tasks are refused, naming max_tasks."""
    assert 1_000 == make(max_tasks=1_000, concurrency=8).maximum_concurrency
    assert (
        '"max_tasks" must keep maximum_concurrency = ceil(max_tasks x concurrency / per_invocation_parallelism) ='
        " ceil(1001 x 8 / 8) = 1001 at most 1000, the event source mapping's MaximumConcurrency limit: 1001"
    ) == str(refusal(max_tasks=1_001, concurrency=8))


def test_lambda_target_provisioned_pollers_lift_the_maximum_concurrency_limit() -> None:
    """With provisioned pollers there is no MaximumConcurrency, so 1001 tasks are not refused."""
    assert make(max_tasks=1_001, concurrency=8, provisioned_pollers=(2, 200)).maximum_concurrency is None


@pytest.mark.parametrize("pollers", [(2, 2), (200, 200), (2, 2_000), (200, 2_000)])
def test_lambda_target_accepts_provisioned_pollers_at_both_edges(pollers: tuple[int, int]) -> None:
    """Minimum 2..200, maximum 2..2000, minimum at most maximum."""
    assert pollers == make(provisioned_pollers=pollers).provisioned_pollers


POLLER_PAIR = "must be a (minimum, maximum) pair of whole numbers, or None"


@pytest.mark.parametrize(
    ("pollers", "message"),
    [
        ((1, 10), '"provisioned_pollers" must have a minimum between 2 and 200 (MinimumPollers): (1, 10)'),
        ((201, 2_000), '"provisioned_pollers" must have a minimum between 2 and 200 (MinimumPollers): (201, 2000)'),
        ((2, 1), '"provisioned_pollers" must have a maximum between 2 and 2000 (MaximumPollers): (2, 1)'),
        ((2, 2_001), '"provisioned_pollers" must have a maximum between 2 and 2000 (MaximumPollers): (2, 2001)'),
        ((10, 9), '"provisioned_pollers" must have a minimum (10) at most its maximum: (10, 9)'),
        ((2,), f'"provisioned_pollers" {POLLER_PAIR}: (2,)'),
        ((2.0, 10), f'"provisioned_pollers" {POLLER_PAIR}: (2.0, 10)'),
        ((True, 10), f'"provisioned_pollers" {POLLER_PAIR}: (True, 10)'),
        ("2,10", f"\"provisioned_pollers\" {POLLER_PAIR}: '2,10'"),
    ],
)
def test_lambda_target_refuses_provisioned_pollers_out_of_bounds(pollers: object, message: str) -> None:
    """One past each edge, a minimum above the maximum, and anything but a pair of whole numbers are refused."""
    assert message == str(refusal(provisioned_pollers=pollers))


@pytest.mark.parametrize("memory_mib", [128, 10_240])
def test_lambda_target_accepts_memory_at_both_edges(memory_mib: int) -> None:
    """Lambda's memory is 128..10240 MiB."""
    assert memory_mib == make(memory_mib=memory_mib).memory_mib


@pytest.mark.parametrize("memory_mib", [127, 10_241])
def test_lambda_target_refuses_memory_out_of_bounds(memory_mib: int) -> None:
    """One past each edge of Lambda's memory is refused."""
    expected = f'"memory_mib" must be between 128 and 10240 (Lambda\'s memory): {memory_mib}'
    assert expected == str(refusal(memory_mib=memory_mib))


@pytest.mark.parametrize(
    ("max_tasks", "message"),
    [
        (0, '"max_tasks" must be at least 1: 0'),
        (1.5, '"max_tasks" must be a whole number: 1.5'),
        (True, '"max_tasks" must be a whole number: True'),
        ("2", "\"max_tasks\" must be a whole number: '2'"),
    ],
)
def test_lambda_target_refuses_max_tasks_below_one_or_not_whole(max_tasks: object, message: str) -> None:
    """max_tasks is a whole number of at least 1 (1 is accepted: see the raise-to-2 test)."""
    assert message == str(refusal(max_tasks=max_tasks))


@pytest.mark.parametrize("max_rate", [0, -1, True, "1"])
def test_lambda_target_refuses_a_max_rate_that_is_not_a_positive_number(max_rate: object) -> None:
    """max_rate is None or a positive number of starts per second (0.00113125 is accepted: see the rate-wait edge)."""
    expected = f'"max_rate" must be a positive number of handler starts per second, or None: {max_rate!r}'
    assert expected == str(refusal(max_rate=max_rate))


def test_lambda_target_refuses_a_contract_that_is_not_one() -> None:
    """contract must be a WorkerContract, not a dict of its fields."""
    with pytest.raises(ContractError) as raised:
        LambdaTarget(contract={"max_duration_seconds": 90}, max_tasks=1, memory_mib=512)  # type: ignore[arg-type]
    expected = "\"contract\" must be a WorkerContract (the handler's @worker declaration): {'max_duration_seconds': 90}"
    assert expected == str(raised.value)
