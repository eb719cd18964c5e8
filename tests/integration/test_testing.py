"""consumer.testing's queue helpers against moto in-process, and the docs' example run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from consumer import Message, worker
from consumer.contract import WorkerContract
from consumer.declaration import contract_of
from consumer.runtime.consumer import Consumer
from consumer.runtime.dead_letter import read_reason
from consumer.testing import QueueDepth, depth, drain, receive_visible, running, send_samples, wait_until
from tests import team_handlers
from tests.integration.conftest import create_pair
from tests.integration.support import holds_nothing

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


def test_send_samples_puts_a_handlers_declared_samples_where_its_runtime_settles_them(sqs: Any) -> None:
    """A team's handler's samples through the real runtime: the valid ones processed and deleted, exactly the poison
    one in the DLQ with the handler's reason, told apart by the idempotency keys send_samples returns."""
    handler = team_handlers.invoices
    pair = create_pair(sqs, contract_of(handler))
    sent = send_samples(sqs, pair.queue_url, handler)
    consumer = Consumer(
        sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=contract_of(handler), handler=handler
    )
    with running(consumer) as run:
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=15, what="every sample settled")
    dead = {m["MessageAttributes"]["idempotency-key"]["StringValue"]: m for m in drain(sqs, pair.dlq_url)}
    assert run.exit_code == 0
    assert [s.body for s in sent.values()] == [getattr(s, "body", s) for s in team_handlers.INVOICE_SAMPLES]
    assert set(dead) == {key for key, sample in sent.items() if sample.poison}
    assert [read_reason(m["MessageAttributes"])["reason"] for m in dead.values()] == ["invoice lacks invoice_id"]  # type: ignore[index]


def test_send_samples_refuses_to_send_nothing(sqs: Any) -> None:
    """A handler without samples (or without poison ones, when asked for those) fails the test, naming it."""
    pair = create_pair(sqs, WorkerContract(max_duration_seconds=30))
    with pytest.raises(AssertionError, match=r"^ledger declares no samples \(@worker\(samples=\.\.\.\)\)$"):
        send_samples(sqs, pair.queue_url, team_handlers.ledger)
    assert len(send_samples(sqs, pair.queue_url, team_handlers.invoices, poison=True)) == 1
    assert depth(sqs, pair.queue_url) == (1, 0)


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
