"""The wake-up of a worker that scales to zero (``min_tasks: 0``), read from the template and evaluated as AWS does.

infra/scaling.py gives such a worker an alarm that is in ALARM while messages are visible and no task runs, whose
only action is a StepScaling policy. The policy is read as it is (:func:`check_step_policy`: one step of
ChangeInCapacity or ExactCapacity, anything else refused in one line naming it) and applied with its own semantics
at every evaluation its alarm is in ALARM, whatever runs then (:mod:`infra.alarms.step_scaling`): a policy that would
lower a fleet on a late datapoint does so here too. When the alarm acts is not assumed: the alarm is evaluated by
the engine on the world's series, so SQS's and Container Insights' publishing rules decide it (an active queue: the
minute's datapoint; a queue inactive for six hours: no datapoint for up to 15 minutes after the message that wakes
it, :mod:`infra.alarms.sqs_model`; a late RunningTaskCount datapoint, :mod:`infra.alarms.publishers`). A task the
policy adds runs ``TASK_START_SECONDS`` after the action and target tracking (:mod:`infra.alarms.scaling`) manages
the fleet from there, down to zero again.

- Step scaling policies, adjustment types, step adjustments:
  https://docs.aws.amazon.com/autoscaling/application/userguide/step-scaling-policy-overview.html
  and https://docs.aws.amazon.com/autoscaling/application/APIReference/API_StepScalingPolicyConfiguration.html
- CloudWatch repeats an Auto Scaling action every minute the alarm stays in ALARM ("Except for Auto Scaling actions,
  the actions happen only on state transitions"): https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.alarms.definitions import ALARM, MetricAlarm
from infra.alarms.engine import evaluate
from infra.alarms.fleet import fleet_calls
from infra.alarms.publishers import RUNNING_TASK_COUNT, container_insights_series
from infra.alarms.scaling import Load, Minute, ScalingPolicy, simulate
from infra.alarms.scaling_template import check_step_policy
from infra.alarms.sqs_model import QueueSpec, sqs_series
from infra.alarms.step_scaling import StepPolicy
from infra.alarms.world import World
from infra.capacity_settings import TASK_START_SECONDS

__all__ = [
    "WakeUp",
    "scale_ins",
    "wake_up_from_template",
    "wake_ups_from_template",
    "woken_fleet",
]

#: Wake-ups one scenario may need at most (each is a scale-in to zero and a new message): a loop that does not end
#: is a model error, refused rather than run on.
MAX_WAKE_UPS = 100


@dataclass(frozen=True)
class WakeUp:
    """A wake-up: its step policy and the alarm whose action it is, with the service the alarm reads."""

    step: StepPolicy
    alarm: MetricAlarm
    cluster: str
    service: str

    @property
    def policy(self) -> str:
        """The step policy's logical id."""
        return self.step.policy

    def acting(self, world: World, *, end: float, idle_since: Mapping[str, float]) -> list[int]:
        """Every evaluation moment (s) at which the alarm is in ALARM, its action invoked: the world's source queue
        through SQS's publishing rules and its task counts through Container Insights', evaluated by the engine."""
        facts, contract = world.facts, world.facts.contract
        spec = QueueSpec(
            facts.source, contract.fifo, contract.source_retention_seconds, contract.visibility_timeout_seconds
        )
        series = sqs_series(
            [e for e in world.events if e.queue == facts.source],  # the alarm reads the source only
            [spec],
            start=0,
            end=end,
            idle_since={k: v for k, v in idle_since.items() if k == facts.source},
        )
        series.merge(
            container_insights_series(
                world.tasks, cluster=self.cluster, service=self.service, start=0, end=end, late=world.late_task_counts
            )
        )
        changes = evaluate([self.alarm], [], series, end=end, created=world.created)
        acting: list[int] = []
        state, since = "", 0
        for change in [*changes, None]:
            until = int(end) + 60 if change is None else change.t
            if state == ALARM:
                acting.extend(range(since, until, 60))
            if change is not None:
                state, since = change.to_state, change.t
        return acting


