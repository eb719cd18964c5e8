"""Deletes and visibility changes, batched: one thread sends every visibility change, in the order decided.

Routing every visibility change through one thread is what keeps the heartbeat from
racing: an extension is dropped at send time if its message is no longer held or has a
backoff or release queued (``Ticket.settled``), and a backoff decided after an extension
is always sent after it, so a heartbeat can never overwrite a backoff. Deletes need no
order (a message is deleted once, after its last visibility change was decided, and an
extension sent after it fails harmlessly on a stale handle): the thread whose delete
fills a batch of 10 sends it, and the acknowledger's background thread sends what has
waited ``DELETE_FLUSH_SECONDS`` (its loop goes on sending visibility changes meanwhile);
a delete asked for ``at_once`` is sent by its caller at once, with whatever is waiting.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from consumer.limits import SQS_MAX_BATCH
from consumer.runtime.clock import SYSTEM, Clock, Waitable
from consumer.runtime.liveness import ACKNOWLEDGER_LOOP, Liveness

if TYPE_CHECKING:  # the stubs are a development dependency; the image never carries them
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import (
        BatchResultErrorEntryTypeDef,
        ChangeMessageVisibilityBatchRequestEntryTypeDef,
        ChangeMessageVisibilityBatchResultTypeDef,
        DeleteMessageBatchRequestEntryTypeDef,
        DeleteMessageBatchResultTypeDef,
    )

    _BatchEntry = DeleteMessageBatchRequestEntryTypeDef | ChangeMessageVisibilityBatchRequestEntryTypeDef
    _BatchResult = DeleteMessageBatchResultTypeDef | ChangeMessageVisibilityBatchResultTypeDef

log = logging.getLogger(__name__)

#: A successful message's delete waits at most this long for nine others to share its call.
DELETE_FLUSH_SECONDS = 1.0
#: While a delete waits for its batch (or the completions' ``waiting`` says something else does), the acknowledger's
#: thread goes round its loop at least this often (sending what is due, flushing the completions); with nothing waiting
#: it sleeps until work comes.
TICK_SECONDS = 0.1
#: Put on the thread's queue when something starts waiting on a timer: the thread may be asleep without a timeout.
_WAKE = object()
#: Per-entry delete failures SQS marks as its own fault: tries in all (the first and two retries).
DELETE_RETRIES = 3
#: A flush waits this long at most for batches other threads are sending (one call's worst case is bounded by
#: the client's timeouts, consumer/limits.py; past this the flush goes on and those sends finish on their own).
FLUSH_WAIT_SECONDS = 10.0


@dataclass(eq=False)
class Ticket:
    """The acknowledger's view of one received message.

    ``settles``: what must be recorded before this message's delete is sent (set by whoever asks for the delete,
    handed to the acknowledger's ``completions.record`` with the rest of the batch, then cleared): the idempotency
    completion of a processed message, recorded in one call per batch rather than one per message.
    """

    message_id: str
    receipt_handle: str
    is_running: Callable[[], bool] = lambda: False
    attempts: int = 0
    settles: object = None
    #: A visibility outcome (a backoff, a release) is queued: an extension sent after it would overwrite it.
    settled: bool = False
    #: Called once its delete is sent for good (deleted, or given up on): whoever holds the message lets it go then.
    on_sent: Callable[[], object] | None = None


@dataclass
class _Visibility:
    ticket: Ticket
    seconds: int
    reason: str  # "extend" | "backoff" | "release"
    on_sent: Callable[[float], None] | None = None


@dataclass
class _Flush:
    done: Waitable


class Acks(Protocol):
    """What the settlement asks of whoever ends a receive: a delete, or a visibility change (a backoff, a release).

    :class:`Acknowledger` sends both to SQS, batched; on Lambda, where the event source mapping deletes every record
    the function does not report failed, a per-invocation report (consumer/runtime/invocation.py) keeps them.
    """

    def delete(self, ticket: Ticket, at_once: bool = False) -> None: ...

    def change_visibility(
        self, ticket: Ticket, seconds: int, reason: str, on_sent: Callable[[float], None] | None = None
    ) -> None: ...


class Recorded(Protocol):
    """What is written before some deletes are sent, and on a timer (consumer/runtime/completions.py's
    ``Completions``): a delete must never land before what its message's processing recorded."""

    def record(self, tickets: list[Ticket]) -> None:
        """Write what ``tickets`` settle, if not written yet (called just before their batch of deletes is sent)."""
        ...

    def flush(self) -> None:
        """Write what has waited long enough (called every time round the acknowledger's loop)."""
        ...

    def waiting(self) -> bool:
        """Whether something waits for :meth:`flush` (the loop then ticks rather than sleeps)."""
        ...


