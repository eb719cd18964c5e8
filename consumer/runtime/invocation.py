"""A worker on AWS Lambda: each invocation runs an SQS event's records as the container runs a receive.

The event source mapping receives, and deletes what the function does not report failed
(https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html). Everything between is the
container's: the same handler runners (one-message, batch and async shapes), the same :class:`.Settlement` (backoff,
poison and exhausted messages moved to the DLQ with their reason, FIFO groups stopped at their first failure, copies
that carry their spent receives), the same idempotency guard, circuit and ``max_rate``. What differs is who ends a
receive (a :class:`.BatchReport` instead of the acknowledger: "deleted" means "not listed") and how long a receive may
last: the invocation's remaining time, not a lease a heartbeat extends.

Time: an invocation gives up ``INVOCATION_FLUSH_SECONDS`` before Lambda would stop it (the time its DLQ sends, copies,
completions, visibility changes and metrics need). A message starts, and once its idempotency claim is done its
handler is called, only with at least ``max_duration`` left before then (else it is handed back, ``invocation_ending``);
a handler past ``max_duration`` is given up on as the heartbeat gives up on one; at the give-up every handler still
running is given up on (listed failed, no visibility change: it returns after the queue's visibility, as a container's
given-up message returns after its lease) and every message still waiting or claiming is handed back. A thread cannot be stopped: one still running when the function answers resumes with the
environment's next invocation, and its late success is settled then (completion, then a delete of its own).

One :class:`LambdaWorker` per execution environment (consumer/lambda_entry.py builds it at the first invocation):
its handler threads, idempotency store, circuit, rate and metrics last across invocations; each invocation has its own
in-flight table, stop and report.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from consumer.contract import WorkerContract
from consumer.declaration import max_rate_of
from consumer.exit_codes import ExitCode
from consumer.lambda_event import batch_item_failures, records_of
from consumer.limits import SHUTDOWN_FLUSH_SECONDS
from consumer.message import Attempt, Message
from consumer.runtime.batch_report import BatchReport
from consumer.runtime.batches import BatchRunner
from consumer.runtime.circuit import PROBE, Circuit, RateLimit
from consumer.runtime.completions import Completions
from consumer.runtime.consumer import Collaborators, check_shape, consumer_name, runner_for
from consumer.runtime.coroutines import AsyncRunner
from consumer.runtime.failures import FailureText
from consumer.runtime.idempotency import InMemoryStore
from consumer.runtime.inflight import InFlight, InFlightTable, LogContext, State
from consumer.runtime.liveness import Liveness
from consumer.runtime.observability import Metrics
from consumer.runtime.polling import Flow, Slots, tasks_of
from consumer.runtime.processing import Refusal
from consumer.runtime.protection import ScaleInProtection
from consumer.runtime.settlement import Settlement
from consumer.runtime.stopping import Stopping
from consumer.runtime.tracing import TRACE_FLUSH_SECONDS
from consumer.runtime.wiring import Guard, Intake, Queues, Shared

if TYPE_CHECKING:
    from consumer.runtime.clock import Clock

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

#: Kept at the end of every invocation for what settles after the give-up (DLQ sends, copies, completions, visibility
#: changes, metrics): the container's shutdown flush.
INVOCATION_FLUSH_SECONDS = SHUTDOWN_FLUSH_SECONDS
#: How often an invocation looks at its handlers' durations while it waits for them (the heartbeat's give-up check).
WATCH_SECONDS = 0.5


def exit_stuck() -> None:
    """End the execution environment's process (ExitCode.STUCK): Lambda starts a new one for the next invocation."""
    logging.shutdown()  # the handlers_stuck line written out first
    os._exit(ExitCode.STUCK)


class LambdaContext(Protocol):
    """What an invocation reads of Lambda's context object: the time it has left."""

    def get_remaining_time_in_millis(self) -> int: ...


