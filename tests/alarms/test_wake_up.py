"""infra/alarms/wake_up.py and the scale-to-zero scenarios: the wake-up read from a synthesized min_tasks 0 worker,
its step policy's shape refused when it differs, its semantics in the scaling simulation, and each wake-up scenario
shown able to fail on a template whose alarms lack the allowance it proves (ConsumerStalled's AND, the wake-up time
in StalledBacklogLate's threshold)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from infra.alarms.catalogue import Outcome, run_catalogue, skipped_scenarios, worker_facts
from infra.alarms.scaling import Load, Minute, ScalingPolicy, policies_from_template, simulate
from infra.alarms.scaling_template import check_step_policy
from infra.alarms.scenarios import CATALOGUE, HELD_SHARE_OF_TARGET, LATE_SECONDS
from infra.alarms.step_scaling import StepPolicy, StepScaling
from infra.alarms.template import read_alarms
from infra.alarms.wake_up import wake_up_from_template, woken_fleet
from infra.alarms.world import World
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.settings import EnvironmentSettings, load_environments
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import synthesize
from tests.reference import NOTIFICATIONS

#: A worker that scales to zero, the notifications example (60 s acceptable latency): a framework test's own context.
CONTEXT = {CONTEXT_KEY: {"zero": {"handler": NOTIFICATIONS, "min_tasks": 0, "max_tasks": 5}}}
STACK = "SqsWorker-zero"
CHANGE_ONE = StepPolicy("WakeUp", "WakeUpAlarm", "ChangeInCapacity", 1, 180)
EXACT_ONE = StepPolicy("WakeUp", "WakeUpAlarm", "ExactCapacity", 1, 180)
WAKE_UP_SCENARIOS = (
    "asleep",
    "wake-up-active",
    "wake-up-inactive",
    "steady-at-zero",
    "wake-up-fails",
    "asleep-then-traffic",
)


@pytest.fixture(scope="module")
def zero(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], EnvironmentSettings]:
    """The min_tasks 0 worker's synthesized template and its settings, once for the module."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    synthesize(outdir, CONTEXT)
    (environment,) = load_environments(CONTEXT)
    return json.loads((outdir / f"{STACK}.template.json").read_text()), environment


def resource_id(template: dict[str, Any], prefix: str) -> str:
    (found,) = [str(lid) for lid in template["Resources"] if lid.startswith(prefix)]
    return found


def run(template: dict[str, Any], environment: EnvironmentSettings, tmp_path: Path, *names: str) -> list[Outcome]:
    path = tmp_path / f"{STACK}.template.json"
    path.write_text(json.dumps(template))
    return run_catalogue(path, environment, [s for s in CATALOGUE if s.name in names])


def test_the_wake_up_is_read_from_the_template(zero: tuple[dict[str, Any], EnvironmentSettings]) -> None:
    """Its step policy, its alarm (by name) and the service the alarm reads; target tracking keeps MinCapacity 0."""
    template, _ = zero
    alarms, _ = read_alarms(template, STACK)
    wake_up = wake_up_from_template(template, alarms)
    assert wake_up is not None
    assert (wake_up.policy, wake_up.alarm.name) == (resource_id(template, "ConsumerWakeUp5"), f"{STACK}-WakeUp")
    assert wake_up.service and wake_up.cluster
    (policy,) = policies_from_template(template).values()
    assert (policy.min_tasks, policy.max_tasks) == (0, 5)


