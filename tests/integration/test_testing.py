"""consumer.testing's queue helpers against moto (in-process and over HTTP), and the docs' example run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from consumer import Message, worker
from consumer.contract import WorkerContract
from consumer.testing import QueueDepth, depth, drain, receive_visible
from tests.integration.conftest import create_pair

ROOT = Path(__file__).resolve().parents[2]


def send(sqs: Any, url: str, count: int) -> None:
    for i in range(count):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")


def test_depth_counts_visible_and_in_flight_apart(sqs: Any) -> None:
    """Three sent, one received: (2 visible, 1 in flight), 3 in all, equal to the plain tuple."""
    pair = create_pair(sqs, WorkerContract(max_duration_seconds=30))
    send(sqs, pair.queue_url, 3)
    sqs.receive_message(QueueUrl=pair.queue_url, MaxNumberOfMessages=1)
    assert depth(sqs, pair.queue_url) == QueueDepth(visible=2, in_flight=1)
    assert depth(sqs, pair.queue_url) == (2, 1)
    assert depth(sqs, pair.queue_url).total == 3


def test_receive_visible_leaves_the_messages_in_flight_with_their_attributes(sqs: Any) -> None:
    """One receive of up to 10: the messages come back with system and message attributes, still in the queue."""
    pair = create_pair(sqs, WorkerContract(max_duration_seconds=30))
    sqs.send_message(
        QueueUrl=pair.queue_url,
        MessageBody="job",
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )
    (message,) = receive_visible(sqs, pair.queue_url)
    assert (message["Body"], message["MessageAttributes"]["tenant"]["StringValue"]) == ("job", "acme")
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert depth(sqs, pair.queue_url) == (0, 1)


def test_drain_receives_and_deletes_more_than_one_batch(sqs: Any) -> None:
    """Twelve messages (two receives' worth): all returned, with attributes, and the queue is empty after."""
    pair = create_pair(sqs, WorkerContract(max_duration_seconds=30))
    send(sqs, pair.queue_url, 12)
    drained = drain(sqs, pair.queue_url)
    assert sorted(m["Body"] for m in drained) == sorted(f"m{i}" for i in range(12))
    assert all("ApproximateReceiveCount" in m["Attributes"] for m in drained)
    assert depth(sqs, pair.queue_url) == (0, 0)


def docs_example() -> str:
    """The python block under the "Testing a handler" heading of docs/testing.md."""
    page = (ROOT / "docs" / "testing.md").read_text()
    section = page.split("## Testing a handler\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "no python block under ## Testing a handler in docs/testing.md"
    return match.group(1)


def test_docs_testing_example_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' example, with `orders.handle` a real @worker handler, passes and the handler saw the order."""
    seen: list[str] = []

    @worker(max_duration=5)
    def handle(message: Message) -> None:
        seen.append(message.body)

    orders = types.ModuleType("orders")
    orders.handle = handle  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "orders", orders)
    namespace: dict[str, Any] = {}
    exec(compile(docs_example(), "docs/testing.md#testing-a-handler", "exec"), namespace)
    namespace["test_an_order_is_handled_and_deleted"]()
    assert seen == ['{"order": 1}']