class InvocationLease:
    """An invocation's lease rules (processing.Lease): a message starts, and its handler is called, only with its
    whole ``max_duration`` left before the give-up, nothing extends a lease, and a claim is leased for the rest of the invocation (nothing renews
    it either)."""

    stop_reason = "invocation_ending"

    def __init__(self, contract: WorkerContract, *, give_up_at: float, claim_seconds: int) -> None:
        self._give_up_at = give_up_at
        self._max_duration = contract.max_duration_seconds
        self.claim_seconds = claim_seconds

    def refusal(self, item: InFlight, now: float) -> Refusal | None:
        if self._give_up_at - now < self._max_duration:
            return Refusal(self.stop_reason)
        return None

    def started(self, item: InFlight, now: float) -> None:
        """Nothing: the function cannot extend what the mapping received, and needs not (the queue's visibility is at
        least six times the function's timeout)."""

    def at_call(self, item: InFlight, now: float) -> Refusal | None:
        """As at the start, once its claim is done: max_duration counts from the call, which a slow claim delays."""
        return self.refusal(item, now)


@dataclass(frozen=True, kw_only=True)
class Binding:
    """The queues a function is bound to: ``queues`` (the SQS client, the source's URL and the DLQ's) and the source's
    ARN, which every record of an event must come from."""

    queues: Queues
    queue_arn: str


class LambdaWorker:
    """One execution environment's worker: :meth:`handle` runs one invocation's event.

    ``binding``: the source queue (its URL and ARN), its DLQ and the SQS client. ``contract`` and ``handler``: as a
    :class:`.Consumer`'s. ``collaborators``: its clock, randomness, idempotency store, metrics and tracer (protection
    and liveness are the container's and unused here). ``intake``: whose copies are trusted with their spent receives
    (the function's execution role), the declared sources, ``max_rate``.
    """

    def __init__(
        self,
        binding: Binding,
        *,
        contract: WorkerContract,
        handler: Callable[..., Any],
        collaborators: Collaborators = Collaborators(),
        intake: Intake = Intake(),
        on_stuck: Callable[[], None] = exit_stuck,
    ) -> None:
        check_shape(handler, contract)
        self.binding = binding
        self.contract = contract
        self.handler = handler
        self.clock: Clock = collaborators.clock
        self.intake = intake
        self.idempotency = (
            None if contract.idempotent else (collaborators.idempotency or InMemoryStore(clock=self.clock.time))
        )
        queue_name = binding.queues.queue_url.rsplit("/", 1)[-1]
        self.metrics = collaborators.metrics or Metrics(dimensions={"Queue": queue_name}, clock=self.clock.time)
        self.rng = collaborators.rng or random.Random()
        self.tracer = collaborators.tracer
        self.owner = consumer_name(self.rng)
        self.describe = FailureText.of(handler)
        # Across invocations, as in one container process: the downstream's circuit and max_rate's pacing.
        self.circuit = Circuit(contract, metrics=self.metrics, clock=self.clock.monotonic)
        rate = intake.max_rate if intake.max_rate is not None else max_rate_of(handler)
        self.rate = None if rate is None else RateLimit(rate, self.clock.monotonic)
        # The handler threads: a thread still running when an invocation answers goes on in the next one.
        self.threads = None if contract.asynchronous else self.clock.executor(contract.concurrency, "handler")
        #: Tasks whose handler was given up on and still runs, after their invocation answered: each holds a thread.
        self.given_up: set[concurrent.futures.Future[Any]] = set()
        self._on_stuck = on_stuck

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, list[dict[str, str]]]:
        """Run ``event``'s records; the answer lists the ones the mapping must not delete. Raises only for an event
        that is not this function's (a record from another queue): Lambda then retries the whole batch."""
        start = self.clock.monotonic()
        end = start + context.get_remaining_time_in_millis() / 1000
        self._check_stuck()
        records = records_of(event, queue_arn=self.binding.queue_arn)
        return Invocation(self, start=start, end=end).run(records)

    def _check_stuck(self) -> None:
        """Every handler thread is held by a handler given up on in an earlier invocation: this environment can start
        nothing more, so it ends (``on_stuck``; the process exits, as a container exits STUCK). Lambda retries this
        batch after its visibility and starts a new environment."""
        self.given_up = {task for task in self.given_up if not task.done()}
        if self.threads is not None and len(self.given_up) >= self.contract.concurrency:
            log.critical("handlers_stuck", extra={"stuck": len(self.given_up)})
            self._on_stuck()


