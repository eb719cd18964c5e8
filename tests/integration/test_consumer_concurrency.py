"""More messages in flight in one process than one receive can bring, on the simulated clock
(tests/integration/virtual.py)."""

from __future__ import annotations

from threading import BrokenBarrierError

from consumer import Message
from consumer.exit_codes import ExitCode
from consumer.runtime.circuit import PROBE, CircuitState
from consumer.runtime.inflight import InFlight, LogContext, State
from consumer.testing import depth
from tests.integration.conftest import create_pair
from tests.integration.support import fast_contract, holds_nothing
from tests.integration.virtual import Virtual


def test_consumer_runs_sixteen_messages_at_once_in_one_process(virtual: Virtual) -> None:
    """Concurrency 16, more than one receive brings (SQS hands out at most 10): 16 handlers that each wait until
    all 16 have started all start together; every message runs once, and every copy received is deleted once. On
    the virtual clock."""
    contract = fast_contract(max_duration_seconds=20, concurrency=16)
    bodies = [f"m{i}" for i in range(16)]
    arrived = virtual.sim.condition()
    broken: list[str] = []  # the handlers that gave up waiting for the other 15
    started: list[str] = []
    received: list[str] = []
    deleted: list[str] = []

    def handle(message: Message) -> None:
        with arrived:
            started.append(message.body)
            arrived.notify_all()
            if not arrived.wait_for(lambda: len(started) >= 16, timeout=15):
                broken.append(message.body)
                raise BrokenBarrierError  # a failed attempt unless 16 run at the same time

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for batch in (bodies[:8], bodies[8:]):
            sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=[{"Id": b, "MessageBody": b} for b in batch])
        worker = virtual.consumer_of(pair, contract, handle)
        worker.client.meta.events.register(
            "after-call.sqs.ReceiveMessage",
            lambda parsed, **_: received.extend(m["ReceiptHandle"] for m in parsed.get("Messages", [])),
        )
        worker.client.meta.events.register(
            "provide-client-params.sqs.DeleteMessageBatch",
            lambda params, **_: deleted.extend(e["ReceiptHandle"] for e in params["Entries"]),
        )
        with virtual.running(worker) as exit_code:
            virtual.wait_until(lambda: len(deleted) >= 16 and holds_nothing(sqs, pair.queue_url))
        assert exit_code == [ExitCode.OK]
        assert broken == []
        assert sorted(started) == sorted(bodies)
        # Each copy received is deleted once. SQS may hand one message out twice (16 copies or a few more); the
        # second copy is recognised by its idempotency key and deleted without running the handler.
        assert len(deleted) == len(set(deleted)) and sorted(deleted) == sorted(received) and len(received) >= 16
        assert depth(sqs, pair.dlq_url).total == 0

    virtual.run(body)


def test_consumer_receives_ahead_of_a_short_handler(virtual: Virtual) -> None:
    """One handler slot, a 1 ms handler: once a handler has finished, a receive asks for a full batch (the
    lookahead), not one message per receive; every message still runs once and is deleted. On the virtual clock."""
    contract = fast_contract(concurrency=1)
    bodies = [f"m{i}" for i in range(30)]
    asked: list[int] = []
    started: list[str] = []

    def handle(message: Message) -> None:
        started.append(message.body)
        virtual.sim.sleep(0.001)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for start in range(0, 30, 10):
            entries = [{"Id": b, "MessageBody": b} for b in bodies[start : start + 10]]
            sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
        worker = virtual.consumer_of(pair, contract, handle)
        worker.client.meta.events.register(
            "provide-client-params.sqs.ReceiveMessage",
            lambda params, **_: asked.append(params["MaxNumberOfMessages"]),
        )
        with virtual.running(worker) as exit_code:
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert exit_code == [ExitCode.OK]
        assert sorted(started) == sorted(bodies)
        assert asked[0] == 1 and max(asked) == 10

    virtual.run(body)


