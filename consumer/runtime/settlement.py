"""What happens to a message once its fate is known: one outcome type, one place that settles it.

Outcomes: return -> delete (batched; at once on the last allowed receive); raise -> visibility set to a jittered backoff
from the receive count, or on the last allowed receive a move to the DLQ with the
error as reason; ``PoisonMessage`` (or a type the handler declared ``non_retryable``,
with the error as reason) -> moved to the DLQ at once with its reason, then
deleted; another holder's lease is live -> deferred, handed back, not an attempt;
``DownstreamUnavailable`` -> the circuit opens (:mod:`.circuit`) and the message is handed
back for the pause, not an attempt either. A
handler raising anything, ``SystemExit`` and ``KeyboardInterrupt`` included, has
failed an attempt. An exception is written into reasons and logs by :class:`.failures.FailureText`
(its text left out where the handler declared ``error_text="omit"``); a ``PoisonMessage`` or
``DownstreamUnavailable`` reason is the handler author's own words and is written as given.

Handing back is the one way a message returns to the queue without an attempt
settling it (unstarted at shutdown, deferred to another holder, behind a failed
message in its FIFO group, still running at the drain timeout): on a standard queue
it is requeued as a fresh copy that carries the receives spent on attempts
(``x-prior-receives``, trusted only on a copy the task role sent), because SQS counts
every receive toward the redrive policy, attempted or not. On a FIFO queue, where a
copy would jump its group, the hand-back is a visibility change, and an unattempted
message on its last allowed receive is moved to the DLQ with the reason. See
:meth:`Settlement.hand_back`.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from consumer.limits import SHUTDOWN_FLUSH_SECONDS, SQS_MAX_VISIBILITY_SECONDS
from consumer.message import DownstreamUnavailable, Message, PoisonMessage
from consumer.runtime.acknowledger import Acks
from consumer.runtime.completions import Completions
from consumer.runtime.dead_letter import can_carry_receives, requeue_parameters, send_parameters
from consumer.runtime.failures import FailureText
from consumer.runtime.inflight import InFlight, State, update_record
from consumer.runtime.polling import Flow
from consumer.runtime.wiring import Queues, Shared

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)


class AttemptSpans(Protocol):
    """What the handler runners ask of a tracer (tracing_spans.AttemptTracer, which imports this module and
    opentelemetry, so it is imported only when tracing is on): each attempt run in its span."""

    def process(self, item: InFlight, attempt: Callable[[InFlight], Outcome], settle: Callable[..., bool]) -> bool: ...

    async def process_async(self, item: InFlight, run: Callable[[InFlight], Awaitable[bool]]) -> bool: ...

    def run_batch(self, items: list[InFlight], run: Callable[[list[InFlight]], None]) -> None: ...


class Verdict(enum.Enum):
    SUCCEEDED = "succeeded"  # the handler returned: delete, complete the idempotency record
    ALREADY_DONE = "already_done"  # the idempotency record is complete: delete, nothing to record
    FAILED = "failed"  # retry after a backoff, or to the DLQ once the receives are exhausted
    DEFERRED = "deferred"  # another holder's lease is live: no attempt, hand back after a backoff
    POISON = "poison"  # to the DLQ at once with its reason; the retry budget is not spent
    NON_RETRYABLE = "non_retryable"  # a type declared in @worker(non_retryable=...): as POISON, the error as reason
    UNAVAILABLE = "unavailable"  # the downstream is down: open the circuit, hand back, no attempt spent


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended; ``error`` is what failed it (FAILED, POISON); ``after_seconds``, of a DEFERRED one, is
    when the holder's lease ends, from now (None: unknown)."""

    verdict: Verdict
    error: BaseException | None = None
    after_seconds: float | None = None


SUCCEEDED = Outcome(Verdict.SUCCEEDED)
ALREADY_DONE = Outcome(Verdict.ALREADY_DONE)


