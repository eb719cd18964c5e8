"""What a handler tells the consumer, and what the consumer tells a handler, against moto in-process on the
simulated clock (tests/integration/virtual.py).

A handler raising a type it declared ``non_retryable`` sends its message to the DLQ at the first receive; a
handler sees its attempt's deadline and whether the consumer is stopping (``Message.deadline``, ``.stopping``).
"""

from __future__ import annotations

from typing import Any

from consumer import Message, worker
from consumer.exit_codes import ExitCode
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, drain, receive_visible
from tests.integration.conftest import create_pair
from tests.integration.support import fast_contract, holds_nothing
from tests.integration.virtual import Virtual


class ValidationError(Exception):
    """A handler's own error for a message that fails its schema."""


class MissingFieldError(ValidationError):
    """A subclass: declaring ValidationError covers it."""


def test_consumer_moves_a_declared_non_retryable_error_to_dlq_at_the_first_receive(virtual: Virtual) -> None:
    """Declared types, a subclass included: one handler call each, then the DLQ with kind non_retryable and the
    error's type and text as reason, at receive 1 (the retry budget untouched). On the virtual clock."""
    contract = fast_contract()
    calls: list[tuple[str, int]] = []

    @worker(max_duration=3, non_retryable=(KeyError, ValidationError))
    def handle(message: Message) -> None:
        calls.append((message.body, message.receive_count))
        if message.body == "no-key":
            raise KeyError("order_id")
        raise MissingFieldError("customer is required")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="no-key")
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="no-field")
        with virtual.running(virtual.consumer_of(pair, contract, handle)) as exit_code:
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 2)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert exit_code == [ExitCode.OK]
        assert sorted(calls) == [("no-field", 1), ("no-key", 1)]
        reasons = {m["Body"]: read_reason(m["MessageAttributes"]) or {} for m in drain(sqs, pair.dlq_url)}
        assert {text: (r["kind"], r["reason"], r["receive_count"]) for text, r in reasons.items()} == {
            "no-key": ("non_retryable", "KeyError: 'order_id'", 1),
            "no-field": ("non_retryable", "MissingFieldError: customer is required", 1),
        }

    virtual.run(body)


def test_consumer_still_retries_an_error_not_declared_non_retryable(virtual: Virtual) -> None:
    """A handler declaring KeyError that raises ValueError: every allowed receive (two) is an attempt, then
    exhausted. On the virtual clock."""
    contract = fast_contract(concurrency=1, max_receive_count=2)
    attempts: list[int] = []

    @worker(max_duration=3, non_retryable=(KeyError,))
    def handle(message: Message) -> None:
        attempts.append(message.receive_count)
        raise ValueError("downstream 503")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job")
        with virtual.running(virtual.consumer_of(pair, contract, handle)):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert attempts == [1, 2]
        (moved,) = receive_visible(sqs, pair.dlq_url)
        reason = read_reason(moved["MessageAttributes"]) or {}
        assert (reason["kind"], reason["reason"]) == (
            "exhausted",
            "failed 2 times; last error: ValueError: downstream 503",
        )

    virtual.run(body)


def test_consumer_lets_a_long_handler_see_stopping_and_settles_its_return_as_success(virtual: Virtual) -> None:
    """stop() (what SIGTERM calls) while a long handler runs: it sees ``stopping`` turn true, checkpoints and
    returns well within the drain, and the message is deleted, neither handed back nor dead-lettered. On the virtual
    clock."""
    contract = fast_contract(stop_timeout_seconds=8)  # drains for 3 s
    started = virtual.sim.event()
    seen: dict[str, Any] = {}
    requeues: list[dict[str, Any]] = []
    clock = virtual.sim.monotonic

    def handle(message: Message) -> None:
        seen["at_start"] = message.stopping
        started.set()
        rows = 0
        give_up = clock() + 10  # past the drain: without the signal it would be abandoned
        while not message.stopping and clock() < give_up:
            rows += 1
            virtual.sim.sleep(0.02)
        seen["checkpoint"], seen["returned_at"], seen["stopping"] = rows, clock(), message.stopping

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="report")
        worker_ = virtual.consumer_of(pair, contract, handle)
        worker_.client.meta.events.register(
            "provide-client-params.sqs.SendMessage", lambda params, **_: requeues.append(params)
        )
        with virtual.running(worker_) as exit_code:
            assert started.wait(20)
            stopped_at = clock()
            worker_.stop()
        assert exit_code == [ExitCode.OK]
        assert (seen["at_start"], seen.get("stopping")) == (False, True), "the handler never saw stopping"
        assert seen["checkpoint"] > 0
        assert seen["returned_at"] - stopped_at < contract.drain_timeout_seconds
        assert requeues == []
        assert (depth(sqs, pair.queue_url).total, depth(sqs, pair.dlq_url).total) == (0, 0)

    virtual.run(body)


