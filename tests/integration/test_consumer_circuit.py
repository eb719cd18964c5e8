"""The downstream circuit and max_rate through the real runtime, against moto in-process.

The circuit's state is read from the consumer itself (``consumer.circuit``) at every ReceiveMessage
botocore sends, so "no receive while open" is counted, not inferred from timing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest

from consumer import DownstreamUnavailable, Message
from consumer.exit_codes import ExitCode
from consumer.runtime.circuit import CircuitState
from consumer.testing import depth, running, wait_until
from tests.integration.conftest import create_pair
from tests.integration.support import MOTO_SENDER_ID, consumer_of, fast_contract, holds_nothing


def record_receives(sqs: Any, consumer: Any) -> list[tuple[CircuitState, int]]:
    """Each ReceiveMessage the consumer sends, as (the circuit's state then, MaxNumberOfMessages)."""
    receives: list[tuple[CircuitState, int]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        if params.get("QueueUrl") == consumer.queue_url and params.get("WaitTimeSeconds"):
            receives.append((consumer.circuit.state, params["MaxNumberOfMessages"]))

    sqs.meta.events.register("provide-client-params.sqs.ReceiveMessage", record)
    return receives


def test_consumer_circuit_pauses_hands_back_unspent_then_probes_and_delivers_once(
    sqs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage across two opens: no receive while open, the probe receives one message, every message is
    seen at receive count 1 (handed back unspent, though the outage outlasts max_receive_count receives),
    none reaches the DLQ, and once the downstream is back each is delivered exactly once."""
    contract = fast_contract(concurrency=4, max_receive_count=2, retry_backoff_max_seconds=4)
    pair = create_pair(sqs, contract)
    sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(8)])
    outage = threading.Event()
    outage.set()
    refusals, delivered, counts = Counter[str](), Counter[str](), Counter[int]()
    lock = threading.Lock()

    def handle(message: Message) -> None:
        with lock:
            counts[message.receive_count] += 1
            if outage.is_set():
                refusals[message.body] += 1
                raise DownstreamUnavailable("HTTP 503", retry_after=1)
            delivered[message.body] += 1

    caplog.set_level(logging.INFO, logger="consumer")
    consumer = consumer_of(sqs, pair, contract, handle, task_role_id=MOTO_SENDER_ID)
    receives = record_receives(sqs, consumer)
    with running(consumer) as result:
        # Open for 1 s (retry_after), the probe meets the outage and reopens it for 2 s (the backoff for a
        # second open in a row beats retry_after): the downstream comes back during that second pause.
        wait_until(lambda: consumer.circuit.opens_in_a_row == 2, what="the probe reopening the circuit")
        outage.clear()
        wait_until(lambda: len(delivered) == 8, timeout=60, what="all eight delivered")
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), what="source empty")
    assert dict(delivered) == {f"m{i}": 1 for i in range(8)}
    assert dict(counts) == {1: sum(counts.values())}, "a hand-back by the circuit spent a receive"
    assert depth(sqs, pair.dlq_url).total == 0
    assert result.exit_code == ExitCode.OK
    assert [r for r in receives if r[0] is CircuitState.OPEN] == []
    assert {n for state, n in receives if state is CircuitState.HALF_OPEN} == {1}
    events = [r.getMessage() for r in caplog.records]
    assert (events.count("circuit_opened"), events.count("circuit_closed")) == (2, 1)
    (closed,) = [r for r in caplog.records if r.getMessage() == "circuit_closed"]
    assert getattr(closed, "open_seconds", 0) >= 3.0  # the first pause (1 s) and the probe's longer one (2 s)


def test_consumer_circuit_open_at_shutdown_drains_and_exits_0_with_nothing_in_the_dlq(sqs: Any) -> None:
    """A downstream down for good: SIGTERM while the circuit is open exits 0 promptly; every message is back
    in the source (delayed by the pause), none in the DLQ."""
    contract = fast_contract(concurrency=4, retry_backoff_max_seconds=30)
    pair = create_pair(sqs, contract)
    for i in range(3):
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody=f"m{i}")

    def handle(message: Message) -> None:
        raise DownstreamUnavailable(retry_after=30)

    consumer = consumer_of(sqs, pair, contract, handle, task_role_id=MOTO_SENDER_ID)
    with running(consumer, stop_timeout=10) as result:
        wait_until(lambda: consumer.circuit.state is CircuitState.OPEN, what="the circuit open")
        wait_until(lambda: _delayed(sqs, pair.queue_url) == 3, what="three messages handed back for the pause")
        stopping = time.monotonic()
    assert result.exit_code == ExitCode.OK
    assert time.monotonic() - stopping < 5
    assert (depth(sqs, pair.dlq_url).total, _delayed(sqs, pair.queue_url)) == (0, 3)


def _delayed(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"])


def test_consumer_max_rate_spaces_handler_starts(sqs: Any) -> None:
    """max_rate=5 with eight handler threads: any six consecutive starts span at least a second (less 150 ms of
    thread scheduling), measured on the consumer's own clock."""
    contract = fast_contract(concurrency=8)
    pair = create_pair(sqs, contract)
    sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)])
    clock = time.monotonic
    starts: list[float] = []

    def handle(message: Message) -> None:
        starts.append(clock())

    consumer = consumer_of(sqs, pair, contract, handle, max_rate=5)  # the machine's clock, as `clock` above
    with running(consumer):
        wait_until(lambda: len(starts) == 10, what="ten starts")
    starts.sort()
    assert min(later - earlier for earlier, later in zip(starts, starts[5:], strict=False)) >= 0.85
