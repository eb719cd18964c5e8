"""Batch handlers (``@worker(max_batch=...)``) through the real runtime, on the simulated clock
(tests/integration/virtual.py): batches collected across receives up to ``max_batch`` or the window, each message
settled with the outcome its ``BatchResult`` reports (deleted, retried, DLQ at once with its reason, never deleted
when not reported), idempotency per message, room for a batch before a receive, and hand-back at shutdown."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from consumer import BatchResult, Message, worker
from consumer.declaration import contract_of
from consumer.exit_codes import ExitCode
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, drain
from tests.integration.conftest import create_pair
from tests.integration.support import fast_contract, holds_nothing, send
from tests.integration.virtual import Virtual


def reasons(sqs: Any, dlq_url: str) -> dict[str, tuple[str, str]]:
    """Each DLQ message's body -> (kind, reason)."""
    found = {}
    for moved in drain(sqs, dlq_url):
        reason = read_reason(moved.get("MessageAttributes", {})) or {}
        found[moved["Body"]] = (reason.get("kind", ""), reason.get("reason", ""))
    return found


@worker(
    max_duration=3,
    concurrency=1,
    max_batch=10,
    max_receive_count=3,
    retry_backoff_base=1,
    retry_backoff_max=1,
    non_retryable=(KeyError,),
)
def mixed(messages: list[Message]) -> BatchResult:
    """Each body says what the handler reports for it."""
    result = BatchResult()
    for message in messages:
        attempts[message.body] = attempts.get(message.body, 0) + 1
        if message.body == "ok":
            result.succeeded(message)
        elif message.body == "poison":
            result.poison(message, "not an order")
        elif message.body == "rejected":
            result.failed(message, KeyError("order_id"))
        elif message.body == "flaky":
            if message.receive_count == 1:
                result.failed(message, RuntimeError("downstream 503"))
            else:
                result.succeeded(message)
        elif message.body == "failing":
            result.failed(message, RuntimeError("always"))
        # "forgotten": not reported at all
    return result


attempts: dict[str, int] = {}


def test_each_message_of_a_batch_gets_the_outcome_the_result_reports(virtual: Virtual) -> None:
    """One batch, six outcomes: ok deleted once; poison and a declared non-retryable type to the DLQ at their first
    receive with their reasons; flaky retried after a backoff, then deleted; failing and forgotten (not reported)
    retried to the last receive, then to the DLQ with the reason, never deleted by default. On the virtual clock."""
    attempts.clear()
    contract = contract_of(mixed)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "ok", "poison", "rejected", "flaky", "failing", "forgotten")
        with virtual.running(virtual.consumer_of(pair, contract, mixed)) as exit_code:
            virtual.wait_until(
                lambda: depth(sqs, pair.dlq_url).total == 4 and holds_nothing(sqs, pair.queue_url), timeout=30
            )
        moved = reasons(sqs, pair.dlq_url)
        assert set(moved) == {"poison", "rejected", "failing", "forgotten"}
        assert moved["poison"] == ("poison", "not an order")
        assert moved["rejected"] == ("non_retryable", "KeyError: 'order_id'")
        assert moved["failing"] == ("exhausted", "failed 3 times; last error: RuntimeError: always")
        kind, reason = moved["forgotten"]
        assert kind == "exhausted" and "the batch handler did not report this message" in reason
        assert attempts == {"ok": 1, "poison": 1, "rejected": 1, "flaky": 2, "failing": 3, "forgotten": 3}
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


