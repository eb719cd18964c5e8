"""Unit tests for the capacity knobs of cdk.json, ``spot`` and ``min_tasks: 0`` (infra/capacity_settings.py): every
refusal is one line naming the setting's path, the rule and the value, through infra.settings' parser as synth runs
it; the Worker construct, called directly by a team's own app, refuses the same; and the stop timeout of every
contract fits in Fargate Spot's two-minute reclaim warning."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.contract import WorkerContract
from consumer.errors import ContractError
from consumer.limits import FARGATE_MAX_STOP_TIMEOUT_SECONDS, MAX_DURATION_SECONDS
from infra.capacity_settings import MAX_CAPACITY_WEIGHT, SPOT_WARNING_SECONDS, ZERO_NEEDS_INSIGHTS, SpotSettings
from infra.settings import parse_environment
from infra.worker_settings import CONTEXT_KEY
from tests.reference import REPORT_JOB
from tests.unit.support import refusal

HANDLER = "consumer.examples.notifications:handle"
AT = f"{CONTEXT_KEY}.qa"
SPOT_KEYS = "on_demand_base, on_demand_weight, spot_weight"
SPOT_LINK = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html"
EXISTING_CLUSTER_RULE = (
    "needs a cluster the stack creates (leave out cluster_name): an existing cluster's capacity providers are"
    " unknown, and the stack associates FARGATE_SPOT only with its own"
)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # spot: an object of its three keys.
        ({"spot": True}, f'"{AT}.spot" must be an object with keys {SPOT_KEYS}: True'),
        ({"spot": [1, 3]}, f'"{AT}.spot" must be an object with keys {SPOT_KEYS}: [1, 3]'),
        (
            {"spot": {"on_demand_bse": 1}},
            f"\"{AT}.spot.on_demand_bse\" is not a spot key (one of {SPOT_KEYS}): 'on_demand_bse'",
        ),
        # on_demand_base: 0..max_tasks (a base beyond the fleet's maximum is never reached).
        (
            {"max_tasks": 3, "spot": {"on_demand_base": 4}},
            f'"{AT}.spot.on_demand_base" must be between 0 and 3 (up to max_tasks): 4',
        ),
        ({"spot": {"on_demand_base": -1}}, f'"{AT}.spot.on_demand_base" must be between 0 and 2 (up to max_tasks): -1'),
        # The weights: ECS's 0..1000; a Spot weight of 0 would run nothing on Spot.
        ({"spot": {"on_demand_weight": 1001}}, f'"{AT}.spot.on_demand_weight" must be between 0 and 1000: 1001'),
        ({"spot": {"on_demand_weight": -1}}, f'"{AT}.spot.on_demand_weight" must be between 0 and 1000: -1'),
        ({"spot": {"spot_weight": 0}}, f'"{AT}.spot.spot_weight" must be between 1 and 1000 (0 runs no Spot): 0'),
        (
            {"spot": {"spot_weight": 1001}},
            f'"{AT}.spot.spot_weight" must be between 1 and 1000 (0 runs no Spot): 1001',
        ),
        ({"spot": {"spot_weight": True}}, f'"{AT}.spot.spot_weight" must be a whole number: True'),
        # Fargate Spot runs x86_64 tasks only.
        (
            {"architecture": "arm64", "spot": {}},
            f"\"{AT}.spot\" needs architecture x86_64: Fargate Spot runs no ARM64 task ({SPOT_LINK}): 'arm64'",
        ),
        # min_tasks 0 is valid, -1 is not; max_tasks is at least 1 even from a min of 0.
        ({"min_tasks": -1}, f'"{AT}.min_tasks" must be between 0 and 100: -1'),
        (
            {"min_tasks": 0, "max_tasks": 0},
            f'"{AT}.max_tasks" must be between 1 and 100 (from min_tasks, and at least 1): 0',
        ),
    ],
)
def test_capacity_settings_refusals_are_one_line_with_path_rule_and_value(raw: dict[str, Any], message: str) -> None:
    """Each refusal of ``spot`` and ``min_tasks`` is the whole message: the cdk.json path, the rule, the value."""
    assert refusal({"handler": HANDLER, **raw}) == message


def test_an_existing_cluster_refuses_scale_to_zero_and_spot() -> None:
    """With ``cluster_name`` neither its Container Insights nor its capacity providers are known: min_tasks 0 and
    spot are refused, at the environment's top level and under ``workers`` (the path is the worker's)."""
    from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER as cluster  # the CDK only where a test needs it

    zero = refusal({"handler": HANDLER, "min_tasks": 0, **cluster})
    assert zero == f'"{AT}.min_tasks" must be at least 1{ZERO_NEEDS_INSIGHTS}: 0'
    assert refusal({"handler": HANDLER, "spot": {}, **cluster}) == f"\"{AT}.spot\" {EXISTING_CLUSTER_RULE}: 'platform'"
    spot = refusal({"workers": {"plain": {"handler": HANDLER}, "fast": {"handler": HANDLER, "spot": {}}}, **cluster})
    assert spot == f"\"{AT}.workers.fast.spot\" {EXISTING_CLUSTER_RULE}: 'platform'"
    zero = refusal({"workers": {"idle": {"handler": HANDLER, "min_tasks": 0}}, **cluster})
    assert zero == f'"{AT}.workers.idle.min_tasks" must be at least 1{ZERO_NEEDS_INSIGHTS}: 0'


def test_capacity_settings_refusals_name_the_worker_under_workers() -> None:
    """Under ``workers`` a refusal names the worker's own path: ``workers.<name>.spot...``."""
    weight = refusal({"workers": {"fast": {"handler": HANDLER, "spot": {"spot_weight": 0}}}})
    assert weight == f'"{AT}.workers.fast.spot.spot_weight" must be between 1 and 1000 (0 runs no Spot): 0'