MODELED = (
    "one step from the threshold up ({'MetricIntervalLowerBound': 0, 'ScalingAdjustment': n}) of ChangeInCapacity"
    " n >= 1 or ExactCapacity n >= 0"
)


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        (
            {"AdjustmentType": "PercentChangeInCapacity"},
            "'PercentChangeInCapacity' [{'MetricIntervalLowerBound': 0, 'ScalingAdjustment': 1}]",
        ),
        (
            {"AdjustmentType": "ChangeInCapacity", "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 0}]},
            "'ChangeInCapacity' [{'MetricIntervalLowerBound': 0, 'ScalingAdjustment': 0}]",
        ),
        (
            {"StepAdjustments": [{"MetricIntervalUpperBound": 0, "ScalingAdjustment": 1}]},
            "'ChangeInCapacity' [{'MetricIntervalUpperBound': 0, 'ScalingAdjustment': 1}]",
        ),
    ],
)  # fmt: skip
def test_another_step_policy_is_refused_in_one_line_naming_it(
    zero: tuple[dict[str, Any], EnvironmentSettings], change: dict[str, Any], shown: str
) -> None:
    """Only the wake-up's shapes are modeled: anything else would be evaluated as something it is not."""
    template = copy.deepcopy(zero[0])
    policy = resource_id(template, "ConsumerWakeUp5")
    template["Resources"][policy]["Properties"]["StepScalingPolicyConfiguration"].update(change)
    with pytest.raises(ValueError) as refused:
        policies_from_template(template)
    assert str(refused.value) == f"scaling policy {policy}: StepScaling {shown} is not modeled ({MODELED})"


@pytest.mark.parametrize(("kind", "adjustment"), [("ChangeInCapacity", 1), ("ExactCapacity", 1)])
def test_the_step_policy_is_read_as_the_template_has_it(
    zero: tuple[dict[str, Any], EnvironmentSettings], kind: str, adjustment: int
) -> None:
    """Its adjustment type, step and cooldown as synthesized or edited: the model applies what AWS would."""
    template = copy.deepcopy(zero[0])
    policy = resource_id(template, "ConsumerWakeUp5")
    config = template["Resources"][policy]["Properties"]["StepScalingPolicyConfiguration"]
    config.update(
        {
            "AdjustmentType": kind,
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": adjustment}],
            "Cooldown": 240,
        }
    )
    step = check_step_policy(template, policy)
    assert step == StepPolicy(policy, resource_id(template, "ConsumerWakeUpAlarm"), kind, adjustment, 240)


