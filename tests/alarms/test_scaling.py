"""infra/alarms/scaling.py: each documented target tracking rule (and each reading where the documentation is silent)
has a test here that fails when the rule is taken out. Unit tests run on hand-written templates and loads; one test
runs a burst on the reference prod's synthesized template."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from consumer.contract import WorkerContract
from infra.alarms.definitions import ALARM, INSUFFICIENT_DATA
from infra.alarms.scaling import (
    FLAP_WINDOW_MINUTES,
    Load,
    Minute,
    ScalingPolicy,
    per_task_per_minute,
    policies_from_template,
    simulate,
    summary,
)
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import synthesize
from tests.reference import ENVIRONMENTS

POLICY_ID = "ConsumerBacklogPerTaskScaling"
#: The reference prod's worker: the notifications example (90 s max, 8 at a time, 2 s average): 240 messages a task
#: a minute, target 240 backlog per task.
PROD_CONTRACT = WorkerContract(max_duration_seconds=90, concurrency=8, average_duration_seconds=2)


def metric(query_id: str, namespace: str, name: str, stat: str) -> dict[str, Any]:
    return {
        "Id": query_id,
        "MetricStat": {"Metric": {"Namespace": namespace, "MetricName": name, "Dimensions": []}, "Stat": stat},
        "ReturnData": False,
    }


def template(
    *,
    min_tasks: int = 2,
    max_tasks: int = 20,
    target: float = 240,
    cooldowns: tuple[int, int] | None = (60, 300),
    config: dict[str, Any] | None = None,
    properties: dict[str, Any] | None = None,
    dimension: str = "ecs:service:DesiredCount",
    contract: WorkerContract = PROD_CONTRACT,
) -> dict[str, Any]:
    """The resources the policy and the per-task rate are read from, as the stack writes them (infra/service.py)."""
    tracking: dict[str, Any] = {
        "TargetValue": target,
        "CustomizedMetricSpecification": {
            "Metrics": [
                metric("backlog", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Sum"),
                metric("tasks", "ECS/ContainerInsights", "RunningTaskCount", "Average"),
                {"Id": "backlogPerTask", "Expression": "backlog / tasks", "ReturnData": True},
            ]
        },
    }
    if cooldowns is not None:
        tracking.update(ScaleOutCooldown=cooldowns[0], ScaleInCooldown=cooldowns[1])
    tracking.update(config or {})
    environment: list[dict[str, Any]] = [{"Name": k, "Value": v} for k, v in contract.to_env().items()]
    environment.append({"Name": "QUEUE_URL", "Value": {"Ref": "Queue"}})
    return {
        "Resources": {
            "TaskDefinition": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {"ContainerDefinitions": [{"Name": "Consumer", "Environment": environment}]},
            },
            "Service": {"Type": "AWS::ECS::Service", "Properties": {"TaskDefinition": {"Ref": "TaskDefinition"}}},
            "ScalableTarget": {
                "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
                "Properties": {
                    "MinCapacity": min_tasks,
                    "MaxCapacity": max_tasks,
                    "ResourceId": {
                        "Fn::Join": ["", ["service/", {"Ref": "Cluster"}, "/", {"Fn::GetAtt": ["Service", "Name"]}]]
                    },
                    "ScalableDimension": dimension,
                    "ServiceNamespace": "ecs",
                },
            },
            POLICY_ID: {
                "Type": "AWS::ApplicationAutoScaling::ScalingPolicy",
                "Properties": {
                    "PolicyType": "TargetTrackingScaling",
                    "ScalingTargetId": {"Ref": "ScalableTarget"},
                    "TargetTrackingScalingPolicyConfiguration": tracking,
                    **(properties or {}),
                },
            },
        }
    }


def scale_outs(minutes: list[Minute]) -> list[tuple[int, int]]:
    """(minute, new desired count) of each increase."""
    return [(b.t, b.desired) for a, b in zip(minutes, minutes[1:], strict=False) if b.desired > a.desired]


def scale_ins(minutes: list[Minute]) -> list[tuple[int, int]]:
    return [(b.t, b.desired) for a, b in zip(minutes, minutes[1:], strict=False) if b.desired < a.desired]


# --- the template ------------------------------------------------------------------------------------------------


def test_policy_read_from_the_scalable_target_and_the_policy() -> None:
    policies = policies_from_template(template(min_tasks=2, max_tasks=20, target=240, cooldowns=(60, 300)))
    assert policies == {POLICY_ID: ScalingPolicy(2, 20, 240.0, 60, 300)}


def test_absent_cooldowns_are_application_auto_scaling_defaults_for_ecs() -> None:
    """API_TargetTrackingScalingPolicyConfiguration: 300 s for ECS services, both cooldowns."""
    (policy,) = policies_from_template(template(cooldowns=None)).values()
    assert (policy.scale_out_cooldown, policy.scale_in_cooldown) == (300, 300)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"properties": {"PolicyType": "StepScaling"}}, "StepScaling"),
        ({"config": {"CustomizedMetricSpecification": None, "PredefinedMetricSpecification": {"X": 1}}}, "metric math"),
        ({"config": {"DisableScaleIn": True}}, "DisableScaleIn"),
        ({"dimension": "ecs:service:Other"}, "ecs:service:Other"),
    ],
)
def test_policies_it_does_not_model_are_refused_naming_them(change: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=POLICY_ID) as raised:
        policies_from_template(template(**change))
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("queries", "named"),
    [
        (("tasks / backlog",), "'tasks'"),
        (("backlog * tasks",), "backlog * tasks"),
        (("backlog / tasks", "p90"), "p90"),
    ],
)
def test_metric_math_other_than_backlog_per_task_is_refused(queries: tuple[str, ...], named: str) -> None:
    document = template()
    metrics = document["Resources"][POLICY_ID]["Properties"]["TargetTrackingScalingPolicyConfiguration"][
        "CustomizedMetricSpecification"
    ]["Metrics"]
    metrics[2]["Expression"] = queries[0]
    if len(queries) > 1:
        metrics[0]["MetricStat"]["Stat"] = queries[1]
    with pytest.raises(ValueError, match=POLICY_ID) as raised:
        policies_from_template(document)
    assert named in str(raised.value)


def test_per_task_rate_read_from_the_task_definitions_contract() -> None:
    """concurrency 8 x 60 s / 2 s average = 240 a minute; 2 at a time for 2 minutes each = 1 a minute."""
    assert per_task_per_minute(template()) == 240
    slow = WorkerContract(max_duration_seconds=600, concurrency=2, average_duration_seconds=120)
    assert per_task_per_minute(template(contract=slow), POLICY_ID) == 1


def test_per_task_rate_needs_the_policy_named_when_there_are_several() -> None:
    document = template()
    document["Resources"]["Second"] = copy.deepcopy(document["Resources"][POLICY_ID])
    with pytest.raises(ValueError, match="2 scaling policies"):
        per_task_per_minute(document)
    assert per_task_per_minute(document, "Second") == 240


# --- the alarms --------------------------------------------------------------------------------------------------

#: Target 100, 100 a task a minute, two tasks: a backlog of 250 is 125 per task, above the target.
SMALL = ScalingPolicy(min_tasks=1, max_tasks=50, target=100, scale_out_cooldown=60, scale_in_cooldown=300)


def above_target_for(minutes: int) -> list[float]:
    """250 left over (125 per task) for ``minutes`` minutes, then the two tasks clear it."""
    return [450.0] + [200.0] * (minutes - 1) + [0.0] * 10


def test_scale_out_needs_three_datapoints_above_target() -> None:
    """AlarmHigh: 3 of 3 one-minute datapoints above TargetValue; the policy acts when it is in ALARM."""
    two = simulate(SMALL, Load(above_target_for(2), 100), initial_tasks=2)
    assert [m.backlog_per_task for m in two[:2]] == [125, 125]
    assert scale_outs(two) == []
    three = simulate(SMALL, Load(above_target_for(3), 100), initial_tasks=2)
    assert [m.alarm_high for m in three[:3]] == [INSUFFICIENT_DATA, INSUFFICIENT_DATA, ALARM]
    assert scale_outs(three)[0] == (2, 3)  # ceil(2 x 125 / 100)


def steady_backlog(per_task: float, tasks: int = 10, minutes: int = 40) -> list[float]:
    """A constant backlog of ``per_task`` x ``tasks`` on ``tasks`` busy tasks (100 each a minute)."""
    return [tasks * 100 + per_task * tasks] + [tasks * 100.0] * (minutes - 1)


def test_scale_in_needs_fifteen_datapoints_below_ninety_percent_of_target() -> None:
    """AlarmLow: 15 of 15 datapoints below 90% of TargetValue. At 92 per task on 20 tasks the policy would ask for
    ceil(18.4) = 19, but AlarmLow (below 90) never goes to ALARM."""
    at_92 = simulate(SMALL, Load(steady_backlog(92, tasks=20), 100), initial_tasks=20)
    assert {m.backlog_per_task for m in at_92} == {92}
    assert ALARM not in {m.alarm_low for m in at_92} and scale_ins(at_92) == []
    at_85 = simulate(SMALL, Load(steady_backlog(85), 100), initial_tasks=10)
    assert at_85[13].alarm_low != ALARM and at_85[14].alarm_low == ALARM
    assert scale_ins(at_85)[0][0] == 14


def test_new_capacity_is_proportional_and_clamped_to_min_and_max() -> None:
    """ceil(current x metric / target) within [MinCapacity, MaxCapacity]: a 10x burst asks for more than 20."""
    policy = ScalingPolicy(min_tasks=2, max_tasks=20, target=240, scale_out_cooldown=60, scale_in_cooldown=300)
    minutes = simulate(policy, Load([240.0] * 5 + [2400.0] * 10 + [0.0] * 30, 240))
    assert scale_outs(minutes)[0] == (7, 20)  # ceil(2 x 2880 / 240) = 24, clamped
    # below 216 from minute 10 (the 20 tasks outpace the burst), 15 datapoints later: ceil(20 x 0 / 240), clamped
    assert scale_ins(minutes) == [(24, 2)]


def test_scale_in_removes_less_rounding_the_new_capacity_up() -> None:
    """At 85 per task on 10 tasks the policy keeps ceil(8.5) = 9, never 8 ("rounding up or down ... removing too
    much capacity")."""
    minutes = simulate(SMALL, Load(steady_backlog(85), 100), initial_tasks=10)
    assert scale_ins(minutes)[0] == (14, 9)


# --- the cooldowns -----------------------------------------------------------------------------------------------


def test_scale_ins_are_a_scale_in_cooldown_apart() -> None:
    """The 10 busy tasks stay protected, the metric stays at 85, so each invocation asks for less: one each 300 s."""
    minutes = simulate(SMALL, Load(steady_backlog(85), 100), initial_tasks=10)
    assert scale_ins(minutes) == [(14, 9), (19, 8), (24, 7), (29, 6)]  # ceil(6 x 0.85) = 6: no further


def test_scale_out_in_the_scale_in_cooldown_goes_ahead_at_once() -> None:
    arrivals = steady_backlog(85, minutes=15) + [3000.0] + [1000.0] * 10
    minutes = simulate(SMALL, Load(arrivals, 100), initial_tasks=10)
    assert scale_ins(minutes) == [(14, 9)]
    assert scale_outs(minutes)[0][0] == 17  # 3 datapoints above target, 2 minutes short of the cooldown's end


def test_scale_out_cooldown_counts_the_capacity_it_added() -> None:
    """Within ScaleOutCooldown the policy asks from the capacity before the scale-out (2 tasks), so only a larger
    need scales out again; outside it (no cooldown) it would multiply the 24 it already asked for."""
    policy = ScalingPolicy(min_tasks=1, max_tasks=100, target=60, scale_out_cooldown=300, scale_in_cooldown=300)
    load = Load([600.0] * 6, 60)  # 2 tasks clear 120 a minute; new ones take 10 minutes to start
    minutes = simulate(policy, load, initial_tasks=2, task_start_seconds=600)
    assert [m.backlog_per_task for m in minutes[:4]] == [240, 480, 720, 960]
    assert scale_outs(minutes)[:2] == [(2, 24), (3, 32)]  # ceil(2 x 12), then ceil(2 x 16)
    no_cooldown = ScalingPolicy(min_tasks=1, max_tasks=100, target=60, scale_out_cooldown=0, scale_in_cooldown=300)
    assert scale_outs(simulate(no_cooldown, load, initial_tasks=2, task_start_seconds=600))[:2] == [(2, 24), (3, 100)]


# --- ECS: start time and protection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start_seconds", "processed"),
    [(60, [200, 300, 300]), (90, [200, 250, 300]), (120, [200, 200, 300])],
)
def test_new_tasks_consume_only_after_their_start_time(start_seconds: int, processed: list[float]) -> None:
    """The scale-out at the end of minute 2 adds a third task; it consumes from start_seconds after it."""
    three_at_most = ScalingPolicy(min_tasks=1, max_tasks=3, target=100, scale_out_cooldown=60, scale_in_cooldown=300)
    load = Load([450.0] + [200.0] * 2 + [1000.0] * 3, 100)
    minutes = simulate(three_at_most, load, initial_tasks=2, task_start_seconds=start_seconds)
    assert scale_outs(minutes)[0][0] == 2
    assert [m.processed for m in minutes[3:6]] == processed


