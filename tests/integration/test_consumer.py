"""The consumer runtime against moto in-process: each message's final place.

One behaviour per test, on the simulated clock (tests/integration/virtual.py): a backoff, a lease or a drain passes
in virtual seconds, so no test waits for one or depends on the timings a machine produces. Two tests need a real
socket and stay on the wall clock: an endpoint that refuses connections, and one taken away and brought back.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from consumer import Message, PoisonMessage
from consumer.exit_codes import ExitCode
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE
from consumer.runtime.consumer import Consumer
from consumer.runtime.dead_letter import read_reason
from consumer.runtime.idempotency import Claim, InMemoryStore
from consumer.runtime.observability import Metrics
from consumer.testing import depth, receive_visible, running, wait_until
from tests.integration.conftest import create_pair
from tests.integration.support import MOTO_SENDER_ID, consumer_of, fast_contract, holds_nothing
from tests.integration.virtual import Virtual


def counted(stream: io.StringIO, *names: str) -> tuple[float, ...]:
    """The totals of ``names`` over every EMF document a consumer's metrics wrote to ``stream``."""
    documents = [json.loads(line) for line in stream.getvalue().splitlines()]
    return tuple(sum(document.get(name, 0) for document in documents) for name in names)


def test_consumer_deletes_successful_messages(virtual: Virtual) -> None:
    """Five messages: each handled once, all deleted, in batched calls. On the virtual clock."""
    contract = fast_contract()
    seen: list[str] = []

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for i in range(5):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=f"m{i}")
        consumer = virtual.consumer_of(pair, contract, lambda m: seen.append(m.body))
        with virtual.running(consumer) as exit_code:
            virtual.wait_until(lambda: len(seen) == 5)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert sorted(seen) == [f"m{i}" for i in range(5)]
        assert exit_code == [ExitCode.OK]
        assert depth(sqs, pair.dlq_url).total == 0

    virtual.run(body)


def test_consumer_retries_then_moves_to_dlq_with_reason(virtual: Virtual) -> None:
    """A handler that always fails runs max_receive_count times (2), then the message is in the DLQ with why, counted
    once as dead-lettered. (The backoff between the attempts: tests/sim/test_behaviour.py.) On the virtual clock."""
    contract = fast_contract(max_receive_count=2)
    attempts: list[int] = []
    stream = io.StringIO()

    def fail(message: Message) -> None:
        attempts.append(message.receive_count)
        raise RuntimeError(f"downstream down (receive {message.receive_count})")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="flaky")
        consumer = virtual.consumer_of(pair, contract, fail, metrics=Metrics(stream=stream))
        with virtual.running(consumer):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert attempts == [1, 2]
        # The DlqDepth alarm reads dead_lettered: one per move, whatever made it (here the retries ran out).
        assert counted(stream, "failed", "poisoned", "dead_lettered") == (2, 0, 1)
        (moved,) = receive_visible(sqs, pair.dlq_url)
        reason = read_reason(moved["MessageAttributes"])
        assert moved["Body"] == "flaky"
        assert reason["kind"] == "exhausted" and reason["receive_count"] == 2
        assert "RuntimeError: downstream down (receive 2)" in reason["reason"]

    virtual.run(body)


def test_consumer_moves_poison_to_dlq_at_once_with_attributes(virtual: Virtual) -> None:
    """PoisonMessage: one handler call, DLQ copy keeps body and attributes and says why. On the virtual clock."""
    contract = fast_contract()
    calls: list[str] = []
    stream = io.StringIO()

    def reject(message: Message) -> None:
        calls.append(message.body)
        raise PoisonMessage("body is not JSON")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(
            QueueUrl=pair.queue_url,
            MessageBody="{not json",
            MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
        )
        consumer = virtual.consumer_of(pair, contract, reject, metrics=Metrics(stream=stream))
        with virtual.running(consumer):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert calls == ["{not json"]
        assert counted(stream, "poisoned", "dead_lettered") == (1, 1)  # one move, counted once
        (moved,) = receive_visible(sqs, pair.dlq_url)
        assert moved["Body"] == "{not json"
        assert moved["MessageAttributes"]["tenant"]["StringValue"] == "acme"
        reason = read_reason(moved["MessageAttributes"])
        assert (reason["kind"], reason["reason"], reason["receive_count"]) == ("poison", "body is not JSON", 1)

    virtual.run(body)


