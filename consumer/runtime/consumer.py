"""The consumer: poll for free slots, run the handler, acknowledge, and shut down cleanly.

Threads and what each owns:

* pollers (``contract.pollers``): reserve free slots first, then long-poll for
  at most that many messages, so a received message always has a slot to start in;
* workers (``contract.concurrency``): run the handler under the idempotency guard;
* heartbeat: gives up on handlers past ``max_duration``, extends leases of running
  messages close to expiry (never past the attempt timeout or 12 h), renews
  idempotency leases and task protection, flushes metrics;
* acknowledger: sends every delete and visibility change (see ``acknowledger.py``).

Outcomes: return -> delete (batched); raise -> visibility set to a jittered
backoff from the receive count, or on the last allowed receive a move to the DLQ
with the error as reason; ``PoisonMessage`` -> moved to the DLQ at once with its
reason, then deleted. A message handed back (unstarted at shutdown, deferred to
another holder, still running at the drain timeout) on a standard queue is
requeued as a fresh copy that carries the receives spent on attempts
(``x-prior-receives``, trusted only on a copy the task role sent), because SQS
counts every receive toward the redrive policy, attempted or not. On a FIFO
queue, where a copy would jump its group, the hand-back is a visibility change,
and an unattempted message on its last allowed receive is moved to the DLQ with
the reason. A handler raising anything, ``SystemExit`` and ``KeyboardInterrupt``
included, has failed an attempt. Worker, poller and heartbeat threads are
daemons, so an idle consumer exits about a second after SIGTERM, without waiting
out a long poll.
"""

from __future__ import annotations

import enum
import logging
import os
import queue
import random
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.contract import SQS_MAX_VISIBILITY_SECONDS, TASK_ROLE_ID_ENV, ContractError, WorkerContract
from consumer.exit_codes import ExitCode
from consumer.message import Message, PoisonMessage
from consumer.runtime.acknowledger import Acknowledger, Ticket
from consumer.runtime.dead_letter import can_carry_receives, requeue_parameters, send_parameters
from consumer.runtime.idempotency import Claim, IdempotencyStore, InMemoryStore, idempotency_key
from consumer.runtime.observability import Metrics, trace_context
from consumer.runtime.protection import ScaleInProtection

log = logging.getLogger("consumer")

LONG_POLL_SECONDS = 20
RECEIVE_ERROR_MAX_BACKOFF_SECONDS = 20
TICK_SECONDS = 0.5
#: A busy poller waits at most this long for enough free slots to receive a full batch
#: (see Slots.reserve_up_to); 0.2 SQS requests per message needs full batches.
BATCH_FILL_SECONDS = 0.1
METRICS_FLUSH_SECONDS = 60
#: At shutdown, how long to wait for a poller handing on the messages of a receive answered meanwhile.
DISPATCH_WAIT_SECONDS = 2.0
#: The names the tests import; the codes themselves are consumer.exit_codes.ExitCode's.
EXIT_OK = ExitCode.OK
EXIT_STUCK = ExitCode.STUCK
#: An IAM RoleId as IAM writes it (the API's pattern and length limits).
ROLE_ID_PATTERN = re.compile(r"\w{16,128}", re.ASCII)


class State(enum.Enum):
    WAITING = "waiting"  # received, not started
    RUNNING = "running"
    TIMED_OUT = "timed_out"  # given up on: no extension, no delete; still holds its slot
    DONE = "done"
    RELEASED = "released"  # handed back at shutdown


@dataclass(eq=False)
class InFlight:
    message: Message
    received_at: float
    visible_until: float
    state: State = State.WAITING
    started_at: float | None = None
    key: str | None = None
    owner: str = ""  # unique per attempt, so a stale attempt can never touch a newer one's record
    ticket: Ticket = field(init=False)

    def __post_init__(self) -> None:
        self.ticket = Ticket(
            self.message.message_id, self.message.receipt_handle, is_running=lambda: self.state is State.RUNNING
        )


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


def task_role_id_from_env(environ: Mapping[str, str]) -> str | None:
    """The task role's RoleId the stack writes (``CONSUMER_TASK_ROLE_ID``), or None when unset (a bare local run)."""
    value = environ.get(TASK_ROLE_ID_ENV, "")
    if not value:
        return None
    if not ROLE_ID_PATTERN.fullmatch(value):
        # A typo here would silently restart every requeued message's retry budget: refuse instead.
        raise ContractError(
            TASK_ROLE_ID_ENV, "must be the task role's RoleId (16 to 128 letters, digits or underscores)", value
        )
    return value