def test_protected_tasks_keep_running_below_a_lowered_desired_count() -> None:
    """A task with messages in flight holds scale-in protection: the desired count drops, the running one does not
    until the task is idle (here: the backlog stays, every task stays busy)."""
    minutes = simulate(SMALL, Load(steady_backlog(85), 100), initial_tasks=10)
    after = minutes[14]
    assert (after.desired, after.running, after.backlog > 0) == (9, 10, True)


def test_idle_tasks_stop_as_soon_as_they_are_idle() -> None:
    """The same scale-in, then the arrivals stop: once the backlog is gone the extra tasks are stopped."""
    arrivals = steady_backlog(85, minutes=16) + [0.0] * 5
    minutes = simulate(SMALL, Load(arrivals, 100), initial_tasks=10)
    assert [(m.desired, m.running) for m in minutes[14:18]] == [(9, 10), (9, 10), (9, 9), (9, 9)]
    assert minutes[15].backlog > 0 and minutes[16].backlog == 0


# --- the metric math gap ------------------------------------------------------------------------------------------


def test_no_running_task_leaves_the_metric_without_a_value_and_the_policy_idle() -> None:
    """backlog / 0 is dropped: no datapoint, the alarms stay INSUFFICIENT_DATA and a service at zero tasks never
    scales out, whatever its backlog."""
    policy = ScalingPolicy(min_tasks=0, max_tasks=10, target=100, scale_out_cooldown=60, scale_in_cooldown=300)
    minutes = simulate(policy, Load([100.0] * 30, 100), initial_tasks=0)
    assert {m.backlog_per_task for m in minutes} == {None}
    assert {m.alarm_high for m in minutes} == {m.alarm_low for m in minutes} == {INSUFFICIENT_DATA}
    assert {m.desired for m in minutes} == {0} and minutes[-1].backlog == 3000