def test_consumer_stopping_mid_dlq_move_finishes_it_before_exiting(virtual: Virtual) -> None:
    """SIGTERM while a poison message's DLQ send is on the wire (1.5 s of it): the consumer waits for the move and
    its delete before exiting, so the message is in the DLQ once and gone from the source (not moved twice). On the
    virtual clock."""
    contract = fast_contract()

    def reject(message: Message) -> None:
        raise PoisonMessage("body is not JSON")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="{not json")
        sending = virtual.sim.event()

        def slow_send(**_: Any) -> None:
            sending.set()
            virtual.sim.sleep(1.5)

        worker = virtual.consumer_of(pair, contract, reject)
        worker.client.meta.events.register("before-call.sqs.SendMessage", slow_send)
        with virtual.running(worker) as exit_code:
            assert sending.wait(20)
        assert exit_code == [ExitCode.OK]
        assert (depth(sqs, pair.queue_url).total, depth(sqs, pair.dlq_url).total) == (0, 1)

    virtual.run(body)


def stop_when_received(worker: Consumer, body: str, then: Callable[[], None] = lambda: None) -> None:
    """SIGTERM arriving while the long poll of ``worker``'s client that brings ``body`` is being answered (``then``
    runs after it)."""

    def hook(parsed: dict, **_: Any) -> None:
        if any(m["Body"] == body for m in parsed.get("Messages", [])):
            worker.stop()
            then()

    worker.client.meta.events.register("after-call.sqs.ReceiveMessage", hook)


def test_consumer_hands_back_a_receive_answered_during_the_drain_without_starting_it(virtual: Virtual) -> None:
    """A long poll answered after SIGTERM, while another handler drains: its message never starts and goes
    back at once as a copy that spent nothing. On the virtual clock."""
    contract = fast_contract(concurrency=2)
    started: list[str] = []
    first_running = virtual.sim.event()

    def handle(m: Message) -> None:
        started.append(m.body)
        if m.body == "first":
            first_running.set()
            virtual.sim.sleep(1.5)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        worker = virtual.consumer_of(pair, contract, handle)
        stop_when_received(worker, "late")
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="first")
        with virtual.running(worker) as exit_code:
            assert first_running.wait(20)
            virtual.sim.sleep(0.5)  # the poller is long-polling with the free slot
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody="late")
        assert exit_code == [ExitCode.OK] and started == ["first"]
        (copy,) = receive_visible(sqs, pair.queue_url)
        assert (copy["Body"], copy["MessageAttributes"][PRIOR_RECEIVES_ATTRIBUTE]["StringValue"]) == ("late", "0")

    virtual.run(body)


def test_consumer_starts_nothing_a_receive_brings_after_shutdown_collected(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """A long poll answered once shutdown has handed back and flushed: nothing starts, and the message is handed
    back at once (logged as received_after_shutdown), not left invisible until its lease ends. On the virtual
    clock."""
    contract = fast_contract()
    started: list[str] = []
    caplog.set_level(logging.WARNING, logger="consumer")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        worker = virtual.consumer_of(pair, contract, lambda m: started.append(m.body))
        finished = virtual.sim.event()
        stop_when_received(worker, "late", then=lambda: finished.wait(10))
        with virtual.running(worker) as exit_code:
            virtual.sim.sleep(0.5)
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody="late")
            virtual.wait_until(lambda: worker._stopping.closed.is_set())
            finished.set()
            logged = lambda: any(r.getMessage() == "received_after_shutdown" for r in caplog.records)  # noqa: E731
            # One message, visible again now (a copy, or the original released), never two: nothing is sent twice.
            virtual.wait_until(
                lambda: logged() and (depth(sqs, pair.queue_url).visible, depth(sqs, pair.queue_url).total) == (1, 1)
            )
        assert exit_code == [ExitCode.OK] and started == []

    virtual.run(body)


