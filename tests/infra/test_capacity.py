"""The capacity knobs in the template: ``spot`` (a capacity provider strategy) and ``min_tasks: 0`` (scale to zero
with a wake-up). Each knob is compared with the same environment without it, synthesized from this module's own
variants (never cdk.json's): turning a knob on changes exactly what it should and nothing else, and a stack without
it is what it was. Every variant is synthesized by the real app, so cdk-nag runs on each (an open finding fails its
synth); the findings are also read back below.

The permissions tier (tests/infra/test_permissions.py) evaluates the flows a stack's own policies decide. Neither knob
adds one, and the last test here holds the roles to that:

- the wake-up is a CloudWatch alarm whose action is an Application Auto Scaling step policy. CloudWatch invokes the
  policy and Application Auto Scaling sets the desired count under its service-linked role
  ``AWSServiceRoleForApplicationAutoScaling_ECSService`` (``ecs:UpdateService``, ``cloudwatch:*Alarm*`` in the
  AWS-managed ``AWSApplicationAutoscalingECSServicePolicy``), the role the target tracking policy already runs under;
  no resource policy or role of the stack is involved
  (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/auto-scaling-IAM.html);
- Fargate Spot is capacity ECS places the same task definition on: the same task and execution roles, and the
  reclaim reaches the container as the SIGTERM of any stop, no call of the task's
  (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra.capacity_settings import TASK_START_SECONDS, WAKE_UP_SECONDS
from infra.report import nag_results
from infra.scaling import WAKE_UP_EXPRESSION
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import Synthesized, synthesize_once
from tests.infra.contexts import TWO_WORKERS

STACK = "SqsWorker-qa"
#: Two workers: "fast" (the first, max 4) and "idle" (min 1, max 2); each variant turns one knob on.
BASE = TWO_WORKERS
SPOT = {"on_demand_base": 1, "on_demand_weight": 1, "spot_weight": 3}
VARIANTS: dict[str, dict[str, Any]] = {
    "base": BASE,
    "spot": {**BASE, "fast": {**BASE["fast"], "spot": SPOT}},
    "zero": {**BASE, "idle": {**BASE["idle"], "min_tasks": 0}},
}
ASSOCIATIONS = "AWS::ECS::ClusterCapacityProviderAssociations"


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """Each variant as environment ``qa`` (so every name is the same) in a cloud assembly of its own."""
    return {
        name: synthesize_once(tmp_path_factory, {CONTEXT_KEY: {"qa": {"workers": workers}}})["qa"]
        for name, workers in VARIANTS.items()
    }


def service(env: Synthesized, worker: str) -> dict[str, Any]:
    resource: dict[str, Any] = env.json["Resources"][env.logical_id(env.stack.workers[worker].consumer.service)]
    return resource


def alarm(env: Synthesized, name: str) -> dict[str, Any]:
    """The alarm (metric or composite) named ``<stack>-<name>``."""
    found = [
        r["Properties"]
        for r in env.json["Resources"].values()
        if r["Type"].startswith("AWS::CloudWatch::") and r["Properties"].get("AlarmName") == f"{STACK}-{name}"
    ]
    assert len(found) == 1, f"{len(found)} alarms named {STACK}-{name}"
    properties: dict[str, Any] = found[0]
    return properties


def wake_up_policy(env: Synthesized, worker: str) -> str:
    """The logical id of ``worker``'s wake-up step policy (the worker scales to zero)."""
    wake_up = env.stack.workers[worker].consumer.scaling.wake_up
    assert wake_up is not None, f"{worker} has no wake-up"
    return env.logical_id(wake_up.node.default_child)


def cluster_id(env: Synthesized) -> str:
    return env.logical_id(env.stack.node.find_child("Cluster"))