class Slots:
    """Counts free handler slots; a timed-out handler keeps its slot until its thread returns."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._total = total
        self._free = total
        self._clock = clock
        self._condition = threading.Condition()

    def reserve_up_to(self, wanted: int, stop: threading.Event, fill_seconds: float = 0.0) -> int:
        """Take between 1 and ``wanted`` free slots, waiting for the first; 0 once ``stop`` is set.

        With fewer than ``wanted`` free (some handlers still running), wait up to
        ``fill_seconds`` longer for more to free up: a busy consumer then receives
        full batches instead of one message per ReceiveMessage call. An idle
        consumer has every slot free and never waits.
        """
        with self._condition:
            while self._free == 0 and not stop.is_set():
                self._condition.wait(TICK_SECONDS)
            wanted = min(wanted, self._total)
            deadline = self._clock() + fill_seconds
            while self._free < wanted and not stop.is_set() and (remaining := deadline - self._clock()) > 0:
                self._condition.wait(remaining)
            if stop.is_set():
                return 0
            taken = min(wanted, self._free)
            self._free -= taken
            return taken

    def release(self, count: int = 1) -> None:
        if count:
            with self._condition:
                self._free += count
                self._condition.notify_all()


class Consumer:
    """Consume ``queue_url`` with ``handler`` under ``contract``.

    ``task_role_id`` is the RoleId of the role the consumer sends with: only a copy
    a session of it sent is trusted to carry its spent receives (``x-prior-receives``);
    None trusts none, so a requeued copy's count restarts. ``rng`` draws the backoff
    jitter (a seeded ``random.Random`` makes it reproducible).

    Example::

        consumer = Consumer(boto3.client("sqs"), queue_url=url, dlq_url=dlq, contract=c, handler=handle)
        exit_code = consumer.run()   # until stop() (SIGTERM) or stuck handlers pile up
    """

    def __init__(
        self,
        client: Any,
        *,
        queue_url: str,
        dlq_url: str | None,
        contract: WorkerContract,
        handler: Callable[[Message], None],
        idempotency: IdempotencyStore | None = None,
        protection: ScaleInProtection | None = None,
        metrics: Metrics | None = None,
        task_role_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.queue_url = queue_url
        self.dlq_url = dlq_url
        self.contract = contract
        self.handler = handler
        self.idempotency = idempotency or InMemoryStore()
        self.protection = protection or ScaleInProtection(None)
        self.metrics = metrics or Metrics(dimensions={"Queue": queue_url.rsplit("/", 1)[-1]})
        self.task_role_id = task_role_id
        self._clock = clock
        self._wall_clock = wall_clock
        self._random = rng or random.Random()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: dict[int, InFlight] = {}
        # Pollers between a receive's answer and handing its messages on; shutdown waits for them
        # before it collects what to hand back, and refuses new ones once it has (``_closing``).
        self._dispatching = 0
        self._closing = False
        self._slots = Slots(contract.concurrency)
        self._work: queue.Queue[list[InFlight]] = queue.Queue()
        self._ack = Acknowledger(client, queue_url, on_deleted=lambda _t: self.metrics.count("deleted"))
        self.exit_code = EXIT_OK
        self._count_requests(client)

    # --- public -----------------------------------------------------------
    def stop(self) -> None:
        """Begin shutdown (safe from a signal handler): stop polling, drain, flush."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        """Process until :meth:`stop`; returns the process exit code."""
        threads = [
            threading.Thread(target=self._guarded(self._worker), name=f"worker-{i}", daemon=True)
            for i in range(self.contract.concurrency)
        ]
        threads += [
            threading.Thread(target=self._guarded(self._poll), name=f"poller-{i}", daemon=True)
            for i in range(self.contract.pollers)
        ]
        threads.append(threading.Thread(target=self._guarded(self._heartbeat), name="heartbeat", daemon=True))
        self._ack.start()
        for thread in threads:
            thread.start()
        log.info(
            "consumer_started",
            extra={
                "queue_url": self.queue_url,
                "concurrency": self.contract.concurrency,
                "pollers": self.contract.pollers,
                "task_role_id": self.task_role_id,
            },
        )
        if self.task_role_id is None:
            log.warning(
                "carried_receives_untrusted",
                extra={
                    "binding": TASK_ROLE_ID_ENV,
                    "effect": "unset: no x-prior-receives is trusted, a requeued copy's receive count restarts",
                },
            )
        while not self._stop.wait(TICK_SECONDS):
            pass
        self._shutdown()
        return self.exit_code

    def _guarded(self, target: Callable[[], None]) -> Callable[[], None]:
        """A thread that dies unexpectedly stops the process (exit 1) instead of leaving it half alive."""

        def run() -> None:
            try:
                target()
            except Exception:
                log.critical("thread_crashed", exc_info=True, extra={"thread_name": threading.current_thread().name})
                self.exit_code = ExitCode.FAILED
                self.stop()

        return run

    # --- polling ------------------------------------------------------------
    def _poll(self) -> None:
        error_backoff = 1.0
        while not self._stop.is_set():
            reserved = self._slots.reserve_up_to(self.contract.batch_size, self._stop, BATCH_FILL_SECONDS)
            if not reserved:
                continue
            try:
                response = self.client.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=reserved,
                    WaitTimeSeconds=LONG_POLL_SECONDS,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                error_backoff = 1.0
            except (ClientError, BotoCoreError) as error:
                self._slots.release(reserved)
                log.warning(
                    "receive_failed",
                    extra={"queue_url": self.queue_url, "error": str(error), "retry_in_seconds": error_backoff},
                )
                # Bounded exponential wait: an unreachable endpoint costs one call per wait, no busy loop.
                self._stop.wait(error_backoff)
                error_backoff = min(error_backoff * 2, RECEIVE_ERROR_MAX_BACKOFF_SECONDS)
                continue
            now = self._clock()
            lease_end = now + self.contract.visibility_timeout_seconds
            received = [
                InFlight(Message.from_sqs(raw, own_role_id=self.task_role_id), now, lease_end)
                for raw in response.get("Messages", [])
            ]
            self._slots.release(reserved - len(received))
            if not received:
                continue
            self.metrics.count("received", len(received))
            with self._lock:
                late = self._closing
                if not late:
                    self._dispatching += 1
                    for item in received:
                        self._in_flight[id(item)] = item
                    busy = len(self._in_flight) == len(received)
            if late:
                # Answered after shutdown collected its hand-backs: they come back after their lease.
                self._slots.release(len(received))
                log.warning("received_after_shutdown", extra={"count": len(received), "queue_url": self.queue_url})
                continue
            try:
                if self._stop.is_set():
                    # A long poll answered during shutdown: nothing of it may start now.
                    self._release(received, "shutdown")
                    continue
                if busy:
                    self.protection.busy()
                for group in self._groups(received):
                    self._work.put(group)
            finally:
                with self._lock:
                    self._dispatching -= 1

    def _groups(self, received: list[InFlight]) -> list[list[InFlight]]:
        """Standard queue: one task per message. FIFO: one task per message group, in order."""
        if not self.contract.fifo:
            return [[item] for item in received]
        groups: OrderedDict[str, list[InFlight]] = OrderedDict()
        for item in received:
            groups.setdefault(item.message.attributes.get("MessageGroupId", ""), []).append(item)
        return list(groups.values())

    # --- processing -----------------------------------------------------------
    def _worker(self) -> None:
        while True:
            group = self._work.get()
            for index, item in enumerate(group):
                if self._stop.is_set():
                    self._release(group[index:], "shutdown")
                    break
                succeeded = self._process(item)
                if not succeeded and self.contract.fifo:
                    # Order within a group: nothing after a failed message may run before it.
                    self._release(group[index + 1 :], "fifo_group_blocked")
                    break

    def _context(self, message: Message) -> dict[str, Any]:
        """The fields every log line about ``message`` carries, trace ids included."""
        context: dict[str, Any] = {
            "message_id": message.message_id,
            "receive_count": message.receive_count,
            "queue_url": self.queue_url,
        }
        return context | trace_context(message.message_attributes, message.attributes)

    def _process(self, item: InFlight) -> bool:
        message = item.message
        context = self._context(message)
        with self._lock:
            if item.state is not State.WAITING:
                return False
            item.state, item.started_at = State.RUNNING, self._clock()
            item.key = idempotency_key(message)
            item.owner = f"{self.owner}:{uuid.uuid4().hex[:12]}"
        try:
            claim = self.idempotency.claim(
                item.key, owner=item.owner, lease_seconds=self.contract.visibility_timeout_seconds
            )
        except Exception as error:  # noqa: BLE001 (a store outage must not lose the message)
            log.warning("idempotency_unavailable", extra={**context, "error": str(error)})
            return self._finish(item, context, self._retry, error)
        if claim is Claim.COMPLETED:
            log.info("duplicate_skipped", extra=context)
            self.metrics.count("duplicates_skipped")
            return self._finish(item, context, self._succeed, None, complete=False)
        if claim is Claim.IN_PROGRESS:
            log.info("message_in_progress_elsewhere", extra=context)
            return self._finish(item, context, self._retry, None, release_key=False)

        started = self._clock()
        try:
            self.handler(message)
            outcome, error = self._succeed, None
        except PoisonMessage as poison:
            outcome, error = self._poison, poison
        except BaseException as failure:  # noqa: BLE001 (any handler error means "retry later")
            # SystemExit, KeyboardInterrupt and the like too: raised by a handler on this worker thread
            # (signals reach only the main thread), they would end the thread with its slot still taken
            # and strand the message; as a failed attempt it backs off and, on its last receive, goes
            # to the DLQ like any other failure.
            outcome, error = self._retry, failure
        self.metrics.timing("duration", (self._clock() - started) * 1000)
        return self._finish(item, context, outcome, error)

    def _finish(
        self, item: InFlight, context: dict, outcome: Callable, error: BaseException | None, **options: bool
    ) -> bool:
        try:
            with self._lock:
                if item.state is not State.RUNNING:
                    # Given up on (timeout) or handed back at shutdown: its result no longer counts.
                    log.warning("handler_finished_after_giving_up", extra={**context, "state": item.state.value})
                    return False
                item.state = State.DONE
            return outcome(item, context, error, **options)
        finally:
            self._slots.release(1)
            with self._lock:
                self._in_flight.pop(id(item), None)
                idle = not self._in_flight
            if idle:
                self.protection.idle()

    def _succeed(self, item: InFlight, context: dict, _error: object, complete: bool = True) -> bool:
        if complete:
            self._idempotency_call("complete", item, keep_seconds=self.contract.source_retention_seconds)
        self._ack.delete(item.ticket)
        self.metrics.count("processed")
        log.info("message_processed", extra=context)
        return True

    def _poison(self, item: InFlight, context: dict, error: PoisonMessage, **_: bool) -> bool:
        self._idempotency_call("release", item)
        self.metrics.count("poisoned")
        if self._move_to_dlq(item, context, error.reason, "poison"):
            return True  # moved: the group may go on, nothing is waiting for this message
        self._backoff(item, context)
        return False

    def _retry(self, item: InFlight, context: dict, error: BaseException | None, release_key: bool = True) -> bool:
        if release_key:
            self._idempotency_call("release", item)
        self.metrics.count("failed" if error is not None else "deferred")
        receive_count = item.message.receive_count
        if error is not None:
            log.warning("handler_failed", extra={**context, "error": f"{type(error).__name__}: {error}"})
            if receive_count >= self.contract.max_receive_count and self.dlq_url:
                reason = f"failed {receive_count} times; last error: {type(error).__name__}: {error}"
                if self._move_to_dlq(item, context, reason, "exhausted"):
                    return True  # moved: as with poison, the rest of a FIFO group may go on
            elif receive_count == self.contract.max_receive_count - 1:
                log.warning("message_one_receive_from_dlq", extra=context)
        elif receive_count >= self.contract.max_receive_count or self._requeues(item.message):
            # Deferred (another holder's lease is live): not an attempt, so it must cost the message
            # neither its retry budget nor, on its last receive, its place in the queue.
            self._hand_back(item, "deferred", delay=self._backoff_delay(item))
            return False
        self._backoff(item, context)
        return False

    def _backoff_delay(self, item: InFlight) -> int:
        cap = self.contract.retry_backoff_seconds(item.message.receive_count)
        # Equal jitter: at least half the cap, so retries of a burst spread without coming back early.
        return int(self._random.uniform(cap / 2, cap) + 0.5)

    def _backoff(self, item: InFlight, context: dict) -> None:
        delay = self._backoff_delay(item)
        budget = int(item.received_at + SQS_MAX_VISIBILITY_SECONDS - self._clock()) - 1
        self._ack.change_visibility(item.ticket, max(0, min(delay, budget)), "backoff")
        log.info("message_backoff", extra={**context, "delay_seconds": delay})

    def _requeues(self, message: Message) -> bool:
        """Whether a hand-back of ``message`` is a requeued copy that keeps its retry budget (standard queues)."""
        return not self.contract.fifo and can_carry_receives(message)

    def _hand_back(self, item: InFlight, why: str, delay: int = 0, attempted: bool = False) -> None:
        """Return a message to the queue without spending the retry budget on a receive that was no attempt.

        SQS counts every receive toward ``maxReceiveCount``, attempted or not, so a plain
        hand-back (visibility change) costs the message one of its attempts; on its last
        allowed receive it spends the backstop receives the redrive policy keeps for
        receives the consumer never sees, and SQS then moves it to the DLQ silently,
        never tried. So on a standard queue every hand-back is a fresh copy (same body
        and attributes, so the same idempotency key) carrying the receives spent so far
        (``x-prior-receives``, this one only if ``attempted``), sent before the original
        is deleted. A FIFO queue, where a copy would jump its group's order, keeps the
        plain hand-back, and on the last allowed receive moves an unattempted message
        to the DLQ with the reason instead. If a send fails, the plain hand-back remains.
        """
        message = item.message
        last = message.receive_count >= self.contract.max_receive_count
        context = self._context(message)
        if self.contract.fifo:
            if last and not attempted:
                reason = (
                    f"not attempted: handed back ({why}) on its last allowed receive"
                    f" ({message.receive_count} of {self.contract.max_receive_count}); FIFO order forbids a requeue"
                )
                if self._move_to_dlq(item, context, reason, "unattempted"):
                    return
        elif (last or self._requeues(message)) and self._requeue(item, context, why, delay, attempted):
            return
        self._ack.change_visibility(item.ticket, delay, "release")

    def _requeue(self, item: InFlight, context: dict, why: str, delay: int, attempted: bool) -> bool:
        """Send a copy to the source, then delete the original; False if the send failed."""
        params = requeue_parameters(item.message, queue_url=self.queue_url, delay_seconds=delay, attempted=attempted)
        fields = {**context, "why": why}
        if not self._send_then_delete(item, params, "requeue_failed", "message_requeued", fields, logging.INFO):
            return False
        self.metrics.count("requeued")
        return True

    def _move_to_dlq(self, item: InFlight, context: dict, reason: str, kind: str) -> bool:
        """Send to the DLQ, then delete from the source; False (nothing deleted) if the send failed."""
        if not self.dlq_url:
            log.error("dlq_unknown", extra={**context, "reason": reason})
            return False
        params = send_parameters(
            item.message, dlq_url=self.dlq_url, reason=reason, kind=kind, source_queue_url=self.queue_url
        )
        return self._send_then_delete(
            item, params, "dlq_send_failed", "message_moved_to_dlq", {**context, "kind": kind, "reason": reason}
        )

    def _send_then_delete(
        self, item: InFlight, params: dict, failed: str, done: str, fields: dict, level: int = logging.WARNING
    ) -> bool:
        """The message is deleted only once SQS has confirmed its copy: at worst in two places, never in none."""
        try:
            self.client.send_message(**params)
        except (ClientError, BotoCoreError) as error:
            log.error(failed, extra={**fields, "error": str(error)})
            return False
        self._ack.delete(item.ticket)
        log.log(level, done, extra=fields)
        return True

    def _release(self, items: list[InFlight], why: str) -> None:
        """Hand messages that will not start here back to the queue at once."""
        for item in items:
            with self._lock:
                if item.state is not State.WAITING:
                    continue
                item.state = State.RELEASED
                self._in_flight.pop(id(item), None)
            self._hand_back(item, why)
            self._slots.release(1)
            log.info("message_released", extra={"message_id": item.message.message_id, "why": why})
        with self._lock:
            idle = not self._in_flight
        if idle:
            self.protection.idle()

    def _idempotency_call(self, operation: str, item: InFlight, **kwargs: int) -> None:
        try:
            getattr(self.idempotency, operation)(item.key, owner=item.owner, **kwargs)
        except Exception as error:  # noqa: BLE001 (the message outcome stands; the record expires)
            log.warning(
                "idempotency_update_failed",
                extra={"operation": operation, "message_id": item.message.message_id, "error": str(error)},
            )

    # --- heartbeat ------------------------------------------------------------
    def _heartbeat(self) -> None:
        last_beat = last_flush = self._clock()
        while not self._closed.wait(TICK_SECONDS):
            now = self._clock()
            self._give_up_overruns(now)
            # Busy/idle are decided on several threads; reconciling here means a late idle() can never
            # leave a busy task unprotected for longer than one tick. Both calls are no-ops when unchanged.
            with self._lock:
                has_work = bool(self._in_flight)
            self.protection.busy() if has_work else self.protection.idle()
            if now - last_beat >= self.contract.heartbeat_interval_seconds:
                last_beat = now
                self._extend_leases(now)
                self.protection.refresh()
            if now - last_flush >= METRICS_FLUSH_SECONDS:
                last_flush = now
                self.metrics.flush()

    def _give_up_overruns(self, now: float) -> None:
        with self._lock:
            overrun = [
                i
                for i in self._in_flight.values()
                if i.state is State.RUNNING
                and i.started_at is not None
                and now - i.started_at > self.contract.message_timeout_seconds
            ]
            for item in overrun:
                item.state = State.TIMED_OUT
            stuck = sum(1 for i in self._in_flight.values() if i.state is State.TIMED_OUT)
        for item in overrun:
            self.metrics.count("timed_out")
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
            self.exit_code = EXIT_STUCK
            self.stop()

    def _extend_leases(self, now: float) -> None:
        with self._lock:
            running = [i for i in self._in_flight.values() if i.state is State.RUNNING and i.started_at is not None]
        for item in running:
            assert item.started_at is not None
            target = lease_extension(
                self.contract,
                now=now,
                received_at=item.received_at,
                started_at=item.started_at,
                visible_until=item.visible_until,
            )
            if target is None:
                continue

            def extended(sent_at: float, item: InFlight = item, target: int = target) -> None:
                item.visible_until = sent_at + target

            self._ack.change_visibility(item.ticket, target, "extend", on_sent=extended)
            self._idempotency_call("renew", item, lease_seconds=target)
            self.metrics.count("visibility_extensions")

    # --- shutdown -----------------------------------------------------------
    def _shutdown(self) -> None:
        log.info("consumer_stopping", extra={"in_flight": len(self._in_flight)})
        # Messages still queued for a worker have not started: hand them back now.
        while True:
            try:
                self._release(self._work.get_nowait(), "shutdown")
            except queue.Empty:
                break
        deadline = self._clock() + self.contract.drain_timeout_seconds
        while self._clock() < deadline:
            with self._lock:
                # DONE stays in flight until its outcome (delete, backoff, DLQ move or requeue) has been
                # handed to the acknowledger: exiting earlier would cut a DLQ move between its send and
                # its delete, and the message would come back to be moved a second time.
                busy = [i for i in self._in_flight.values() if i.state in (State.RUNNING, State.DONE)]
            if not busy:
                break
            time.sleep(0.05)
        with self._lock:
            self._closing = True
            dispatching = self._dispatching
        # A poller handing on (or back) what a receive brought: brief, never a long poll; bounded, as a
        # requeue's send can retry against a dead endpoint, within the 5 s kept for flushing.
        give_up = self._clock() + DISPATCH_WAIT_SECONDS
        while dispatching and self._clock() < give_up:
            time.sleep(0.01)
            with self._lock:
                dispatching = self._dispatching
        with self._lock:
            # (item, attempted): a handler still running at the drain timeout had its attempt.
            unfinished = [
                (i, i.state is State.RUNNING)
                for i in self._in_flight.values()
                if i.state in (State.RUNNING, State.WAITING)
            ]
            for item, _ in unfinished:
                item.state = State.RELEASED
        for item, attempted in unfinished:
            # Past the drain time: hand back now rather than let the lease run out after SIGKILL.
            self._hand_back(item, "drain_timeout", attempted=attempted)
            log.warning("message_handed_back", extra={"message_id": item.message.message_id})
        self._ack.close()
        self._closed.set()
        self.protection.close()
        self.metrics.flush()
        log.info("consumer_stopped", extra={"exit_code": self.exit_code, "handed_back": len(unfinished)})

    def _count_requests(self, client: Any) -> None:
        events = getattr(getattr(client, "meta", None), "events", None)
        if events is not None:
            events.register("before-send.sqs.*", lambda **_: self.metrics.count("sqs_requests"))