def test_consumer_skips_the_side_effect_of_a_duplicate(virtual: Virtual) -> None:
    """Two messages with the same idempotency key: the handler runs once, both are deleted. On the virtual clock."""
    contract = fast_contract(concurrency=1)
    calls: list[str] = []

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        key = {"idempotency-key": {"DataType": "String", "StringValue": "order-42"}}
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="a", MessageAttributes=key)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="b", MessageAttributes=key)
        worker = virtual.consumer_of(pair, contract, lambda m: calls.append(m.body))
        with virtual.running(worker):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert len(calls) == 1

    virtual.run(body)


def test_consumer_keeps_fifo_order_within_a_group_after_a_failure(virtual: Virtual) -> None:
    """Group g: message 2 fails once; 3..5 never complete before 2 does. On the virtual clock (whose long poll
    returns once the group is free again, as SQS's does)."""
    contract = fast_contract(fifo=True, concurrency=4)
    completed: list[str] = []
    failed_once: set[str] = set()

    def handle(message: Message) -> None:
        if message.body == "2" and "2" not in failed_once:
            failed_once.add("2")
            raise RuntimeError("transient")
        completed.append(message.body)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for i in range(1, 6):
            sqs.send_message(
                QueueUrl=pair.queue_url, MessageBody=str(i), MessageGroupId="g", MessageDeduplicationId=f"d{i}"
            )
        worker = virtual.consumer_of(pair, contract, handle)
        with virtual.running(worker):
            virtual.wait_until(lambda: len(completed) == 5)
        assert completed == ["1", "2", "3", "4", "5"]

    virtual.run(body)


def test_consumer_survives_an_unreachable_endpoint_without_busy_looping() -> None:
    """With a dead endpoint (a refused connection: botocore's HTTP layer, no moto) the poller backs off, a second
    apart at least before its second receive (not hundreds of calls), never crashes, and stops cleanly."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "sqs",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1),
    )
    worker = Consumer(
        client,
        queue_url="http://127.0.0.1:9/123456789012/gone",
        dlq_url=None,
        contract=fast_contract(),
        handler=lambda m: None,
    )
    receives: list[float] = []
    client.meta.events.register("before-call.sqs.ReceiveMessage", lambda **_: receives.append(time.monotonic()))
    with running(worker) as result:
        wait_until(lambda: len(receives) >= 2, timeout=10)
    assert receives[1] - receives[0] >= 0.9  # the first wait is 1 s (then 2 s, 4 s...)
    assert result.exit_code == ExitCode.OK


def test_consumer_resumes_when_the_endpoint_comes_back(aws_credentials: None) -> None:
    """The endpoint goes away for a few seconds; the consumer keeps running and processes what arrives after."""
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    sqs = boto3.client("sqs", region_name="eu-west-1", endpoint_url=f"http://127.0.0.1:{port}")
    contract = fast_contract()
    pair = create_pair(sqs, contract)
    seen: list[str] = []
    worker = consumer_of(sqs, pair, contract, lambda m: seen.append(m.body))
    try:
        server.stop()  # moto keeps its state in-process: the queue is still there when it comes back
        # Hold the port, bound but not listening (connections are refused, as with the endpoint gone), so that
        # no other test's server (pytest-xdist workers start theirs on free ports) takes it during the outage.
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        with running(worker) as result:
            time.sleep(3)
            holder.close()
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            server.start()
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody="after-outage")
            wait_until(lambda: seen == ["after-outage"], timeout=40)
        assert result.exit_code == ExitCode.OK
    finally:
        server.stop()


def test_consumer_stops_with_exit_1_when_a_thread_crashes(virtual: Virtual, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error in a poller stops the whole process (exit 1) rather than leaving it idle. On the virtual
    clock."""
    contract = fast_contract()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        worker = virtual.consumer_of(pair, contract, lambda m: None)
        monkeypatch.setattr(worker._poller, "_received", lambda response: 1 / 0)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="x")
        assert worker.run() == 1

    virtual.run(body)


