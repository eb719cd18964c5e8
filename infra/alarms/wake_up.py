"""The wake-up of a worker that scales to zero (``min_tasks: 0``), read from the template and evaluated as AWS does.

infra/scaling.py gives such a worker an alarm that is in ALARM while messages are visible and no task runs, whose
action is a StepScaling policy setting the desired count to exactly 1. That shape, and only it, is read here
(:func:`check_step_policy` refuses any other step policy in one line naming it). When the alarm acts is not assumed:
the alarm is evaluated by the engine on the world's series, so SQS's publishing rules decide it (an active queue: the
minute's datapoint, about a minute; a queue inactive for six hours: no datapoint for up to 15 minutes after the
message that wakes it, :mod:`infra.alarms.sqs_model`). The task then runs ``TASK_START_SECONDS`` after the action
and target tracking (:mod:`infra.alarms.scaling`) manages the fleet from that one task, down to zero again.

- Step scaling policies, ExactCapacity, step adjustments:
  https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-step-scaling-policies.html
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
from infra.alarms.world import World
from infra.capacity_settings import TASK_START_SECONDS, WAKE_UP_SECONDS

__all__ = [
    "TASK_START_SECONDS",
    "WAKE_UP_SECONDS",
    "WakeUp",
    "check_step_policy",
    "wake_up_from_template",
    "wake_ups_from_template",
    "woken_fleet",
]

#: Wake-ups one scenario may need at most (each is a scale-in to zero and a new message): a loop that does not end
#: is a model error, refused rather than run on.
MAX_WAKE_UPS = 100


@dataclass(frozen=True)
class WakeUp:
    """A wake-up: its step policy (logical id) and the alarm whose action it is, with the service the alarm reads."""

    policy: str
    alarm: MetricAlarm
    cluster: str
    service: str

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
        alarm_id = check_step_policy(template, policy)
        (alarm,) = [a for a in alarms if a.logical_id == alarm_id]
        keys = [dict(key[2]) for key in alarm.metric_keys() if key[1] == RUNNING_TASK_COUNT]
        if len(keys) != 1:
            raise ValueError(
                f"alarm {alarm.name}: reads no single service's RunningTaskCount, not modeled as a wake-up"
            )
        found.append(WakeUp(policy, alarm, keys[0].get("ClusterName", ""), keys[0].get("ServiceName", "")))
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
    idle_since: Mapping[str, float] | None = None,
) -> tuple[list[Minute], list[tuple[float, float | None]]]:
    """``arrivals`` (messages a minute from t = 0) on a fleet that starts at zero tasks, written into ``world`` as
    calls and task counts; returns the fleet minute by minute and each wake-up as (when its alarm acted, when its
    task ran), seconds on the world's clock.

    The wake-up and target tracking feed each other (a woken task ends the alarm; a scale-in to zero lets it act
    again), so the fleet is found by fixed point: simulate with the wake-ups found so far, write the calls into a
    scratch world, evaluate the alarm on them, and add the first minute it acts while no task runs or starts; until
    there is none.
    """

    end = len(arrivals) * 60.0
    load = Load(arrivals, world.facts.per_task_per_minute)
    wakes: list[int] = []
    for _ in range(MAX_WAKE_UPS):
        minutes = simulate(policy, load, initial_tasks=0, wake_at=wakes, task_start_seconds=TASK_START_SECONDS)
        scratch = World(world.facts, created=world.created)
        fleet_calls(scratch, arrivals, minutes)
        asleep = [m.t for m in minutes if m.running == 0 and m.desired == 0]
        acts = [t // 60 - 1 for t in wake_up.acting(scratch, end=end, idle_since=idle_since or {})]
        new = [m for m in acts if m in asleep]
        if not new:
            fleet_calls(world, arrivals, minutes)
            return minutes, [((m + 1) * 60.0, (m + 1) * 60.0 + TASK_START_SECONDS) for m in sorted(wakes)]
        if new[0] in wakes:
            raise ValueError(f"wake-up: ExactCapacity 1 at minute {new[0]} set no desired count in the simulation")
        wakes.append(new[0])
    raise ValueError(f"wake-up: more than {MAX_WAKE_UPS} wake-ups in one scenario, the model does not settle")
