"""The heartbeat: gives up on overrunning handlers, extends leases, keeps task protection and flushes metrics."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable

from consumer.contract import WorkerContract
from consumer.limits import SQS_MAX_VISIBILITY_SECONDS
from consumer.runtime.acknowledger import Acknowledger
from consumer.runtime.idempotency import IdempotencyStore, warn_lost_lease
from consumer.runtime.inflight import InFlight, State, update_record
from consumer.runtime.liveness import HEARTBEAT_LOOP
from consumer.runtime.polling import TICK_SECONDS, Lookahead
from consumer.runtime.wiring import Shared

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

METRICS_FLUSH_SECONDS = 60
#: How long past max_duration the heartbeat waits for an async handler's event loop to cancel a coroutine before it
#: gives up on it itself (and counts it toward "every slot stuck"): a few of the loop's watcher's ticks.
ASYNC_GIVE_UP_GRACE_SECONDS = 4 * TICK_SECONDS
#: Beyond a heartbeat interval, what an extension needs to land: the heartbeat's tick and the call itself.
REACH_SLACK_SECONDS = 1.0


def heartbeat_reach(contract: WorkerContract) -> float:
    """The lease a waiting message must still have to start: the heartbeat's next extension lands within it."""
    return contract.heartbeat_interval_seconds + REACH_SLACK_SECONDS


def waiting_threshold(contract: WorkerContract) -> float:
    """A waiting message (collected in a batch, queued behind its FIFO group) is extended below this lease: a beat
    later (an interval and a tick) with that extension landing (the slack), it still has the heartbeat's reach, so
    the handler thread that takes it can start it. The running threshold (``heartbeat_threshold``) is lower: a waiting
    message extended only there could be taken in the gap between reach and threshold and handed back as
    ``lease_ran_down`` although the heartbeat held it, every time with a lease of a few heartbeat intervals."""
    return heartbeat_reach(contract) + contract.heartbeat_interval_seconds + REACH_SLACK_SECONDS


def lease_extension(
    contract: WorkerContract,
    *,
    now: float,
    received_at: float,
    started_at: float,
    visible_until: float,
    threshold: float | None = None,
) -> int | None:
    """New visibility (seconds from now) for a running message, or None if it needs no extension.

    Only when the lease has at most ``threshold`` left (``heartbeat_threshold`` unless given); never past the
    attempt end (``started + max_duration + margin``: the handler is given up on
    then) nor 12 h after the receive (SQS's limit, which extensions do not reset).
    """
    remaining = visible_until - now
    if remaining > (contract.heartbeat_threshold_seconds if threshold is None else threshold):
        return None
    attempt_end = started_at + contract.max_duration_seconds + contract.visibility_margin_seconds
    target = int(
        min(contract.visibility_timeout_seconds, attempt_end - now, received_at + SQS_MAX_VISIBILITY_SECONDS - now - 1)
    )
    return target if target > remaining else None


