"""The scenario catalogue: what happens, when it starts, and what the alarms must do about it.

Every scenario says its source: ``modeled`` (a script of calls, :mod:`infra.alarms.world`, for what a local run cannot
show in minutes: days of DLQ ageing, a queue idle for hours) or ``recorded`` (calls and EMF lines captured from a real
local run by the lab's recorder, ``python -m bench.alarm_recording``, and read here from infra/alarms/recordings/).
Both go through the same publishing rules (:mod:`infra.alarms.sqs_model`).

``pages`` are the alarms (construct ids, as in infra/queue_alarms.py) that must notify within ``within_minutes`` of
the onset; ``may_page`` ones may notify too (a real failure often trips more than one); anything else notifying is
an unintended page. A scenario with ``wrong=False`` must notify nothing and flap nothing.

A worker that scales to zero (``min_tasks: 0``): while traffic flows its fleet is scripted awake at one task
(:attr:`WorkerFacts.awake_tasks`): with messages every few seconds its task is busy every minute and holds scale-in
protection, so target tracking's scale-in to zero cannot stop it (the simulation says the same: ``steady-at-zero``
derives the fleet from the wake-up and scaling models). Its bounds on ConsumerStalled and BacklogAge grow by the
wake-up time, as their thresholds do (:data:`WAKE_DELAYED`). A scenario that does not apply to it says why
(``skip_at_zero``), and the wake-up scenarios (``only_at_zero``) do not apply to a worker that never sleeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from infra.alarms.world import DAY, HOUR, MINUTE, Timeline, WorkerFacts, World

#: The usual rate of the modeled scenarios (messages a minute) and a quiet one for the ones that last days.
USUAL_PER_MINUTE = 20.0
QUIET_PER_MINUTE = 0.2
#: Bound on a poison message's page into a DLQ idle for days (SQS's first metrics after waking can take 15 minutes;
#: the consumer's own dead_lettered count does not wait for them).
IDLE_DLQ_PAGE_MINUTES = 4


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    source: str
    wrong: bool
    build: Callable[[World], Timeline]
    pages: tuple[str, ...] = ()
    within_minutes: float | None = None
    may_page: tuple[str, ...] = ()
    #: Recorded scenarios: the recording's name under infra/alarms/recordings/.
    recording: str | None = None
    #: Nothing may go to ALARM after the onset (an operator's work on an incident already paged).
    quiet_after_onset: bool = False
    #: Ticket-level alarms this scenario may raise though nothing is broken (a burst beyond max_tasks is late work).
    tickets: tuple[str, ...] = ()
    #: Why the scenario does not apply to a worker that scales to zero (None: it does, its fleet awake).
    skip_at_zero: str | None = None
    #: A wake-up scenario: it applies only to a worker that scales to zero.
    only_at_zero: bool = False
    #: How many times the wake-up alarm must act (go to ALARM) after the onset; None: not checked.
    wake_ups: int | None = None
    #: A bound that depends on the worker (minutes after the onset), used instead of ``within_minutes``.
    bound: Callable[[WorkerFacts], float] | None = None
    #: The load holds the fleet: its desired count must not fall after the onset (Timeline.scale_ins).
    holds_fleet: bool = False
    #: Alarms that go back to ALARM for each new occurrence of the fault (a poison message arriving after the DLQ was
    #: drained, or into one that holds some): ALARM → OK → ALARM is the fault recurring, not a flap. The tables show
    #: each of their notifications once with its count, and time only the ones ``pages`` names from the onset.
    recurring: tuple[str, ...] = ()

    def skipped(self, scales_to_zero: bool) -> str | None:
        """Why this scenario does not run on a worker (None: it runs)."""
        if self.only_at_zero and not scales_to_zero:
            return "min_tasks >= 1: the worker never scales to zero, so it has no wake-up"
        return self.skip_at_zero if scales_to_zero else None


def _background(world: World, end: float, per_minute: float = USUAL_PER_MINUTE) -> None:
    facts = world.facts
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, end, per_minute)


def steady(world: World) -> Timeline:
    _background(world, 2 * HOUR)
    return Timeline(onset=0, end=2 * HOUR)


def idle_then_traffic(world: World) -> Timeline:
    facts = world.facts
    world.set_tasks(0, facts.awake_tasks)
    onset = 30 * MINUTE
    world.steady(onset, onset + HOUR, USUAL_PER_MINUTE)
    return Timeline(onset=onset, end=onset + 90 * MINUTE, idle_since={facts.source: -8 * HOUR, facts.dlq: -8 * HOUR})


def poison_active_dlq(world: World) -> Timeline:
    onset = 30 * MINUTE
    _background(world, HOUR)
    world.dlq_stats(1)  # someone looked at the DLQ: it is active
    world.poisoned(onset)
    return Timeline(onset=onset, end=HOUR)


def poison_idle_dlq(world: World) -> Timeline:
    onset = 30 * MINUTE
    _background(world, 2 * HOUR)
    world.poisoned(onset)
    return Timeline(onset=onset, end=2 * HOUR, idle_since={world.facts.dlq: -3 * DAY})


def handler_fails_all(world: World) -> Timeline:
    facts = world.facts
    onset = 30 * MINUTE
    end = onset + facts.contract.retry_horizon_seconds + HOUR
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, onset, USUAL_PER_MINUTE)
    world.steady(onset, end - 30 * MINUTE, USUAL_PER_MINUTE, "failing")
    return Timeline(onset=onset, end=end, idle_since={facts.dlq: -DAY})


def downstream(outage_seconds: float) -> Callable[[World], Timeline]:
    """Every task's circuit opens at the onset and re-opens after each pause until the downstream is back; the
    messages wait in the source (the tasks receive nothing while paused, each probe hands its message back as a
    fresh copy), then the backlog drains."""

    def build(world: World) -> Timeline:
        facts = world.facts
        contract = facts.contract
        onset = 30 * MINUTE
        back = onset + outage_seconds
        end = back + HOUR
        world.set_tasks(0, facts.awake_tasks)
        world.steady(0, onset, USUAL_PER_MINUTE)
        for task in range(facts.awake_tasks):
            at, opens, copies = onset + task * 0.5, 0, []
            while at < back:
                opens += 1
                probe = world.send(at - 1)  # the message the probe (or the first failure) held: handed back
                world.receive(at - 0.5, probe)
                pause = min(contract.retry_backoff_seconds(opens), contract.retry_backoff_max_seconds)
                copies.append(world.send(at))  # the hand-back: a fresh copy, then the original's delete
                world.delete(at, probe)
                world.count(at, "circuit_opens")
                world.count(at, "deleted")
                at += pause + 1
            for index, copy in enumerate(copies):  # the copies wait out the outage with the rest
                done = back + 2 + task + index * 0.1
                world.receive(done - 1, copy)
                world.delete(done, copy)
                world.count(done, "processed")
                world.count(done, "deleted")
        # While paused nothing is received: the backlog builds, then drains at the fleet's pace.
        arrivals = [onset + i * 60 / USUAL_PER_MINUTE for i in range(int(outage_seconds * USUAL_PER_MINUTE / 60))]
        capacity = facts.per_task_per_minute * facts.awake_tasks / 60
        for index, sent in enumerate(arrivals):
            world.processed(sent, wait=max(0.0, back - sent) + index / capacity)
        world.steady(back, end, USUAL_PER_MINUTE)
        return Timeline(onset=onset, end=end)

    return build


def hung_consumer(world: World) -> Timeline:
    """From the onset every handler hangs: the slots fill, nothing is deleted, the backlog ages; each task exits
    (3, handlers stuck) after the attempt timeout and ECS starts another that hangs too."""
    facts = world.facts
    contract = facts.contract
    onset = 30 * MINUTE
    end = onset + HOUR
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, onset, USUAL_PER_MINUTE)
    held_per_task = contract.concurrency
    at = onset
    for index in range(int(HOUR * USUAL_PER_MINUTE / 60)):
        message_id = world.send(onset + index * 60 / USUAL_PER_MINUTE)
        if index < held_per_task * facts.awake_tasks:
            world.receive(onset + index * 60 / USUAL_PER_MINUTE + 1, message_id)
    while at < end:  # tasks replaced after each attempt timeout (a minute to start again)
        world.set_tasks(at + contract.attempt_timeout_seconds, 0, facts.awake_tasks)
        world.set_tasks(at + contract.attempt_timeout_seconds + MINUTE, facts.awake_tasks)
        at += contract.attempt_timeout_seconds + MINUTE
    return Timeline(onset=onset, end=end)


def tasks_down(running_while_down: int, title_desired: int | None = None) -> Callable[[World], Timeline]:
    """No task consuming from the onset: a crash loop at start-up (desired stays, nothing runs long enough to be
    counted) or a service scaled to zero (desired 0)."""

    def build(world: World) -> Timeline:
        facts = world.facts
        onset = 30 * MINUTE
        end = onset + HOUR
        world.set_tasks(0, facts.awake_tasks)
        world.steady(0, onset, USUAL_PER_MINUTE)
        desired = facts.awake_tasks if title_desired is None else title_desired
        world.set_tasks(onset, running_while_down, desired)
        for index in range(int(HOUR * USUAL_PER_MINUTE / 60)):
            world.send(onset + index * 60 / USUAL_PER_MINUTE)
        return Timeline(onset=onset, end=end)

    return build


def deploy_replaces_tasks(world: World) -> Timeline:
    facts = world.facts
    onset = 30 * MINUTE
    world.set_tasks(0, facts.awake_tasks)
    world.set_tasks(onset, facts.awake_tasks * 2, facts.awake_tasks)  # new tasks start before the old ones stop
    world.set_tasks(onset + 3 * MINUTE, facts.awake_tasks)
    world.steady(0, 2 * HOUR, USUAL_PER_MINUTE)
    return Timeline(onset=onset, end=2 * HOUR)


def scale_in_to_minimum(world: World) -> Timeline:
    facts = world.facts
    onset = 30 * MINUTE
    world.set_tasks(0, facts.max_tasks)
    for step in range(facts.max_tasks - facts.awake_tasks + 1):
        world.set_tasks(onset + step * 5 * MINUTE, facts.max_tasks - step)
    world.steady(0, onset, USUAL_PER_MINUTE * 5)
    world.steady(onset, 3 * HOUR, USUAL_PER_MINUTE)
    return Timeline(onset=onset, end=3 * HOUR)


def burst(world: World) -> Timeline:
    """Ten times the usual rate for 15 minutes; the fleet grows as the scaling simulation says and drains in order."""
    from infra.alarms.scaling_bridge import burst_fleet  # the scaling model, shared with the scaling table

    return burst_fleet(world, usual_per_minute=USUAL_PER_MINUTE, factor=10, onset=30 * MINUTE, minutes=15)


def _dlq_messages(world: World, onset: float, count: int) -> list[str]:
    """``count`` poison messages moved to the DLQ at the onset: the DLQ ids the operator then works with."""
    moved = []
    for index in range(count):
        message_id = world.send(onset + index)
        world.receive(onset + index + 1, message_id)
        moved.append(world.dead_letter(onset + index + 2, message_id))
        world.count(onset + index + 2, "poisoned")
    return moved


def operator_works_dlq(world: World) -> Timeline:
    """A DLQ page worked with the runbook's own commands over three days: stats, peek twice, export, a redrive dry
    run, then the redrive of what the fix makes good and an export --delete of the rest."""
    facts = world.facts
    onset = 30 * MINUTE
    end = 3 * DAY
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, end, QUIET_PER_MINUTE)
    moved = _dlq_messages(world, onset, 5)
    world.dlq_stats(onset + 10 * MINUTE)
    world.dlq_read(onset + 11 * MINUTE, moved)  # peek
    world.dlq_read(onset + 2 * HOUR, moved)  # peek again, after lunch
    world.dlq_read(onset + DAY, moved, visibility=60)  # export --out (no --delete)
    world.dlq_stats(onset + DAY + HOUR)
    world.dlq_read(onset + 2 * DAY, moved)  # redrive --dry-run
    world.dlq_redrive(onset + 2 * DAY + HOUR, moved[:4])
    world.dlq_read(onset + 2 * DAY + 2 * HOUR, moved[4:], release=False)  # export --delete
    world.delete(onset + 2 * DAY + 2 * HOUR + 1, moved[4], facts.dlq)
    return Timeline(onset=onset, end=end)


def dlq_untouched(inspected: bool) -> Callable[[World], Timeline]:
    """One poison message left in the DLQ until it expires; ``inspected``: the operator peeked at it three times on
    the first day (three receives: SQS's age metric leaves it out from then on)."""

    def build(world: World) -> Timeline:
        facts = world.facts
        onset = 30 * MINUTE
        retention = facts.contract.dlq_retention_seconds
        end = onset + retention + 2 * HOUR
        world.set_tasks(0, facts.awake_tasks)
        world.steady(0, end, QUIET_PER_MINUTE)
        (moved,) = _dlq_messages(world, onset, 1)
        if inspected:
            for hour in (1, 2, 5):
                world.dlq_read(onset + hour * HOUR, [moved])
        return Timeline(onset=onset, end=end, expiries=[onset + 2 + retention])

    return build


def backstop_move_untouched(world: World) -> Timeline:
    """SQS's redrive policy (the backstop) moves a message near the end of the source's retention: its expiry
    counts from the original enqueue time, so it has the least time left of any DLQ message."""
    facts = world.facts
    contract = facts.contract
    onset = 30 * MINUTE
    enqueued = onset - contract.source_retention_seconds + HOUR
    end = enqueued + contract.dlq_retention_seconds + 2 * HOUR
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, end, QUIET_PER_MINUTE)
    world.send(onset, facts.dlq, by="redrive", enqueued=enqueued)
    return Timeline(onset=onset, end=end, expiries=[enqueued + contract.dlq_retention_seconds])


