"""The consumer: wires the parts together, runs their threads, and shuts down cleanly.

Threads and what each runs:

* pollers (``contract.pollers``, :mod:`.polling`): reserve free slots first (handlers, plus a lookahead
  of what short handlers clear in a second), then long-poll for at most that many messages;
* handler threads (``contract.concurrency``, :mod:`.processing`; one event loop for an ``async def`` handler,
  :mod:`.coroutines`): run the handler under the idempotency guard; :mod:`.settlement` turns each outcome into SQS
  calls;
* heartbeat (:mod:`.heartbeat`): gives up on handlers past ``max_duration``, extends leases
  of running messages close to expiry (never past the attempt timeout or 12 h), renews
  idempotency leases and task protection, flushes metrics;
* acknowledger: sends every delete and visibility change (see ``acknowledger.py``).

The pollers and the heartbeat record their progress for ``python -m consumer health`` (:mod:`.liveness`).

Every change of a message's state goes through one lock, the :class:`.inflight.InFlightTable`'s.
Handler, poller and heartbeat threads are daemons, so an idle consumer exits about a
second after SIGTERM, without waiting out a long poll.

Each part takes :class:`.wiring.Shared` (the contract, the clock, the stop, the in-flight table, and what the outside
reads: metrics, task protection, liveness) and the few other things it needs (:mod:`.wiring`).
"""

from __future__ import annotations

import inspect
import logging
import os
import queue
import random
import re
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from consumer.contract import TASK_ROLE_ID_ENV, WorkerContract
from consumer.declaration import check_rate_fits_the_lease, max_rate_of
from consumer.errors import ContractError
from consumer.exit_codes import ExitCode
from consumer.limits import EVENT_LOOP_STALL_SECONDS
from consumer.runtime.acknowledger import Acknowledger
from consumer.runtime.batches import BatchRunner
from consumer.runtime.circuit import Circuit, RateLimit
from consumer.runtime.clients import renewal_threads
from consumer.runtime.clock import SYSTEM, Clock
from consumer.runtime.completions import Completions
from consumer.runtime.coroutines import EVENT_LOOP, AsyncRunner
from consumer.runtime.failures import FailureText
from consumer.runtime.heartbeat import Heartbeat, Renewals
from consumer.runtime.idempotency import IdempotencyStore, InMemoryStore
from consumer.runtime.inflight import InFlight, InFlightTable
from consumer.runtime.liveness import ACKNOWLEDGER_LOOP, HEARTBEAT_LOOP, Liveness, poller_loop
from consumer.runtime.observability import Metrics
from consumer.runtime.polling import (
    BATCH_FILL_SECONDS,
    LONG_POLL_SECONDS,
    LOOKAHEAD_WAIT_SECONDS,
    TICK_SECONDS,
    Flow,
    Lookahead,
    Poller,
    Slots,
    Timings,
)
from consumer.runtime.processing import HandlerRunner, HeartbeatLease, Lease
from consumer.runtime.protection import ScaleInProtection
from consumer.runtime.settlement import Settlement
from consumer.runtime.stopping import Stopping
from consumer.runtime.tracing import close_tracing
from consumer.runtime.wiring import Guard, Intake, Queues, Shared

if TYPE_CHECKING:  # the stubs are a development dependency: the image does not carry them
    from mypy_boto3_sqs import SQSClient

    from consumer.runtime.tracing_spans import AttemptTracer  # imports opentelemetry: only when tracing is on


# The timing knobs imported above (LONG_POLL_SECONDS, BATCH_FILL_SECONDS, LOOKAHEAD_WAIT_SECONDS and TICK_SECONDS
# from .polling, EVENT_LOOP_STALL_SECONDS from consumer.limits) are read from this module's namespace when a Consumer
# is built (EVENT_LOOP_STALL_SECONDS when it runs): setting one on this module (bench/subject.py's ablation, a test's monkeypatch) tunes every part of a
# Consumer built afterwards. To read one, import it from the module that defines it.

log = logging.getLogger("consumer")

