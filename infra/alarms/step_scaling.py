"""A step scaling policy as Application Auto Scaling applies it each time its alarm invokes it: the one step from the
alarm's threshold up, as a worker's wake-up has (infra/scaling.py), read from the template by
:func:`infra.alarms.scaling_template.check_step_policy`.

- Adjustment types: ExactCapacity makes the capacity the adjustment, ChangeInCapacity adds the adjustment to the
  current capacity (the service's desired count); either way within the scalable target's MinCapacity and
  MaxCapacity: https://docs.aws.amazon.com/autoscaling/application/userguide/step-scaling-policy-overview.html
- The cooldown (default 300 s): "The scaling policy won't increase the desired capacity again unless either a larger
  scale out is triggered or the cooldown period ends. While the cooldown period is in effect, capacity added by the
  initiating scale-out activity is calculated as part of the desired capacity for the next scale-out activity"; a
  scale-in is "blocked until the cooldown period has expired":
  https://docs.aws.amazon.com/autoscaling/application/APIReference/API_StepScalingPolicyConfiguration.html
- CloudWatch invokes the policy at every evaluation its alarm is in ALARM ("Except for Auto Scaling actions, the
  actions happen only on state transitions"): https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html

Reading (the guide is silent): each policy keeps its own cooldown, so a target tracking policy's cooldown neither
blocks nor is ended by a step policy's activity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EXACT_CAPACITY, CHANGE_IN_CAPACITY = "ExactCapacity", "ChangeInCapacity"
#: "If not specified, the default value is 300" (API_StepScalingPolicyConfiguration, Cooldown).
DEFAULT_STEP_COOLDOWN_SECONDS = 300


@dataclass(frozen=True)
class StepPolicy:
    """A step policy of one step from the threshold up: ``adjustment`` as ``adjustment_type`` says (ChangeInCapacity:
    a positive number, a scale-out policy), ``cooldown`` in seconds; ``policy`` and ``alarm`` are the logical ids of
    the policy and of the one alarm whose action it is."""

    policy: str
    alarm: str
    adjustment_type: str
    adjustment: int
    cooldown: int = DEFAULT_STEP_COOLDOWN_SECONDS


class StepScaling:
    """One step policy's invocations over time, with its cooldown, on a target within ``min_tasks``..``max_tasks``."""

    def __init__(self, policy: StepPolicy, min_tasks: int, max_tasks: int) -> None:
        self.policy = policy
        self.bounds = (min_tasks, max_tasks)
        self.scale_out_until = -math.inf
        self.scale_out_base = 0
        self.scale_in_until = -math.inf

    def invoke(self, now: float, desired: int) -> int:
        """The desired count after the alarm invokes the policy at ``now`` on a service whose desired count is
        ``desired``. ChangeInCapacity (positive) only ever scales out: within the cooldown it counts from the
        capacity before the activity that started it, and acts only when that asks for more than ``desired``.
        ExactCapacity scales out to its number, or in to it once no scale-in cooldown of its own runs."""
        policy, (low, high) = self.policy, self.bounds
        in_cooldown = now < self.scale_out_until
        if policy.adjustment_type == CHANGE_IN_CAPACITY:
            wanted = (self.scale_out_base if in_cooldown else desired) + policy.adjustment
        else:
            wanted = policy.adjustment
        wanted = max(low, min(high, wanted))
        if wanted > desired:
            if not in_cooldown:
                self.scale_out_base = desired
            self.scale_out_until = now + policy.cooldown
            self.scale_in_until = -math.inf
            return wanted
        if policy.adjustment_type == EXACT_CAPACITY and wanted < desired and now >= self.scale_in_until:
            self.scale_in_until = now + policy.cooldown
            return wanted
        return desired