def test_consumer_hands_back_a_message_that_waited_past_the_heartbeats_reach(virtual: Virtual) -> None:
    """A message whose lease has less than a heartbeat interval (and a second) left when its turn comes, after
    waiting for a handler, is handed back (visible again at once), never started on a lease that may lapse before
    the heartbeat's next extension. On the virtual clock."""
    contract = fast_contract(concurrency=1)
    started: list[str] = []

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="late")
        raw = sqs.receive_message(QueueUrl=pair.queue_url, MessageSystemAttributeNames=["All"])["Messages"][0]
        consumer = virtual.consumer_of(pair, contract, lambda m: started.append(m.body))
        message = Message.from_sqs(raw)
        now = virtual.sim.monotonic()
        lease_end = now + contract.heartbeat_interval_seconds + 0.5  # it waited: less left than the heartbeat reaches
        item = InFlight(message, now - contract.visibility_timeout_seconds, lease_end, LogContext.of(message, "q"))
        consumer._table.admit([item])
        consumer._table.dispatched()
        assert consumer._slots.reserve_up_to(1, virtual.sim.event()) == 1
        # It was the half-open circuit's probe: handed back unanswered, the next receive must probe again at once.
        consumer.circuit.state, consumer.circuit._probe = CircuitState.HALF_OPEN, message.message_id
        consumer.circuit._probe_taken_at = now
        consumer._ack.start()
        try:
            assert consumer._runner._process(item) is False
            consumer._ack.flush()
        finally:
            consumer._ack.close()
        assert started == []
        assert item.state is State.RELEASED
        assert depth(sqs, pair.queue_url).visible == 1  # back in the queue now, not when the lease lapses
        assert consumer.circuit.receive_limit() == PROBE

    virtual.run(body)


def test_consumer_extends_at_once_a_message_that_starts_with_little_lease_left(virtual: Virtual) -> None:
    """A message that waited and starts with less lease than the heartbeat's threshold (but more than it can
    reach) starts, and its lease is extended as it starts, not up to a heartbeat interval later. On the virtual
    clock."""
    contract = fast_contract(max_duration_seconds=20, concurrency=1)
    assert contract.heartbeat_interval_seconds >= 2  # so interval + 1.5 s is under the threshold (2 intervals)
    extensions: list[int] = []
    started: list[str] = []

    def handle(message: Message) -> None:
        started.append(message.body)
        virtual.sim.sleep(0.3)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="waited")
        raw = sqs.receive_message(QueueUrl=pair.queue_url, MessageSystemAttributeNames=["All"])["Messages"][0]
        consumer = virtual.consumer_of(pair, contract, handle)
        consumer.client.meta.events.register(
            "provide-client-params.sqs.ChangeMessageVisibilityBatch",
            lambda params, **_: extensions.extend(e["VisibilityTimeout"] for e in params["Entries"]),
        )
        message = Message.from_sqs(raw)
        now = virtual.sim.monotonic()
        lease_end = now + contract.heartbeat_interval_seconds + 1.5
        item = InFlight(message, now - 1, lease_end, LogContext.of(message, "q"))
        consumer._table.admit([item])
        consumer._table.dispatched()
        assert consumer._slots.reserve_up_to(1, virtual.sim.event()) == 1
        consumer._ack.start()
        try:
            assert consumer._runner._process(item) is True
        finally:
            consumer._ack.close()
        assert started == ["waited"]
        assert extensions and extensions[0] > contract.heartbeat_interval_seconds + 1.5

    virtual.run(body)


def test_consumer_hands_back_a_receive_answered_after_shutdown_closed_its_table(virtual: Virtual) -> None:
    """A long poll outstanding at SIGTERM, answered once shutdown has collected its hand-backs (often by the copies
    it requeued): what it brings is handed back at once, not left invisible until its lease ends. On the virtual
    clock."""
    contract = fast_contract(concurrency=1)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="late")
        raw = sqs.receive_message(QueueUrl=pair.queue_url, MessageSystemAttributeNames=["All"])["Messages"][0]
        consumer = virtual.consumer_of(pair, contract, lambda m: None)
        message = Message.from_sqs(raw)
        now = virtual.sim.monotonic()
        item = InFlight(message, now, now + contract.visibility_timeout_seconds, LogContext.of(message, "q"))
        consumer._ack.start()
        consumer._table.close()
        assert consumer._slots.reserve_up_to(1, virtual.sim.event()) == 1
        consumer._poller._dispatch([item], 1)
        consumer._ack.close()
        assert depth(sqs, pair.queue_url).visible == 1

    virtual.run(body)