#: At shutdown, how long to wait for a poller handing on the messages of a receive answered meanwhile.
DISPATCH_WAIT_SECONDS = 2.0
#: After requeuing at shutdown, how long to wait for a long poll answered with those copies to release them.
LATE_RECEIVE_WAIT_SECONDS = 1.0
#: An IAM RoleId as IAM writes it (the API's pattern and length limits).
ROLE_ID_PATTERN = re.compile(r"\w{16,128}", re.ASCII)


def check_shape(handler: Callable[..., Any], contract: WorkerContract) -> None:
    """Refuse an ``async def`` handler under a contract for a ``def`` one, and the reverse: a thread calling a
    coroutine function gets a coroutine back, never run, and would delete the message as if it had succeeded."""
    if inspect.iscoroutinefunction(handler) != contract.asynchronous:
        shape = "an async def" if contract.asynchronous else "a def"
        name = getattr(handler, "__qualname__", repr(handler))
        raise ContractError("handler", f"must be {shape} function, as its contract says (asynchronous)", name)


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


def guarded(target: Callable[[], None], on_crash: Callable[[], None]) -> Callable[[], None]:
    """``target``, calling ``on_crash`` (after logging ``thread_crashed``) if it raises."""

    def run() -> None:
        try:
            target()
        except Exception:
            log.critical("thread_crashed", exc_info=True, extra={"thread_name": threading.current_thread().name})
            on_crash()

    return run


