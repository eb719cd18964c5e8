"""What the scaling models read from a template's scaling policies, apart from the models themselves: the scalable
target a policy names, and the one step policy modeled, the wake-up of a worker at ``min_tasks: 0`` (infra/scaling.py).
:mod:`infra.alarms.scaling` (target tracking) and :mod:`infra.alarms.wake_up` both read them, and neither imports the
other's model for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DIMENSION = "ecs:service:DesiredCount"
#: The one step the wake-up has: from the threshold up (lower bound 0, no upper bound), set the capacity to 1.
WAKE_UP_STEPS = [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]


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


def check_step_policy(template: Mapping[str, Any], logical_id: str) -> str:
    """The logical id of the alarm whose action is the step policy ``logical_id``, after checking the policy is the
    wake-up infra/scaling.py creates (ExactCapacity, one step from 0 setting 1, an ECS service's desired count);
    anything else is refused naming the policy."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    properties = resources[logical_id].get("Properties", {})
    where = f"scaling policy {logical_id}"
    config = properties.get("StepScalingPolicyConfiguration") or {}
    if config.get("AdjustmentType") != "ExactCapacity" or config.get("StepAdjustments") != WAKE_UP_STEPS:
        raise ValueError(
            f"{where}: StepScaling {config.get('AdjustmentType')!r} {config.get('StepAdjustments')!r} is not modeled"
            f" (the wake-up: ExactCapacity {WAKE_UP_STEPS})"
        )
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
    return alarms[0]