def test_a_missing_task_count_drops_the_datapoint() -> None:
    """RunningTaskCount missing is 0 in the expression: the division is dropped. AlarmHigh then needs its breaching
    points old enough (the evaluator's premature-alarm rule): a gap in minute 0 delays the scale-out a minute, a gap
    in minute 1, after a breaching point, does not."""
    load = Load(above_target_for(4), 100)
    assert scale_outs(simulate(SMALL, load, initial_tasks=2))[0][0] == 2
    late = simulate(SMALL, load, initial_tasks=2, missing_task_metric={0})
    assert late[0].backlog_per_task is None and scale_outs(late)[0][0] == 3
    between = simulate(SMALL, load, initial_tasks=2, missing_task_metric={1})
    assert between[1].backlog_per_task is None and scale_outs(between)[0][0] == 2


def test_insufficient_data_never_scales_in() -> None:
    idle = Load([0.0] * 30, 100)
    assert scale_ins(simulate(SMALL, idle, initial_tasks=5)) == [(14, 1)]
    blind = simulate(SMALL, idle, initial_tasks=5, missing_task_metric=set(range(30)))
    assert {m.alarm_low for m in blind} == {INSUFFICIENT_DATA} and scale_ins(blind) == []


# --- the queue -----------------------------------------------------------------------------------------------------