def test_min_tasks_zero_is_accepted_with_max_tasks_defaulting_to_two() -> None:
    """``min_tasks: 0`` parses; max_tasks then defaults to 2, as from a min of 1; spot stays off."""
    (worker,) = parse_environment("qa", {"handler": HANDLER, "min_tasks": 0}).workers
    assert (worker.min_tasks, worker.max_tasks, worker.spot) == (0, 2, None)
    (one,) = parse_environment("qa", {"handler": HANDLER, "min_tasks": 0, "max_tasks": 1}).workers
    assert (one.min_tasks, one.max_tasks) == (0, 1)


def test_spot_defaults_put_every_task_on_spot() -> None:
    """``spot: {}`` is no on-demand base, on-demand weight 0, Spot weight 1; leaving ``spot`` out is no Spot."""
    (worker,) = parse_environment("qa", {"handler": HANDLER, "spot": {}}).workers
    assert worker.spot == SpotSettings(on_demand_base=0, on_demand_weight=0, spot_weight=1)
    (plain,) = parse_environment("qa", {"handler": HANDLER}).workers
    assert plain.spot is None


def test_spot_bounds_are_accepted_at_their_edges() -> None:
    """A base equal to max_tasks and both weights at ECS's 1000 parse."""
    raw = {"max_tasks": 4, "spot": {"on_demand_base": 4, "on_demand_weight": 1000, "spot_weight": MAX_CAPACITY_WEIGHT}}
    (worker,) = parse_environment("qa", {"handler": HANDLER, **raw}).workers
    assert worker.spot == SpotSettings(on_demand_base=4, on_demand_weight=1000, spot_weight=1000)