def test_a_wake_up_alarm_that_also_notifies_is_refused(zero: tuple[dict[str, Any], EnvironmentSettings]) -> None:
    template = copy.deepcopy(zero[0])
    policy, alarm = resource_id(template, "ConsumerWakeUp5"), resource_id(template, "ConsumerWakeUpAlarm")
    template["Resources"][alarm]["Properties"]["OKActions"] = [
        {"Ref": next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::SNS::Topic")}
    ]
    with pytest.raises(ValueError) as refused:
        check_step_policy(template, policy)
    assert str(refused.value) == (
        f"scaling policy {policy}: its alarm {alarm} has other actions, not modeled (the wake-up's only action)"
    )


def test_a_step_from_zero_wakes_the_simulated_fleet_and_target_tracking_returns_it_to_zero() -> None:
    """At zero tasks backlog / tasks has no value: without the wake-up the backlog only grows. Invoked at minute 2's
    end (ChangeInCapacity +1 from 0, or ExactCapacity 1: the same from zero) the task runs from minute 4 (120 s),
    drains the backlog, and once the metric has been 0 for AlarmLow's 15 minutes target tracking's proportional rule
    (ceil(1 x 0 / target) = 0, within MinCapacity 0) stops it."""
    policy = ScalingPolicy(0, 2, 240, 60, 300)
    load = Load([100.0] * 3 + [0.0] * 40, 240)
    asleep = simulate(policy, load, initial_tasks=0, task_start_seconds=120)
    assert {m.running for m in asleep} == {0} and asleep[-1].backlog == 300
    for step in (CHANGE_ONE, EXACT_ONE):
        woken = simulate(policy, load, initial_tasks=0, task_start_seconds=120, step=step, step_at=[2])
        assert [m.desired for m in woken[:4]] == [0, 0, 1, 1]
        assert [m.stepped for m in woken[:4]] == [0, 0, 1, 0]
        assert next(m.t for m in woken if m.running) == 4  # the decision at 180 s, ready at 300 s: minute 4's end
        assert next(m.t for m in woken if m.t > 4 and m.backlog == 0) == 6  # 300 waiting, 240 a minute from minute 5
        assert woken[-1].desired == woken[-1].running == 0


def test_change_in_capacity_never_lowers_and_waits_out_its_cooldown() -> None:
    """ChangeInCapacity +1 with a 180 s cooldown: 0 -> 1; invoked again within the cooldown it counts the task it
    added and does nothing; after it, one more, never beyond max_tasks; invoked on a fleet of 5 it adds, never cuts."""
    waking = StepScaling(CHANGE_ONE, 0, 6)
    assert [waking.invoke(t, d) for t, d in [(0, 0), (60, 1), (120, 1), (180, 1)]] == [1, 1, 1, 2]
    assert waking.invoke(240, 6) == 6  # at max_tasks
    assert StepScaling(CHANGE_ONE, 0, 6).invoke(0, 5) == 6
    in_cooldown = StepScaling(CHANGE_ONE, 0, 6)
    in_cooldown.invoke(0, 0)
    assert in_cooldown.invoke(60, 4) == 4  # target tracking grew it meanwhile: 0 + 1 asks for less, nothing happens


def test_exact_capacity_one_on_a_running_fleet_cuts_it_to_one() -> None:
    """GIVEN a fleet of 5 under load, WHEN an ExactCapacity 1 wake-up is invoked (its alarm read a late
    RunningTaskCount as no task), THEN the desired count falls to 1: the former model ignored an invocation while
    tasks ran and so hid it; ChangeInCapacity +1 at the same minute only adds."""
    policy = ScalingPolicy(0, 6, 240, 60, 300)
    load = Load([5 * 240.0] * 10, 240)
    cut = simulate(policy, load, initial_tasks=5, step=EXACT_ONE, step_at=[5])
    assert [m.desired for m in cut[4:6]] == [5, 1] and cut[5].stepped == -4
    raised = simulate(policy, load, initial_tasks=5, step=CHANGE_ONE, step_at=[5])
    assert [m.desired for m in raised[4:6]] == [5, 6] and min(m.desired for m in raised) == 5


def test_the_wake_up_scenarios_hold_on_a_worker_at_zero(
    zero: tuple[dict[str, Any], EnvironmentSettings], tmp_path: Path
) -> None:
    """(a) asleep: nothing acts; (b) an active queue: woken after two minutes (2 of 2), the task runs two later; (c) a
    queue idle over 6 h: SQS's 15-minute delay, then the same, WAKE_UP_SECONDS after the first message; (d) no task
    starts: the policy adds one task per cooldown up to max_tasks and ConsumerStalled pages within
    acceptable_latency + WAKE_UP_SECONDS + 4 minutes; (e) traffic after a sleep grows the fleet and a late datapoint
    then changes nothing."""
    outcomes = {o.scenario.name: o for o in run(*zero, tmp_path, *WAKE_UP_SCENARIOS)}
    assert [(name, o.problems) for name, o in outcomes.items() if not o.intended] == []
    assert outcomes["asleep"].row()["wake_ups"] == []
    assert outcomes["wake-up-active"].row()["wake_ups"] == [{"acted": 2.0, "ran": 4.0}]
    assert outcomes["wake-up-inactive"].row()["wake_ups"] == [{"acted": 17.0, "ran": WAKE_UP_SECONDS / 60}]
    assert outcomes["asleep-then-traffic"].row()["wake_ups"] == [{"acted": 17.0, "ran": WAKE_UP_SECONDS / 60}]
    failed = outcomes["wake-up-fails"]
    assert failed.row()["wake_ups"] == [{"acted": 2.0 + 4 * n, "ran": None} for n in range(5)]
    assert failed.bound() == (60 + WAKE_UP_SECONDS) / 60 + 4
    assert [n["alarm"] for n in failed.row()["notifications"]][0] == "ConsumerStalled"


def test_no_task_is_not_a_page_without_a_late_backlog(
    zero: tuple[dict[str, Any], EnvironmentSettings], tmp_path: Path
) -> None:
    """GIVEN ConsumerStalled's no-task branch without its AND on the late backlog, WHEN the worker sleeps, THEN it
    pages: the asleep scenario is what proves the AND is needed."""
    template = copy.deepcopy(zero[0])
    stalled = template["Resources"][resource_id(template, "AlarmsConsumerStalled")]["Properties"]
    no_tasks = resource_id(template, "AlarmsStalledNoRunningTasks")
    stalled["AlarmRule"] = {"Fn::Join": ["", ['ALARM("', {"Fn::GetAtt": [no_tasks, "Arn"]}, '")']]}
    (outcome,) = run(template, zero[1], tmp_path, "asleep")
    assert outcome.problems and outcome.problems[0].startswith("ConsumerStalled notified ALARM")


def test_the_late_threshold_must_allow_the_wake_up(
    zero: tuple[dict[str, Any], EnvironmentSettings], tmp_path: Path
) -> None:
    """GIVEN StalledBacklogLate's threshold without WAKE_UP_SECONDS, WHEN a batch wakes a worker on an inactive queue,
    THEN ConsumerStalled pages falsely: the wake-up-inactive scenario is what proves the allowance is needed."""
    template = copy.deepcopy(zero[0])
    late = template["Resources"][resource_id(template, "AlarmsStalledBacklogLate")]["Properties"]
    late["Threshold"] -= WAKE_UP_SECONDS
    (outcome,) = run(template, zero[1], tmp_path, "wake-up-inactive")
    assert [p.split(" at ")[0] for p in outcome.problems] == ["ConsumerStalled notified ALARM"]


def test_scenarios_that_do_not_apply_are_skipped_by_their_rule(
    zero: tuple[dict[str, Any], EnvironmentSettings], tmp_path: Path
) -> None:
    """A worker at zero skips no-task-running (zero is its normal state); the wake-up scenarios never run elsewhere."""
    path = tmp_path / "t.template.json"
    path.write_text(json.dumps(zero[0]))
    assert [s.name for s, _ in skipped_scenarios(path)] == ["no-task-running"]
    awake = [s.name for s in CATALOGUE if s.skipped(scales_to_zero=False)]
    assert awake == list(WAKE_UP_SCENARIOS)


def test_a_wake_up_that_never_acts_fails_the_active_scenario(
    zero: tuple[dict[str, Any], EnvironmentSettings], tmp_path: Path
) -> None:
    """GIVEN a wake-up alarm that cannot reach its threshold, WHEN a batch arrives at zero tasks, THEN no task runs,
    the scenario counts no wake-up and ConsumerStalled pages: wake-up-active holds only because the wake-up acts."""
    template = copy.deepcopy(zero[0])
    template["Resources"][resource_id(template, "ConsumerWakeUpAlarm")]["Properties"]["Threshold"] = 2
    (outcome,) = run(template, zero[1], tmp_path, "wake-up-active")
    assert outcome.row()["wake_ups"] == []
    assert "the wake-up acted 0 times, not 1" in outcome.problems
    assert any(p.startswith("ConsumerStalled notified ALARM") for p in outcome.problems)


def reshape(
    template: dict[str, Any], *, kind: str | None = None, periods: int | None = None, cooldown: int = 0
) -> None:
    """Edit the wake-up in place: its policy's adjustment type and cooldown, its alarm's M of M."""
    config = template["Resources"][resource_id(template, "ConsumerWakeUp5")]["Properties"]
    config = config["StepScalingPolicyConfiguration"]
    config.update({"AdjustmentType": kind} if kind else {})
    config.update({"Cooldown": cooldown} if cooldown else {})
    alarm = template["Resources"][resource_id(template, "ConsumerWakeUpAlarm")]["Properties"]
    alarm.update({"EvaluationPeriods": periods, "DatapointsToAlarm": periods} if periods else {})


def fleet_of(
    template: dict[str, Any],
    environment: EnvironmentSettings,
    arrivals: list[float],
    *,
    initial_tasks: int = 0,
    late: dict[float, float] | None = None,
) -> list[Minute]:
    """The fleet target tracking and the template's wake-up make of ``arrivals``, the RunningTaskCount datapoints of
    the ``late`` minutes (their start, s) reaching CloudWatch that many seconds after the minute's end."""
    alarms, _ = read_alarms(template, STACK)
    wake_up = wake_up_from_template(template, alarms)
    assert wake_up is not None
    (policy,) = policies_from_template(template).values()
    world = World(worker_facts(environment)[0])
    for minute, seconds in (late or {}).items():
        world.late_task_count(minute, seconds)
    minutes, _ = woken_fleet(world, arrivals, policy, wake_up, initial_tasks=initial_tasks)
    return minutes


def loaded(template: dict[str, Any]) -> list[float]:
    """The late-task-count scenario's load: a fleet of 5 held at 95 % of its target backlog per task, 40 minutes."""
    (policy,) = policies_from_template(template).values()
    return [5 * 240.0 + (HELD_SHARE_OF_TARGET * policy.target * 5 if m == 0 else 0.0) for m in range(40)]


def test_the_new_scenarios_hold_and_fail_with_the_former_wake_up(
    zero: tuple[dict[str, Any], EnvironmentSettings], tmp_path: Path
) -> None:
    """GIVEN the former wake-up (ExactCapacity 1 on 1 of 1 periods), WHEN one RunningTaskCount datapoint is late
    while a fleet runs (a fleet of 5 under load; the fleet traffic grew after a sleep), THEN its alarm reads "no task",
    acts, and cuts the desired count to 1; the wake-up as synthesized holds both."""
    template, environment = zero
    names = ("late-task-count", "asleep-then-traffic")
    assert {o.scenario.name: o.problems for o in run(template, environment, tmp_path, *names)} == {
        name: [] for name in names
    }
    former = copy.deepcopy(template)
    reshape(former, kind="ExactCapacity", periods=1)
    outcomes = {o.scenario.name: o for o in run(former, environment, tmp_path, *names)}
    late, traffic = outcomes["late-task-count"], outcomes["asleep-then-traffic"]
    assert [p for p in late.problems if "lowered" in p] == [
        "the wake-up lowered the desired count from 5 to 1 at +1.0 min"
    ]
    assert "the wake-up acted 1 times, not 0" in late.problems
    assert any(p.startswith("the wake-up lowered the desired count from 5 to 1") for p in traffic.problems)
    assert "the wake-up acted 2 times, not 1" in traffic.problems


@pytest.mark.parametrize(("kind", "lowest"), [("ChangeInCapacity", 5), ("ExactCapacity", 1)])
def test_two_late_datapoints_in_a_row_act_and_only_an_added_task_keeps_the_fleet(
    zero: tuple[dict[str, Any], EnvironmentSettings], kind: str, lowest: int
) -> None:
    """2 of 2 keeps one late datapoint from acting, not two in a row both still missing at one evaluation (here at
    1920 s): the alarm acts (the ExactCapacity case shows it), and only ChangeInCapacity keeps a fleet of 5 (it adds
    a task, up to max_tasks), where ExactCapacity 1 cuts it. Both halves of the fix are needed."""
    template = copy.deepcopy(zero[0])
    reshape(template, kind=kind)
    late = {1800.0: 2 * LATE_SECONDS, 1860.0: LATE_SECONDS}
    minutes = fleet_of(template, zero[1], loaded(template), initial_tasks=5, late=late)
    assert min(m.desired for m in minutes) == lowest  # at max_tasks (5) the added task is clamped away


@pytest.mark.parametrize(("cooldown", "steps"), [(0, 1), (180, 2)])
def test_the_cooldown_outlasts_a_late_first_datapoint_of_the_woken_task(
    zero: tuple[dict[str, Any], EnvironmentSettings], cooldown: int, steps: int
) -> None:
    """GIVEN a wake from zero, messages still visible once its task runs, and that task's first RunningTaskCount
    datapoint a minute late, THEN the alarm is still in ALARM when a 180 s cooldown ends and the policy adds a second
    task; the synthesized cooldown (task start + two periods) outlasts it: one step."""
    template = copy.deepcopy(zero[0])
    reshape(template, cooldown=cooldown)
    arrivals = [200.0 if m >= 30 else 0.0 for m in range(60)]  # under one task's 240 a minute: a backlog that lasts
    first = next(m.t for m in fleet_of(template, zero[1], arrivals) if m.running)
    minutes = fleet_of(template, zero[1], arrivals, late={(first + 1) * 60.0: LATE_SECONDS})
    assert [m.stepped for m in minutes if m.stepped] == [1] * steps
