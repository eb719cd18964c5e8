"""How the runtime treats a failed attempt, against moto in-process on the simulated clock
(tests/integration/virtual.py): whatever the handler raises, the jittered backoff it gets, and the deletes that
cannot wait for their batch."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import pytest

from consumer import Message
from consumer.exit_codes import ExitCode
from consumer.runtime import acknowledger
from consumer.runtime.dead_letter import read_reason
from consumer.runtime.inflight import InFlight, LogContext
from consumer.testing import depth, receive_visible
from tests.integration.conftest import create_pair
from tests.integration.support import fast_contract, holds_nothing
from tests.integration.virtual import Virtual


class HandlerAborted(BaseException):
    """A handler's own BaseException subclass, neither SystemExit nor KeyboardInterrupt."""


@pytest.mark.parametrize(
    "raise_it",
    [lambda: SystemExit(3), lambda: KeyboardInterrupt(), lambda: HandlerAborted("gave up")],
    ids=["SystemExit", "KeyboardInterrupt", "BaseException-subclass"],
)
def test_consumer_treats_a_handler_raising_a_base_exception_as_a_failed_attempt(
    virtual: Virtual, caplog: pytest.LogCaptureFixture, raise_it: Callable[[], BaseException]
) -> None:
    """With one slot, the second attempt needs the slot back; each failure is logged, the first backed off, and
    the last allowed receive (the second) moves the message to the DLQ with the exception as reason. On the virtual
    clock."""
    contract = fast_contract(concurrency=1, max_receive_count=2)
    attempts: list[int] = []
    expected = f"{type(raise_it()).__name__}: {raise_it()}"

    def handle(message: Message) -> None:
        attempts.append(message.receive_count)
        raise raise_it()

    caplog.set_level(logging.INFO, logger="consumer")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job")
        worker = virtual.consumer_of(pair, contract, handle)
        with virtual.running(worker) as exit_code:
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert attempts == [1, 2]
        assert exit_code == [ExitCode.OK]
        events = [(r.getMessage(), getattr(r, "error", None)) for r in caplog.records]
        assert events.count(("handler_failed", expected)) == 2
        assert [e for e, _ in events].count("message_backoff") == 1
        (moved,) = receive_visible(sqs, pair.dlq_url)
        reason = read_reason(moved["MessageAttributes"]) or {}
        assert (reason["kind"], reason["reason"]) == ("exhausted", f"failed 2 times; last error: {expected}")

    virtual.run(body)


def test_consumer_spreads_backoffs_with_equal_jitter(virtual: Virtual) -> None:
    """Twelve first-receive failures under a seeded random source: every backoff the consumer sends lies in
    [cap / 2, cap] of retry_backoff(1), and they are not all the same. On the virtual clock."""
    contract = fast_contract(concurrency=12, retry_backoff_base_seconds=8, retry_backoff_max_seconds=8)
    cap = contract.retry_backoff_seconds(1)
    assert cap == 8
    backoffs: list[int] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        backoffs.extend(entry["VisibilityTimeout"] for entry in params["Entries"])

    def fail(message: Message) -> None:
        raise RuntimeError("downstream 503")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(12)]
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries[:10])
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries[10:])
        worker = virtual.consumer_of(pair, contract, fail, rng=random.Random(20261123))
        worker.client.meta.events.register("provide-client-params.sqs.ChangeMessageVisibilityBatch", record)
        with virtual.running(worker):
            virtual.wait_until(lambda: len(backoffs) >= 12)
        assert all(cap / 2 <= seconds <= cap for seconds in backoffs), backoffs
        assert len(set(backoffs)) > 1, backoffs

    virtual.run(body)


def test_consumer_deletes_a_message_done_with_on_its_last_allowed_receive_at_once(
    virtual: Virtual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With batched deletes made to wait a minute: a message that succeeds on its last allowed receive, and one moved
    to the DLQ then, leave the source at once (a holder killed while such a delete waited would leave the message
    the redrive policy's backstop receives only, then SQS's silent move to the DLQ); one done on its first receive
    still waits for its batch (the cost of about 0.2 requests per message depends on batching). On the virtual
    clock."""
    monkeypatch.setattr(acknowledger, "DELETE_FLUSH_SECONDS", 60.0)
    contract = fast_contract(max_receive_count=2)
    done: list[tuple[str, int]] = []

    def handle(message: Message) -> None:
        if message.body == "doomed" or (message.body == "late" and message.receive_count < contract.max_receive_count):
            raise RuntimeError("downstream 503")
        done.append((message.body, message.receive_count))

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for text in ("late", "doomed"):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=text)
        worker = virtual.consumer_of(pair, contract, handle)
        with virtual.running(worker):
            virtual.wait_until(lambda: ("late", 2) in done and depth(sqs, pair.dlq_url).total == 1)
            virtual.wait_until(
                lambda: holds_nothing(sqs, pair.queue_url), timeout=5, what="both deleted without the wait"
            )
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody="early")
            virtual.wait_until(lambda: ("early", 1) in done)
            virtual.sim.sleep(0.5)  # an at-once delete is sent within milliseconds of the handler's return
            assert depth(sqs, pair.queue_url).in_flight == 1  # its delete waits for nine others, or the minute
        assert depth(sqs, pair.queue_url).total == 0  # the drain sent it

    virtual.run(body)


def test_consumer_deletes_a_message_done_with_little_lease_left_at_once(
    virtual: Virtual, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With batched deletes made to wait a minute: a message done with when its lease is within the heartbeat's
    threshold (it is extended no more) leaves the source at once, before the lease can end and hand it to another
    receive; one done with a full lease still waits for its batch. On the virtual clock."""
    monkeypatch.setattr(acknowledger, "DELETE_FLUSH_SECONDS", 60.0)
    contract = fast_contract()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        consumer = virtual.consumer_of(pair, contract, lambda m: None)
        consumer._ack.start()
        try:
            in_flight = []
            for lease in (contract.heartbeat_threshold_seconds - 1, contract.visibility_timeout_seconds):
                sqs.send_message(QueueUrl=pair.queue_url, MessageBody=f"lease {lease}")
                raw = sqs.receive_message(QueueUrl=pair.queue_url, MessageSystemAttributeNames=["All"])["Messages"][0]
                message, now = Message.from_sqs(raw), virtual.sim.monotonic()
                consumer._settlement._delete(InFlight(message, now, now + lease, LogContext.of(message, "q")))
                in_flight.append(depth(sqs, pair.queue_url).in_flight)
            # The low lease's delete was sent at once; the full lease's waits for its batch.
            assert in_flight == [0, 1]
        finally:
            consumer._ack.close()
        assert depth(sqs, pair.queue_url).total == 0  # the close sent the waiting one

    virtual.run(body)
