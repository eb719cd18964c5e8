"""The burst scenario on the scaling model's clock: the fleet the target-tracking simulation grows, written as calls.

The scaling simulation (:mod:`infra.alarms.scaling`) says, minute by minute, how many tasks run and how many
messages they take; this turns that into the sends, receives and deletes of each message (oldest first), so the
alarms see the burst the fleet actually had.
"""

from __future__ import annotations

from infra.alarms.fleet import fleet_calls
from infra.alarms.scaling import Load, ScalingPolicy, simulate
from infra.alarms.wake_up import WakeUp, scale_ins, woken_fleet
from infra.alarms.world import HOUR, Timeline, World

#: The usual rate of the burst scenario: half of what the minimum fleet clears (so ten times it needs the fleet to
#: grow, as a real burst does), but never below the catalogue's usual rate.
USUAL_SHARE_OF_MIN_FLEET = 0.5


def policy_of(world: World) -> ScalingPolicy:
    """The scaling policy the catalogue read from the template for the first worker (World.policy), else one built
    from the worker's settings with the stack's cooldowns (infra/service.py)."""
    policy = getattr(world, "policy", None)
    if isinstance(policy, ScalingPolicy):
        return policy
    facts = world.facts
    return ScalingPolicy(facts.min_tasks, facts.max_tasks, facts.contract.scaling_target_backlog_per_task, 60, 300)


def burst_fleet(world: World, *, usual_per_minute: float, factor: int, onset: float, minutes: int) -> Timeline:
    facts = world.facts
    usual = max(usual_per_minute, USUAL_SHARE_OF_MIN_FLEET * facts.min_tasks * facts.per_task_per_minute)
    start_minute, total = int(onset // 60), int((onset + 2 * HOUR) // 60)
    arrivals = [usual * (factor if start_minute <= m < start_minute + minutes else 1) for m in range(total)]
    policy = policy_of(world)
    if world.wake_up is not None:  # a worker at zero tasks: the traffic wakes it once its alarms exist
        assert isinstance(world.wake_up, WakeUp)
        arrivals = [rate if m * 60 >= world.created else 0.0 for m, rate in enumerate(arrivals)]
        fleet, woken = woken_fleet(world, arrivals, policy, world.wake_up)
        return Timeline(onset=onset, end=total * 60, wake_ups=woken, scale_ins=scale_ins(fleet, 0))
    fleet = simulate(policy, Load(arrivals, facts.per_task_per_minute))
    fleet_calls(world, arrivals, fleet)
    return Timeline(onset=onset, end=total * 60, scale_ins=scale_ins(fleet, policy.min_tasks))