def test_oldest_age_follows_the_arrival_cohorts_drained_in_order() -> None:
    """60 arrive in each of the first two minutes, evenly; one task clears 30 a minute, oldest first."""
    policy = ScalingPolicy(min_tasks=1, max_tasks=1, target=1000, scale_out_cooldown=60, scale_in_cooldown=300)
    minutes = simulate(policy, Load([60.0, 60.0, 0.0, 0.0, 0.0], 30))
    assert [m.backlog for m in minutes] == [30, 60, 30, 0, 0]
    # the oldest left arrived at 30 s, 60 s, 90 s: ages at each minute's end 30, 60, 90, then none
    assert [m.oldest_age_seconds for m in minutes] == [30, 60, 90, 0, 0]


# --- the summary ---------------------------------------------------------------------------------------------------


def minutes_with_desired(counts: list[int]) -> list[Minute]:
    return [Minute(t, 0.0, 0.0, n, n, 0.0, 0.0, 0.0) for t, n in enumerate(counts)]


def test_a_scale_out_within_fifteen_minutes_of_a_scale_in_is_a_flap() -> None:
    """FLAP_WINDOW_MINUTES: AlarmLow's 15 minutes, the low load that justified the scale-in."""
    assert FLAP_WINDOW_MINUTES == 15
    policy = ScalingPolicy(min_tasks=2, max_tasks=20, target=240, scale_out_cooldown=60, scale_in_cooldown=300)
    load = Load([0.0] * 40, 240)
    flap = minutes_with_desired([10] * 5 + [5] * 15 + [8] * 20)
    assert summary(flap, load, policy)["flaps"] == [{"scale_in_at": 5, "scale_out_at": 20}]
    later = minutes_with_desired([10] * 5 + [5] * 16 + [8] * 19)
    assert summary(later, load, policy)["flaps"] == []


