"""The two handler shapes beside the one-message ``def``: batch handlers (``max_batch``, ``batch_window``) and
``async def`` handlers, as declared, validated and derived, and :class:`consumer.BatchResult`'s rules."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from consumer import BatchResult, Message, PoisonMessage, WorkerContract, worker
from consumer.declaration import contract_of
from consumer.errors import ContractDriftError, ContractError
from consumer.limits import MAX_ASYNC_CONCURRENCY, MAX_CONCURRENCY
from consumer.runtime.config import check_declaration
from consumer.runtime.inflight import InFlight, InFlightTable, LogContext


def message(n: int) -> Message:
    return Message(body=f"m{n}", message_id=f"id-{n}", receipt_handle=f"rh-{n}")


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"max_batch": 0}, '"max_batch" must be between 1 and 1000 (messages per call of a batch handler): 0'),
        ({"max_batch": "10"}, "\"max_batch\" must be a whole number: '10'"),
        (
            {"max_batch": 10, "fifo": True},
            '"max_batch" is only allowed on a standard queue (fifo=False): a FIFO group\'s order is kept one message'
            " at a time: 10",
        ),
        (
            {"max_batch": 1000, "concurrency": 11},
            '"max_batch" must keep concurrency x max_batch (11 x 1000 = 11000) at most 10000 messages held by one'
            " process: 1000",
        ),
        ({"batch_window": 3}, '"batch_window" is only for a batch handler (declare max_batch too): 3'),
        ({"max_batch": 10, "batch_window": 301}, '"batch_window" must be between 0 and 300: 301'),
        (
            {"max_batch": 10, "batch_window": 60},
            '"batch_window" must be less than acceptable_latency (60 s): every message of a batch that does not'
            " fill waits the whole window: 60",
        ),
        (
            {"max_batch": 10, "max_rate": 5},
            '"max_rate" is not supported for a batch handler (max_batch) yet: pace the downstream in the handler: 5',
        ),
    ],
)
def test_a_batch_declaration_is_refused_in_one_line_naming_the_argument(arguments: dict[str, Any], error: str) -> None:
    with pytest.raises(ContractError) as raised:

        @worker(max_duration=10, **arguments)
        def handle(messages: list[Message]) -> BatchResult: ...

    assert str(raised.value) == error


def test_a_batch_window_counts_toward_the_max_duration_bound() -> None:
    """SQS's 12 hours from a receive must hold a batch message's wait in the window and its attempt: with a 30 s
    window max_duration reaches 42870 (a receive cycle of exactly 43200 s), and 42871 is refused in one line."""

    @worker(max_duration=42_870, max_batch=10, batch_window=30, acceptable_latency=600)
    def fits(messages: list[Message]) -> BatchResult: ...

    assert contract_of(fits).receive_cycle_seconds == 43_200
    with pytest.raises(ContractError) as raised:

        @worker(max_duration=42_871, max_batch=10, batch_window=30, acceptable_latency=600)
        def past(messages: list[Message]) -> BatchResult: ...

    assert str(raised.value) == (
        '"max_duration" must be at most 42870 with a 30 s batch window (SQS\'s 43200 s visibility limit from the'
        " receive, less the 300 s margin and the window): 42871"
    )


def test_concurrency_is_threads_for_a_def_and_coroutines_for_an_async_def() -> None:
    """A def handler is capped at 256 threads; an async def at 4096 coroutines, and its contract says asynchronous."""

    @worker(max_duration=10, concurrency=MAX_ASYNC_CONCURRENCY)
    async def many(message: Message) -> None: ...

    assert contract_of(many).asynchronous and contract_of(many).concurrency == MAX_ASYNC_CONCURRENCY
    with pytest.raises(ContractError, match=r'"concurrency" must be between 1 and 256 \(threads; an async def'):

        @worker(max_duration=10, concurrency=MAX_CONCURRENCY + 1)
        def threads(message: Message) -> None: ...

    with pytest.raises(ContractError, match=r'"concurrency" must be between 1 and 4096 \(coroutines'):

        @worker(max_duration=10, concurrency=MAX_ASYNC_CONCURRENCY + 1)
        async def too_many(message: Message) -> None: ...

    with pytest.raises(ContractError, match='"max_rate" is not supported for an async def handler yet'):

        @worker(max_duration=10, max_rate=5)
        async def paced(message: Message) -> None: ...

    with pytest.raises(ContractError, match='"max_batch" is not supported for an async def handler yet'):

        @worker(max_duration=10, max_batch=10)
        async def batched(messages: list[Message]) -> BatchResult: ...


def test_a_batch_contract_derives_from_the_batch_and_its_window() -> None:
    """max_duration and average_duration are one call's, for the whole batch: the scaling target counts max_batch
    messages per call; the window adds to every receive's hold (visibility, retry horizon, backlog age alarm); the
    pollers follow the messages held."""
    one = WorkerContract(max_duration_seconds=60, concurrency=2, average_duration_seconds=10)
    batch = dataclasses.replace(one, max_batch=100, batch_window_seconds=5)
    assert batch.messages_per_call == 100 and batch.messages_in_flight == 200
    assert batch.scaling_target_backlog_per_task == one.scaling_target_backlog_per_task * 100 == 1200
    assert batch.visibility_timeout_seconds == one.visibility_timeout_seconds + 5 == 75
    assert batch.retry_horizon_seconds == one.retry_horizon_seconds + 5 * one.redrive_max_receive_count
    assert batch.backlog_age_alarm_seconds == one.backlog_age_alarm_seconds + 5 * 3
    assert (one.pollers, batch.pollers) == (1, 4)
    assert batch.stop_timeout_seconds == one.stop_timeout_seconds  # a collecting batch is handed back, not awaited


def test_shape_fields_are_written_only_when_declared_and_read_back() -> None:
    """A one-message def handler's task environment is what it was; a batch or async one round-trips."""
    plain = WorkerContract(max_duration_seconds=60)
    assert not {"CONSUMER_MAX_BATCH", "CONSUMER_BATCH_WINDOW_SECONDS", "CONSUMER_ASYNCHRONOUS"} & set(plain.to_env())
    for shaped in (
        dataclasses.replace(plain, max_batch=50, batch_window_seconds=2),
        dataclasses.replace(plain, asynchronous=True, concurrency=1024),
    ):
        assert WorkerContract.from_env(shaped.to_env()) == shaped
    assert WorkerContract.from_env(plain.to_env()) == plain