@pytest.mark.parametrize("returned", [None, ["ok"]], ids=["None", "a-list"])
def test_a_handler_returning_no_batch_result_deletes_nothing(virtual: Virtual, returned: object) -> None:
    """Returning anything but a BatchResult reports nothing: every message is retried and ends in the DLQ with a
    reason that says so; none is deleted as if it had succeeded. On the virtual clock."""
    contract = fast_contract(concurrency=1, max_batch=10, max_receive_count=2)
    calls: list[int] = []

    def handle(messages: list[Message]) -> Any:
        calls.append(len(messages))
        return returned

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "a", "b", "c")
        with virtual.running(virtual.consumer_of(pair, contract, handle)):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 3, timeout=30)
        moved = reasons(sqs, pair.dlq_url)
        assert set(moved) == {"a", "b", "c"}
        assert all(kind == "exhausted" and "not a BatchResult" in reason for kind, reason in moved.values())
        assert sum(calls) == 6  # each message attempted on both allowed receives, deleted on neither

    virtual.run(body)


def test_a_handler_raising_fails_the_whole_batch(virtual: Virtual) -> None:
    """A batch handler that raises fails every message of its call: each is retried, then moved with the error. On
    the virtual clock."""
    contract = fast_contract(concurrency=1, max_batch=10, max_receive_count=2)

    def handle(messages: list[Message]) -> BatchResult:
        raise ConnectionError("bulk insert refused")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "a", "b")
        with virtual.running(virtual.consumer_of(pair, contract, handle)):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 2, timeout=30)
        assert reasons(sqs, pair.dlq_url) == {
            sent: ("exhausted", "failed 2 times; last error: ConnectionError: bulk insert refused") for sent in "ab"
        }

    virtual.run(body)


def test_idempotency_is_per_message_within_a_batch(virtual: Virtual) -> None:
    """Two messages with one body (one idempotency key) and a third: the handler runs the shared key once and the
    other once; all three leave the queue (the duplicate deleted, as done, without reaching the handler). On the
    virtual clock."""
    contract = fast_contract(concurrency=1, max_batch=10, retry_backoff_base_seconds=1, max_receive_count=4)
    handled: list[str] = []

    def handle(messages: list[Message]) -> BatchResult:
        handled.extend(m.body for m in messages)
        return BatchResult().succeeded(*messages)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "same", "same", "other")
        with virtual.running(virtual.consumer_of(pair, contract, handle)):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=30)
        assert sorted(handled) == ["other", "same"]
        assert depth(sqs, pair.dlq_url).total == 0

    virtual.run(body)


def test_a_running_batch_holds_room_for_a_full_batch(virtual: Virtual) -> None:
    """One thread, max_batch 10: while a call runs, its unused room stays held, so no receive starts for it. The
    one receive already in flight when the call began (for the room the thread was collecting into) may still bring
    messages (b, or some of c, d, e); after it no receive is made, so the 4 sent later all stay visible, where a
    receive for the free room would have taken every one. Once the call returns the rest are processed. On the
    virtual clock."""
    contract = fast_contract(concurrency=1, max_batch=10, max_duration_seconds=30)
    receives = {"started": 0, "answered": 0}
    running_call, release = virtual.sim.event(), virtual.sim.event()
    sizes: list[int] = []

    def handle(messages: list[Message]) -> BatchResult:
        sizes.append(len(messages))
        running_call.set()
        release.wait(30)
        return BatchResult().succeeded(*messages)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        consumer = virtual.consumer_of(pair, contract, handle)
        consumer.client.meta.events.register(
            "before-call.sqs.ReceiveMessage", lambda **_: receives.update(started=receives["started"] + 1)
        )
        consumer.client.meta.events.register(
            "after-call.sqs.ReceiveMessage", lambda **_: receives.update(answered=receives["answered"] + 1)
        )
        send(sqs, pair.queue_url, "a", "b")
        with virtual.running(consumer):
            virtual.wait_until(running_call.is_set, timeout=10)
            send(sqs, pair.queue_url, "c", "d", "e")
            # The receive in flight when the call began takes them if it is still polling (it may have ended empty
            # first): once it has answered, nothing may receive them, nor what follows, until the call returns.
            virtual.wait_until(
                lambda: receives["answered"] == receives["started"], timeout=10, what="no receive in flight"
            )
            made = receives["started"]
            send(sqs, pair.queue_url, *(f"m{i}" for i in range(4)))
            virtual.sim.sleep(0.5)  # a receive for free room would start within milliseconds of the last one's answer
            held = depth(sqs, pair.queue_url)
            assert receives["started"] == made, "a receive started while the call held the thread's room"
            release.set()
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
        # The call's messages and whatever that one receive took are in flight; m0..m3 (sent after it) are not.
        assert held.total == 9 and held.visible >= 4, held
        assert sum(sizes) == 9

    virtual.run(body)