def trickle_drained_daily(world: World) -> Timeline:
    """One poison message an hour for a week, the DLQ emptied every morning with the runbook's ``export --delete``:
    no message is ever older than a day, so nothing is at risk of expiring, though the DLQ holds one in every hour.
    The export receives each message (a lease of 30 s) and deletes it a second later, within one minute."""
    facts = world.facts
    onset = 30 * MINUTE
    end = onset + 7 * DAY
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, end, QUIET_PER_MINUTE)
    held: list[str] = []
    drains = iter(range(9 * HOUR + 10, end, DAY))  # every morning at 09:00:10
    drain = next(drains)
    for hour in range(7 * 24):
        at = onset + hour * HOUR
        while drain < at:
            world.dlq_read(drain, held, release=False)  # export --delete: each message received, then deleted
            for index, message_id in enumerate(held):
                world.delete(drain + 1 + 0.01 * index, message_id, facts.dlq)
            held, drain = [], next(drains, end)
        held += _dlq_messages(world, at, 1)
    return Timeline(onset=onset, end=end)


# --- a worker at zero tasks (min_tasks 0) ------------------------------------------------------------------------
#: The alarms whose thresholds carry the wake-up time (infra/queue_alarms.py, wake_up_seconds).
WAKE_DELAYED = ("ConsumerStalled", "BacklogAge")
#: StalledBacklogLate's evaluation: 3 one-minute periods (infra/queue_alarms.py BACKLOG_AGE_EVALUATION_MINUTES).
LATE_EVALUATION_MINUTES = 3
#: The wake-up scenarios: a batch of this many minutes at the usual rate arrives on a fleet at zero.
BATCH_MINUTES = 10