def bump_receive_count(sqs: Any, url: str, times: int) -> None:
    """Receive and hand back at once, ``times`` times: what earlier hand-backs (deploys, deferrals) do to a message."""
    for _ in range(times):
        (received,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
        assert received


def test_consumer_requeues_a_deferred_message_keeping_its_spent_receives(virtual: Virtual) -> None:
    """Deferred on its last allowed receive: a fresh copy (same body and key) carries the receives spent on attempts
    (2; a deferral is none), so the message never reaches the DLQ, and it comes back once the holder's lease has
    ended (the claim's answer says when: 300 s here), not after a backoff of a second or two. On the virtual
    clock."""
    contract = fast_contract()
    key = {"idempotency-key": {"DataType": "String", "StringValue": "job-1"}}
    store = InMemoryStore(clock=virtual.sim.time)
    calls: list[str] = []
    sends: list[dict[str, Any]] = []

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job", MessageAttributes=key)
        bump_receive_count(sqs, pair.queue_url, contract.max_receive_count - 1)
        assert store.claim("attr:job-1", owner="another-task", lease_seconds=300) is Claim.ACQUIRED
        worker = virtual.consumer_of(
            pair, contract, lambda m: calls.append(m.body), idempotency=store, task_role_id=MOTO_SENDER_ID
        )
        worker.client.meta.events.register(
            "provide-client-params.sqs.SendMessage", lambda params, **_: sends.append(params)
        )
        with virtual.running(worker):
            virtual.wait_until(lambda: len(sends) >= 1)  # deferred on receive 3, as a copy
        carried = {**key, PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "2"}}
        assert [(s["QueueUrl"], s["MessageBody"], s["MessageAttributes"]) for s in sends] == [
            (pair.queue_url, "job", carried)
        ]
        assert 290 <= sends[0]["DelaySeconds"] <= 300  # until the other holder's lease ends
        counts = sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["All"])["Attributes"]
        assert sum(int(counts[f"ApproximateNumberOfMessages{n}"]) for n in ("", "NotVisible", "Delayed")) == 1
        assert depth(sqs, pair.dlq_url).total == 0 and calls == []

    virtual.run(body)


def test_consumer_gives_a_requeued_copy_only_the_attempts_left(virtual: Virtual) -> None:
    """A copy carrying one spent receive gets max_receive_count - 1 attempts, not a new budget; the DLQ copy
    says 3 receives and drops the carried count, so a redrive starts afresh. On the virtual clock."""
    contract = fast_contract()
    attributes = {
        PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "1"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
    }
    attempts: list[int] = []

    def fail(m: Message) -> None:
        attempts.append(m.receive_count)
        raise RuntimeError("downstream 503")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job", MessageAttributes=attributes)
        worker = virtual.consumer_of(pair, contract, fail, task_role_id=MOTO_SENDER_ID)
        with virtual.running(worker):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
        assert attempts == [2, 3]
        (moved,) = receive_visible(sqs, pair.dlq_url)
        assert (read_reason(moved["MessageAttributes"]) or {}).get("receive_count") == 3
        assert set(moved["MessageAttributes"]) == {"tenant", "x-dlq-reason"}

    virtual.run(body)


def test_consumer_ignores_a_carried_count_another_sender_set(virtual: Virtual) -> None:
    """x-prior-receives sent by anyone but the task role (here moto's one sender, not the consumer's role) is
    ignored: a forged 1 cannot send the message to the DLQ on its first failure; it gets both attempts. On the
    virtual clock."""
    contract = fast_contract(max_receive_count=2)
    forged = {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "1"}}
    attempts: list[int] = []

    def fail(m: Message) -> None:
        attempts.append(m.receive_count)
        raise RuntimeError("downstream 503")

    own_role_id = "AROAEXAMPLEOWNROLE01"
    assert own_role_id != MOTO_SENDER_ID

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job", MessageAttributes=forged)
        worker = virtual.consumer_of(pair, contract, fail, task_role_id=own_role_id)
        with virtual.running(worker):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
        assert attempts == [1, 2]

    virtual.run(body)


def test_consumer_without_a_task_role_id_restarts_carried_counts_and_says_so_once(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """A bare local run (no CONSUMER_TASK_ROLE_ID): no carried count is trusted, even from the only sender
    there is, and one warning at start says so (not one per message). On the virtual clock."""
    contract = fast_contract()
    carried = {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "2"}}
    seen: list[int] = []
    caplog.set_level(logging.WARNING, logger="consumer")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for text in ("a", "b"):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=text, MessageAttributes=carried)
        worker = virtual.consumer_of(pair, contract, lambda m: seen.append(m.receive_count))
        with virtual.running(worker):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert seen == [1, 1]
        (warning,) = [r for r in caplog.records if r.getMessage() == "carried_receives_untrusted"]
        assert warning.binding == "CONSUMER_TASK_ROLE_ID"

    virtual.run(body)


