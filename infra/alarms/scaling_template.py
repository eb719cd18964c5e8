"""What the scaling models read from a template's scaling policies, apart from the models themselves: the scalable
target a policy names, and the one kind of step policy modeled, the wake-up of a worker at ``min_tasks: 0``
(infra/scaling.py). :mod:`infra.alarms.scaling` (target tracking) and :mod:`infra.alarms.wake_up` both read them, and
neither imports the other's model for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.alarms.step_scaling import CHANGE_IN_CAPACITY, DEFAULT_STEP_COOLDOWN_SECONDS, EXACT_CAPACITY, StepPolicy

DIMENSION = "ecs:service:DesiredCount"
#: The step policies modeled (infra.alarms.step_scaling): one step from the threshold up (lower bound 0, no upper
#: bound) of a whole number, at least this for each adjustment type.
STEP_ADJUSTMENT_FLOOR = {CHANGE_IN_CAPACITY: 1, EXACT_CAPACITY: 0}
MODELED_STEPS = (
    "one step from the threshold up ({'MetricIntervalLowerBound': 0, 'ScalingAdjustment': n}) of ChangeInCapacity"
    " n >= 1 or ExactCapacity n >= 0"
)


def scalable_target(where: str, resources: Mapping[str, Any], properties: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = properties.get("ScalingTargetId")
    target_id = ref.get("Ref") if isinstance(ref, Mapping) else None
    if (
        not isinstance(target_id, str)
        or resource_type(resources, target_id) != "AWS::ApplicationAutoScaling::ScalableTarget"
    ):
        raise ValueError(f"{where}: ScalingTargetId is not a Ref to a ScalableTarget of the template")
    target: Mapping[str, Any] = resources[target_id]["Properties"]
    if target.get("ScalableDimension") != DIMENSION:
        raise ValueError(f"{where}: ScalableDimension {target.get('ScalableDimension')!r} is not modeled ({DIMENSION})")
    return target


def resource_type(resources: Mapping[str, Any], logical_id: object) -> str | None:
    resource = resources.get(logical_id) if isinstance(logical_id, str) else None
    return resource.get("Type") if isinstance(resource, Mapping) else None


def check_step_policy(template: Mapping[str, Any], logical_id: str) -> StepPolicy:
    """The step policy ``logical_id`` with the one alarm whose action it is, after checking it has the wake-up's
    shape (:data:`MODELED_STEPS`, on an ECS service's desired count, the alarm's only action); anything else is
    refused naming the policy."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    properties = resources[logical_id].get("Properties", {})
    where = f"scaling policy {logical_id}"
    config = properties.get("StepScalingPolicyConfiguration") or {}
    kind, steps = config.get("AdjustmentType"), config.get("StepAdjustments")
    step = steps[0] if isinstance(steps, list) and len(steps) == 1 and isinstance(steps[0], Mapping) else {}
    adjustment = step.get("ScalingAdjustment")
    if (
        kind not in STEP_ADJUSTMENT_FLOOR
        or set(step) != {"MetricIntervalLowerBound", "ScalingAdjustment"}
        or step["MetricIntervalLowerBound"] != 0
        or not isinstance(adjustment, int)
        or isinstance(adjustment, bool)
        or adjustment < STEP_ADJUSTMENT_FLOOR[kind]
    ):
        raise ValueError(f"{where}: StepScaling {kind!r} {steps!r} is not modeled ({MODELED_STEPS})")
    scalable_target(where, resources, properties)
    alarms = [
        alarm_id
        for alarm_id, resource in resources.items()
        if resource.get("Type") == "AWS::CloudWatch::Alarm"
        and {"Ref": logical_id} in resource.get("Properties", {}).get("AlarmActions", [])
    ]
    if len(alarms) != 1:
        raise ValueError(f"{where}: {len(alarms)} alarms act on it, not modeled (the wake-up: one alarm)")
    alarm = resources[alarms[0]]["Properties"]
    if (
        alarm.get("AlarmActions") != [{"Ref": logical_id}]
        or alarm.get("OKActions")
        or alarm.get("InsufficientDataActions")
    ):
        raise ValueError(f"{where}: its alarm {alarms[0]} has other actions, not modeled (the wake-up's only action)")
    cooldown = int(config.get("Cooldown", DEFAULT_STEP_COOLDOWN_SECONDS))
    return StepPolicy(logical_id, alarms[0], kind, adjustment, cooldown)