def test_batch_window_takes_a_timedelta() -> None:
    @worker(max_duration=timedelta(minutes=1), max_batch=10, batch_window=timedelta(milliseconds=1500))
    def handle(messages: list[Message]) -> BatchResult: ...

    assert contract_of(handle).batch_window_seconds == 2  # rounded up, as every duration


def test_batch_result_reports_each_message_once() -> None:
    """succeeded / failed / poison each name a message once; a second report of it is a bug, refused at once."""
    a, b, c, d = (message(n) for n in range(4))
    error = RuntimeError("503")
    result = BatchResult().succeeded(a).failed(b, error).poison(c, "not JSON")
    assert result.outcome(a) == (True, None)
    assert result.outcome(b) == (True, error)
    reported, poison = result.outcome(c)
    assert reported and isinstance(poison, PoisonMessage) and poison.reason == "not JSON"
    assert result.outcome(d) == (False, None)  # not reported: never deleted by the runtime
    assert list(result.reported()) == [a, b, c] and len(result) == 3
    with pytest.raises(ValueError, match="message id-0 is reported twice: it already succeeded"):
        result.failed(a, error)
    with pytest.raises(ValueError, match=r"message id-1 is reported twice: it already failed \(RuntimeError\)"):
        result.succeeded(b)


def test_batch_result_tells_equal_messages_apart() -> None:
    """Two receives of one message are equal Messages but two entries of a batch: each is reported on its own."""
    first, second = message(1), message(1)
    assert first == second
    result = BatchResult().succeeded(first)
    assert result.outcome(first) == (True, None)
    assert result.outcome(second) == (False, None)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda r: r.succeeded("m1"), "BatchResult: expected a Message of the batch, not str"),
        (lambda r: r.failed(message(1), "boom"), "BatchResult.failed: error must be an exception, not str"),
    ],
)
def test_batch_result_refuses_what_is_not_a_message_or_an_error(call: Any, error: str) -> None:
    with pytest.raises(TypeError) as raised:
        call(BatchResult())
    assert str(raised.value) == error


def test_a_stuck_batch_call_counts_once_toward_every_slot_stuck() -> None:
    """The heartbeat stops the process when every slot of concurrency holds a handler given up on: the messages of
    one batch call are one slot, a one-message handler's message is one."""
    table = InFlightTable()
    batch = [InFlight(message(n), 0.0, 100.0, LogContext.of(message(n), "q"), call=7) for n in range(3)]
    single = InFlight(message(9), 0.0, 100.0, LogContext.of(message(9), "q"))
    table.admit([*batch, single])
    for item in [*batch, single]:
        assert table.start(item, key=None, owner="")
        item.started_at = 0.0  # its handler called
    overrun, stuck = table.time_out_overruns(now=10.0, timeout_seconds=5)
    assert len(overrun) == 4 and stuck == 2


def test_the_drift_check_names_a_shape_the_stack_and_the_handler_disagree_on() -> None:
    """A stack deployed for a one-message handler, an image whose handler now batches (or is async): refused at
    start in one line naming the variable and both values, never run in the wrong shape."""
    deployed = WorkerContract(max_duration_seconds=60)
    with pytest.raises(ContractDriftError) as batch:
        check_declaration(declared=dataclasses.replace(deployed, max_batch=50), deployed=deployed)
    assert str(batch.value).startswith(
        '"CONSUMER_MAX_BATCH" differs from the handler\'s @worker declaration (max_batch:'
    )
    assert "stack None, handler 50" in str(batch.value)
    with pytest.raises(
        ContractDriftError, match='"CONSUMER_ASYNCHRONOUS" differs .*asynchronous: stack False, handler True'
    ):
        check_declaration(declared=dataclasses.replace(deployed, asynchronous=True), deployed=deployed)