def test_consumer_shortens_a_running_handlers_remaining_to_the_drain_after_stop(virtual: Virtual) -> None:
    """A 60 s handler running when stop() comes: remaining() drops from about 60 s to within the 3 s drain, so a
    handler pacing itself by remaining() (not by stopping) returns before the drain ends and is deleted. On the
    virtual clock."""
    contract = fast_contract(max_duration_seconds=60, stop_timeout_seconds=8)  # drains for 3 s
    started, stopped = virtual.sim.event(), virtual.sim.event()
    seen: dict[str, float] = {}
    clock = virtual.sim.monotonic

    def handle(message: Message) -> None:
        seen["at_start"] = message.remaining()
        started.set()
        assert stopped.wait(20)
        seen["after_stop"], seen["deadline"] = message.remaining(), message.deadline
        while message.remaining() > 1:  # a chunk of work at a time, while the attempt has time left
            virtual.sim.sleep(0.02)
        seen["returned_at"] = clock()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="report")
        worker_ = virtual.consumer_of(pair, contract, handle)
        with virtual.running(worker_) as exit_code:
            assert started.wait(20)
            stopped_at = clock()
            worker_.stop()
            stopped.set()
        drain = contract.drain_timeout_seconds
        assert exit_code == [ExitCode.OK]
        assert seen["at_start"] > contract.message_timeout_seconds - 5
        assert drain - 1 < seen["after_stop"] <= drain
        assert stopped_at < seen["deadline"] <= stopped_at + drain + 0.1
        assert seen["returned_at"] - stopped_at < drain
        assert (depth(sqs, pair.queue_url).total, depth(sqs, pair.dlq_url).total) == (0, 0)

    virtual.run(body)


def test_consumer_gives_each_attempt_its_start_plus_the_message_timeout_as_deadline(virtual: Virtual) -> None:
    """A FIFO group received together runs in order: the second message starts 1.5 s after its receive, and its
    deadline is its own start plus max_duration (the instant the heartbeat gives up), not its receive's. On the
    virtual clock."""
    contract = fast_contract(fifo=True, concurrency=2)
    seen: dict[str, tuple[float, float, float]] = {}

    def handle(message: Message) -> None:
        seen[message.body] = (message.deadline, message.remaining(), virtual.sim.monotonic())
        if message.body == "first":
            virtual.sim.sleep(1.5)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message_batch(
            QueueUrl=pair.queue_url,
            Entries=[
                {"Id": text, "MessageBody": text, "MessageGroupId": "g", "MessageDeduplicationId": text}
                for text in ("first", "second")
            ],
        )
        with virtual.running(virtual.consumer_of(pair, contract, handle)):
            virtual.wait_until(lambda: len(seen) == 2)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))

    virtual.run(body)
    timeout = contract.message_timeout_seconds
    # The deadline is the handler's call plus max_duration: just before the handler's first line, on the same clock.
    assert all(called - 0.5 + timeout < deadline <= called + timeout for deadline, _, called in seen.values())
    assert seen["second"][0] - seen["first"][0] >= 1.5 - 1e-6  # virtual instants near 1e5 s: a rounding step
    assert all(timeout - 0.5 < remaining <= timeout for _, remaining, _ in seen.values())