def _zero_idle(world: World, source_idle_hours: float) -> dict[str, float]:
    """The queues' last activity before t = 0: the source ``source_idle_hours`` ago, the DLQ 8 hours (inactive)."""
    return {world.facts.source: -source_idle_hours * HOUR, world.facts.dlq: -8 * HOUR}


def asleep(world: World) -> Timeline:
    """(a) At zero tasks with an empty source for six hours, both queues idle for eight before: no message, no task.
    The wake-up must not act and nothing may notify or flap (no task is the worker asleep, not stalled)."""
    world.set_tasks(0, 0, 0)
    return Timeline(onset=30 * MINUTE, end=6 * HOUR, idle_since=_zero_idle(world, 8))


def woken(source_idle_hours: float) -> Callable[[World], Timeline]:
    """(b), (c) At zero tasks, a batch at the usual rate for ``BATCH_MINUTES`` from the onset; the source last held a
    message ``source_idle_hours`` before t = 0 (over 6 h: inactive, so SQS publishes nothing for up to 15 minutes
    after the first message). The fleet comes from the models: the wake-up alarm evaluated on the queue's published
    datapoints starts one task, target tracking manages it and scales in to zero once the queue stays empty."""

    def build(world: World) -> Timeline:
        from infra.alarms.scaling_bridge import policy_of
        from infra.alarms.wake_up import WakeUp, scale_ins, woken_fleet

        assert isinstance(world.wake_up, WakeUp)
        onset, end = 30 * MINUTE, 30 * MINUTE + 2 * HOUR
        first = onset // MINUTE
        arrivals = [USUAL_PER_MINUTE if first <= m < first + BATCH_MINUTES else 0.0 for m in range(end // MINUTE)]
        idle = _zero_idle(world, source_idle_hours)
        minutes, woken = woken_fleet(world, arrivals, policy_of(world), world.wake_up, idle_since=idle)
        return Timeline(onset=onset, end=end, idle_since=idle, wake_ups=woken, scale_ins=scale_ins(minutes, 0))

    return build


def steady_at_zero(world: World) -> Timeline:
    """Steady traffic for two hours from the onset on a fleet at zero, the source active, derived from the wake-up
    and scaling models: the reading behind scripting every other scenario's fleet awake at one task."""
    from infra.alarms.scaling_bridge import policy_of
    from infra.alarms.wake_up import WakeUp, scale_ins, woken_fleet

    assert isinstance(world.wake_up, WakeUp)
    onset, end = 30 * MINUTE, 30 * MINUTE + 2 * HOUR
    arrivals = [USUAL_PER_MINUTE if m >= onset // MINUTE else 0.0 for m in range(end // MINUTE)]
    idle = _zero_idle(world, 1)
    minutes, woken = woken_fleet(world, arrivals, policy_of(world), world.wake_up, idle_since=idle)
    return Timeline(onset=onset, end=end, idle_since=idle, wake_ups=woken, scale_ins=scale_ins(minutes, 0))


def wake_up_fails(world: World) -> Timeline:
    """(d) At zero tasks, messages arrive on an active source at the usual rate; the wake-up acts but no task ever
    runs: it crash-loops at start-up, or the service cannot place it. Its alarm stays in ALARM, so its policy raises
    the desired count again after each cooldown, up to max_tasks. ConsumerStalled must page within
    acceptable_latency + WAKE_UP_SECONDS + StalledBacklogLate's 3 evaluation minutes + 1 minute (:func:`_fails_bound`).
    """
    from infra.alarms.step_scaling import StepScaling
    from infra.alarms.wake_up import WakeUp

    assert isinstance(world.wake_up, WakeUp)
    onset, end = 30 * MINUTE, 30 * MINUTE + HOUR
    idle = _zero_idle(world, 1)
    world.set_tasks(0, 0, 0)
    for index in range(int(HOUR * USUAL_PER_MINUTE / 60)):
        world.send(onset + index * 60 / USUAL_PER_MINUTE)
    policy, desired, acted = StepScaling(world.wake_up.step, world.facts.min_tasks, world.facts.max_tasks), 0, []
    for t in (t for t in world.wake_up.acting(world, end=end, idle_since=idle) if t >= onset):
        raised = policy.invoke(t, desired)
        if raised != desired:
            world.set_tasks(t, 0, raised)
            desired = raised
            acted.append(float(t))
    return Timeline(onset=onset, end=end, idle_since=idle, wake_ups=[(t, None) for t in acted])


# --- a late Container Insights datapoint (the ci-late rule) ---------------------------------------------------------
#: The fleet the loaded scenario holds (max_tasks where that is fewer), and the share of target tracking's target its
#: backlog per task stays at: between AlarmLow's 90 % and the target, so the policy neither scales in nor out.
LOADED_FLEET = 5
HELD_SHARE_OF_TARGET = 0.95
#: How late the late RunningTaskCount datapoint reaches CloudWatch after its minute's end: the evaluation that
#: would read it reads the minute as "no task".
LATE_SECONDS = 60
#: Traffic after a sleep, as a share of what one task clears: more than one task's worth, so the woken fleet grows.
GROWING_SHARE_OF_TASK = 1.5


def _modeled_fleet(world: World, arrivals: list[float], initial_tasks: int, idle: dict[str, float]) -> Timeline:
    """``arrivals`` on the fleet target tracking (and, at min_tasks 0, the wake-up) makes of it, as calls; the
    timeline's end, wake-ups and cuts of the desired count filled in (its onset left to the caller)."""
    from infra.alarms.fleet import fleet_calls
    from infra.alarms.scaling import Load, simulate
    from infra.alarms.scaling_bridge import policy_of
    from infra.alarms.wake_up import WakeUp, scale_ins, woken_fleet

    policy, end = policy_of(world), len(arrivals) * MINUTE
    if isinstance(world.wake_up, WakeUp):
        fleet, woken = woken_fleet(world, arrivals, policy, world.wake_up, initial_tasks=initial_tasks, idle_since=idle)
        return Timeline(onset=0, end=end, idle_since=idle, wake_ups=woken, scale_ins=scale_ins(fleet, initial_tasks))
    late = {int(minute // MINUTE) for minute in world.late_task_counts}
    load = Load(arrivals, world.facts.per_task_per_minute)
    fleet = simulate(policy, load, initial_tasks=initial_tasks, missing_task_metric=late)
    fleet_calls(world, arrivals, fleet)
    return Timeline(onset=0, end=end, idle_since=idle, scale_ins=scale_ins(fleet, initial_tasks))


def late_task_count(world: World) -> Timeline:
    """A fleet of LOADED_FLEET tasks under a load that holds it (arrivals at its capacity over a standing backlog of
    HELD_SHARE_OF_TARGET of the target per task); the RunningTaskCount datapoint of the onset's minute reaches
    CloudWatch LATE_SECONDS late. Nothing may page, the desired count may not fall, and a wake-up may not act."""
    from infra.alarms.scaling_bridge import policy_of

    facts = world.facts
    fleet = min(LOADED_FLEET, facts.max_tasks)
    onset, end = 30 * MINUTE, 50 * MINUTE  # longer than any alarm that reads the late minute looks back
    standing = HELD_SHARE_OF_TARGET * policy_of(world).target * fleet
    capacity = fleet * facts.per_task_per_minute
    arrivals = [capacity + (standing if m == 0 else 0.0) for m in range(end // MINUTE)]
    world.late_task_count(onset, LATE_SECONDS)
    return replace(_modeled_fleet(world, arrivals, fleet, {}), onset=onset)


def asleep_then_traffic(world: World) -> Timeline:
    """At zero tasks on a source idle for 8 hours (inactive: SQS's first datapoint up to 15 minutes after the first
    message), then for an hour traffic more than one task clears (GROWING_SHARE_OF_TASK); target tracking grows the
    woken fleet, and the RunningTaskCount datapoint of the first minute it is at its largest reaches CloudWatch
    LATE_SECONDS late. The task must run within WAKE_UP_SECONDS of the first message, nothing may page, and the
    wake-up acts once and never lowers the desired count."""
    from infra.alarms.scaling_bridge import policy_of
    from infra.alarms.wake_up import WakeUp, woken_fleet

    assert isinstance(world.wake_up, WakeUp)
    onset, end = 30 * MINUTE, 30 * MINUTE + HOUR
    rate = GROWING_SHARE_OF_TASK * world.facts.per_task_per_minute
    arrivals = [rate if m >= onset // MINUTE else 0.0 for m in range(end // MINUTE)]
    idle = _zero_idle(world, 8)
    probe = World(world.facts, created=world.created)  # where the fleet peaks, before any datapoint is late
    grown, _ = woken_fleet(probe, arrivals, policy_of(world), world.wake_up, idle_since=idle)
    peak = max(m.running for m in grown)
    at_peak = next(m.t for m in grown if m.running == peak)
    world.late_task_count((at_peak + 1) * MINUTE, LATE_SECONDS)  # the minute that reports at_peak's end
    return replace(_modeled_fleet(world, arrivals, 0, idle), onset=onset)


def _fails_bound(facts: WorkerFacts) -> float:
    """wake-up-fails' bound, minutes: the late backlog's threshold (acceptable latency + the wake-up time), its three
    evaluation minutes, and a minute for the age datapoint's own minute."""
    from infra.capacity_settings import WAKE_UP_SECONDS

    return (facts.contract.acceptable_latency_seconds + WAKE_UP_SECONDS) / 60 + LATE_EVALUATION_MINUTES + 1


ZERO_IS_NORMAL = (
    "min_tasks 0: no task is the worker asleep, not a fault; its failure (messages wait and no task starts) is"
    " wake-up-fails"
)

DLQ_PAGES = ("DlqDepth",)
STALLED = ("ConsumerStalled",)

CATALOGUE: tuple[Scenario, ...] = (
    Scenario("steady", "steady traffic, nothing wrong (2 h)", "modeled", False, steady),
    Scenario("idle-then-traffic", "queues idle for 8 h, then traffic", "modeled", False, idle_then_traffic),
    Scenario("poison-active-dlq", "a poison message into an active DLQ", "modeled", True, poison_active_dlq, DLQ_PAGES, 2),
    Scenario(
        "poison-idle-dlq", "a poison message into a DLQ idle for days", "modeled", True, poison_idle_dlq, DLQ_PAGES,
        IDLE_DLQ_PAGE_MINUTES,
    ),
    Scenario(
        "handler-fails-all", "the handler fails every message", "modeled", True, handler_fails_all, DLQ_PAGES, None,
        ("ConsumerStalled", "BacklogAge", "DlqNewArrivals"),
    ),
    Scenario(
        "downstream-outage", "the downstream is down for 30 minutes", "modeled", True, downstream(30 * MINUTE),
        ("DownstreamUnavailable",), 30, ("ConsumerStalled", "BacklogAge"),
    ),
    Scenario("downstream-blip", "the downstream is down for 2 minutes", "modeled", False, downstream(2 * MINUTE)),
    Scenario(
        "hung-consumer", "every handler hangs", "modeled", True, hung_consumer, STALLED, 10, ("BacklogAge",)
    ),
    Scenario(
        "crash-loop", "tasks crash at start-up (a bad deploy)", "modeled", True, tasks_down(0), STALLED, 6,
        ("BacklogAge",),
    ),
    Scenario(
        "no-task-running", "the service scaled to zero", "modeled", True, tasks_down(0, 0), STALLED, 6,
        ("BacklogAge",), skip_at_zero=ZERO_IS_NORMAL,
    ),
    Scenario("deploy-replaces-tasks", "a deploy replaces every task", "modeled", False, deploy_replaces_tasks),
    Scenario("scale-in", "scale-in to the minimum", "modeled", False, scale_in_to_minimum),
    Scenario(
        "burst-10x", "a burst of ten times the usual rate", "modeled", False, burst, tickets=("BacklogAge",),
    ),
    Scenario(
        "operator-works-dlq", "the operator works a DLQ page with the runbook's commands over days", "modeled",
        True, operator_works_dlq, DLQ_PAGES, 2,
    ),
    Scenario(
        "dlq-untouched", "a DLQ message left untouched until it would expire", "modeled", True, dlq_untouched(False),
        ("DlqDepth", "DlqExpiring"), None,
    ),
    Scenario(
        "dlq-inspected", "the same after the operator inspected it three times", "modeled", True, dlq_untouched(True),
        ("DlqDepth", "DlqExpiring"), None,
    ),
    Scenario(
        "backstop-move", "SQS's redrive backstop moves a message near the source's retention", "modeled", True,
        backstop_move_untouched, ("DlqDepth", "DlqExpiring"), None,
    ),
    Scenario(
        "dlq-trickle", "one poison an hour, the DLQ drained every morning, for a week", "modeled", True,
        trickle_drained_daily, DLQ_PAGES, 2, ("DlqNewArrivals",), recurring=("DlqDepth", "DlqNewArrivals"),
    ),
    # A worker at zero tasks (min_tasks 0): the wake-up.
    Scenario(
        "asleep", "at zero tasks, the queue empty for hours", "modeled", False, asleep, only_at_zero=True, wake_ups=0,
    ),
    Scenario(
        "wake-up-active", "at zero tasks, a batch arrives on an active queue", "modeled", False, woken(1),
        only_at_zero=True, wake_ups=1,
    ),
    Scenario(
        "wake-up-inactive", "at zero tasks, a batch arrives on a queue idle over 6 h", "modeled", False, woken(8),
        only_at_zero=True, wake_ups=1,
    ),
    Scenario(
        "steady-at-zero", "steady traffic from zero tasks, the fleet from the models (2 h)", "modeled", False,
        steady_at_zero, only_at_zero=True,
    ),
    Scenario(
        "wake-up-fails", "at zero tasks, messages wait and no task starts", "modeled", True, wake_up_fails, STALLED,
        may_page=("BacklogAge",), only_at_zero=True, wake_ups=1, bound=_fails_bound,
    ),
    Scenario(
        "asleep-then-traffic", "a queue asleep at zero, then traffic; a RunningTaskCount datapoint late once the"
        " fleet has grown", "modeled", False, asleep_then_traffic, only_at_zero=True, wake_ups=1,
    ),
    # Any worker: a late Container Insights datapoint (ci-late) under load.
    Scenario(
        "late-task-count", "a fleet of 5 (max_tasks if fewer) under load, one RunningTaskCount datapoint late",
        "modeled", False, late_task_count, wake_ups=0, holds_fleet=True,
    ),
    # Recorded: a real consumer, producer and the dlq commands against the local endpoint (bench/alarm_recording/).
    Scenario(
        "recorded-poison", "a poison message (recorded run)", "recorded", True, steady, DLQ_PAGES, 2,
        recording="poison-active-dlq",
    ),
    Scenario(
        "recorded-fails-all", "the handler fails every message (recorded run)", "recorded", True, steady, DLQ_PAGES, 3,
        ("DlqNewArrivals",), recording="handler-fails-all",
    ),
    Scenario(
        "recorded-blip", "the downstream is down for 2 minutes (recorded run)", "recorded", False, steady,
        recording="downstream-blip",
    ),
    Scenario(
        "recorded-deploy", "a rolling deploy replaces both tasks (recorded run)", "recorded", False, steady,
        recording="deploy-replaces-tasks",
    ),
    Scenario(
        "recorded-operator", "stats, peek twice, export, redrive dry run on a paged DLQ (recorded run)", "recorded",
        True, steady, (), None, DLQ_PAGES, recording="operator-works-dlq", quiet_after_onset=True,
    ),
)  # fmt: skip