class _Background:
    """What the acknowledger's timers send that may wait on DynamoDB (the due completions, a due batch of deletes that
    writes its completions first), on a thread of its own, guarded as the loop: a slow table then never holds up the
    lease extensions the loop sends next."""

    def __init__(
        self,
        clock: Clock,
        guard: Callable[[Callable[[], None]], Callable[[], None]],
        every_tick: Callable[[], None] | None,
    ) -> None:
        self._executor = clock.executor(1, ACKNOWLEDGER_LOOP + "-flush")
        self._guard = guard
        self._every_tick = every_tick
        self._ticking = False  # a tick's completions are being written

    def submit(self, send: Callable[[], None]) -> None:
        self._executor.submit(self._guard(send))

    def tick(self) -> None:
        """``every_tick``, one at a time (a tick that finds one under way skips)."""
        if self._every_tick is None or self._ticking:
            return
        self._ticking = True
        every_tick = self._every_tick

        def tick() -> None:
            try:
                every_tick()
            finally:
                self._ticking = False

        self.submit(tick)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)


class Acknowledger:
    """Batches ``DeleteMessageBatch`` and ``ChangeMessageVisibilityBatch`` for one queue.

    ``completions`` (:class:`Recorded`) is what must be written before some deletes are sent: its ``record`` is called
    with each batch of deletes holding a ticket that ``settles`` something, on the thread about to send it, before it
    is sent; its ``flush`` on the acknowledger's thread, every ``TICK_SECONDS`` at most while a delete waits for its
    batch or its ``waiting()`` is true (whoever makes it true calls :meth:`wake`).

    Example::

        ack = Acknowledger(client, queue_url)
        ack.start()
        ack.delete(ticket)           # sent within DELETE_FLUSH_SECONDS or with 9 others
        ack.change_visibility(ticket, 30, "backoff")
        ack.close()                  # flushes everything, then stops
    """

    def __init__(
        self,
        client: SQSClient,
        queue_url: str,
        *,
        completions: Recorded | None = None,
        on_deleted: Callable[[Ticket], None] | None = None,
        clock: Clock = SYSTEM,
        guard: Callable[[Callable[[], None]], Callable[[], None]] = lambda run: run,
        liveness: Liveness | None = None,
    ) -> None:
        self._client = client
        self._queue_url = queue_url
        self._on_deleted = on_deleted
        # Called with each batch of deletes just before it is sent (on the sending thread): what the batch's tickets
        # settle is recorded first, so a delete never lands before it (Completions.record).
        self._before_delete = None if completions is None else completions.record
        # Called on the acknowledger's thread every time round its loop (at least every TICK_SECONDS): the settlement's
        # timer for the completions it batches (Completions.flush).
        self._every_tick = None if completions is None else completions.flush
        self._waiting: Callable[[], bool] = (lambda: False) if completions is None else completions.waiting
        self._clock = clock.monotonic
        self._new_event = clock.event
        self._ops: queue.SimpleQueue[object] = clock.simple_queue()
        # Deletes wait here until a batch is full, and the thread that fills it sends it; the thread's own tick
        # sends what has waited DELETE_FLUSH_SECONDS. No thread switch per message, and as many batches in
        # flight as the rate needs: one thread sending every batch in turn fell behind at about 1,500 a second.
        self._pending_lock = clock.lock()
        self._sent = clock.condition(self._pending_lock)  # notified when a send of deletes ends
        self._pending: list[Ticket] = []
        self._oldest_pending: float | None = None
        self._sending = 0  # sends of deletes under way, on any thread: a flush waits for them
        self._drained = False  # the thread's last flush is done: from now on each delete's caller sends it
        # Guarded as every thread of the consumer is (its death ends the process: nothing else deletes or extends),
        # and seen by the health check (it beats each time round its loop; idle while it sleeps for want of work).
        self._thread = clock.thread(guard(self._run), name=ACKNOWLEDGER_LOOP)
        self._background = _Background(clock, guard, self._every_tick)
        self._liveness = liveness or Liveness(None)
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    def delete(self, ticket: Ticket, at_once: bool = False) -> None:
        """Delete after success (or after a move to the DLQ): the call that makes a batch of 10 sends it (after
        :meth:`close`, every call sends its own at once). ``at_once``: this caller sends it now, with every delete
        waiting (one call per ten): for a message that must not wait (``Settlement``'s last allowed receive)."""
        tickets = self._take(ticket, everything=at_once)
        if tickets:
            self._send_deletes(tickets)

    def change_visibility(
        self, ticket: Ticket, seconds: int, reason: str, on_sent: Callable[[float], None] | None = None
    ) -> None:
        """``extend`` (dropped if the message stopped running), ``backoff`` or ``release`` (0 s); after
        :meth:`close`, sent by the caller at once."""
        change = _Visibility(ticket, seconds, reason, on_sent)
        if reason != "extend":
            ticket.settled = True  # before it is queued: no extension can follow it out
        with self._pending_lock:
            if not self._drained:
                self._ops.put(change)
                return
        self._send_visibility([change])

    def wake(self) -> None:
        """Something now waits on the thread's timer (``waiting()`` turned true): go round the loop again."""
        self._ops.put(_WAKE)

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything queued so far; True when done within ``timeout``."""
        marker = _Flush(self._new_event())
        self._ops.put(marker)
        return marker.done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Flush and stop the thread. If the thread died (an error nothing expected: the process is stopping for it),
        what waits is sent from here, so no finished message is left to run again; if that meets the same error, it
        is logged and the exit goes on (what was not sent comes back after its lease, and its guard skips the work)."""
        if self._closed:
            return
        if not self._thread.is_alive():
            self._closed = True
            try:
                self._last_flush()
            except Exception as error:  # noqa: BLE001 (the process exits 1 for the first one already)
                log.error("acknowledger_flush_failed", extra={"error": f"{type(error).__name__}: {error}"})
            return
        self.flush(timeout)
        self._closed = True
        self._ops.put(None)
        self._thread.join(timeout)

    # --- the thread ---------------------------------------------------------
    def _run(self) -> None:
        while True:
            # A tick only while something waits on a timer: an idle consumer's acknowledger sleeps until work comes.
            timed = self._oldest_pending is not None or self._waiting()
            if timed:
                self._liveness.beat(ACKNOWLEDGER_LOOP)
            else:
                self._liveness.idle(ACKNOWLEDGER_LOOP)
            try:
                op = self._ops.get(timeout=TICK_SECONDS if timed else None)
            except queue.Empty:
                op = ...
            self._background.tick()
            if op is None:
                self._background.shutdown()
                self._last_flush()
                return
            visibility: list[_Visibility] = []
            flushes: list[_Flush] = []
            while True:
                if isinstance(op, _Visibility):
                    visibility.append(op)
                elif isinstance(op, _Flush):
                    flushes.append(op)
                try:
                    op = self._ops.get_nowait()
                except queue.Empty:
                    break
                if op is None:
                    self._ops.put(None)
                    break
            self._send_visibility(visibility)
            oldest = self._oldest_pending
            due = oldest is not None and self._clock() - oldest >= DELETE_FLUSH_SECONDS
            if flushes:
                self._send_all_deletes()
            elif due and (tickets := self._take(everything=True)):
                self._background.submit(partial(self._send_deletes, tickets))
            for marker in flushes:
                marker.done.set()

    def _last_flush(self) -> None:
        """The completions waiting, every delete (and what SQS failed on its side, retried), then the visibility changes
        queued before the drain; any decided later is sent by its caller."""
        if self._every_tick is not None:
            self._every_tick()
        self._send_all_deletes(final=True)
        self._send_visibility(self._queued_visibility())

    def _queued_visibility(self) -> list[_Visibility]:
        changes: list[_Visibility] = []
        while True:
            try:
                op = self._ops.get_nowait()
            except queue.Empty:
                return changes
            if isinstance(op, _Visibility):
                changes.append(op)
            elif isinstance(op, _Flush):
                op.done.set()

    def _send_all_deletes(self, final: bool = False) -> None:
        """A flush: wait for the batches other threads are sending (their retries come back here), then send every
        waiting delete, and again what SQS failed on its side, until each is done or out of tries. ``final``:
        the last flush (close); any delete decided later is sent by its caller."""
        deadline = self._clock() + FLUSH_WAIT_SECONDS
        with self._pending_lock:
            while self._sending and (remaining := deadline - self._clock()) > 0:
                self._sent.wait(remaining)
            if final:
                self._drained = True
        for _ in range(DELETE_RETRIES + 1):  # each round either empties the list or spends a try of what it keeps
            tickets = self._take(everything=True)
            if not tickets:
                return
            self._send_deletes(tickets)

    def _take(self, ticket: Ticket | None = None, everything: bool = False) -> list[Ticket]:
        """Add ``ticket`` to the waiting deletes; take every full batch (``everything``, or once drained: all of
        them) for the caller to send with :meth:`_send_deletes`, counted as a send under way until it ends."""
        with self._pending_lock:
            if ticket is not None:
                self._wait_for_batch([ticket])
            whole = everything or self._drained
            cut = len(self._pending) if whole else len(self._pending) - len(self._pending) % SQS_MAX_BATCH
            if not cut:
                return []
            taken, self._pending = self._pending[:cut], self._pending[cut:]
            # What stays behind is a partial batch decided just now (or nothing): its wait starts again.
            self._oldest_pending = self._clock() if self._pending else None
            self._sending += 1
            return taken

    def _wait_for_batch(self, tickets: list[Ticket]) -> None:
        """Add ``tickets`` to the waiting deletes (lock held), starting the wait of the oldest if none was waiting."""
        if tickets:
            self._pending += tickets
            if self._oldest_pending is None:
                self._oldest_pending = self._clock()
                self._ops.put(_WAKE)  # the thread may be asleep: this delete's wait is timed from now

    def _send_deletes(self, tickets: list[Ticket]) -> None:
        """Send ``tickets`` (taken by :meth:`_take`) in batches of 10 on the calling thread. Entries SQS failed on
        its side wait for a later batch, or, once drained, are sent again here until done or out of tries."""
        try:
            while tickets:
                retry = self._send_batches(tickets)
                with self._pending_lock:
                    if not self._drained:
                        self._wait_for_batch(retry)
                        retry = []
                tickets = retry
        finally:
            with self._pending_lock:
                self._sending -= 1
                self._sent.notify_all()

    def _send_batches(self, tickets: list[Ticket]) -> list[Ticket]:
        """One try at each of ``tickets``, 10 per call; returns those to try again (SQS's fault, tries left)."""
        retry: list[Ticket] = []
        for start in range(0, len(tickets), SQS_MAX_BATCH):
            batch = tickets[start : start + SQS_MAX_BATCH]
            if self._before_delete is not None and any(t.settles is not None for t in batch):
                self._before_delete(batch)
            entries: list[DeleteMessageBatchRequestEntryTypeDef] = [
                {"Id": str(i), "ReceiptHandle": t.receipt_handle} for i, t in enumerate(batch)
            ]
            send = partial(self._client.delete_message_batch, QueueUrl=self._queue_url, Entries=entries)
            failed = call_batch("DeleteMessageBatch", self._queue_url, entries, send)
            for index, ticket in enumerate(batch):
                failure = failed.get(str(index))
                if failure is None:
                    if self._on_deleted:
                        self._on_deleted(ticket)
                    if ticket.on_sent is not None:
                        ticket.on_sent()
                    continue
                ticket.attempts += 1
                if not failure.get("SenderFault", True) and ticket.attempts < DELETE_RETRIES:
                    retry.append(ticket)  # SQS's own fault: try again
                    continue
                if ticket.on_sent is not None:
                    ticket.on_sent()
                # A stale handle (the message was received again elsewhere) cannot be deleted with
                # it; the message comes back and the idempotency guard skips its side effect.
                log.warning(
                    "delete_failed",
                    extra={
                        "message_id": ticket.message_id,
                        "code": failure.get("Code"),
                        "error": failure.get("Message"),
                    },
                )
        return retry

    def _send_visibility(self, changes: list[_Visibility]) -> None:
        # An extension for a message that finished in the meantime would overwrite its backoff
        # or hit a deleted handle: drop it here, on the one thread that sends.
        changes = [c for c in changes if c.reason != "extend" or (c.ticket.is_running() and not c.ticket.settled)]
        for start in range(0, len(changes), SQS_MAX_BATCH):
            batch = changes[start : start + SQS_MAX_BATCH]
            entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
                {"Id": str(i), "ReceiptHandle": c.ticket.receipt_handle, "VisibilityTimeout": c.seconds}
                for i, c in enumerate(batch)
            ]
            send = partial(self._client.change_message_visibility_batch, QueueUrl=self._queue_url, Entries=entries)
            sent_at = self._clock()
            failed = call_batch("ChangeMessageVisibilityBatch", self._queue_url, entries, send)
            for index, change in enumerate(batch):
                failure = failed.get(str(index))
                if failure is None:
                    if change.on_sent:
                        change.on_sent(sent_at)
                    continue
                level = logging.DEBUG if change.reason == "extend" else logging.WARNING
                log.log(
                    level,
                    "visibility_change_failed",
                    extra={
                        "message_id": change.ticket.message_id,
                        "reason": change.reason,
                        "code": failure.get("Code"),
                        "error": failure.get("Message"),
                    },
                )


def call_batch(
    operation: str, queue_url: str, entries: Sequence[_BatchEntry], send: Callable[[], _BatchResult]
) -> dict[str, BatchResultErrorEntryTypeDef]:
    """Run one batch call (``send``); returns failed entries by Id (every entry, if the call itself failed)."""
    try:
        response = send()
    except (ClientError, BotoCoreError) as error:
        log.warning(
            "sqs_batch_failed",
            extra={"operation": operation, "queue_url": queue_url, "error": str(error), "entries": len(entries)},
        )
        return {
            e["Id"]: {"Id": e["Id"], "SenderFault": False, "Code": "CallFailed", "Message": str(error)} for e in entries
        }
    return {f["Id"]: f for f in response.get("Failed", [])}
