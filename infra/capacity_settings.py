"""What a worker's tasks run on and how few of them there may be: ``architecture``, ``spot`` and ``min_tasks: 0``.

The three cost knobs of cdk.json (docs/configuration.md, "What it costs to run"), parsed without the CDK so the
settings, the report and the bill read them the same way:

* ``architecture``: ``"x86_64"`` (the default) or ``"arm64"`` (Graviton, about 20 % cheaper per vCPU and GB hour);
* ``spot``: ``{"on_demand_base": n, "on_demand_weight": w, "spot_weight": s}`` runs the tasks beyond the first
  ``n`` on Fargate Spot in the ratio ``w:s`` (a capacity provider strategy); absent, every task is on-demand;
* ``min_tasks: 0``: the worker scales to zero when its queue is empty and a wake-up policy starts a task when
  messages wait (infra/scaling.py); :data:`WAKE_UP_SECONDS` is how long that may take at worst.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from consumer.contract import check_int
from consumer.errors import ContractError
from infra.alarms.sqs_model import WAKE_DELAY_SECONDS

#: cdk.json's values (infra/service.py maps each to the task's CpuArchitecture and the image's platform).
ARCHITECTURES = ("arm64", "x86_64")
DEFAULT_ARCHITECTURE = "x86_64"
#: "Linux tasks with the ARM64 architecture don't support the Fargate Spot capacity provider."
#: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html
SPOT_ARCHITECTURES = frozenset({"x86_64"})
SPOT_KEYS = ("on_demand_base", "on_demand_weight", "spot_weight")
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CapacityProviderStrategyItem.html: base 0..100000,
# weight 0..1000; a strategy whose every weight is 0 places nothing beyond its base.
MAX_CAPACITY_WEIGHT = 1000
#: What Fargate gives a Spot task before it stops it: a SIGTERM two minutes ahead
#: (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html). The container's
#: stopTimeout fits in it for every contract (it is at most consumer.limits.FARGATE_MAX_STOP_TIMEOUT_SECONDS, equal
#: to this; tests/unit/test_capacity_settings.py holds them together), so a reclaimed task drains as a deploy's does.
SPOT_WARNING_SECONDS = 120

# The wake-up of a worker at zero tasks: the sum of the worst cases of each step, each documented.
#: An inactive queue (no message and no call for six hours: a queue no task polls) publishes no metric, and "a delay
#: of up to 15 minutes occurs when a queue is activated from an inactive state": infra/alarms/sqs_model.py's rule,
#: with its documentation link.
INACTIVE_METRICS_DELAY_SECONDS = WAKE_DELAY_SECONDS
#: The wake-up alarm's period (SQS publishes one-minute metrics) and how many of them in a row must read "messages
#: visible, no task": two, so one late or lost RunningTaskCount datapoint (Container Insights documents no latency)
#: reads as a task-less minute but never wakes a running fleet on its own.
WAKE_UP_PERIOD_SECONDS = 60
WAKE_UP_ALARM_PERIODS = 2
WAKE_UP_ALARM_SECONDS = WAKE_UP_PERIOD_SECONDS * WAKE_UP_ALARM_PERIODS
#: A task from a desired count of 1 to its first receive: Fargate's placement and image pull, then the consumer's
#: start. No AWS figure exists; an allowance, the same one the scenario catalogue uses.
TASK_START_SECONDS = 120
WAKE_UP_SECONDS = INACTIVE_METRICS_DELAY_SECONDS + WAKE_UP_ALARM_SECONDS + TASK_START_SECONDS
#: Why min_tasks 0 is refused on a cluster the stack did not create: the wake-up reads Container Insights'
#: RunningTaskCount, which such a cluster may not publish (a fleet read as zero tasks would be set to one).
ZERO_NEEDS_INSIGHTS = (
    " (0, scale to zero, needs Container Insights' RunningTaskCount, which only a cluster the stack creates is known"
    " to publish: the wake-up would read an existing cluster's fleet as no task)"
)


class CapacityError(ContractError):
    """A cost knob breaks a rule (same message shape as :class:`ContractError`)."""


@dataclass(frozen=True, kw_only=True)
class SpotSettings:
    """A capacity provider strategy: the first ``on_demand_base`` tasks on FARGATE, the rest split
    ``on_demand_weight``:``spot_weight`` between FARGATE and FARGATE_SPOT."""

    on_demand_base: int = 0
    on_demand_weight: int = 0
    spot_weight: int = 1

    def split(self, tasks: int) -> tuple[int, int]:
        """``(on-demand, spot)`` of ``tasks`` as ECS places them: the base first, then by weight. ECS spreads the
        rest in the weights' ratio; rounded here toward on-demand (an estimate, never a Spot-heavy guess)."""
        base = min(tasks, self.on_demand_base)
        rest = tasks - base
        total = self.on_demand_weight + self.spot_weight
        spot = (rest * self.spot_weight) // total if total else 0
        return tasks - spot, spot


def check_architecture(path: str, raw: object) -> str:
    if raw not in ARCHITECTURES:
        raise CapacityError(path, f"must be one of {', '.join(ARCHITECTURES)}", raw)
    return str(raw)


def parse_spot(path: str, raw: object, *, architecture: str, max_tasks: int) -> SpotSettings:
    """The ``spot`` setting at ``path``: an object of :data:`SPOT_KEYS`, on an architecture Fargate Spot runs."""
    if not isinstance(raw, Mapping):
        raise CapacityError(path, f"must be an object with keys {', '.join(SPOT_KEYS)}", raw)
    unknown = sorted(set(raw) - set(SPOT_KEYS))
    if unknown:
        raise CapacityError(f"{path}.{unknown[0]}", f"is not a spot key (one of {', '.join(SPOT_KEYS)})", unknown[0])
    if architecture not in SPOT_ARCHITECTURES:
        raise CapacityError(
            path,
            "needs architecture x86_64: Fargate Spot runs no ARM64 task"
            " (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html)",
            architecture,
        )
    try:
        base = check_int(f"{path}.on_demand_base", raw.get("on_demand_base", 0), 0, max_tasks, " (up to max_tasks)")
        on_demand = check_int(f"{path}.on_demand_weight", raw.get("on_demand_weight", 0), 0, MAX_CAPACITY_WEIGHT)
        spot = check_int(f"{path}.spot_weight", raw.get("spot_weight", 1), 1, MAX_CAPACITY_WEIGHT, " (0 runs no Spot)")
    except ContractError as error:
        raise CapacityError(error.parameter, error.rule, error.value) from None
    return SpotSettings(on_demand_base=base, on_demand_weight=on_demand, spot_weight=spot)