@contextlib.contextmanager
def underway(handing_back: set[int], item: InFlight) -> Iterator[None]:
    """``item`` in ``handing_back`` while its hand-back runs: released unstarted, out of the in-flight table, and its
    copy or DLQ move and its delete (or its visibility change) not yet at the acks. Added before the release, so no
    instant sees it in neither place."""
    handing_back.add(id(item))
    try:
        yield
    finally:
        handing_back.discard(id(item))


class Settlement:
    """Turns outcomes into SQS calls (through the acknowledger, or a send for a copy) and frees the slot.

    ``queues``: where a copy or a DLQ move is sent. ``ack``: the deletes and visibility changes (the acknowledger's, or
    a Lambda invocation's report). ``flow``: the slot a
    settled message frees, the circuit its outcome answers. ``completions``: the processed messages' idempotency
    completions, batched, and the store its records are released and renewed in. ``rng`` draws the backoff jitter (a
    seeded ``random.Random`` makes it reproducible). ``describe`` writes an exception into a reason or a log line
    (default: its type and text).
    """

    #: The attempts' tracer: a traced consumer's settlement (tracing_spans.TracedSettlement) carries it.
    tracer: AttemptSpans | None = None

    def __init__(
        self,
        shared: Shared,
        *,
        queues: Queues,
        ack: Acks,
        flow: Flow,
        completions: Completions,
        rng: random.Random,
        describe: Callable[[BaseException], str] = FailureText(),
    ) -> None:
        self.client = queues.client
        # These two names tell the runtime call recorder (tests) which queue a send is for.
        self.queue_url = queues.queue_url
        self.dlq_url = queues.dlq_url
        self.contract = shared.contract
        self._ack = ack
        self._table = shared.table
        self._slots = flow.slots
        self._idempotency = completions.store
        self._metrics = shared.metrics
        self._protection = shared.protection
        self._clock = shared.clock.monotonic
        self._wall_clock = shared.clock.time  # what a DLQ reason records (failed_at)
        self._random = rng
        self.circuit = flow.circuit
        self._describe = describe
        # Processed messages' completions and message_processed lines, batched (the acknowledger's hooks write them).
        self._completions = completions
        self.handing_back: set[int] = set()  # underway(): a Lambda invocation waits for them (invocation.py)

    def settle(self, item: InFlight, outcome: Outcome) -> bool:
        """Act on a started message's outcome and free its slot; True if it left the queue (deleted or moved).

        A FIFO group's runner goes on with the rest of the message's group only after True.
        """
        try:
            if outcome.verdict is not Verdict.UNAVAILABLE:  # the downstream answered, unless nothing reached it
                answered = outcome.verdict not in (Verdict.DEFERRED, Verdict.ALREADY_DONE) or None
                self.circuit.answered(item.message.message_id, answered)
            verdict = outcome.verdict
            done = verdict is Verdict.SUCCEEDED or verdict is Verdict.ALREADY_DONE
            found = self._table.finish(item, late=done)
            if found is State.TIMED_OUT and done:
                return self._late_success(item, complete=verdict is Verdict.SUCCEEDED)
            if found is not State.RUNNING:
                # Given up on (a failure past max_duration), or handed back at shutdown: its result no longer counts.
                log.warning("handler_finished_after_giving_up", extra=item.context.fields(state=found.value))
                return False
            if verdict is Verdict.SUCCEEDED or verdict is Verdict.ALREADY_DONE:
                return self._succeed(item, complete=verdict is Verdict.SUCCEEDED)
            if verdict is Verdict.POISON:
                assert isinstance(outcome.error, PoisonMessage)
                return self._poison(item, outcome.error.reason, "poison")
            if verdict is Verdict.NON_RETRYABLE:
                assert outcome.error is not None
                return self._poison(item, self._describe(outcome.error), "non_retryable")
            if verdict is Verdict.DEFERRED:
                return self._defer(item, outcome.after_seconds)
            if verdict is Verdict.UNAVAILABLE:
                assert isinstance(outcome.error, DownstreamUnavailable)
                return self._unavailable(item, outcome.error)
            assert outcome.error is not None
            return self._fail(item, outcome.error)
        finally:
            self._slots.release(1)
            if item.state is not State.DELETING:  # else held until its delete is sent (_let_go)
                self._let_go(item)

    def hand_back_unstarted(self, items: list[InFlight], why: str, delay: int = 0, copy: bool = False) -> None:
        """Hand messages that will not start here back to the queue at once, freeing their slots (each
        :func:`underway` meanwhile). ``delay`` and ``copy``: as :meth:`hand_back` (the circuit's hand-backs use both)."""
        for item in items:
            with underway(self.handing_back, item):
                if not self._table.release_waiting(item):
                    continue
                self.hand_back(item, why, delay, copy=copy)
            self._slots.release(1)
            log.info("message_released", extra={"message_id": item.message.message_id, "why": why})
        if self._table.is_idle():
            self._protection.idle()

    def hand_back(self, item: InFlight, why: str, delay: int = 0, attempted: bool = False, copy: bool = False) -> None:
        """Return a message to the queue without spending the retry budget on a receive that was no attempt.

        SQS counts every receive toward ``maxReceiveCount``, attempted or not, so a plain hand-back (visibility change)
        costs the message one of its attempts; on its last allowed receive it spends the backstop receives the redrive
        policy keeps for receives the consumer never sees, and SQS then moves it to the DLQ silently, never tried. So on
        a standard queue every hand-back is a fresh copy (same body and attributes, so the same idempotency key)
        carrying the receives spent so far (``x-prior-receives``, this one only if ``attempted``), sent before the
        original is deleted. A FIFO queue, where a copy would jump its group's order, keeps the plain hand-back, and on
        the last allowed receive moves an unattempted message to the DLQ with the reason instead. If a send fails, the
        plain hand-back remains. ``copy`` copies even a message that cannot carry its count (its budget then restarts):
        the circuit's hand-backs, which a long outage would otherwise repeat until SQS's redrive. A message whose lease
        ran out is back in the queue, perhaps received elsewhere: nothing is sent (a copy would run it twice).
        """
        message = item.message
        if item.visible_until <= self._clock():
            log.info("message_lease_lapsed", extra={"message_id": message.message_id, "why": why})
            return
        last = message.receive_count >= self.contract.max_receive_count
        if self.contract.fifo:
            if last and not attempted:
                reason = (
                    f"not attempted: handed back ({why}) on its last allowed receive"
                    f" ({message.receive_count} of {self.contract.max_receive_count}); FIFO order forbids a requeue"
                )
                if self._move_to_dlq(item, reason, "unattempted"):
                    return
        elif (last or copy or self._copies(message)) and self._send_copy(item, why, delay, attempted):
            return
        self._ack.change_visibility(item.ticket, delay, "release")

    def hand_back_at_drain(self, item: InFlight, *, attempted: bool) -> None:
        """Hand back a message whose handler still runs (or was cancelled) when the drain ends. Its idempotency lease
        is cut to the flush that ends the process (the handler dies with it): the next receive's claim then waits
        seconds for it, not the whole lease the heartbeat kept renewing."""
        update_record(self._idempotency, "renew", item, lease_seconds=SHUTDOWN_FLUSH_SECONDS)
        self.hand_back(item, "drain_timeout", attempted=attempted)

    # --- outcomes ---------------------------------------------------------------
    def _late_success(self, item: InFlight, complete: bool) -> bool:
        """A handler that returned successfully after it was given up on (past max_duration): its work is done, so
        its completion is recorded whatever happens next; while its lease lives its message is deleted at once (the
        heartbeat extends it no more). Once its lease has run out, another receive may hold it: no delete then (that
        holder's claim finds the work done)."""
        self._completions.add(item, complete)
        lease_left = item.visible_until - self._clock()
        log.warning("handler_succeeded_late", extra=item.context.fields(lease_left_seconds=round(lease_left, 3)))
        if lease_left <= 0:
            self._completions.record([item.ticket])  # at once: no delete of this receive will carry it
            return False
        self._ack.delete(item.ticket, at_once=True)
        self._metrics.count("processed")
        return True

    def _succeed(self, item: InFlight, complete: bool) -> bool:
        # ``complete``: the handler ran (not for a duplicate skipped). The completion is batched, and always lands
        # before the delete can (see completions.py).
        self._completions.add(item, complete)
        self._delete(item)
        self._metrics.count("processed")
        return True

    def _poison(self, item: InFlight, reason: str, kind: str) -> bool:
        update_record(self._idempotency, "release", item)
        self._metrics.count("poisoned")  # a declared non-retryable error too: both are the handler's verdict
        if self._move_to_dlq(item, reason, kind):
            return True  # moved: the group may go on, nothing is waiting for this message
        self._back_off(item)
        return False

    def _fail(self, item: InFlight, error: BaseException) -> bool:
        update_record(self._idempotency, "release", item)
        self._metrics.count("failed")
        receive_count = item.message.receive_count
        described = self._describe(error)
        log.warning("handler_failed", extra=item.context.fields(error=described))
        if receive_count >= self.contract.max_receive_count and self.dlq_url:
            reason = f"failed {receive_count} times; last error: {described}"
            if self._move_to_dlq(item, reason, "exhausted"):
                return True  # moved: as with poison, the rest of a FIFO group may go on
        elif receive_count == self.contract.max_receive_count - 1:
            log.warning("message_one_receive_from_dlq", extra=item.context.fields())
        self._back_off(item)
        return False

    def _unavailable(self, item: InFlight, error: DownstreamUnavailable) -> bool:
        """The downstream is down, not the message: open the circuit and hand the message back for the pause.

        Not an attempt: on a standard queue always as a copy carrying only the receives spent before this one,
        because the original's ApproximateReceiveCount would keep growing with every outage and SQS's redrive
        would move it, never tried, after ``max_receive_count + 2`` receives (see :meth:`hand_back`).
        """
        update_record(self._idempotency, "release", item)
        pause = self.circuit.open(error.retry_after_seconds, item.message.message_id)
        log.info("downstream_unavailable", extra=item.context.fields(error=error.reason, pause_seconds=pause))
        self._metrics.count("circuit_handed_back")
        self.hand_back(item, "circuit_open", delay=math.ceil(pause), copy=True)
        return False

    def _defer(self, item: InFlight, holder_lease_seconds: float | None) -> bool:
        """Another holder's lease is live: hand the message back until it ends (the claim's answer said when; else
        the retry backoff), never sooner than the backoff, so a message deferred again and again backs off."""
        # The other holder keeps the idempotency lease: nothing of ours to release.
        self._metrics.count("deferred")
        delay = max(self._backoff_delay(item), math.ceil(holder_lease_seconds or 0))
        if item.message.receive_count >= self.contract.max_receive_count or self._copies(item.message):
            # Deferred (another holder's lease is live): not an attempt, so it must cost the message
            # neither its retry budget nor, on its last receive, its place in the queue.
            self.hand_back(item, "deferred", delay=delay)
            return False
        self._back_off(item, delay)
        return False

    def _backoff_delay(self, item: InFlight) -> int:
        cap = self.contract.retry_backoff_seconds(item.message.receive_count)
        # Equal jitter: at least half the cap, so retries of a burst spread without coming back early.
        return int(self._random.uniform(cap / 2, cap) + 0.5)

    def _back_off(self, item: InFlight, delay: int | None = None) -> None:
        """A spent attempt: the message comes back after a jittered backoff (a visibility change), or ``delay``."""
        delay = self._backoff_delay(item) if delay is None else delay
        budget = int(item.received_at + SQS_MAX_VISIBILITY_SECONDS - self._clock()) - 1
        self._ack.change_visibility(item.ticket, max(0, min(delay, budget)), "backoff")
        log.info("message_backoff", extra=item.context.fields(delay_seconds=delay))

    # --- how a message leaves: a copy first, then the delete ------------------------
    def _delete(self, item: InFlight) -> None:
        """Delete a message that is done with (processed, already done, or copied to the DLQ or the source).

        Batched, so a delete waits up to ``DELETE_FLUSH_SECONDS`` for others to share its call (the cost of about
        0.2 SQS requests per message depends on it), the message held and extended meanwhile (DELETING: its batch
        writes its completions first, which a slow table can stretch past the lease); but at once when its lease is
        within the heartbeat's threshold (it would need an extension), and on or past its last allowed receive.
        A delete that never lands (the task stopped or killed while it waited) brings the message back after its
        lease, one receive further; past ``max_receive_count`` only the redrive policy's backstop receives are
        left, and SQS then moves the message to the DLQ itself, without a reason, though it was done with
        (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html).
        Such messages are rare (retried ones, duplicates): one call each costs nothing measurable.
        """
        last = item.message.receive_count >= self.contract.max_receive_count
        lease_low = item.visible_until - self._clock() <= self.contract.heartbeat_threshold_seconds
        at_once = last or lease_low
        if not at_once and self._table.deleting(item):
            item.ticket.on_sent = partial(self._let_go, item)  # held until its batch is sent
        self._ack.delete(item.ticket, at_once=at_once)

    def _let_go(self, item: InFlight) -> None:
        """Its delete is sent: out of the table, and the task unprotected if nothing else is in flight."""
        if self._table.remove(item):
            self._protection.idle()

    def _copies(self, message: Message) -> bool:
        """Whether a hand-back of ``message`` is a requeued copy that keeps its retry budget (standard queues)."""
        return not self.contract.fifo and can_carry_receives(message)

    def _send_copy(self, item: InFlight, why: str, delay: int, attempted: bool) -> bool:
        """Send a copy to the source, then delete the original; False if the send failed."""
        params = requeue_parameters(item.message, queue_url=self.queue_url, delay_seconds=delay, attempted=attempted)
        fields = item.context.fields(why=why)
        if not self._send_then_delete(item, params, "requeue_failed", "message_requeued", fields, logging.INFO):
            return False
        self._metrics.count("requeued")
        return True

    def _move_to_dlq(self, item: InFlight, reason: str, kind: str) -> bool:
        """Send to the DLQ, then delete from the source; False (nothing deleted) if the send failed."""
        if not self.dlq_url:
            log.error("dlq_unknown", extra=item.context.fields(reason=reason))
            return False
        params = send_parameters(
            item.message,
            dlq_url=self.dlq_url,
            reason=reason,
            kind=kind,
            source_queue_url=self.queue_url,
            failed_at=self._wall_clock(),
        )
        fields = item.context.fields(kind=kind, reason=reason)
        if not self._send_then_delete(item, params, "dlq_send_failed", "message_moved_to_dlq", fields):
            return False
        # Every move, whatever its kind: the DlqDepth alarm reads it, so a page does not wait for the metrics of a
        # DLQ that SQS let sleep (idle for 6 hours, up to 15 minutes to publish again once woken).
        self._metrics.count("dead_lettered")
        return True

    def _send_then_delete(
        self,
        item: InFlight,
        params: dict[str, Any],
        failed: str,
        done: str,
        fields: dict[str, Any],
        level: int = logging.WARNING,
    ) -> bool:
        """The message is deleted only once SQS has confirmed its copy: at worst in two places, never in none."""
        try:
            self.client.send_message(**params)
        except (ClientError, BotoCoreError) as error:
            log.error(failed, extra={**fields, "error": str(error)})
            return False
        self._delete(item)
        log.log(level, done, extra=fields)
        return True
