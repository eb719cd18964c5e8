"""More messages in flight in one process than one receive can bring, against moto (in-process and over HTTP)."""

from __future__ import annotations

import threading
from typing import Any

from consumer import Message
from consumer.runtime.consumer import EXIT_OK
from consumer.testing import depth, running, wait_until
from tests.integration.conftest import create_pair
from tests.integration.test_consumer import consumer_of, fast_contract


def test_consumer_runs_sixteen_messages_at_once_in_one_process(sqs: Any) -> None:
    """Concurrency 16, more than one receive brings (SQS hands out at most 10): 16 handlers that each wait until
    all 16 have started all start together; every message runs once and is deleted exactly once."""
    contract = fast_contract(max_duration_seconds=20, concurrency=16)
    pair = create_pair(sqs, contract)
    bodies = [f"m{i}" for i in range(16)]
    for batch in (bodies[:8], bodies[8:]):
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=[{"Id": b, "MessageBody": b} for b in batch])
    all_started = threading.Barrier(16, timeout=15)
    started: list[str] = []
    deleted: list[str] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.DeleteMessageBatch",
        lambda params, **_: deleted.extend(e["ReceiptHandle"] for e in params["Entries"]),
    )

    def handle(message: Message) -> None:
        started.append(message.body)
        all_started.wait()  # BrokenBarrierError (a failed attempt) unless 16 run at the same time

    worker = consumer_of(sqs, pair, contract, handle)
    with running(worker) as result:
        wait_until(lambda: len(deleted) >= 16 and depth(sqs, pair.queue_url).total == 0)
    assert result.exit_code == EXIT_OK
    assert not all_started.broken
    assert sorted(started) == sorted(bodies)
    assert len(deleted) == len(set(deleted)) == 16
    assert depth(sqs, pair.dlq_url).total == 0
