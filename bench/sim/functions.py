"""A Lambda plan's world (``Plan.draw_lambda``): the worker as a Lambda function behind an SQS event source mapping.

The same queues, producer, handlers and invariants as the container's world (bench/sim/world.py); what runs the
handler is Lambda's, each part as AWS documents it, shaped by the worker's :class:`~consumer.lambda_target.LambdaTarget`
(the function's timeout, the queue's visibility, the mapping's BatchSize, window and maximum concurrency):

- **the mapping**: ``maximum_concurrency`` pollers ("lanes", threads of the world), each the local
  :class:`~consumer.local.mapping.EventSourceMapping` on the virtual clock: a long poll for up to BatchSize messages
  with every attribute, gathering for the window; an invocation with their records; a delete of every record the
  answer does not list (a whole-batch failure deletes nothing). Its requests meet no fault (Lambda retries its own),
  and they are labelled with the environment the lane invokes, whose messages they are.
- **an execution environment** (:class:`bench.sim.run.Environment`, one of ``Run.processes``): a group of the
  scheduler's threads, as a process is, with its own :class:`~consumer.runtime.invocation.LambdaWorker`, clients and
  store, built at a cold start (the init phase), on the lane's first invocation and after the environment is
  discarded. Each invocation runs on a thread of the
  environment with a context whose remaining time is on the virtual clock. Between invocations the environment is
  frozen ("Lambda freezes the execution environment when the runtime and each extension have completed and there are
  no pending events", https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html): a handler given up
  on still runs, and resumes with the environment's next invocation, on the same LambdaWorker.
- **the timeout**: an invocation still running at the function's timeout is stopped: the environment's threads are
  killed as a SIGKILL kills a process's, nothing is deleted (every record returns after the queue's visibility,
  https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html) and the environment is discarded.

Lambda's faults, drawn per invocation by the plan's rates from the world's own stream, until the chaos is over:

- **throttled** (``Plan.throttled``): the function is not called; the batch waits out the queue's visibility, a receive
  spent that no consumer saw (``Run.unseen``). AWS asks for a visibility of six times the timeout for Lambda to retry a
  throttled batch (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html); its retries are not
  played: the batch returns to the queue as it does once they run out.
- **stalled** (``Plan.stalled``): the environment freezes at a drawn moment of the invocation for a drawn while (a
  noisy host, a long pause): it goes on after it, or Lambda stops it at its timeout.
- **recycled** (``Plan.recycled``): after its answer, Lambda discards the environment (the next invocation starts
  cold): a handler still running in it dies with it (a kill), else nothing is lost.

The function's own SQS and DynamoDB calls meet the plan's faults as a container's do.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.sim.aws import ACCOUNT, REGION, Faults
from bench.sim.plan import Plan
from bench.sim.run import Environment, Run
from bench.sim.scheduler import BLOCKED, RUNNABLE, SimThread, freeze
from bench.sim.world import World
from consumer.lambda_event import records_of
from consumer.local.mapping import EventSourceMapping, Invoked, RemainingTime
from consumer.queue_attributes import QueuePairAttributes
from consumer.runtime.inflight import InFlight, State
from consumer.runtime.invocation import Binding, Invocation, LambdaContext, LambdaWorker
from consumer.runtime.wiring import Queues

#: The init phase of a cold start, seconds (the runtime starts, the handler's module is imported).
INIT_SECONDS = (0.1, 1.0)
#: After an invocation fails whole (throttled, an error, a timeout), a lane waits this long before it polls again:
#: "Lambda gradually backs off" (https://docs.aws.amazon.com/lambda/latest/operatorguide/sqs-retries.html).
BACKOFF_SECONDS = 1.0


class FunctionTimedOut(Exception):
    """Lambda stopped an invocation at the function's timeout."""


class _Worker(LambdaWorker):
    """A :class:`LambdaWorker` whose running invocation the world can see (its in-flight table): its ``handle`` is
    LambdaWorker's, each invocation kept. Kept for the run, too: an invocation dropped mid-run would be collected with
    its event loop, and a task still pending there finalized on whichever thread of the run the collector interrupts,
    its code running there (calls that wait on the virtual clock included), where no thread of the run may run code
    that is not its own."""

    invocation: Invocation | None = None

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, list[dict[str, str]]]:
        start = self.clock.monotonic()
        end = start + context.get_remaining_time_in_millis() / 1000
        records = records_of(event, queue_arn=self.binding.queue_arn)
        self.invocation = Invocation(self, start=start, end=end)
        self.kept.append(self.invocation)
        return self.invocation.run(records)

    @functools.cached_property
    def kept(self) -> list[Invocation]:
        return []


@dataclass(kw_only=True)
class _Mapping(EventSourceMapping):
    """The local mapping, its invocations first asked of the lane (a throttle calls nothing)."""

    before: Callable[[list[dict[str, Any]]], Invoked | None] = lambda _messages: None

    def invoke(self, messages: list[dict[str, Any]]) -> Invoked:
        refused = self.before(messages)
        return refused if refused is not None else super().invoke(messages)