def count_requests(client: SQSClient, metrics: Metrics) -> None:
    """Count every request ``client`` sends, retries included (the ``sqs_requests`` metric)."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register("before-send.sqs.*", lambda **_: metrics.count("sqs_requests"))


def runner_for(
    shared: Shared,
    *,
    handler: Callable[..., Any],
    flow: Flow,
    settlement: Settlement,
    guard: Guard,
    work: queue.SimpleQueue[list[InFlight]],
    lease: Lease,
    on_crash: Callable[[], None],
) -> HandlerRunner:
    """The handler runner for the contract's handler shape: threads of one message each, threads of a batch each
    (``max_batch``), or coroutines on one event loop (``async def``; ``work`` unused, ``on_crash`` called when a
    message's task raises what nothing expected)."""
    if shared.contract.asynchronous:
        return AsyncRunner(
            shared, handler=handler, flow=flow, settlement=settlement, guard=guard, lease=lease, on_crash=on_crash
        )
    runner = BatchRunner if shared.contract.max_batch is not None else HandlerRunner
    return runner(shared, handler=handler, flow=flow, settlement=settlement, guard=guard, work=work, lease=lease)


def consumer_name(rng: random.Random) -> str:
    """This consumer's name in idempotency records, unique per run: the host, the process and a token drawn once (a
    restarted process with the same host and pid never reuses an earlier run's name); each attempt adds a counter."""
    return f"{socket.gethostname()}:{os.getpid()}:{rng.getrandbits(32):08x}"


@dataclass(frozen=True, kw_only=True)
class Collaborators:
    """What a consumer works with besides its SQS client and its handler; ``python -m consumer run`` builds each from
    its environment (consumer/runtime/cli.py), a test or the simulated world (bench/sim) passes its own.

    ``clock``: what every part reads time from and waits through (:mod:`.clock`; the machine's by default).
    ``rng``: draws the backoff jitter and the consumer's name in idempotency records (a seeded ``random.Random``
    makes both reproducible; None: an unseeded one). ``idempotency``: the store of the guard (None: in memory; no guard
    at all for a handler idempotent by itself, ``@worker(idempotent=True)``). ``protection``: ECS task scale-in
    protection (None: none). ``metrics``: where the EMF metrics go (None: stdout, dimension ``Queue`` the queue's
    name). ``liveness``: the progress file ``python -m consumer health`` reads (None: none). ``tracer``: a span per
    attempt (docs/tracing.md; None: off, nothing paid).

    Example::

        consumer = Consumer(sqs, ..., collaborators=Collaborators(idempotency=store, metrics=Metrics(stream=out)))
    """

    clock: Clock = SYSTEM
    rng: random.Random | None = None
    idempotency: IdempotencyStore | None = None
    protection: ScaleInProtection | None = None
    metrics: Metrics | None = None
    liveness: Liveness | None = None
    tracer: AttemptTracer | None = None


class Consumer:
    """Consume ``queue_url`` with ``handler`` under ``contract``.

    ``collaborators`` (:class:`Collaborators`): what it works with beyond the SQS client, each defaulting to
    a bare local run's: its clock, randomness, idempotency store, task protection, metrics, progress file and tracer.
    ``intake`` (:class:`.wiring.Intake`): how it takes messages in beyond the contract: the task role whose requeued
    copies are trusted with their spent receives, what its declared sources deliver, and ``max_rate`` (None: the
    handler's ``@worker(max_rate=...)``).

    Example::

        consumer = Consumer(boto3.client("sqs"), queue_url=url, dlq_url=dlq, contract=c, handler=handle)
        exit_code = consumer.run()   # until stop() (SIGTERM) or stuck handlers pile up

        # a DynamoDB guard, EMF lines to a buffer, and a rate for this run:
        Consumer(sqs, ..., collaborators=Collaborators(idempotency=store, metrics=Metrics(stream=out)),
                 intake=Intake(max_rate=5))
    """

    def __init__(
        self,
        client: SQSClient,
        *,
        queue_url: str,
        dlq_url: str | None,
        contract: WorkerContract,
        handler: Callable[..., Any],
        collaborators: Collaborators = Collaborators(),
        intake: Intake = Intake(),
    ) -> None:
        check_shape(handler, contract)
        clock = self._clock = collaborators.clock
        self._now = clock.monotonic
        self.client = client
        self.queue_url = queue_url
        self.dlq_url = dlq_url
        self.contract = contract
        self.handler = handler
        self.task_role_id = intake.task_role_id
        # --- the collaborators, each defaulting to a bare local run's ----------------------------------------------
        # No guard for a handler idempotent by itself (@worker(idempotent=True)): no key, no claim, no completion.
        self.idempotency = (
            None if contract.idempotent else (collaborators.idempotency or InMemoryStore(clock=clock.time))
        )
        self.protection = collaborators.protection or ScaleInProtection(None)
        queue_name = queue_url.rsplit("/", 1)[-1]
        self.metrics = collaborators.metrics or Metrics(dimensions={"Queue": queue_name}, clock=clock.time)
        self._random = collaborators.rng or random.Random()
        self.liveness = collaborators.liveness or Liveness(None)  # None: no progress file (`run` gives one)
        self._tracer = tracer = collaborators.tracer
        self.owner = consumer_name(self._random)
        self.exit_code = ExitCode.OK
        # --- what every part shares ---------------------------------------------------------------------------------
        self._stopping = Stopping(clock, contract.drain_timeout_seconds)
        self._stop = self._stopping.event
        self._table = InFlightTable()
        shared = Shared(
            contract=contract,
            clock=clock,
            stopping=self._stopping,
            table=self._table,
            metrics=self.metrics,
            protection=self.protection,
            liveness=self.liveness,
        )
        # Read from this module now, so that setting them here tunes every part (the comment above the logger).
        timings = Timings(
            tick_seconds=TICK_SECONDS,
            long_poll_seconds=LONG_POLL_SECONDS,
            batch_fill_seconds=BATCH_FILL_SECONDS,
            lookahead_wait_seconds=LOOKAHEAD_WAIT_SECONDS,
        )
        # --- how much may be received and started --------------------------------------------------------------------
        self._slots = Slots(contract.messages_in_flight, clock, tick_seconds=timings.tick_seconds)
        self.circuit = Circuit(contract, metrics=self.metrics, clock=clock.monotonic)
        rate = intake.max_rate if intake.max_rate is not None else max_rate_of(handler)
        if rate is not None:
            check_rate_fits_the_lease(contract, rate)  # @worker checked its own; an explicit one is checked here
        self._lookahead = Lookahead.for_contract(
            self._slots, contract, rated=rate is not None, wait_seconds=timings.lookahead_wait_seconds, clock=self._now
        )
        flow = Flow(
            slots=self._slots,
            lookahead=self._lookahead,
            circuit=self.circuit,
            rate=None if rate is None else RateLimit(rate, self._now),
        )
        # --- the parts: each takes what every part shares and the few other things it needs --------------------------
        # SimpleQueue (C, no Condition): one put and one get per message, the cheapest hand-off there is.
        self._work: queue.SimpleQueue[list[InFlight]] = clock.simple_queue()
        self._completions = Completions(
            self.idempotency,
            keep_seconds=contract.source_retention_seconds,
            clock=self._now,
            wake=lambda: self._ack.wake(),
        )
        self._ack = Acknowledger(
            client,
            queue_url,
            # Completions are written before their batch of deletes is sent, or on the tick once due.
            completions=self._completions,
            on_deleted=lambda _t: self.metrics.count("deleted"),
            # The consumer's clock: an extension sets a lease's end (visible_until) from the send time it reports,
            # and the heartbeat and the delete at once compare that end with the consumer's clock.
            clock=clock,
            guard=self._guarded,
            liveness=self.liveness,
        )
        queues = Queues(client=client, queue_url=queue_url, dlq_url=dlq_url)
        self._settlement = (Settlement if tracer is None else tracer.settlement_type)(
            shared,
            queues=queues,
            ack=self._ack,
            flow=flow,
            completions=self._completions,
            rng=self._random,
            describe=FailureText.of(handler),  # error text in reasons and logs, as @worker(error_text=...) says
        )
        self._renewals = (
            None
            if self.idempotency is None
            else Renewals(self.idempotency, clock.executor(renewal_threads(contract), "renew"))
        )
        self._heartbeat = Heartbeat(
            shared,
            ack=self._ack,
            renewals=self._renewals,
            lookahead=self._lookahead,
            on_stuck=self._stuck,
            tick_seconds=timings.tick_seconds,
        )
        self._runner = self._runner_for(shared, flow, Guard(store=self.idempotency, owner=self.owner))
        if isinstance(self._runner, AsyncRunner):
            self._work = self._runner.feed  # each message starts as a task on the loop at once
        self._poller = Poller(
            shared,
            queues=queues,
            intake=intake,  # whose copies to trust, what the declared SNS topics and EventBridge rules deliver
            flow=flow,
            settlement=self._settlement,
            work=self._work,
            timings=timings,
        )
        count_requests(client, self.metrics)

    def _runner_for(self, shared: Shared, flow: Flow, guard: Guard) -> HandlerRunner:
        """The handler runner for the handler's shape (:func:`runner_for`; a task's unexpected error stops the
        process as a guarded thread's death does)."""
        lease = HeartbeatLease(self.contract, self._heartbeat.extend_now)
        return runner_for(
            shared,
            handler=self.handler,
            flow=flow,
            settlement=self._settlement,
            guard=guard,
            work=self._work,
            lease=lease,
            on_crash=self._crashed,
        )

    # --- public -----------------------------------------------------------
    def stop(self) -> None:
        """Begin shutdown: stop polling, drain, flush. Not from a signal handler: :meth:`request_stop` is. The drain
        (what running handlers' ``message.deadline`` shrinks to) counts from the stop asked for first."""
        self._stopping.stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop, from a signal handler: it takes no lock (consumer/runtime/stopping.py)."""
        self._stopping.request()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        """Process until :meth:`stop`; returns the process exit code."""
        loops = 1 if isinstance(self._runner, AsyncRunner) else self.contract.concurrency  # one event loop
        spawn = self._clock.thread
        # "worker-<i>", though they run the handler runner: the name operators see in a thread_crashed line (its
        # thread_name field), which stays stable.
        threads = [spawn(self._guarded(self._runner.run), name=f"worker-{i}") for i in range(loops)]
        threads += [
            spawn(self._guarded(partial(self._poller.run, i)), name=poller_loop(i))
            for i in range(self.contract.pollers)
        ]
        threads.append(spawn(self._guarded(self._heartbeat.run), name=HEARTBEAT_LOOP))
        allowances = {poller_loop(i): self.contract.poll_stall_seconds for i in range(self.contract.pollers)}
        if isinstance(self._runner, AsyncRunner):
            allowances[EVENT_LOOP] = EVENT_LOOP_STALL_SECONDS
        # The acknowledger's calls are SQS calls as a receive is: the same worst case, the same allowance.
        allowances[ACKNOWLEDGER_LOOP] = self.contract.poll_stall_seconds
        self.liveness.start({**allowances, HEARTBEAT_LOOP: self.contract.heartbeat_stall_seconds})
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
        self._stopping.wait_for_a_stop()
        self._shutdown()
        return self.exit_code

    def _guarded(self, target: Callable[[], None]) -> Callable[[], None]:
        """A thread that dies unexpectedly stops the process (exit 1) instead of leaving it half alive."""
        return guarded(target, self._crashed)

    def _crashed(self) -> None:
        self.exit_code = ExitCode.FAILED
        self.stop()

    def _stuck(self) -> None:
        """Every slot holds a handler that will not return: only a new task can make progress."""
        self.exit_code = ExitCode.STUCK
        self.stop()

    # --- shutdown -----------------------------------------------------------
    def _shutdown(self) -> None:
        log.info("consumer_stopping", extra={"in_flight": len(self._table)})
        self.liveness.stopping()
        # Messages still queued for a handler thread have not started: hand them back now.
        handed_back = 0
        while True:
            try:
                waiting = self._work.get_nowait()
            except queue.Empty:
                break
            self._settlement.hand_back_unstarted(waiting, "shutdown")
            handed_back += len(waiting)
        deadline = self._stopping.drain_end  # set by stop(): the instant handlers were told
        # DONE stays in flight until its outcome (delete, backoff, DLQ move or requeue) has been
        # handed to the acknowledger: exiting earlier would cut a DLQ move between its send and
        # its delete, and the message would come back to be moved a second time.
        while self._now() < deadline and self._table.unsettled():
            self._clock.sleep(0.05)
        self._runner.cancel_running(LATE_RECEIVE_WAIT_SECONDS)  # coroutines see CancelledError and hand back
        dispatching = self._table.close()
        # A poller handing on (or back) what a receive brought: brief, never a long poll; bounded, as a
        # requeue's send can retry against a dead endpoint, within the 5 s kept for flushing.
        if dispatching:
            self._wait_while(lambda: self._table.dispatching > 0, DISPATCH_WAIT_SECONDS)
        unfinished = self._table.release_unfinished()
        for item, attempted in unfinished:
            # Past the drain time: hand back now rather than let the lease run out after SIGKILL.
            # A handler still running at the drain timeout had its attempt.
            self._settlement.hand_back_at_drain(item, attempted=attempted)
            log.warning("message_handed_back", extra={"message_id": item.message.message_id})
        if unfinished or handed_back:
            # A long poll still outstanding may be answered with the copies just requeued: it returns at once
            # if so, and hands them back again (Poller._dispatch). Give it that moment before exiting.
            self._wait_while(lambda: self._table.receives_in_flight > 0, LATE_RECEIVE_WAIT_SECONDS)
        self._ack.close()
        self._stopping.closed.set()
        if self._renewals is not None:
            self._renewals.close()
        self.protection.close()
        self.metrics.flush()
        close_tracing(self._tracer)  # the spans still open ended, the buffered ones exported (bounded)
        log.info("consumer_stopped", extra={"exit_code": self.exit_code, "handed_back": len(unfinished)})

    def _wait_while(self, condition: Callable[[], bool], seconds: float) -> None:
        """Shutdown's short, bounded waits on pollers (checked every 10 ms)."""
        give_up = self._now() + seconds
        while condition() and self._now() < give_up:
            self._clock.sleep(0.01)
