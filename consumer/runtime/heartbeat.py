"""The heartbeat: gives up on overrunning handlers, extends leases, keeps task protection and flushes metrics."""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumer.contract import SQS_MAX_VISIBILITY_SECONDS, WorkerContract
from consumer.runtime.acknowledger import Acknowledger
from consumer.runtime.clock import Waitable
from consumer.runtime.idempotency import IdempotencyStore, warn_lost_lease
from consumer.runtime.inflight import InFlight, InFlightTable, update_record
from consumer.runtime.liveness import HEARTBEAT_LOOP, Liveness
from consumer.runtime.observability import Metrics
from consumer.runtime.polling import Lookahead
from consumer.runtime.protection import ScaleInProtection

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

METRICS_FLUSH_SECONDS = 60


def lease_extension(
    contract: WorkerContract, *, now: float, received_at: float, started_at: float, visible_until: float
) -> int | None:
    """New visibility (seconds from now) for a running message, or None if it needs no extension.

    Only when the lease has at most ``heartbeat_threshold`` left; never past the
    attempt end (``started + max_duration + margin``: the handler is given up on
    then) nor 12 h after the receive (SQS's limit, which extensions do not reset).
    """
    remaining = visible_until - now
    if remaining > contract.heartbeat_threshold_seconds:
        return None
    attempt_end = started_at + contract.max_duration_seconds + contract.visibility_margin_seconds
    target = int(
        min(contract.visibility_timeout_seconds, attempt_end - now, received_at + SQS_MAX_VISIBILITY_SECONDS - now - 1)
    )
    return target if target > remaining else None


class Heartbeat:
    """Once a tick until ``closed``: time out overruns, reconcile task protection; every heartbeat interval,
    extend the leases of running messages close to expiry (through the acknowledger, so an extension can never
    overwrite a backoff or touch a deleted message) with their idempotency leases, and refresh protection.

    ``on_stuck`` is called when every slot holds a handler that was given up on.
    """

    def __init__(
        self,
        *,
        contract: WorkerContract,
        table: InFlightTable,
        ack: Acknowledger,
        idempotency: IdempotencyStore | None,
        metrics: Metrics,
        protection: ScaleInProtection,
        stop: Waitable,
        closed: Waitable,
        on_stuck: Callable[[], None],
        clock: Callable[[], float],
        tick_seconds: float,
        liveness: Liveness | None = None,
        lookahead: Lookahead | None = None,
        grace_seconds: float = 0.0,
        extend_waiting: bool = False,
    ) -> None:
        self.contract = contract
        #: Beyond max_duration, before giving up on a handler here: an async one is cancelled by its event loop at
        #: max_duration and returns; the heartbeat gives up on it only if the loop cannot (blocked).
        self._grace_seconds = grace_seconds
        #: Messages that wait here by design are extended as running ones are: a batch handler's, for a free thread (a
        #: receive in flight as the last free one started its call), up to a call's max_duration; a FIFO group's, for
        #: their turn behind the group's running message (on FIFO a hand-back spends a receive, and on the last one
        #: would send the message to the DLQ untried), except behind one given up on (InFlightTable.waiting).
        self._extend_waiting = extend_waiting
        self._table = table
        self._ack = ack
        self._idempotency = idempotency
        self._metrics = metrics
        self._protection = protection
        self._stop = stop
        self._closed = closed
        self._on_stuck = on_stuck
        self._clock = clock
        self._tick_seconds = tick_seconds
        self._liveness = liveness or Liveness(None)
        self._lookahead = lookahead

    def run(self) -> None:
        last_beat = last_flush = self._clock()
        while not self._closed.wait(self._tick_seconds):
            self._liveness.beat(HEARTBEAT_LOOP)  # every tick: a tick stuck in a call shows as a stalled heartbeat
            now = self._clock()
            self._give_up_overruns(now)
            if self._lookahead is not None:
                self._lookahead.check(now)
            # Busy/idle are decided on several threads; reconciling here means a late idle() can never
            # leave a busy task unprotected for longer than one tick. Both calls are no-ops when unchanged.
            self._protection.idle() if self._table.is_idle() else self._protection.busy()
            if now - last_beat >= self.contract.heartbeat_interval_seconds:
                last_beat = now
                self._extend_leases(now)
                self._protection.refresh()
            if now - last_flush >= METRICS_FLUSH_SECONDS:
                last_flush = now
                self._metrics.flush()

    def _give_up_overruns(self, now: float) -> None:
        # Given up on at max_duration (no more extensions); stuck only past the attempt's end (max_duration and the
        # margin: its lease), so a handler that returns just past max_duration is settled (Settlement._late_success)
        # before the process would exit for it.
        overrun, stuck = self._table.time_out_overruns(
            now,
            self.contract.message_timeout_seconds + self._grace_seconds,
            self.contract.attempt_timeout_seconds + self._grace_seconds,
        )
        for item in overrun:
            self._metrics.count("timed_out")
            log.error(
                "handler_timed_out",
                extra={
                    "message_id": item.message.message_id,
                    "max_duration_seconds": self.contract.max_duration_seconds,
                },
            )
        if stuck >= self.contract.concurrency and not self._stop.is_set():
            # Every slot holds a handler that will not return: only a new task can make progress.
            log.critical("handlers_stuck", extra={"stuck": stuck})
            self._on_stuck()

    def extend_now(self, item: InFlight) -> None:
        """Extend ``item``'s lease at once if it is due (a message starting with little lease left, after waiting
        for a handler), rather than at the next heartbeat; its idempotency claim, made next, takes a full lease."""
        self._extend(item, self._clock())

    def _extend(self, item: InFlight, now: float) -> int | None:
        """Queue a lease extension for the running ``item`` if it is due; the new visibility, or None."""
        target = lease_extension(
            self.contract,
            now=now,
            received_at=item.received_at,
            started_at=now if item.started_at is None else item.started_at,  # waiting: as if it started now
            visible_until=item.visible_until,
        )
        if target is None:
            return None

        def extended(sent_at: float, item: InFlight = item, target: int = target) -> None:
            item.visible_until = sent_at + target

        self._ack.change_visibility(item.ticket, target, "extend", on_sent=extended)  # queued, not waited on
        self._metrics.count("visibility_extensions")
        return target

    def _extend_leases(self, now: float) -> None:
        held = self._table.running()
        if self._extend_waiting:
            held += self._table.waiting(behind_given_up=not self.contract.fifo)
        for item in held:
            target = self._extend(item, now)
            if target is None:
                continue
            if update_record(self._idempotency, "renew", item, lease_seconds=target) is False and item.key is not None:
                # Refused: the lease lapsed before this renewal and another attempt may have claimed the key.
                warn_lost_lease(item.key, item.owner)
            # Each renewal is a call that returned: progress. The allowance (heartbeat_stall_seconds) covers one
            # call's worst case, not one per running message, which no fixed allowance could.
            self._liveness.beat(HEARTBEAT_LOOP)
