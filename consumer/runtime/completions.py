"""Processed messages' idempotency completions and ``message_processed`` lines, written in batches.

A processed message's completion (the handler ran; not for a duplicate skipped) and its ``message_processed`` line
are written when 25 wait (one DynamoDB ``BatchWriteItem``), when the oldest has waited ``COMPLETION_FLUSH_SECONDS``
(:meth:`Completions.flush`, on the acknowledger's tick), or with the message's batch of deletes if that goes first
(:meth:`Completions.record`, called by the acknowledger just before it sends the batch), so a completion always lands
before its delete can.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from consumer.runtime.acknowledger import Ticket
from consumer.runtime.idempotency import IdempotencyStore
from consumer.runtime.inflight import InFlight

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

#: A processed message's idempotency completion waits at most this long (plus the acknowledger's tick) for others to
#: share its BatchWriteItem, and never longer than its delete: a task killed in that window runs the message again
#: once its lease lapses, as one killed while the handler ran would.
COMPLETION_FLUSH_SECONDS = 0.05
#: BatchWriteItem's limit of requests per call: a full batch of completions is written at once.
COMPLETION_BATCH = 25


class Completions:
    """The processed messages whose completion is not written yet, oldest first, and the writing of them.

    ``store`` is the idempotency store (None: no guard, nothing to complete); ``keep_seconds`` how long a completed
    record is kept (the source queue's retention). ``wake`` is called when a completion starts waiting (the
    acknowledger's thread, which flushes them on its tick, may be asleep).
    """

    def __init__(
        self,
        store: IdempotencyStore | None,
        *,
        keep_seconds: int,
        clock: Callable[[], float],
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        #: The store the completions go to; the settlement releases and renews its records there too.
        self.store = store
        self._keep_seconds = keep_seconds
        self._clock = clock
        self._wake = wake
        # The lock also makes taking a ticket's ``settles`` one step, so no completion is written (or logged) twice.
        self._lock = threading.Lock()
        self._waiting: list[Ticket] = []
        self._oldest: float | None = None

    def add(self, item: InFlight, complete: bool) -> None:
        """Queue a processed message (``complete``: the handler ran); a full batch is written at once."""
        item.ticket.settles = (item, complete)
        with self._lock:
            self._waiting.append(item.ticket)
            first = self._oldest is None
            if first:
                self._oldest = self._clock()
            full = self._take() if len(self._waiting) >= COMPLETION_BATCH else []
        if full:
            self.record(full)
        elif first:
            self._wake()

    def waiting(self) -> bool:
        """Whether a completion waits for its batch (read without the lock: a stale answer costs one tick)."""
        return self._oldest is not None

    def flush(self) -> None:
        """Write the completions that have waited ``COMPLETION_FLUSH_SECONDS`` (on the acknowledger's tick)."""
        with self._lock:
            oldest = self._oldest
            if oldest is None or self._clock() - oldest < COMPLETION_FLUSH_SECONDS:
                return
            due = self._take()
        self.record(due)

    def _take(self) -> list[Ticket]:
        """(``_lock`` held.) Every completion waiting; the wait starts again."""
        taken, self._waiting, self._oldest = self._waiting, [], None
        return taken

    def record(self, tickets: list[Ticket]) -> None:
        """Record what ``tickets`` settle that is not recorded yet: before the acknowledger sends their batch of
        deletes, and the batches of :meth:`add` and :meth:`flush`.

        The idempotency completions of their processed messages in one call (a failure is logged, never raised: the
        message outcome stands and the record's lease expires), then a ``message_processed`` line per message, at
        DEBUG: one line per message is the busiest thing a consumer can print, and what an operator reads from it
        is a count (the EMF ``processed`` metric). Failures, moves and hand-backs stay at INFO and above;
        ``CONSUMER_LOG_LEVEL=DEBUG`` brings the line back (the local runs and the chaos suite set it).
        """
        settled: list[tuple[InFlight, bool]] = []
        with self._lock:  # whoever takes a ticket's settles writes it: the other callers find None
            for ticket in tickets:
                if ticket.settles is not None:
                    settled.append(ticket.settles)  # type: ignore[arg-type]  # only add() sets it
                    ticket.settles = None
        if not settled:
            return
        done = [(item.key, item.owner) for item, complete in settled if complete and item.key is not None]
        if done and self.store is not None:
            try:
                self.store.complete_many(done, keep_seconds=self._keep_seconds)
            except Exception as error:  # noqa: BLE001 (the outcomes stand; the records' leases expire)
                log.warning(
                    "idempotency_update_failed",
                    extra={
                        "operation": "complete",
                        "message_ids": [item.message.message_id for item, complete in settled if complete],
                        "error": str(error),
                    },
                )
        if log.isEnabledFor(logging.DEBUG):
            for item, _ in settled:
                log.debug("message_processed", extra=item.context.fields())
