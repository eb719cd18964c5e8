"""The acknowledger against moto: batching, the heartbeat race guard, per-entry failures."""

from __future__ import annotations

import threading
import time
from typing import Any

from consumer.contract import WorkerContract
from consumer.runtime.acknowledger import Acknowledger, Ticket
from consumer.testing import wait_until
from tests.integration.conftest import create_pair

CONTRACT = WorkerContract(max_duration_seconds=5)


def received_tickets(sqs: Any, url: str, count: int, running: bool = True) -> list[Ticket]:
    for i in range(count):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    tickets: list[Ticket] = []
    while len(tickets) < count:
        for raw in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            tickets.append(Ticket(raw["MessageId"], raw["ReceiptHandle"], is_running=lambda: running))
    return tickets


def calls_of(sqs: Any, operation: str) -> list[int]:
    calls: list[int] = []
    sqs.meta.events.register(
        f"provide-client-params.sqs.{operation}", lambda params, **_: calls.append(len(params["Entries"]))
    )
    return calls


def test_acknowledger_batches_fifteen_deletes_into_two_calls(sqs: Any) -> None:
    """Fifteen successes cost two DeleteMessageBatch calls (10 + 5), and the queue is empty."""
    pair = create_pair(sqs, CONTRACT)
    tickets = received_tickets(sqs, pair.queue_url, 15)
    calls = calls_of(sqs, "DeleteMessageBatch")
    ack = Acknowledger(sqs, pair.queue_url)
    ack.start()
    for ticket in tickets:
        ack.delete(ticket)
    ack.close()
    assert sorted(calls) == [5, 10]
    attributes = sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_acknowledger_drops_extensions_of_messages_no_longer_running(sqs: Any) -> None:
    """An extension queued before the message finished is never sent; a backoff always is."""
    pair = create_pair(sqs, CONTRACT)
    (finished,) = received_tickets(sqs, pair.queue_url, 1, running=False)
    calls = calls_of(sqs, "ChangeMessageVisibilityBatch")
    ack = Acknowledger(sqs, pair.queue_url)
    ack.start()
    ack.change_visibility(finished, 900, "extend")
    ack.flush()
    assert calls == []
    ack.change_visibility(finished, 0, "backoff")
    ack.close()
    assert calls == [1]


def test_acknowledger_sends_no_extension_after_a_backoff_of_a_message_still_held(sqs: Any) -> None:
    """A message done with but still held (settling: its completion or copy under way) is extended; once its backoff
    is queued no extension follows it out (the heartbeat may have read the message as held just before): it would
    overwrite the backoff and bring the message back a lease later instead."""
    pair = create_pair(sqs, CONTRACT)
    (held,) = received_tickets(sqs, pair.queue_url, 1, running=True)
    sent: list[list[int]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.ChangeMessageVisibilityBatch",
        lambda params, **_: sent.append([e["VisibilityTimeout"] for e in params["Entries"]]),
    )
    ack = Acknowledger(sqs, pair.queue_url)
    ack.start()
    ack.change_visibility(held, 900, "extend")
    ack.flush()
    assert sent == [[900]]
    ack.close()  # from here on each change is sent at once, in the order asked
    ack.change_visibility(held, 7, "backoff")
    ack.change_visibility(held, 900, "extend")
    assert sent == [[900], [7]]


def test_acknowledger_lets_a_held_message_go_once_its_delete_is_sent(sqs: Any) -> None:
    """A ticket's ``on_sent`` is called once its delete is sent for good: after the delete, and after a delete given
    up on (a stale handle), so a message held (and extended) while its delete waits for its batch is let go either
    way, never held for ever."""
    pair = create_pair(sqs, CONTRACT)
    (good,) = received_tickets(sqs, pair.queue_url, 1)
    stale = Ticket("gone", "not-a-real-receipt-handle")
    sent: list[str] = []
    for ticket in (good, stale):
        ticket.on_sent = lambda ticket=ticket: sent.append(ticket.message_id)
    ack = Acknowledger(sqs, pair.queue_url)
    ack.start()
    ack.delete(good)
    ack.delete(stale)
    assert sent == []  # waiting for their batch
    ack.close()
    assert sorted(sent) == sorted([good.message_id, "gone"])


def test_acknowledger_logs_a_stale_receipt_handle_without_raising(sqs: Any, caplog: Any) -> None:
    """A per-entry ReceiptHandleIsInvalid is logged as delete_failed; the other entries succeed."""
    pair = create_pair(sqs, CONTRACT)
    good = received_tickets(sqs, pair.queue_url, 2)
    stale = Ticket("gone", "not-a-real-receipt-handle")
    ack = Acknowledger(sqs, pair.queue_url)
    ack.start()
    for ticket in [*good, stale]:
        ack.delete(ticket)
    ack.close()
    assert [r.message for r in caplog.records if r.message == "delete_failed"] == ["delete_failed"]
    attributes = sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_acknowledger_sends_a_full_batch_on_the_thread_that_fills_it(sqs: Any) -> None:
    """The tenth delete's caller sends the batch itself (no hand-off to the acknowledger's thread per message);
    the partial batch left goes out after its wait from the acknowledger's background thread (its loop goes on
    sending visibility changes meanwhile: a batch writes its completions first, which may take a slow table's time)."""
    pair = create_pair(sqs, CONTRACT)
    tickets = received_tickets(sqs, pair.queue_url, 12)
    senders: list[tuple[str, int]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.DeleteMessageBatch",
        lambda params, **_: senders.append((threading.current_thread().name, len(params["Entries"]))),
    )
    ack = Acknowledger(sqs, pair.queue_url)
    ack.start()
    worker = threading.Thread(target=lambda: [ack.delete(t) for t in tickets], name="worker-7")
    worker.start()
    worker.join(10)
    assert senders == [("worker-7", 10)]
    wait_until(lambda: len(senders) == 2, timeout=5)
    assert senders[1] == ("acknowledger-flush_0", 2)
    ack.close()


def test_acknowledger_close_waits_for_a_batch_another_thread_is_sending(sqs: Any) -> None:
    """close() returns only once a batch a handler thread took and is still sending has been sent: exiting earlier
    would leave ten processed messages undeleted, to run again after their lease."""
    pair = create_pair(sqs, CONTRACT)
    tickets = received_tickets(sqs, pair.queue_url, 10)
    deleted: list[str] = []
    sqs.meta.events.register("before-call.sqs.DeleteMessageBatch", lambda **_: time.sleep(0.5))  # a slow call
    ack = Acknowledger(sqs, pair.queue_url, on_deleted=lambda ticket: deleted.append(ticket.message_id))
    ack.start()
    for ticket in tickets[:9]:
        ack.delete(ticket)
    sender = threading.Thread(target=ack.delete, args=(tickets[9],))
    sender.start()
    time.sleep(0.1)  # the sender is inside its slow call now
    ack.close()
    assert len(deleted) == 10
    sender.join(5)


def test_acknowledger_sends_a_delete_decided_after_close_at_once(sqs: Any) -> None:
    """A delete decided after close() (a handler that finished past the drain) is sent by its caller, not left
    waiting for a thread that has stopped."""
    pair = create_pair(sqs, CONTRACT)
    (ticket,) = received_tickets(sqs, pair.queue_url, 1)
    deleted: list[str] = []
    ack = Acknowledger(sqs, pair.queue_url, on_deleted=lambda t: deleted.append(t.message_id))
    ack.start()
    ack.close()
    ack.delete(ticket)
    assert deleted == [ticket.message_id]
