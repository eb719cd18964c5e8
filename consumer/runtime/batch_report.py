"""A Lambda invocation's acknowledgements: what the function reports to its SQS event source mapping.

The event source mapping deletes every record of a batch that the function's answer does not list in
``batchItemFailures`` and leaves every listed one to return after its visibility
(https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html). So where the container's
:class:`.Acknowledger` sends a delete, an invocation's :class:`BatchReport` only notes it: "deleted" means "not
listed". A visibility change (a backoff, a FIFO hand-back) is an SQS call the function makes itself with the record's
receipt handle, sent in batches of 10 as the invocation ends; the record is then listed, so the mapping leaves it.

Before the answer goes back, :meth:`BatchReport.close` writes the idempotency completions of the messages it will let
the mapping delete (a completion always lands before its delete, as the acknowledger's batches ensure). After it, a
late outcome (a handler given up on near the function's timeout that then succeeds) has no answer to ride on: its
delete is sent at once by the function, after its completion.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from consumer.limits import SQS_MAX_BATCH
from consumer.runtime.acknowledger import Recorded, Ticket, call_batch
from consumer.runtime.clock import Clock

if TYPE_CHECKING:  # the stubs are a development dependency; the image never carries them
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import (
        ChangeMessageVisibilityBatchRequestEntryTypeDef,
        DeleteMessageBatchRequestEntryTypeDef,
    )

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)


class BatchReport:
    """The deletes and visibility changes of one invocation (an :class:`~consumer.runtime.acknowledger.Acks`).

    ``client`` and ``queue_url``: where its visibility changes (and, after :meth:`close`, a late delete) go.
    ``completions``: the invocation's processed messages' idempotency completions, written before the answer.
    ``clock``: what a visibility change's ``on_sent`` is told it was sent at.
    """

    def __init__(self, client: SQSClient, *, queue_url: str, completions: Recorded, clock: Clock) -> None:
        self._client = client
        self._queue_url = queue_url
        self._completions = completions
        self._now = clock.monotonic
        self._lock = threading.Lock()
        self._deleted: dict[str, Ticket] = {}
        self._changes: list[tuple[Ticket, int, Callable[[float], None] | None]] = []
        self._closed = False

    def delete(self, ticket: Ticket, at_once: bool = False) -> None:
        """The message is done with: not listed, so the mapping deletes it (after :meth:`close`: deleted now)."""
        with self._lock:
            late = self._closed
            if not late:
                self._deleted[ticket.message_id] = ticket
        if late:
            self._delete_late(ticket)
        if ticket.on_sent is not None:
            ticket.on_sent()

    def change_visibility(
        self, ticket: Ticket, seconds: int, reason: str, on_sent: Callable[[float], None] | None = None
    ) -> None:
        """A backoff or a hand-back: sent as the invocation ends, and the message listed (after :meth:`close`: sent
        now)."""
        ticket.settled = True
        with self._lock:
            if not self._closed:
                self._changes.append((ticket, seconds, on_sent))
                return
        self._send_changes([(ticket, seconds, on_sent)])

    def close(self) -> frozenset[str]:
        """The invocation answers: write the completions of what the mapping will delete, send the visibility
        changes, and return the ids of the messages not to list (the deleted ones)."""
        with self._lock:
            self._closed = True
            deleted, changes = dict(self._deleted), self._changes
            self._changes = []
        self._completions.record(list(deleted.values()))
        try:
            self._send_changes(changes)
        except Exception:  # noqa: BLE001 (what nothing expects, a library's bug: logged, and the answer still goes)
            # The deletes ride on the answer: raised from here, it would fail the whole batch, and what was moved to
            # the DLQ or requeued come back to be moved again (as the container sends its deletes when its
            # acknowledger's thread dies). The records whose changes were not sent stay listed: back after the
            # queue's visibility, not their backoff.
            log.critical("thread_crashed", exc_info=True, extra={"thread_name": "batch_report"})
        return frozenset(deleted)

    def _send_changes(self, changes: list[tuple[Ticket, int, Callable[[float], None] | None]]) -> None:
        for start in range(0, len(changes), SQS_MAX_BATCH):
            batch = changes[start : start + SQS_MAX_BATCH]
            entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
                {"Id": str(index), "ReceiptHandle": ticket.receipt_handle, "VisibilityTimeout": seconds}
                for index, (ticket, seconds, _) in enumerate(batch)
            ]
            send = partial(self._client.change_message_visibility_batch, QueueUrl=self._queue_url, Entries=entries)
            sent_at = self._now()
            failed = call_batch("ChangeMessageVisibilityBatch", self._queue_url, entries, send)
            for index, (ticket, _, on_sent) in enumerate(batch):
                if str(index) in failed:
                    # Listed all the same: the message returns after the queue's visibility, not its backoff.
                    log.warning(
                        "visibility_change_failed",
                        extra={"message_id": ticket.message_id, "error": failed[str(index)].get("Message")},
                    )
                elif on_sent is not None:
                    on_sent(sent_at)

    def _delete_late(self, ticket: Ticket) -> None:
        """Record its completion, then delete it (a batch of one: the call the container's deletes make)."""
        self._completions.record([ticket])
        entries: list[DeleteMessageBatchRequestEntryTypeDef] = [{"Id": "0", "ReceiptHandle": ticket.receipt_handle}]
        send = partial(self._client.delete_message_batch, QueueUrl=self._queue_url, Entries=entries)
        failed = call_batch("DeleteMessageBatch", self._queue_url, entries, send)
        if failed:
            # Its completion is written: the next receive's claim finds the work done and deletes it.
            log.warning(
                "late_delete_failed", extra={"message_id": ticket.message_id, "error": failed["0"].get("Message")}
            )