class LambdaWorld(World):
    """Runs a Lambda plan (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.target = plan.lambda_target()
        self.lambda_rng = random.Random(f"lambda-{plan.seed}")  # Lambda's faults and init times
        self.lambda_faults = True  # off once the chaos is over
        self.lanes: list[_Lane] = []
        self.concurrency = self.target.maximum_concurrency or 2  # the mapping's: environments at once
        self.queue_arn = ""

    def _main(self) -> None:
        plan, sim = self.plan, self.sim
        self._admin = self.aws.client("sqs", caller="world", faults=False)
        self._create_queues()
        suffix = ".fifo" if plan.fifo else ""
        self.queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:sim-source{suffix}"
        producer = sim.thread(self._produce, name="producer")
        producer.start()
        sim.sleep(plan.consumers_from)
        sim.record(f"event source mapping: {self.concurrency} pollers, {self.target.derived()}")
        self.lanes = [_Lane(self, slot) for slot in range(self.concurrency)]
        threads = [SimThread(sim, lane.run, f"poller{lane.slot}", "mapping") for lane in self.lanes]
        for thread in threads:
            thread.start()
        sim.sleep(max(0.0, plan.chaos_until - sim.now))
        producer.join()
        self.aws.faults = Faults()
        self.lambda_faults = False
        sim.record("chaos over")
        self._settle()
        self._stopping = True
        for thread in threads:  # each ends after its poll and the invocation it makes
            thread.join(self.target.function_timeout_seconds + self.target.batching_window_seconds + 60)
        sim.record("world stopped")

    # --- what the world sees -------------------------------------------------------------------------------------------
    def _queue_attributes(self) -> QueuePairAttributes:
        return self.target.queue_attributes()

    def _source_visibility(self) -> int:
        return self.target.queue_visibility_seconds

    def _alive(self) -> list[Any]:
        return [e for e in self.run.processes if e.killed is None and e.discarded is None]

    def _holdings(self) -> Iterator[tuple[Any, list[InFlight]]]:
        """Each environment with the records of the invocation it runs (none between invocations: what a given-up
        handler still runs is held by the queue's visibility, not by the environment)."""
        for env in self._alive():
            invocation = env.worker.invocation if env.busy and env.worker is not None else None
            if invocation is not None:
                yield env, list(invocation.table._items.values())  # noqa: SLF001 (the world sees everything)

    def _holds(self, item: Any, given_up: set[str | None]) -> bool:
        """An invocation holds every record of its batch until it answers: running, done with, or waiting (for a
        free handler thread, a batch's call, its FIFO group's turn, unless behind one given up on)."""
        if item.state in (State.RUNNING, State.DONE, State.DELETING):
            return True
        if item.state is not State.WAITING:
            return False
        return not self.contract.fifo or item.context.message_group_id not in given_up

    # --- environments --------------------------------------------------------------------------------------------------
    def environment(self, slot: int) -> Environment:
        """A new environment for lane ``slot`` (built at its first invocation: a cold start)."""
        self._processes_started += 1
        count = self._processes_started
        name = f"fn{slot}" if count <= self.concurrency else f"fn{slot}.{count}"
        env = Environment(name, slot, self.sim.now)
        self.run.processes.append(env)
        return env

    def worker(self, name: str) -> _Worker:
        """An environment's worker, as consumer/lambda_entry.py builds it (on the environment's own thread)."""
        sqs, collaborators = self._wiring(name)
        return _Worker(
            Binding(
                queues=Queues(client=sqs, queue_url=self.run.queue_url, dlq_url=self.run.dlq_url),
                queue_arn=self.queue_arn,
            ),
            contract=self.contract,
            handler=self.handlers.for_process(name),
            collaborators=collaborators,
            intake=self.intake,
        )

    def busy(self, env: Environment) -> bool:
        """Whether a thread of ``env`` has work under way (a handler, a call): not only idle handler threads."""
        return any(
            t.group == env.name and (t.state is RUNNABLE or (t.state is BLOCKED and t.deadline is not None))
            for t in self.sim.threads
        )

    def drawn(self, rate: float) -> bool:
        """One of Lambda's faults, at ``rate``, while the chaos lasts."""
        return self.lambda_faults and rate > 0 and self.lambda_rng.random() < rate


@dataclass(eq=False)
class _Lane:
    """One poller of the mapping and the environment it invokes."""

    world: LambdaWorld
    slot: int
    env: Environment = field(init=False)
    mapping: _Mapping = field(init=False)

    def __post_init__(self) -> None:
        self._new_environment()

    def run(self) -> None:
        world = self.world
        while not world._stopping:
            invoked = self.mapping.poll()
            self.env.busy = False
            if invoked is None:
                continue
            self._record(invoked)
            if self.env.killed is not None:
                self._new_environment()
            elif invoked.failed_whole is None and world.drawn(world.plan.recycled):
                self._discard()
            if invoked.failed_whole is not None:
                world.sim.sleep(BACKOFF_SECONDS)

    def _new_environment(self) -> None:
        world, target = self.world, self.world.target
        self.env = world.environment(self.slot)
        self.mapping = _Mapping(
            client=world.aws.client("sqs", caller=self.env.name, faults=False),
            queue_url=world.run.queue_url,
            queue_arn=world.queue_arn,
            region=REGION,
            function=self._call,
            batch_size=target.esm_batch_size,
            window_seconds=target.batching_window_seconds,
            timeout_seconds=target.function_timeout_seconds,
            clock=world.sim.monotonic,
            before=self._before,
        )

    def _before(self, messages: list[dict[str, Any]]) -> Invoked | None:
        """Before an invocation: a throttle (nothing called), or a cold start (the environment's init)."""
        world, env = self.world, self.env
        if world.drawn(world.plan.throttled):
            world.run.unseen += [m["Body"] for m in messages]
            world.sim.record(f"invocation of {env.name} throttled: {len(messages)} messages wait out their visibility")
            return Invoked([m["MessageId"] for m in messages], failed_whole="throttled")
        if env.worker is None:
            init = SimThread(world.sim, self._init, "init", env.name)
            init.start()
            init.join()
        env.busy = True
        assert env.worker is not None
        env.worker.invocation = None
        return None

    def _init(self) -> None:
        world = self.world
        world.sim.sleep(world.lambda_rng.uniform(*INIT_SECONDS))
        self.env.worker = world.worker(self.env.name)
        world.sim.record(f"environment {self.env.name} cold start")

    def _call(self, event: Mapping[str, Any], context: RemainingTime) -> Any:
        """The invocation, on a thread of the environment (thawed for it, frozen after); Lambda stops it at the
        timeout."""
        world, env, sim = self.world, self.env, self.world.sim
        worker = env.worker
        assert worker is not None
        answer: list[Any] = []
        failure: list[Exception] = []

        def invocation() -> None:
            try:
                answer.append(worker.handle(event, context))
            except Exception as error:  # noqa: BLE001 (the function's error: Lambda reports it to the mapping)
                failure.append(error)

        env.invocations += 1
        thread = SimThread(sim, invocation, f"invoke{env.invocations}", env.name)
        if env.invocations > 1 and world.busy(env):
            sim.record(f"environment {env.name} thawed with work under way in it")
        freeze(sim, env.name, frozen=False)
        thread.start()
        if world.drawn(world.plan.stalled):
            self._stall(thread, context.deadline)
        thread.join(max(0.0, context.deadline - sim.monotonic()))
        if thread.is_alive():
            env.killed = sim.now
            sim.record(f"environment {env.name} stopped at its timeout")
            sim.kill(env.name)
            raise FunctionTimedOut(f"Task timed out after {self.mapping.timeout_seconds:.2f} seconds")
        freeze(sim, env.name)
        if failure:
            raise failure[0]
        return answer[0]

    def _stall(self, invocation: SimThread, deadline: float) -> None:
        """The environment freezes at a drawn moment of ``invocation`` for a drawn while."""
        world, env, sim = self.world, self.env, self.world.sim
        # While the invocation runs (within an ok handler's longest work of its start), for up to one and a half times
        # the timeout: about two stalls in three outlast it.
        timeout = self.mapping.timeout_seconds
        at = world.lambda_rng.uniform(0, world.plan.duration[1])
        length = world.lambda_rng.uniform(1, 1.5 * timeout)

        def stall() -> None:
            sim.sleep(at)
            if not invocation.is_alive() or env.killed is not None:
                return
            sim.record(f"environment {env.name} stalls for {length:.1f} s ({deadline - sim.monotonic():.1f} s left)")
            freeze(sim, env.name)
            sim.sleep(length)
            if env.killed is None:
                freeze(sim, env.name, frozen=False)

        SimThread(sim, stall, f"stall-{env.name}", "lambda").start()

    def _discard(self) -> None:
        """Lambda discards the idle environment: what still runs in it (a handler given up on) dies with it."""
        world, env, sim = self.world, self.env, self.world.sim
        if world.busy(env):
            env.killed = sim.now
            sim.record(f"environment {env.name} discarded with work under way in it")
        else:
            env.discarded = sim.now
            sim.record(f"environment {env.name} discarded")
        sim.kill(env.name)
        self._new_environment()

    def _record(self, invoked: Invoked) -> None:
        env = self.env
        listed = len(invoked.message_ids) - len(invoked.deleted)
        line = (
            f"{env.name} at {self.world.sim.now:.1f}: {len(invoked.message_ids)} records, {len(invoked.deleted)}"
            f" deleted, {listed} left; {invoked.failed_whole or 'answered'}"
        )
        self.world.run.invocations.append(line)
        self.world.sim.record(f"invocation {line}")


def simulate(plan: Plan) -> Run:
    """Run a Lambda plan once; the :class:`Run` it left."""
    return LambdaWorld(plan).simulate()


__all__ = ["FunctionTimedOut", "LambdaWorld", "simulate"]
