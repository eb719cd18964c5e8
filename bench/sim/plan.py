"""What one run of the simulated world varies: a :class:`Plan`, drawn from a seed or written out by a scenario."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from bench.sim.aws import Brownout, Faults
from consumer.contract import WorkerContract
from consumer.lambda_target import LambdaTarget

#: The handler shapes the world runs: one message per call, a batch per call, an async def.
SHAPES = ("one", "batch", "async")
#: How often a drawn plan is a long one (Plan.draw_long).
LONG_PLANS = 1 / 400
#: How often a drawn plan's handlers outlast a SIGTERM's drain (drawn apart, so the other plans stay as they were).
LONG_HANDLERS = 1 / 20
#: Where a plan's worker runs: ECS tasks running ``python -m consumer run`` (processes), or a Lambda function fed by an
#: SQS event source mapping (bench/sim/functions.py: execution environments).
TARGETS = ("container", "lambda")
#: How each kind of event's handler behaves, by its attempt (1-based); durations in units of max_duration where
#: marked. ok: succeeds; flaky: fails its first attempt; poison: raises PoisonMessage; failing: always fails; slow:
#: succeeds after Plan.slow (0.8 to 1.1) max_duration; overrun: its first attempt runs 1.3 times its attempt's
#: timeout (max_duration and the margin: its lease lapses), then succeeds; hang: its first attempt hangs for 20 max_duration; unavailable: its first attempt raises
#: DownstreamUnavailable (the circuit opens), then succeeds.
KINDS = ("ok", "flaky", "poison", "failing", "slow", "overrun", "hang", "unavailable")
#: Kinds whose every event must end done (its effect applied), never in the DLQ.
MUST_SUCCEED = frozenset({"ok", "flaky", "slow", "overrun", "hang", "unavailable"})


@dataclass(frozen=True)
class Plan:
    """What one run varies (see the module docstring); every time is in virtual seconds from the run's start."""

    seed: int
    shape: str = "one"
    fifo: bool = False
    guard: bool = True
    max_duration: int = 10
    concurrency: int = 2
    max_receive_count: int = 3
    max_lease: int | None = None
    max_batch: int = 4
    batch_window: int = 1
    messages: int = 10
    groups: int = 2
    kinds: tuple[str, ...] = ("ok",)  # each event's kind: drawn from these, or in turn (cycle_kinds)
    cycle_kinds: bool = False
    duration: tuple[float, float] = (0.05, 2.0)  # an ok handler's work
    slow: tuple[float, float] = (0.8, 1.1)  # a slow handler's, in max_duration
    send_over: float = 10.0  # the producer sends its events over this long
    consumers: int = 1
    kills: tuple[tuple[float, int], ...] = ()  # (at, consumer slot): SIGKILL, a new process after restart_after
    sigterms: tuple[tuple[float, int], ...] = ()  # (at, consumer slot): SIGTERM (a deploy), a new process after it
    restart_after: float = 5.0
    consumers_from: float = 0.0  # the consumers start this late (a backlog waits for them)
    faults: Faults = Faults()
    chaos_until: float = 60.0  # faults, kills and signals stop here; then the world settles
    latency_ms: tuple[float, float] = (1.0, 25.0)
    ddb_latency_ms: tuple[float, float] | None = None  # a slow table (each way of each DynamoDB request)
    protection: bool = False  # an ECS agent for scale-in protection (its calls take time)
    switch_probability: float | None = None
    settle_limit: float = 4 * 3600.0
    batch_size: int = 10  # the contract's: a receive's size, and on Lambda the mapping's BatchSize
    # --- a Lambda plan's (target "lambda", bench/sim/functions.py); each rate is per invocation, until chaos_until ---
    target: str = "container"
    max_tasks: int = 1  # the worker's max_tasks: LambdaTarget derives the mapping's concurrency (environments) from it
    throttled: float = 0.0  # an invocation is throttled: the function is not called, the batch waits out its visibility
    stalled: float = 0.0  # an environment freezes mid-invocation for a while (Lambda stops it at its timeout)
    recycled: float = 0.0  # after an invocation Lambda discards the environment: the next one starts cold

    @classmethod
    def draw(cls, seed: int) -> Plan:
        """A plan from ``seed``: every shape, standard and FIFO, with and without the guard, faults and chaos; now and
        then (about one seed in 400) a long one (:meth:`draw_long`)."""
        rng = random.Random(f"plan-{seed}")
        if rng.random() < LONG_PLANS:
            return cls.draw_long(seed, rng)
        shape = rng.choice(SHAPES)
        fifo = shape != "batch" and rng.random() < 0.4  # a batch handler runs on a standard queue only
        max_duration = rng.choice((3, 5, 10, 30))
        # Now and then handlers that outlast a SIGTERM's drain (ECS stops a task within 120 s): drawn from a generator
        # of its own, so they shift none of the other draws: each seed's plan is the same with or without them.
        drain = random.Random(f"drain-{seed}")
        long_handlers = drain.random() < LONG_HANDLERS
        if long_handlers:
            max_duration = 300
        max_receive_count = rng.choice((2, 3, 5))
        consumers = rng.choice((1, 1, 2))
        chaos_until = rng.choice((30.0, 60.0, 120.0))
        kinds, faults = _kinds_and_faults(rng, chaos_until)
        kills = tuple((rng.uniform(1, chaos_until), rng.randrange(consumers)) for _ in range(rng.choice((0, 0, 1, 2))))
        sigterms = tuple((rng.uniform(1, chaos_until), rng.randrange(consumers)) for _ in range(rng.choice((0, 0, 1))))
        if long_handlers:  # a SIGTERM while slow handlers run: the drain ends and hands them back
            kinds += ["slow"] * 4
            sigterms = sigterms or ((drain.uniform(1, 20), drain.randrange(consumers)),)
        return cls(
            seed=seed,
            shape=shape,
            fifo=fifo,
            guard=rng.random() < 0.75,
            max_duration=max_duration,
            concurrency=rng.choice((1, 2, 4, 8)),
            max_receive_count=max_receive_count,
            max_lease=rng.choice((None, None, 30, 8, 4)),
            max_batch=rng.choice((2, 4, 10)),
            batch_window=rng.choice((0, 1, 2)),
            messages=rng.choice((4, 8, 16)),
            groups=rng.choice((1, 2, 4)),
            kinds=tuple(kinds),
            duration=(0.05, min(2.0, max_duration / 2)),
            send_over=rng.choice((0.0, 5.0, 20.0)),
            consumers=consumers,
            consumers_from=rng.choice((0.0, 0.0, 2.0)),
            kills=kills,
            sigterms=sigterms,
            faults=faults,
            chaos_until=chaos_until,
            protection=rng.random() < 0.3,
            ddb_latency_ms=(50.0, rng.choice((200.0, 1500.0))) if rng.random() < 0.1 else None,
        )

    @classmethod
    def draw_long(cls, seed: int, rng: random.Random) -> Plan:
        """A long plan: a FIFO group of two-hour jobs (about 0.9 of max_duration each) and two consumers, so the last
        of the group waits close to SQS's 12 hours from its receive. Slow to run (half a minute: the consumers' ticks
        over a simulated day), so rare."""
        return cls(
            seed=seed,
            shape=rng.choice(("one", "async")),
            fifo=True,
            max_duration=7200,
            concurrency=8,
            messages=7,
            groups=1,
            kinds=("slow",),
            slow=(0.9, 0.98),
            consumers=2,
            send_over=0.0,  # the whole group in the consumers' first receive: its 12 hours run from there
            consumers_from=1.0,
            chaos_until=5.0,
            settle_limit=40 * 3600.0,
            switch_probability=0.0,  # what it explores is waiting, over hours: no preemption, half the switches
        )

    @classmethod
    def draw_lambda(cls, seed: int) -> Plan:
        """A Lambda plan from ``seed`` (``--target lambda``): every shape, standard and FIFO, with and without the
        guard, the function's calls meeting the container's faults, and Lambda's own per invocation: throttles,
        stalls past the timeout, environments discarded (cold starts); the mapping's concurrency (several environments)
        from ``max_tasks`` as LambdaTarget derives it. Drawn from a stream of its own: seed N here is not seed N's
        container plan."""
        rng = random.Random(f"lambda-plan-{seed}")
        shape = rng.choice(SHAPES)
        fifo = shape != "batch" and rng.random() < 0.4
        max_duration = rng.choice((3, 5, 10, 30))
        chaos_until = rng.choice((30.0, 60.0, 120.0))
        kinds, faults = _kinds_and_faults(rng, chaos_until)
        plan = cls(
            seed=seed,
            target="lambda",
            shape=shape,
            fifo=fifo,
            guard=rng.random() < 0.75,
            max_duration=max_duration,
            concurrency=rng.choice((1, 2, 4)) if shape != "batch" else rng.choice((1, 2)),
            batch_size=rng.choice((1, 4, 10)) if shape != "batch" else 10,
            max_receive_count=rng.choice((3, 5)),  # LambdaTarget's least is 3
            max_batch=rng.choice((2, 4, 10)),
            batch_window=rng.choice((0, 1, 2)),
            messages=rng.choice((4, 8, 16)),
            groups=rng.choice((1, 2, 4)),
            kinds=tuple(kinds),
            duration=(0.05, min(2.0, max_duration / 2)),
            send_over=rng.choice((0.0, 5.0, 20.0)),
            consumers_from=rng.choice((0.0, 0.0, 2.0)),
            max_tasks=rng.choice((1, 1, 2)),
            faults=faults,
            chaos_until=chaos_until,
            ddb_latency_ms=(50.0, rng.choice((200.0, 1500.0))) if rng.random() < 0.1 else None,
            throttled=rng.choice((0.0, 0.0, 0.1, 0.25)),
            stalled=rng.choice((0.0, 0.0, 0.1, 0.25)),
            recycled=rng.choice((0.0, 0.2, 0.5)),
        )
        # Every message may wait out the queue's visibility on each receive SQS allows (given up on, throttled, a
        # stopped invocation): the world waits that long to settle.
        target = plan.lambda_target()
        limit = (target.redrive_max_receive_count + 1) * target.queue_visibility_seconds + 600.0
        return replace(plan, settle_limit=limit)

    def lambda_target(self) -> LambdaTarget:
        """The worker's Lambda settings (a Lambda plan's): the function's timeout, the queue's visibility, the
        mapping's BatchSize, window and concurrency, as a deployed worker's."""
        return LambdaTarget(contract=self.contract(), max_tasks=self.max_tasks, memory_mib=512)

    def contract(self) -> WorkerContract:
        values: dict[str, Any] = {
            "max_duration_seconds": self.max_duration,
            "concurrency": self.concurrency,
            "max_receive_count": self.max_receive_count,
            "fifo": self.fifo,
            "idempotent": not self.guard,
            "retry_backoff_base_seconds": 1,
            "retry_backoff_max_seconds": 4,
            "asynchronous": self.shape == "async",
            "batch_size": self.batch_size,
        }
        if self.max_lease is not None:
            values["max_lease_seconds"] = self.max_lease
        if self.shape == "batch":
            values["max_batch"] = self.max_batch
            values["batch_window_seconds"] = self.batch_window
        return WorkerContract(**values)

    def describe(self) -> str:
        """One line: the plan's shape, for a failing seed's report."""
        chaos = f"kills={len(self.kills)} sigterms={len(self.sigterms)}"
        if self.target == "lambda":
            chaos = (
                f"target=lambda batch_size={self.batch_size} max_tasks={self.max_tasks} throttled={self.throttled}"
                f" stalled={self.stalled} recycled={self.recycled}"
            )
        faults = self.faults
        return (
            f"shape={self.shape} fifo={self.fifo} guard={self.guard} max_duration={self.max_duration}"
            f" concurrency={self.concurrency} max_receive_count={self.max_receive_count} max_lease={self.max_lease}"
            f" messages={self.messages} consumers={self.consumers} {chaos} throttle={faults.throttle}"
            f"{' slow_table' if self.ddb_latency_ms else ''}{' protection' if self.protection else ''}"
            f" error_before={faults.error_before} lost_answer={faults.lost_answer} crash={faults.crash}"
            f" brownouts={len(faults.brownouts)}"
        )


def _kinds_and_faults(rng: random.Random, chaos_until: float) -> tuple[list[str], Faults]:
    """A drawn plan's kinds of events and its faults (both targets draw them so)."""
    kinds = ["ok"] * 6 + ["flaky", "poison", "failing", "slow"]
    if rng.random() < 0.3:
        kinds += ["overrun", "hang"]
    if rng.random() < 0.2:
        kinds.append("unavailable")
    throttle, before, lost = (rng.choice((0.0, 0.02, 0.08)) for _ in range(3))
    crash = 0.01 if rng.random() < 0.1 else 0.0
    brownouts: tuple[Brownout, ...] = ()
    if rng.random() < 0.2:
        start = rng.uniform(0, chaos_until)
        brownouts = (Brownout(rng.choice(("sqs", "dynamodb")), start, start + rng.uniform(1, 30)),)
    return kinds, Faults(throttle=throttle, error_before=before, lost_answer=lost, crash=crash, brownouts=brownouts)
