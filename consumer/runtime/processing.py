"""The handler runners: take a task (one message, or a FIFO group in order), run the handler under the idempotency
guard. One runner serves every handler thread (``contract.concurrency``); batches.py and coroutines.py derive the
runners of batch and async handlers from it."""

from __future__ import annotations

import itertools
import logging
import math
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from consumer.contract import WorkerContract
from consumer.declaration import non_retryable_of
from consumer.limits import SQS_MAX_VISIBILITY_SECONDS
from consumer.message import DownstreamUnavailable, Message, PoisonMessage
from consumer.runtime.heartbeat import heartbeat_reach
from consumer.runtime.idempotency import Claim, idempotency_key
from consumer.runtime.inflight import InFlight, update_record
from consumer.runtime.polling import Flow
from consumer.runtime.settlement import ALREADY_DONE, SUCCEEDED, Outcome, Settlement, Verdict
from consumer.runtime.wiring import Guard, Shared

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

#: A claim that finds another holder whose lease ends within this many seconds waits for it, holding the message, and
#: claims once more; a longer lease defers the message (handed back until that lease ends).
DEFER_IN_PLACE_SECONDS = 5.0
#: Beyond the holder's lease end, before claiming again: the holder's clock and ours may differ a little.
DEFER_SLACK_SECONDS = 0.5


#: The outcome of an attempt handed back while its claim was under way (HandlerRunner.not_called).
NOT_CALLED = Outcome(Verdict.DEFERRED)


@dataclass(frozen=True)
class Refusal:
    """Why a received message is handed back instead of starting: ``hand_back_unstarted``'s arguments."""

    why: str
    delay: int = 0
    copy: bool = False


class Lease(Protocol):
    """What a message's lease asks of its start: whether too little of it is left to start (a refusal), what to do as
    it starts, and how long its idempotency claim is leased. The container's is :class:`HeartbeatLease`; a Lambda
    invocation's lease is its remaining time (consumer/runtime/invocation.py)."""

    #: Why a message is handed back unstarted once the runner's stop is set ("shutdown" in the container).
    stop_reason: str
    #: The idempotency claim's lease: as long as the message's own (the heartbeat renews it in the container).
    claim_seconds: int

    def refusal(self, item: InFlight, now: float) -> Refusal | None: ...

    def started(self, item: InFlight, now: float) -> None: ...

    def at_call(self, item: InFlight, now: float) -> Refusal | None:
        """Why a started message is handed back instead of calling its handler now, its claim done, or None."""


class HeartbeatLease:
    """The container's lease rules: a waiting message starts only with at least the heartbeat's reach of lease left
    (its next extension lands within it), and is extended at once as it starts with less than the heartbeat's
    threshold left (``extend_now``, the heartbeat's); its claim is leased for the queue's visibility, renewed with it.
    """

    stop_reason = "shutdown"

    def __init__(self, contract: WorkerContract, extend_now: Callable[[InFlight], None]) -> None:
        self.claim_seconds = contract.visibility_timeout_seconds
        self._reach = heartbeat_reach(contract)
        self._extend_below = contract.heartbeat_threshold_seconds
        self._extend_now = extend_now

    def refusal(self, item: InFlight, now: float) -> Refusal | None:
        if item.visible_until - now <= self._reach:
            # It waited here until less than a heartbeat interval of lease is left (received ahead of handlers that
            # ran far longer than their mean): the lease may lapse before the heartbeat's next extension and another
            # receive run it too. Hand it back instead of starting it.
            return Refusal("lease_ran_down")
        return None

    def started(self, item: InFlight, now: float) -> None:
        if item.visible_until - now <= self._extend_below:
            # Less lease left than the heartbeat's threshold (it waited): extend now (queued to the acknowledger),
            # not up to an interval later.
            self._extend_now(item)

    def at_call(self, item: InFlight, now: float) -> Refusal | None:
        """None: the heartbeat extends a running message's lease however long its claim took."""
        return None