def test_consumer_hands_back_a_handler_running_past_the_drain_time_counting_its_attempt(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """Still running at the drain timeout: a copy replaces it carrying this receive as spent (it was an attempt);
    the requeue's log line carries the message's trace id. On the virtual clock."""
    contract = fast_contract(stop_timeout_seconds=6)  # drains for 1 s
    trace = {"traceparent": {"DataType": "String", "StringValue": f"00-{'ab' * 16}-{'cd' * 8}-01"}}
    caplog.set_level(logging.INFO, logger="consumer")
    started, release = virtual.sim.event(), virtual.sim.event()
    sends: list[dict[str, Any]] = []

    def slow(m: Message) -> None:
        started.set()
        release.wait(30)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="slow", MessageAttributes=trace)
        worker = virtual.consumer_of(pair, contract, slow, task_role_id=MOTO_SENDER_ID)
        worker.client.meta.events.register(
            "provide-client-params.sqs.SendMessage", lambda params, **_: sends.append(params)
        )
        try:
            with virtual.running(worker):
                assert started.wait(20)
        finally:
            release.set()
        # A poller's long poll outstanding at the SIGTERM may be answered with that copy: it hands it back again as
        # received_after_shutdown (an unattempted receive, so the carried count stays 1), never strands it. Sorted:
        # the copy may be received, and its requeue logged, before the drain's own line (logged after its delete).
        requeues = [r for r in caplog.records if r.getMessage() == "message_requeued"]
        assert sorted(r.why for r in requeues) in (["drain_timeout"], ["drain_timeout", "received_after_shutdown"])
        assert len(sends) == len(requeues)
        for send in sends:
            assert send["MessageAttributes"] == {
                **trace,
                PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "1"},
            }
        assert requeues[0].trace_id == "ab" * 16
        (copy,) = receive_visible(sqs, pair.queue_url)
        assert Message.from_sqs(copy, own_role_id=MOTO_SENDER_ID).receive_count == 2

    virtual.run(body)


def test_consumer_moves_a_deferred_fifo_message_on_its_last_receive_to_dlq_with_reason(virtual: Virtual) -> None:
    """FIFO cannot requeue without breaking order: the unattempted message goes to the DLQ saying so. On the virtual
    clock."""
    contract = fast_contract(fifo=True)
    store = InMemoryStore(clock=virtual.sim.time)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job", MessageGroupId="g", MessageDeduplicationId="d-1")
        bump_receive_count(sqs, pair.queue_url, contract.max_receive_count - 1)
        assert store.claim("dedup:d-1", owner="another-task", lease_seconds=300) is Claim.ACQUIRED
        worker = virtual.consumer_of(pair, contract, lambda m: None, idempotency=store)
        with virtual.running(worker):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        (moved,) = receive_visible(sqs, pair.dlq_url)
        reason = read_reason(moved["MessageAttributes"])
        assert (reason["kind"], reason["receive_count"]) == ("unattempted", 3)
        assert reason["reason"].startswith("not attempted: handed back (deferred) on its last allowed receive (3 of 3)")

    virtual.run(body)


def test_consumer_of_a_handler_idempotent_by_itself_runs_no_guard(virtual: Virtual) -> None:
    """@worker(idempotent=True): two messages with the same key both run (the handler makes a repeat harmless), and
    the store it is given is never asked: no claim, no completion. On the virtual clock."""
    contract = fast_contract(concurrency=1, idempotent=True)
    key = {"idempotency-key": {"DataType": "String", "StringValue": "order-42"}}
    calls: list[str] = []
    store = InMemoryStore(clock=virtual.sim.time)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="a", MessageAttributes=key)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="b", MessageAttributes=key)
        worker = virtual.consumer_of(pair, contract, lambda m: calls.append(m.body), idempotency=store)
        with virtual.running(worker):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url))
        assert (sorted(calls), worker.idempotency, store.claim("attr:order-42", owner="x", lease_seconds=5)) == (
            ["a", "b"],
            None,
            Claim.ACQUIRED,
        )

    virtual.run(body)