@pytest.mark.parametrize(
    ("spot", "tasks", "split"),
    [
        (SpotSettings(), 0, (0, 0)),
        (SpotSettings(), 4, (0, 4)),
        # The base first: 1 on-demand, then the other 3 at 1:3 -> 0.75 on-demand, rounded toward on-demand.
        (SpotSettings(on_demand_base=1, on_demand_weight=1, spot_weight=3), 1, (1, 0)),
        (SpotSettings(on_demand_base=1, on_demand_weight=1, spot_weight=3), 4, (2, 2)),
        (SpotSettings(on_demand_base=1, on_demand_weight=1, spot_weight=3), 5, (2, 3)),
        # A base of 2 with Spot only beyond it.
        (SpotSettings(on_demand_base=2), 1, (1, 0)),
        (SpotSettings(on_demand_base=2), 6, (2, 4)),
        # Even weights, odd count: the odd task on-demand.
        (SpotSettings(on_demand_weight=1, spot_weight=1), 3, (2, 1)),
    ],
)
def test_spot_split_places_the_base_first_then_by_weight(
    spot: SpotSettings, tasks: int, split: tuple[int, int]
) -> None:
    """``split(tasks)`` is (on-demand, spot) as worked out by hand: the base, then the rest by weight."""
    assert spot.split(tasks) == split
    assert sum(split) == tasks


def test_stop_timeout_fits_in_the_spot_reclaim_warning_for_every_contract() -> None:
    """Fargate's stop timeout cap, the contract's bound, is within the two-minute warning, so a reclaimed task drains
    as a deploy's does: the longest declaration gets at most the warning, and a stop timeout past it is refused."""
    assert FARGATE_MAX_STOP_TIMEOUT_SECONDS <= SPOT_WARNING_SECONDS
    longest = WorkerContract(max_duration_seconds=MAX_DURATION_SECONDS)
    assert longest.stop_timeout_seconds == FARGATE_MAX_STOP_TIMEOUT_SECONDS
    assert (
        WorkerContract(max_duration_seconds=90, stop_timeout_seconds=SPOT_WARNING_SECONDS).stop_timeout_seconds == 120
    )
    with pytest.raises(ContractError, match='"stop_timeout_seconds" must be between'):
        WorkerContract(max_duration_seconds=90, stop_timeout_seconds=SPOT_WARNING_SECONDS + 1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"min_tasks": 0, "running_tasks_reliable": False},
            f'"min_tasks" must be between 1 and 100{ZERO_NEEDS_INSIGHTS}: 0',
        ),
        (
            {"architecture": "arm64", "spot": SpotSettings()},
            "\"spot\" needs architecture x86_64: Fargate Spot runs no ARM64 task: 'arm64'",
        ),
        (
            {"max_tasks": 4, "spot": SpotSettings(on_demand_base=5)},
            '"spot.on_demand_base" must be between 0 and 4 (up to max_tasks): 5',
        ),
        ({"min_tasks": -1}, '"min_tasks" must be between 0 and 100: -1'),
    ],
)
def test_the_construct_refuses_what_the_capacity_settings_refuse(arguments: dict[str, Any], message: str) -> None:
    """Called directly (a team's own app, no cdk.json), the Worker refuses scale to zero on a fleet whose running
    tasks it cannot count, Spot on ARM64 and a base above max_tasks, before anything is built, in one line."""
    from tests.infra.conftest import standalone_worker

    with pytest.raises(ContractError) as refused:
        standalone_worker(REPORT_JOB, **arguments)
    assert str(refused.value) == message


def test_the_synth_report_shows_each_worker_s_capacity() -> None:
    """infra.report's table: min..max with the wake-up bound at zero, and what the tasks run on."""
    from infra.capacity_settings import WAKE_UP_SECONDS
    from infra.report import runs_on, tasks_cell
    from infra.worker_settings import WorkerSettings

    asleep = WorkerSettings(name="a", handler="m:f", min_tasks=0, max_tasks=3, architecture="arm64")
    spot = WorkerSettings(name="b", handler="m:f", min_tasks=2, max_tasks=5, spot=SpotSettings(on_demand_base=1))
    assert (tasks_cell(asleep), runs_on(asleep)) == (f"0..3 (wakes in <= {WAKE_UP_SECONDS} s)", "arm64, on-demand")
    assert (tasks_cell(spot), runs_on(spot)) == ("2..5", "x86_64, Spot beyond 1 on-demand (weights 0:1)")