def test_summary_compares_with_max_tasks_from_the_start() -> None:
    load = Load([240.0] * 5 + [2400.0] * 10 + [240.0] * 30, 240)
    policy = ScalingPolicy(min_tasks=2, max_tasks=20, target=240, scale_out_cooldown=60, scale_in_cooldown=300)
    result = summary(simulate(policy, load), load, policy)
    assert (result["backlog_from_minute"], result["time_to_drain_minutes"]) == (5, 7)
    assert result["ideal_time_to_drain_minutes"] == 0 and result["ideal_max_oldest_age_seconds"] == 0
    assert result["sized_fleet_task_minutes"] == 35 + 10 * 10


# --- the reference prod, synthesized ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prod_template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference prod (tests/reference.py) alone, synthesized by the real app."""
    outdir: Path = tmp_path_factory.mktemp("cdk.out")
    return synthesize(outdir, {CONTEXT_KEY: {"prod": copy.deepcopy(ENVIRONMENTS["prod"])}})["prod"].json


def test_prod_drains_a_tenfold_burst_within_max_tasks_without_flapping(prod_template: dict[str, Any]) -> None:
    """Usual load: half of what MinCapacity tasks clear; ten times that for 10 minutes, then usual for an hour."""
    ((policy_id, policy),) = policies_from_template(prod_template).items()
    rate = per_task_per_minute(prod_template, policy_id)
    assert (policy.min_tasks, policy.max_tasks, policy.target, rate) == (2, 20, 240, 240)
    usual = policy.min_tasks * rate / 2
    load = Load([usual] * 10 + [10 * usual] * 10 + [usual] * 60, rate)
    result = summary(simulate(policy, load), load, policy)
    assert result["drained_at_minute"] is not None and result["drained_at_minute"] < 20  # before the burst ends
    assert not result["exceeded_max_tasks"] and result["max_desired"] == policy.max_tasks
    assert result["flaps"] == []
    assert [(e["t"], e["to"]) for e in result["scale_outs"]] == [(12, 20)]
    assert [(e["t"], e["to"]) for e in result["scale_ins"]] == [(29, 2)]
    assert math.isclose(result["max_oldest_age_seconds"], 192)