def test_a_batch_collecting_at_shutdown_is_handed_back_at_once(virtual: Virtual) -> None:
    """Stopped while its window is open, a collecting batch is handed back, never run: its messages are visible
    again at once, not after their lease. On the virtual clock."""
    contract = fast_contract(concurrency=1, max_batch=10, batch_window_seconds=30, acceptable_latency_seconds=60)
    calls: list[int] = []

    def handle(messages: list[Message]) -> BatchResult:
        calls.append(len(messages))
        return BatchResult().succeeded(*messages)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "a", "b", "c")
        consumer = virtual.consumer_of(pair, contract, handle)
        with virtual.running(consumer) as exit_code:
            virtual.wait_until(lambda: depth(sqs, pair.queue_url).in_flight == 3, timeout=10)
        assert calls == []
        assert exit_code == [ExitCode.OK]
        # Counted, not received: a receive that brought only some of them would leave those in flight for their lease.
        virtual.wait_until(lambda: depth(sqs, pair.queue_url) == (3, 0), timeout=5, what="all three visible again")

    virtual.run(body)


def test_a_timed_out_batch_is_given_up_on_and_the_others_go_on(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """Two threads; the call holding "a" overruns max_duration: every message of it is given up on (no longer
    extended), the consumer is not stopped as stuck (one stuck call of two), and a message sent later is processed by
    the other thread; when the call then returns successfully within its messages' lease, each is settled as done
    (completed and deleted, never run again). (How stuck calls are counted: tests/unit/test_handler_shapes.py.) On
    the virtual clock."""
    contract = fast_contract(concurrency=2, max_batch=3, max_duration_seconds=1)
    unblock, blocked = virtual.sim.event(), []
    done: list[str] = []

    def handle(messages: list[Message]) -> BatchResult:
        bodies = [m.body for m in messages]
        if "a" in bodies and not blocked:
            blocked.extend(bodies)
            unblock.wait(10)
        else:
            done.extend(bodies)
        return BatchResult().succeeded(*messages)

    caplog.set_level(logging.INFO, logger="consumer")

    def timed_out() -> int:
        return sum(1 for record in caplog.records if record.getMessage() == "handler_timed_out")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "a", "b", "c")
        consumer = virtual.consumer_of(pair, contract, handle)
        with virtual.running(consumer) as exit_code:
            virtual.wait_until(lambda: blocked and timed_out() == len(blocked), timeout=10)
            send(sqs, pair.queue_url, "later")
            virtual.wait_until(lambda: "later" in done, timeout=10)
            assert not consumer.stopping
            unblock.set()
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=30)  # a late success: deleted
        # Each message ran once: the overrunning call's (the three, or fewer when they came in more than one batch)
        # and the others', "later" among them.
        assert (sorted(blocked + done), "a" in blocked, "later" in done) == (["a", "b", "c", "later"], True, True)
        late = [record for record in caplog.records if record.getMessage() == "handler_succeeded_late"]
        assert len(late) == len(blocked)
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


def test_a_batch_contract_takes_the_window_into_the_lease() -> None:
    """The window is part of how long a receive holds a message: visibility and retry horizon grow by it."""
    plain = fast_contract(max_batch=10)
    windowed = dataclasses.replace(plain, batch_window_seconds=5)
    assert windowed.visibility_timeout_seconds == plain.visibility_timeout_seconds + 5
    assert windowed.retry_horizon_seconds == plain.retry_horizon_seconds + 5 * plain.redrive_max_receive_count