class HandlerRunner:
    """Runs the handler on every handler thread (``contract.concurrency``); each thread runs :meth:`run`.

    ``work``: the pollers' tasks. ``flow``: the circuit a start asks, ``@worker(max_rate=...)``'s turn it waits for,
    the lookahead each finished handler's duration goes to. ``settlement``: where each outcome goes (and, if traced,
    the tracer of the attempts). ``guard``: the idempotency store and this consumer's name in it (unique per run);
    each attempt adds its own suffix. ``lease``: how much of a message's lease a start needs, what its start does to
    it, and its claim's lease (:class:`HeartbeatLease` in the container).
    """

    def __init__(
        self,
        shared: Shared,
        *,
        handler: Callable[..., Any],
        flow: Flow,
        settlement: Settlement,
        guard: Guard,
        work: queue.SimpleQueue[list[InFlight]],
        lease: Lease,
    ) -> None:
        self.handler = handler
        self.contract = contract = shared.contract
        self._table = shared.table
        self._settlement = settlement
        self._idempotency = guard.store
        self._metrics = shared.metrics
        self._work = work
        self._stop = shared.stopping.event
        # Unique per attempt: the consumer's name (unique per run) and a counter (atomic under the GIL, no uuid per
        # message).
        self._owner = guard.owner
        self._attempts = itertools.count(1)
        self._clock = shared.clock.monotonic
        self._non_retryable = non_retryable_of(handler)
        self._circuit = flow.circuit
        self._rate = flow.rate
        self._lookahead = flow.lookahead
        self._lease = lease
        self._tracer = settlement.tracer  # None: tracing off (docs/tracing.md), one check per attempt
        self._attempt_seconds = contract.attempt_timeout_seconds  # what must fit in SQS's 12 h when it starts

    def run(self) -> None:
        while True:
            self.run_group(self._work.get())

    def run_group(self, group: list[InFlight]) -> None:
        """Run one task: a message, or a FIFO group's messages in order, up to the first that stays in the queue."""
        for index, item in enumerate(group):
            if self._stop.is_set():
                self._settlement.hand_back_unstarted(group[index:], self._lease.stop_reason)
                break
            succeeded = self._process(item)
            if not succeeded and self.contract.fifo:
                # Order within a group: nothing after a failed message may run before it.
                self._settlement.hand_back_unstarted(group[index + 1 :], "fifo_group_blocked")
                break

    def cancel_running(self, wait_seconds: float) -> None:
        """At the drain's end: a thread cannot be cancelled, so shutdown hands its message back (AsyncRunner's)."""

    def _process(self, item: InFlight) -> bool:
        """One attempt at ``item``, settled; True if the message left the queue (deleted or moved to the DLQ)."""
        if not self._begin(item):
            return False
        if self._tracer is not None:
            return self._tracer.process(item, self._attempt, self._settlement.settle)
        return self._settlement.settle(item, self._attempt(item))

    def _begin(self, item: InFlight) -> bool:
        """Start ``item`` (RUNNING, its lease extended if low); False if it was handed back instead (the circuit is
        open, too little of its lease is left, shutdown) or was no longer waiting. Under max_rate it first waits
        its turn (on this thread: an async handler's loop awaits it instead, AsyncRunner)."""
        if self._circuit.may_start(item.message.message_id) and self._rate is not None:
            self._rate.acquire(self._stop)  # the circuit may open, or the consumer stop, meanwhile: _refusal looks
        refusal = self._refusal(item)
        if refusal is not None:
            self._refuse(item, refusal)
            return False
        return self._start(item)

    def _refusal(self, item: InFlight) -> Refusal | None:
        """Why ``item`` is handed back instead of starting now, or None: it starts. Waits for nothing and calls
        nothing that may (an async handler's loop asks it)."""
        if self._stop.is_set():
            return Refusal(self._lease.stop_reason)
        if not self._circuit.may_start(item.message.message_id):
            return Refusal("circuit_open", math.ceil(self._circuit.seconds_paused()), copy=True)
        now = self._clock()
        if item.received_at + SQS_MAX_VISIBILITY_SECONDS - now < self._attempt_seconds:
            # It waited so long that its whole attempt (max_duration and the margin) no longer fits in SQS's 12 hours
            # from its receive, which no extension can pass: its lease would lapse mid-run and another receive run it
            # too. A fresh receive (of a copy, or of the message once visible) brings a fresh 12 hours.
            self._circuit.answered(item.message.message_id, None)
            return Refusal("visibility_budget")
        refusal = self._lease.refusal(item, now)
        if refusal is not None:
            self._circuit.answered(item.message.message_id, None)  # a half-open probe handed back: the next probes
        return refusal

    def _refuse(self, item: InFlight, refusal: Refusal) -> None:
        """Hand ``item`` back as ``refusal`` says (a send and a delete, or a visibility change: it may wait)."""
        self._settlement.hand_back_unstarted([item], refusal.why, delay=refusal.delay, copy=refusal.copy)

    def _start(self, item: InFlight) -> bool:
        """WAITING -> RUNNING with its key and this attempt's owner, then what the lease does as it starts; False if it
        was no longer waiting. Calls nothing that waits (an async handler's loop runs it)."""
        key, owner = None, ""  # no key and no record without a guard (@worker(idempotent=True)): nothing reads them
        if self._idempotency is not None:
            key, owner = idempotency_key(item.message), f"{self._owner}:{next(self._attempts)}"
        if not self._table.start(item, key=key, owner=owner):
            return False
        self._lease.started(item, self._clock())
        return True

    def _attempt(self, item: InFlight) -> Outcome:
        if self._idempotency is not None or item.message.unreadable is not None:
            guarded = self._guard(item)
            if guarded is not None:
                return guarded
        started = self._clock()  # max_duration counts from the call, not from the claim
        refusal = self._lease.at_call(item, started)
        if refusal is not None and self._table.release_running(item):
            self.hand_back_at_call(item, refusal)
        if not self._table.calling(item, started):
            return self.not_called(item)
        try:
            self.handler(self._view(item))
            outcome = SUCCEEDED
        except BaseException as failure:  # noqa: BLE001 (any handler error means "retry later")
            # SystemExit, KeyboardInterrupt and the like too: raised by the handler on its own thread
            # (signals reach only the main thread), they would end the thread with its slot still taken
            # and strand the message; as a failed attempt it backs off and, on its last receive, goes
            # to the DLQ like any other failure.
            outcome = self.classify(failure)
        seconds = self._clock() - started
        self._metrics.timing("duration", seconds * 1000)
        if self._lookahead is not None:
            self._lookahead.finished(seconds)
        return outcome

    def hand_back_at_call(self, item: InFlight, refusal: Refusal) -> None:
        """Hand back a message its lease refuses to call (its claim took too long), released from running."""
        self._settlement.hand_back(item, refusal.why)
        log.info("message_released", extra={"message_id": item.message.message_id, "why": refusal.why})

    def not_called(self, item: InFlight) -> Outcome:
        """``item`` was handed back while its claim was under way, or as it ended: its handler is not called, its claim
        is released, and its outcome, a deferral's (nothing reached the handler), no longer counts (not running)."""
        update_record(self._idempotency, "release", item)
        return NOT_CALLED

    def classify(self, error: BaseException) -> Outcome:
        """The outcome of an attempt that raised ``error`` (or that a batch handler reported failed with it)."""
        if isinstance(error, PoisonMessage):
            return Outcome(Verdict.POISON, error)
        if isinstance(error, DownstreamUnavailable):  # before non_retryable: a declared (Exception,) must not take it
            return Outcome(Verdict.UNAVAILABLE, error)
        if isinstance(error, self._non_retryable):  # declared with @worker(non_retryable=...): the DLQ at once
            return Outcome(Verdict.NON_RETRYABLE, error)
        return Outcome(Verdict.FAILED, error)

    def _guard(self, item: InFlight) -> Outcome | None:
        """Claim ``item``'s idempotency key before its handler runs; None (run it) when the claim is acquired, else
        what to do instead: a duplicate of work done already, another holder's live lease, or a store outage (the
        circuit's, as a downstream unavailable: never an attempt). A
        declared source's delivery the consumer cannot read (``message.unreadable``, consumer/sources.py) is poison
        before any claim: the DLQ with that reason, the handler never called."""
        if item.message.unreadable is not None:
            return Outcome(Verdict.POISON, PoisonMessage(item.message.unreadable))
        store, key = self._idempotency, item.key
        assert store is not None and key is not None
        waited = False
        while True:
            try:
                claim = store.claim(key, owner=item.owner, lease_seconds=self._lease.claim_seconds)
            except Exception as error:  # noqa: BLE001 (a store outage must not lose the message)
                # The table is down (throttled past botocore's retries, unreachable), not the message: no attempt was
                # made or spent. As a downstream that is unavailable, the circuit pauses receiving and the message is
                # handed back for the pause, its retry budget untouched where SQS allows it (a copy on a standard
                # queue).
                log.warning("idempotency_unavailable", extra=item.context.fields(error=str(error)))
                return Outcome(Verdict.UNAVAILABLE, DownstreamUnavailable(f"idempotency store unavailable: {error}"))
            if claim is Claim.COMPLETED:
                log.info("duplicate_skipped", extra=item.context.fields())
                self._metrics.count("duplicates_skipped")
                return ALREADY_DONE
            if claim is Claim.ACQUIRED:
                return None
            left = store.lease_left(key)
            if waited or left is None or left > DEFER_IN_PLACE_SECONDS or self._stop.wait(left + DEFER_SLACK_SECONDS):
                log.info("message_in_progress_elsewhere", extra=item.context.fields(holder_lease_seconds=left))
                return Outcome(Verdict.DEFERRED, after_seconds=left)
            # The holder's lease ends within seconds (an attempt given up on, a process gone): wait for it here,
            # holding the message (the heartbeat extends it), and claim again, rather than hand it back (a receive
            # spent, on FIFO).
            waited = True

    def _view(self, item: InFlight) -> Message:
        """The message as this attempt's handler sees it: its deadline, and the consumer's stop signal.

        The deadline is the one the heartbeat gives up at, or, once stopping, the drain's end if earlier (read
        when the handler asks, so it moves for handlers already running too). The attempt came with the message
        from its receive (:meth:`.Poller._received`): a message is attempted at most once per receive, and a retry
        is a new receive, a new message and a new attempt, so setting its deadline here changes nothing another
        attempt sees.
        """
        assert item.started_at is not None
        item.message.attempt.deadline = item.started_at + self.contract.message_timeout_seconds
        return item.message