class Renewals:
    """Idempotency lease renewals, on threads of their own: the heartbeat queues each and waits for none, so a slow
    table (a DynamoDB call may take ``call_worst(dynamodb)``) never holds up the SQS extensions of the messages after
    it, nor the next beat. A refused renewal (another attempt owns the key now) is logged while its handler runs."""

    def __init__(self, store: IdempotencyStore, executor: concurrent.futures.Executor) -> None:
        self._store = store
        self._executor = executor
        self._lock = threading.Lock()
        self._pending: set[int] = set()  # items with a renewal queued or running: one at a time each

    def renew(self, item: InFlight, lease_seconds: int) -> None:
        if item.key is None:
            return  # not claimed yet (waiting): its claim takes a full lease
        with self._lock:
            if id(item) in self._pending:
                return
            self._pending.add(id(item))
        self._executor.submit(self._renew, item, lease_seconds)

    def _renew(self, item: InFlight, lease_seconds: int) -> None:
        try:
            renewed = update_record(self._store, "renew", item, lease_seconds=lease_seconds)
            if renewed is False and item.state is State.RUNNING and item.key is not None:
                # Refused while it runs: its lease lapsed and another attempt claimed the key (refused after it
                # finished, it only met its own completion or release).
                warn_lost_lease(item.key, item.owner)
        finally:
            with self._lock:
                self._pending.discard(id(item))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class Heartbeat:
    """Once a tick until ``closed``: time out overruns, reconcile task protection; every heartbeat interval,
    extend the leases of held messages close to expiry (running, waiting their turn, done with and settling; through
    the acknowledger, so an extension can never overwrite a backoff) with their idempotency leases (running ones:
    :class:`Renewals`, not waited on), and refresh protection.

    ``on_stuck`` is called when every slot holds a handler that was given up on; ``renewals`` renews the running
    messages' idempotency leases (None: no guard); ``lookahead`` is told every tick how long since a handler finished.
    """

    def __init__(
        self,
        shared: Shared,
        *,
        ack: Acknowledger,
        renewals: Renewals | None,
        lookahead: Lookahead | None,
        on_stuck: Callable[[], None],
        tick_seconds: float,
    ) -> None:
        contract = self.contract = shared.contract
        #: Beyond max_duration, before giving up on a handler here: an async one is cancelled by its event loop at
        #: max_duration and returns; the heartbeat gives up on it only if the loop cannot (blocked).
        self._grace_seconds = ASYNC_GIVE_UP_GRACE_SECONDS if contract.asynchronous else 0.0
        #: Messages that wait here by design are extended as running ones are: a batch handler's, for a free thread (a
        #: receive in flight as the last free one started its call), up to a call's max_duration; a FIFO group's, for
        #: their turn behind the group's running message (on FIFO a hand-back spends a receive, and on the last one
        #: would send the message to the DLQ untried), except behind one given up on (InFlightTable.waiting).
        self._extend_waiting = contract.max_batch is not None or contract.fifo
        self._waiting_threshold = waiting_threshold(contract)
        self._table = shared.table
        self._ack = ack
        self._renewals = renewals
        self._metrics = shared.metrics
        self._protection = shared.protection
        self._stop = shared.stopping.event
        self._closed = shared.stopping.closed
        self._on_stuck = on_stuck
        self._clock = shared.clock.monotonic
        self._tick_seconds = tick_seconds
        self._liveness = shared.liveness
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

    def _extend(self, item: InFlight, now: float, threshold: float | None = None) -> int | None:
        """Queue a lease extension for ``item`` if it is due (below ``threshold``); the new visibility, or None."""
        target = lease_extension(
            self.contract,
            now=now,
            received_at=item.received_at,
            started_at=now if item.started_at is None else item.started_at,  # waiting: as if it started now
            visible_until=item.visible_until,
            threshold=threshold,
        )
        if target is None:
            return None

        def extended(sent_at: float, item: InFlight = item, target: int = target) -> None:
            item.visible_until = sent_at + target

        self._ack.change_visibility(item.ticket, target, "extend", on_sent=extended)  # queued, not waited on
        self._metrics.count("visibility_extensions")
        return target

    def _extend_leases(self, now: float) -> None:
        running = self._table.running()
        # Done with and settling (a completion, a copy or a delete under way, seconds on a slow table): the lease is
        # kept until the outcome is handed to the acknowledger, so the message is not received again meanwhile.
        held: list[tuple[InFlight, float | None]] = [(item, None) for item in running + self._table.settling()]
        if self._extend_waiting:
            waiting = self._table.waiting(behind_given_up=not self.contract.fifo)
            held += [(item, self._waiting_threshold) for item in waiting]
        for item, threshold in held:
            target = self._extend(item, now, threshold)
            if target is not None and self._renewals is not None and item.state is State.RUNNING:
                self._renewals.renew(item, target)