class Invocation:
    """One invocation's parts: its stop, in-flight table, report, settlement and handler runner."""

    def __init__(self, worker: LambdaWorker, *, start: float, end: float) -> None:
        self.worker = worker
        contract = worker.contract
        clock = worker.clock
        self.start, self.end = start, end
        self.give_up_at = end - INVOCATION_FLUSH_SECONDS
        self.stopping = Stopping(clock, 0)
        self.table = InFlightTable()
        shared = Shared(
            contract=contract,
            clock=clock,
            stopping=self.stopping,
            table=self.table,
            metrics=worker.metrics,
            protection=ScaleInProtection(None),
            liveness=Liveness(None),
        )
        self.completions = Completions(
            worker.idempotency, keep_seconds=contract.source_retention_seconds, clock=clock.monotonic
        )
        queues = worker.binding.queues
        self.report = BatchReport(queues.client, queue_url=queues.queue_url, completions=self.completions, clock=clock)
        # Nothing waits for a slot: the event is the receive, every record of it admitted at once.
        flow = Flow(slots=Slots(0, clock), lookahead=None, circuit=worker.circuit, rate=worker.rate)
        tracer = worker.tracer
        self.settlement = (Settlement if tracer is None else tracer.settlement_type)(
            shared,
            queues=queues,
            ack=self.report,
            flow=flow,
            completions=self.completions,
            rng=worker.rng,
            describe=worker.describe,
        )
        lease = InvocationLease(contract, give_up_at=self.give_up_at, claim_seconds=max(1, math.ceil(end - start)))
        guard = Guard(store=worker.idempotency, owner=worker.owner)
        self.runner = runner_for(
            shared,
            handler=worker.handler,
            flow=flow,
            settlement=self.settlement,
            guard=guard,
            work=clock.simple_queue(),
            lease=lease,
            on_crash=self._crashed,
        )

    def run(self, records: list[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
        items = self._admit(records)
        tasks = self._submit(items)
        futures = list(tasks)
        self._wait(items, futures)
        if self.worker.threads is not None:
            self.worker.given_up.update(
                future
                for future, task in tasks.items()
                if not future.done() and any(i.state is State.TIMED_OUT for i in task)
            )
        deleted = self.report.close()
        self.worker.metrics.flush()  # no 60 s heartbeat flush here: after the answer the environment may never run again
        tracer = self.worker.tracer
        if tracer is not None:
            tracer.end_open(items)  # given up on: their spans end with the invocation
            tracer.export(TRACE_FLUSH_SECONDS)
        return batch_item_failures(i.message.message_id for i in items if i.message.message_id not in deleted)

    def _admit(self, records: list[dict[str, Any]]) -> list[InFlight]:
        worker = self.worker
        intake = worker.intake
        items = []
        for raw in records:
            attempt = Attempt(stop=self.stopping.event, clock=worker.clock.monotonic, drain_end=self._give_up_at)
            message = Message.from_sqs(raw, own_role_id=intake.task_role_id, attempt=attempt, sources=intake.sources)
            # Its lease is at least the rest of the invocation: Lambda refuses a mapping whose queue's visibility is
            # shorter than the function's timeout.
            items.append(
                InFlight(message, self.start, self.end, LogContext.of(message, worker.binding.queues.queue_url))
            )
        if items:
            worker.metrics.count("received", len(items))
            self.table.admit(items)
            self.table.dispatched()
            if worker.circuit.receive_limit() == PROBE:
                # Half-open: the first message probes the downstream; the rest are handed back (the runner's refusal).
                worker.circuit.probing([items[0].message.message_id])
        return items

    def _give_up_at(self) -> float:
        return self.give_up_at

    def _submit(self, items: list[InFlight]) -> dict[concurrent.futures.Future[Any], list[InFlight]]:
        """Each task of the event on its way (a message, a FIFO group, or the whole batch of a batch handler), by the
        future that ends with it."""
        runner = self.runner
        tasks = (
            [items] if isinstance(runner, BatchRunner) and items else tasks_of(items, fifo=self.worker.contract.fifo)
        )
        if isinstance(runner, AsyncRunner):
            return {runner.submit(task): task for task in tasks}
        threads = self.worker.threads
        assert threads is not None
        run = runner.run_batch if isinstance(runner, BatchRunner) else runner.run_group
        return {threads.submit(run, task): task for task in tasks}

    def _wait(self, items: list[InFlight], futures: list[concurrent.futures.Future[Any]]) -> None:
        """Until every task returned, giving up on handlers past ``max_duration`` each tick; at the give-up, on
        everything still running, and handing back what waits."""
        clock = self.worker.clock
        done = clock.event()
        remaining = [len(futures)]

        def finished(future: concurrent.futures.Future[Any]) -> None:
            failure = None if future.cancelled() else future.exception()
            if failure is not None:  # its messages stay listed: they return after the queue's visibility
                log.critical("thread_crashed", exc_info=failure, extra={"thread_name": "handler"})
            remaining[0] -= 1
            if remaining[0] <= 0:
                done.set()

        for future in futures:
            future.add_done_callback(finished)
        if not futures:
            done.set()
        while not done.is_set() and self.table.holds(items):
            now = clock.monotonic()
            if now >= self.give_up_at:
                self._give_up()
                break
            done.wait(min(WATCH_SECONDS, self.give_up_at - now))
            self._time_out_overruns(clock.monotonic())
        # What is settling (a DLQ send, a copy) gets until the flush's last second; so does a hand-back under way on a
        # handler thread (a record too late to start: out of the table, its copy or DLQ move and its delete not yet
        # reported). Answered without it, the record would be listed, and its delete wait, frozen with the
        # environment, for its next invocation.
        while (self.table.holds(items) or self.settlement.handing_back) and clock.monotonic() < self.end - 1:
            clock.sleep(0.01)
        if isinstance(self.runner, AsyncRunner):
            self.runner.close()

    def _time_out_overruns(self, now: float) -> None:
        """Give up on handlers past ``max_duration`` (listed; the invocation does not wait for them), and hand back the
        messages of their FIFO groups waiting behind them (their thread is the given-up handler's)."""
        overrun, _ = self.table.time_out_overruns(now, self.worker.contract.message_timeout_seconds)
        for item in overrun:
            self._timed_out(item)
        if self.worker.contract.fifo:
            free = set(map(id, self.table.waiting(behind_given_up=False)))
            behind = [item for item in self.table.waiting() if id(item) not in free]
            self.settlement.hand_back_unstarted(behind, "fifo_group_blocked")

    def _give_up(self) -> None:
        self.stopping.stop()  # nothing more starts: what a runner takes next is handed back (invocation_ending)
        if isinstance(self.runner, AsyncRunner):
            self.runner.cancel_running(1.0)
        timed_out, claiming = self.table.give_up()
        for item in timed_out:
            self._timed_out(item)
        for item in claiming:  # never to be called: back at once, as what waits
            self.settlement.hand_back(item, InvocationLease.stop_reason)
            log.info(
                "message_released", extra={"message_id": item.message.message_id, "why": InvocationLease.stop_reason}
            )
        self.settlement.hand_back_unstarted(self.table.waiting(), InvocationLease.stop_reason)

    def _timed_out(self, item: InFlight) -> None:
        self.worker.metrics.count("timed_out")
        log.error(
            "handler_timed_out",
            extra=item.context.fields(max_duration_seconds=self.worker.contract.max_duration_seconds),
        )

    def _crashed(self) -> None:
        """A message's task on the event loop raised what nothing expected: its records are listed (not deleted)."""
        log.critical("invocation_task_crashed")
