"""The downstream circuit and max_rate through the real runtime, against moto in-process on the simulated clock
(tests/integration/virtual.py): the circuit's pauses and the rate's spacing are virtual seconds.

The circuit's state is read from the consumer itself (``consumer.circuit``) at every ReceiveMessage
botocore sends, so "no receive while open" is counted, not inferred from timing.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from consumer import DownstreamUnavailable, Message
from consumer.exit_codes import ExitCode
from consumer.runtime.circuit import CircuitState
from consumer.runtime.consumer import Consumer
from consumer.testing import depth
from tests.integration.conftest import create_pair
from tests.integration.support import MOTO_SENDER_ID, fast_contract, holds_nothing
from tests.integration.virtual import Virtual


def record_receives(consumer: Consumer) -> list[tuple[CircuitState, int]]:
    """Each ReceiveMessage the consumer sends (on its own client), as (the circuit's state then,
    MaxNumberOfMessages)."""
    receives: list[tuple[CircuitState, int]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        if params.get("QueueUrl") == consumer.queue_url and params.get("WaitTimeSeconds"):
            receives.append((consumer.circuit.state, params["MaxNumberOfMessages"]))

    consumer.client.meta.events.register("provide-client-params.sqs.ReceiveMessage", record)
    return receives


def test_consumer_circuit_pauses_hands_back_unspent_then_probes_and_delivers_once(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage across two opens: no receive while open, the probe receives one message, every message is
    seen at receive count 1 (handed back unspent, though the outage outlasts max_receive_count receives),
    none reaches the DLQ, and once the downstream is back each is delivered exactly once. On the virtual clock."""
    contract = fast_contract(concurrency=4, max_receive_count=2, retry_backoff_max_seconds=4)
    outage = virtual.sim.event()  # set in the run: the simulation's primitives work only there
    refusals, delivered, counts = Counter[str](), Counter[str](), Counter[int]()
    lock = virtual.sim.lock()

    def handle(message: Message) -> None:
        with lock:
            counts[message.receive_count] += 1
            if outage.is_set():
                refusals[message.body] += 1
                raise DownstreamUnavailable("HTTP 503", retry_after=1)
            delivered[message.body] += 1

    caplog.set_level(logging.INFO, logger="consumer")

    def body() -> None:
        outage.set()
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(8)]
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
        consumer = virtual.consumer_of(pair, contract, handle, task_role_id=MOTO_SENDER_ID)
        receives = record_receives(consumer)
        with virtual.running(consumer) as exit_code:
            # Open for 1 s (retry_after), the probe meets the outage and reopens it for 2 s (the backoff for a
            # second open in a row beats retry_after): the downstream comes back during that second pause.
            virtual.wait_until(lambda: consumer.circuit.opens_in_a_row == 2, what="the probe reopening the circuit")
            outage.clear()
            virtual.wait_until(lambda: len(delivered) == 8, timeout=60, what="all eight delivered")
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), what="source empty")
        assert dict(delivered) == {f"m{i}": 1 for i in range(8)}
        assert dict(counts) == {1: sum(counts.values())}, "a hand-back by the circuit spent a receive"
        assert depth(sqs, pair.dlq_url).total == 0
        assert exit_code == [ExitCode.OK]
        assert [r for r in receives if r[0] is CircuitState.OPEN] == []
        assert {n for state, n in receives if state is CircuitState.HALF_OPEN} == {1}
        events = [r.getMessage() for r in caplog.records]
        assert (events.count("circuit_opened"), events.count("circuit_closed")) == (2, 1)
        (closed,) = [r for r in caplog.records if r.getMessage() == "circuit_closed"]
        assert getattr(closed, "open_seconds", 0) >= 3.0  # the first pause (1 s) and the probe's longer one (2 s)

    virtual.run(body)


def test_consumer_circuit_open_at_shutdown_drains_and_exits_0_with_nothing_in_the_dlq(virtual: Virtual) -> None:
    """A downstream down for good: SIGTERM while the circuit is open (for 30 s) exits 0 within 5 s; every message is
    back in the source (delayed by the pause), none in the DLQ. On the virtual clock."""
    contract = fast_contract(concurrency=4, retry_backoff_max_seconds=30)

    def handle(message: Message) -> None:
        raise DownstreamUnavailable(retry_after=30)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for i in range(3):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=f"m{i}")
        consumer = virtual.consumer_of(pair, contract, handle, task_role_id=MOTO_SENDER_ID)
        with virtual.running(consumer, stop_timeout=10) as exit_code:
            virtual.wait_until(lambda: consumer.circuit.state is CircuitState.OPEN, what="the circuit open")
            virtual.wait_until(
                lambda: _delayed(sqs, pair.queue_url) == 3, what="three messages handed back for the pause"
            )
            stopping = virtual.sim.monotonic()
        assert exit_code == [ExitCode.OK]
        assert virtual.sim.monotonic() - stopping < 5
        assert (depth(sqs, pair.dlq_url).total, _delayed(sqs, pair.queue_url)) == (0, 3)

    virtual.run(body)


def _delayed(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"])


def test_consumer_max_rate_spaces_handler_starts(virtual: Virtual) -> None:
    """max_rate=5 with eight handler threads: any six consecutive starts span at least a second (to the float
    rounding of instants near 1e5 s), measured on the consumer's own clock. On the virtual clock, where no thread
    scheduling of the machine's shifts a start."""
    contract = fast_contract(concurrency=8)
    clock = virtual.sim.monotonic
    starts: list[float] = []

    def handle(message: Message) -> None:
        starts.append(clock())

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
        consumer = virtual.consumer_of(pair, contract, handle, max_rate=5)  # the run's clock, as `clock` above
        with virtual.running(consumer):
            virtual.wait_until(lambda: len(starts) == 10, what="ten starts")

    virtual.run(body)
    starts.sort()
    assert min(later - earlier for earlier, later in zip(starts, starts[5:], strict=False)) >= 1 - 1e-6