def wake_ups_from_template(template: Mapping[str, Any], alarms: Sequence[MetricAlarm]) -> list[WakeUp]:
    """Every wake-up of the template (one per worker with min_tasks 0), its alarm among ``alarms`` (read by
    infra.alarms.template)."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    found = []
    for policy, resource in resources.items():
        properties = resource.get("Properties", {})
        if resource.get("Type") != "AWS::ApplicationAutoScaling::ScalingPolicy":
            continue
        if properties.get("PolicyType") != "StepScaling":
            continue
        step = check_step_policy(template, policy)
        (alarm,) = [a for a in alarms if a.logical_id == step.alarm]
        keys = [dict(key[2]) for key in alarm.metric_keys() if key[1] == RUNNING_TASK_COUNT]
        if len(keys) != 1:
            raise ValueError(
                f"alarm {alarm.name}: reads no single service's RunningTaskCount, not modeled as a wake-up"
            )
        found.append(WakeUp(step, alarm, keys[0].get("ClusterName", ""), keys[0].get("ServiceName", "")))
    return found


def wake_up_from_template(
    template: Mapping[str, Any], alarms: Sequence[MetricAlarm], service: tuple[str, str] | None = None
) -> WakeUp | None:
    """The wake-up of the service ``(cluster, service)`` (default: the first service the alarms read, the first
    worker's), None when that worker does not scale to zero."""
    if service is None:
        services = [
            (dict(key[2]).get("ClusterName", ""), dict(key[2]).get("ServiceName", ""))
            for alarm in alarms
            for key in sorted(alarm.metric_keys())
            if key[1] == RUNNING_TASK_COUNT
        ]
        service = services[0] if services else None
    return next((w for w in wake_ups_from_template(template, alarms) if (w.cluster, w.service) == service), None)


def woken_fleet(
    world: World,
    arrivals: Sequence[float],
    policy: ScalingPolicy,
    wake_up: WakeUp,
    *,
    initial_tasks: int = 0,
    idle_since: Mapping[str, float] | None = None,
) -> tuple[list[Minute], list[tuple[float, float | None]]]:
    """``arrivals`` (messages a minute from t = 0) on a fleet of ``initial_tasks`` (default: zero) under target
    tracking and the wake-up, written into ``world`` as calls and task counts; returns the fleet minute by minute and
    each wake-up as (when its policy raised the desired count, when the task it added ran), seconds on the world's
    clock.

    The wake-up and the fleet feed each other (a running task ends the alarm; a late RunningTaskCount datapoint or a
    scale-in to zero may start it again), so the fleet is found by fixed point: simulate with the alarm's invocations
    found so far, write the calls into a scratch world (with the world's late Container Insights datapoints), evaluate
    the alarm on them, and assume its invocations for the next round, until they are the assumed ones. Every
    invocation is applied with the policy's own semantics, whatever runs then
    (:class:`infra.alarms.step_scaling.StepScaling`). An alarm at a minute's end reads that minute and earlier
    ones, which depend on invocations before it only: the invocations up to the first minute where a round's differ
    from its assumed ones are settled, so each round settles at least one more minute, and the one sequence
    consistent with itself is what the rounds end on, whatever they assumed after that minute.
    """

    end = len(arrivals) * 60.0
    load = Load(arrivals, world.facts.per_task_per_minute)
    missing = {int(minute // 60) for minute in world.late_task_counts}  # target tracking's metric has no value then
    assumed: list[int] = []
    for _ in range(len(arrivals) + 1):
        minutes = simulate(
            policy,
            load,
            initial_tasks=initial_tasks,
            step=wake_up.step,
            step_at=assumed,
            task_start_seconds=TASK_START_SECONDS,
            missing_task_metric=missing,
        )
        scratch = World(world.facts, created=world.created, late_task_counts=dict(world.late_task_counts))
        fleet_calls(scratch, arrivals, minutes)
        acting = wake_up.acting(scratch, end=end, idle_since=idle_since or {})
        invoked = sorted({t // 60 - 1 for t in acting if t // 60 - 1 < len(arrivals)})
        if invoked == assumed:
            fleet_calls(world, arrivals, minutes)
            woke = [(m.t + 1) * 60.0 for m in minutes if m.stepped > 0]
            return minutes, [(at, at + TASK_START_SECONDS) for at in woke]
        assumed = invoked
    raise ValueError(f"wake-up: the fleet and the alarm did not settle in {len(arrivals) + 1} rounds")


def scale_ins(minutes: Sequence[Minute], initial: int) -> list[tuple[float, int, int, bool]]:
    """Each cut of the simulated fleet's desired count: (when, from, to, whether the wake-up's policy made it),
    seconds (the end of the minute whose decision it was)."""
    cuts, previous = [], initial
    for minute in minutes:
        if minute.desired < previous:
            cuts.append(((minute.t + 1) * 60.0, previous, minute.desired, minute.stepped < 0))
        previous = minute.desired
    return cuts