def rule(env: Synthesized, name: str) -> str:
    """A composite alarm's rule with each alarm it reads written as that alarm's logical id."""
    parts = alarm(env, name)["AlarmRule"]["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else p["Fn::GetAtt"][0] for p in parts)


def changed(before: Synthesized, after: Synthesized) -> tuple[set[str], set[str], set[str]]:
    """(added, removed, changed) logical ids between two templates; every other section must be equal."""
    assert {k: v for k, v in before.json.items() if k != "Resources"} == {
        k: v for k, v in after.json.items() if k != "Resources"
    }
    old, new = before.json["Resources"], after.json["Resources"]
    return set(new) - set(old), set(old) - set(new), {k for k in set(old) & set(new) if old[k] != new[k]}


def test_spot_service_runs_on_the_capacity_provider_strategy(variants: dict[str, Synthesized]) -> None:
    """The spot worker's service: the on-demand base and weight on FARGATE, the Spot weight on FARGATE_SPOT, and no
    launch type (ECS takes one or the other)."""
    properties = service(variants["spot"], "fast")["Properties"]
    assert properties["CapacityProviderStrategy"] == [
        {"CapacityProvider": "FARGATE", "Base": 1, "Weight": 1},
        {"CapacityProvider": "FARGATE_SPOT", "Weight": 3},
    ]
    assert "LaunchType" not in properties


def test_a_worker_without_spot_keeps_the_fargate_launch_type(variants: dict[str, Synthesized]) -> None:
    """The spot worker's sibling, and every worker of a stack without spot, runs on the FARGATE launch type."""
    services = [service(variants["spot"], "idle")] + [service(variants["base"], w) for w in BASE]
    for properties in (s["Properties"] for s in services):
        assert (properties["LaunchType"], "CapacityProviderStrategy" in properties) == ("FARGATE", False)


def test_the_cluster_has_fargate_spot_only_where_a_worker_uses_it(variants: dict[str, Synthesized]) -> None:
    """With a spot worker the stack's cluster is associated with FARGATE and FARGATE_SPOT, no default strategy;
    without one there is no association at all."""
    env = variants["spot"]
    (association,) = env.resources(ASSOCIATIONS).values()
    assert association["Properties"] == {
        "CapacityProviders": ["FARGATE", "FARGATE_SPOT"],
        "Cluster": {"Ref": cluster_id(env)},
        "DefaultCapacityProviderStrategy": [],
    }
    assert variants["base"].resources(ASSOCIATIONS) == variants["zero"].resources(ASSOCIATIONS) == {}


def test_the_spot_service_waits_for_the_association(variants: dict[str, Synthesized]) -> None:
    """ECS refuses a strategy naming a provider the cluster is not associated with, and CloudFormation creates in
    parallel whatever does not depend: the service depends on the association (and is deleted before it)."""
    env = variants["spot"]
    (association,) = env.resources(ASSOCIATIONS)
    assert association in service(env, "fast")["DependsOn"]
    assert association not in service(env, "idle")["DependsOn"]


def test_turning_spot_on_replaces_the_service_and_adds_the_association_only(variants: dict[str, Synthesized]) -> None:
    """Against the same stack without spot: the spot worker's service is a new resource (a logical id of its own:
    ECS's UpdateService lists no move from the FARGATE launch type to Fargate capacity providers, so the switch is a
    replacement, never an update ECS may refuse), with its security group; the association is added; what names the
    service (its scalable target, policies, alarms' dimensions, dashboard, outputs) follows it; nothing else changes.
    The new service is the old one with the launch type swapped for the strategy."""
    base, spot = variants["base"], variants["spot"]
    old_outputs, new_outputs = base.json["Outputs"], spot.json["Outputs"]
    assert set(old_outputs) == set(new_outputs)
    moved = {k for k in old_outputs if old_outputs[k] != new_outputs[k]}
    assert moved == {"ServiceName"}, moved  # the first worker's service: its output names the new one
    old_resources, new_resources = base.json["Resources"], spot.json["Resources"]
    added, removed = set(new_resources) - set(old_resources), set(old_resources) - set(new_resources)
    different = {k for k in set(old_resources) & set(new_resources) if old_resources[k] != new_resources[k]}
    (association,) = spot.resources(ASSOCIATIONS)
    old = base.logical_id(base.stack.workers["fast"].consumer.service)
    new = spot.logical_id(spot.stack.workers["fast"].consumer.service)
    assert old != new and new in added and old in removed
    groups = {k for k in added | removed if {**old_resources, **new_resources}[k]["Type"] == "AWS::EC2::SecurityGroup"}
    assert added - groups == {association, new} and removed - groups == {old} and len(groups) == 2
    # What changed names the service (a Ref or GetAtt of its logical id), and nothing else changed.
    assert different and all(
        old in json.dumps(old_resources[k]) and new in json.dumps(new_resources[k]) for k in different
    )
    (old_group,), (new_group,) = groups & removed, groups & added
    renamed = json.dumps({k: new_resources[k] for k in different}).replace(new, old).replace(new_group, old_group)
    assert renamed == json.dumps({k: old_resources[k] for k in different})
    expected = copy.deepcopy(base.json["Resources"][old])
    del expected["Properties"]["LaunchType"]
    expected["Properties"]["CapacityProviderStrategy"] = service(spot, "fast")["Properties"]["CapacityProviderStrategy"]
    # Its own security group in the network configuration, and the association among what it waits for.
    actual = copy.deepcopy(service(spot, "fast"))
    actual["Properties"]["NetworkConfiguration"] = json.loads(
        json.dumps(actual["Properties"]["NetworkConfiguration"]).replace(new_group, old_group)
    )
    assert sorted(actual.pop("DependsOn")) == sorted(
        [association, cluster_id(spot), *(d.replace(old_group, new_group) for d in expected.pop("DependsOn"))]
    )
    assert actual == expected


def test_min_tasks_zero_scales_the_service_to_zero(variants: dict[str, Synthesized]) -> None:
    """A min_tasks 0 worker's scalable target goes down to 0; the min_tasks 1 worker beside it stays at 1."""
    targets = {
        worker: variants["zero"].json["Resources"][
            variants["zero"].logical_id(variants["zero"].stack.workers[worker].consumer.scaling.target)
        ]["Properties"]
        for worker in BASE
    }
    assert [(t["MinCapacity"], t["MaxCapacity"]) for t in targets.values()] == [(1, 4), (0, 2)]


def test_min_tasks_zero_wakes_a_task_when_messages_wait(variants: dict[str, Synthesized]) -> None:
    """The wake-up: an alarm on the metric math "messages visible and no task" in 2 of 2 periods of 60 s, missing data
    not breaching, whose one action is a step policy adding one task (it can never lower the desired count) with a
    cooldown covering the task's start and a late first datapoint; it pages nobody."""
    env = variants["zero"]
    scaling = env.stack.workers["idle"].consumer.scaling
    policy = env.json["Resources"][wake_up_policy(env, "idle")]["Properties"]
    assert policy["PolicyType"] == "StepScaling"
    assert policy["ScalingTargetId"] == {"Ref": env.logical_id(scaling.target)}
    step = policy["StepScalingPolicyConfiguration"]
    assert (step["AdjustmentType"], step["StepAdjustments"], step["Cooldown"]) == (
        "ChangeInCapacity",
        [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
        TASK_START_SECONDS + 120,
    )
    wake = alarm(env, "idle-WakeUp")
    assert wake["AlarmActions"] == [{"Ref": wake_up_policy(env, "idle")}]
    assert "OKActions" not in wake and "InsufficientDataActions" not in wake
    (expression,) = [m for m in wake["Metrics"] if m.get("ReturnData")]
    assert expression["Expression"] == WAKE_UP_EXPRESSION
    inputs = {m["Id"]: m["MetricStat"] for m in wake["Metrics"] if "MetricStat" in m}
    assert {i: (s["Metric"]["MetricName"], s["Period"]) for i, s in inputs.items()} == {
        "visible": ("ApproximateNumberOfMessagesVisible", 60),
        "tasks": ("RunningTaskCount", 60),
    }
    shape = ("Threshold", "ComparisonOperator", "EvaluationPeriods", "DatapointsToAlarm", "TreatMissingData")
    assert tuple(wake[key] for key in shape) == (1, "GreaterThanOrEqualToThreshold", 2, 2, "notBreaching")


def test_min_tasks_zero_allows_for_the_wake_up_in_its_thresholds(variants: dict[str, Synthesized]) -> None:
    """The late-backlog input of ConsumerStalled and the BacklogAge ticket wait WAKE_UP_SECONDS longer than without
    scale to zero, and "no running task" pages only together with a late backlog."""
    zero, base = variants["zero"], variants["base"]
    for name in ("idle-StalledBacklogLate", "idle-BacklogAge"):
        assert alarm(zero, name)["Threshold"] == alarm(base, name)["Threshold"] + WAKE_UP_SECONDS
    late, idle, no_tasks = (zero.logical_id(a) for a in zero.stack.workers["idle"].alarms.stalled_inputs)
    assert rule(zero, "idle-ConsumerStalled") == (
        f'((ALARM("{late}") AND ALARM("{idle}")) OR (ALARM("{no_tasks}") AND ALARM("{late}")))'
    )


def test_a_min_tasks_one_worker_has_no_wake_up_and_its_thresholds_unchanged(variants: dict[str, Synthesized]) -> None:
    """Beside a worker at zero, the min_tasks 1 worker has no wake-up, and its alarms are what they were without
    scale to zero anywhere: "no running task" alone still pages."""
    zero, base = variants["zero"], variants["base"]
    fast = zero.stack.workers["fast"].consumer.scaling
    assert (fast.wake_up, fast.wake_up_alarm) == (None, None)
    names = [r["Properties"].get("AlarmName") for r in zero.json["Resources"].values()]
    assert [n for n in names if n and n.endswith("WakeUp")] == [f"{STACK}-idle-WakeUp"]
    for name in ("StalledBacklogLate", "BacklogAge", "ConsumerStalled"):
        assert alarm(zero, name) == alarm(base, name)
    late, idle, no_tasks = (zero.logical_id(a) for a in zero.stack.workers["fast"].alarms.stalled_inputs)
    assert rule(zero, "ConsumerStalled") == f'((ALARM("{late}") AND ALARM("{idle}")) OR ALARM("{no_tasks}"))'


def test_turning_min_tasks_zero_on_changes_that_workers_scaling_and_alarms_only(
    variants: dict[str, Synthesized],
) -> None:
    """Against the same stack at min_tasks 1: added, the wake-up policy and its alarm; changed, that worker's
    scalable target, the two thresholds, ConsumerStalled and the dashboard that draws them; nothing else."""
    base, zero = variants["base"], variants["zero"]
    added, removed, different = changed(base, zero)
    idle = zero.stack.workers["idle"]
    assert added == {wake_up_policy(zero, "idle"), zero.logical_id(idle.consumer.scaling.wake_up_alarm)}
    assert removed == set()
    expected = {
        zero.logical_id(idle.consumer.scaling.target),
        zero.logical_id(idle.alarms.backlog_age),
        zero.logical_id(idle.alarms.stalled_inputs[0]),
        zero.logical_id(idle.alarms.consumer_stalled),
    }
    assert expected <= different
    others = {zero.json["Resources"][k]["Type"] for k in different - expected}
    assert others <= {"AWS::CloudWatch::Dashboard"}, different - expected


@pytest.mark.parametrize("variant", ["spot", "zero"])
def test_capacity_variants_pass_cdk_nag(variants: dict[str, Synthesized], variant: str) -> None:
    """cdk-nag's AwsSolutions report no open finding on a spot or a scale-to-zero stack, and acknowledge nothing
    more than on the same stack without them."""
    open_findings, acknowledged = nag_results(variants[variant].outdir, STACK)
    assert open_findings == []
    assert acknowledged == nag_results(variants["base"].outdir, STACK)[1]


def test_neither_knob_gives_a_role_an_action(variants: dict[str, Synthesized]) -> None:
    """Every role and policy of the stack, the task and execution roles included, is the same with spot or with
    min_tasks 0 as without: no flow is added for the permissions tier to evaluate (this module's docstring)."""

    def iam(env: Synthesized) -> dict[str, Any]:
        return {k: v for k, v in env.json["Resources"].items() if v["Type"].startswith("AWS::IAM::")}

    assert iam(variants["base"])
    assert iam(variants["spot"]) == iam(variants["base"]) == iam(variants["zero"])
