"""A worker switched to ``"target": "lambda"``: its function, event source mapping, queue, role, alarms and outputs, every
derived value checked against its :class:`~consumer.lambda_target.LambdaTarget`.

One app, synthesized once (cdk-nag included), built from the reference environments without pinning their layout: the
first reference environment with a worker whose handler Lambda can run is kept as it is (``ORIGINAL``, which must
synthesize exactly as the reference does) and copied with that worker switched (``fn``), switched with provisioned
pollers (``fn-pollers``); ``fn-window`` is a batch handler with a batching window.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from consumer.contract import BINDING_KEYS, IDEMPOTENCY_TABLE_ENV, QUEUE_ARN_ENV, TASK_ROLE_ID_ENV
from consumer.lambda_target import LambdaTarget
from infra.function import (
    LAMBDA_COMMAND,
    LAMBDA_ENTRYPOINT,
    LOG_ACTIONS,
    SOURCE_QUEUE_ACTIONS,
    ConsumerFunction,
)
from infra.report import nag_results
from infra.service import DEAD_LETTER_QUEUE_ACTIONS, IDEMPOTENCY_TABLE_ACTIONS
from infra.worker import Worker
from infra.worker_settings import (
    CONTEXT_KEY,
    ECS_ONLY_KEYS,
    LAMBDA,
    LAMBDA_SECRETS_RULE,
    TARGET_RULE,
    SecretSource,
    SettingsError,
)
from tests.infra.checks import TEMPLATE_CHECKS
from tests.infra.conftest import Synthesized, standalone_worker, synthesize_once
from tests.infra.function_checks import lambda_ready, move_to_lambda
from tests.infra.templates import SHARED, dashboard_body
from tests.reference import ENVIRONMENTS, NOTIFICATIONS

WINDOWED = "tests.infra.handlers:windowed_batch"
#: Five minutes a message, three rounds: more than Lambda's 900 s.
FIVE_MINUTES = "tests.infra.handlers:five_minutes"
POLLERS = {"minimum": 2, "maximum": 5}


READY = lambda_ready(ENVIRONMENTS)
assert READY is not None, "no reference worker can run on Lambda"
ORIGINAL, WORKER = READY


def switched(**extra: Any) -> dict[str, Any]:
    """``ORIGINAL`` with ``WORKER`` on Lambda: its ECS-only settings and secrets left out, ``extra`` added."""
    return move_to_lambda(copy.deepcopy(ENVIRONMENTS[ORIGINAL]), WORKER, **extra)


CONTEXT = {
    CONTEXT_KEY: {
        ORIGINAL: copy.deepcopy(ENVIRONMENTS[ORIGINAL]),
        "fn": switched(),
        "fn-pollers": switched(provisioned_pollers=POLLERS),
        "fn-window": {**SHARED, "handler": WINDOWED, "target": LAMBDA},
    }
}


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    return synthesize_once(tmp_path_factory, CONTEXT)


def built(env: Synthesized) -> tuple[Worker, ConsumerFunction, LambdaTarget]:
    """The switched worker of ``env``, its function construct and its Lambda target."""
    name = WORKER if env.stack.settings.name != "fn-window" else next(iter(env.stack.workers))
    worker = env.stack.workers[name]
    assert isinstance(worker.consumer, ConsumerFunction) and worker.target is not None
    return worker, worker.consumer, worker.target


def function_props(env: Synthesized) -> dict[str, Any]:
    _, consumer, _ = built(env)
    return env.resources("AWS::Lambda::Function")[env.logical_id(consumer.function)]["Properties"]


def mapping_props(env: Synthesized) -> dict[str, Any]:
    _, consumer, _ = built(env)
    return env.resources("AWS::Lambda::EventSourceMapping")[env.logical_id(consumer.mapping)]["Properties"]


def test_lambda_target_function_timeout_memory_and_architecture_follow_the_target(
    apps: dict[str, Synthesized],
) -> None:
    """Timeout is function_timeout_seconds, MemorySize the worker's memory_mib, the architecture the worker's."""
    env = apps["fn"]
    worker, _, target = built(env)
    architecture = {"x86_64": "x86_64", "arm64": "arm64"}[worker.settings.architecture]
    props = function_props(env)
    assert (target.function_timeout_seconds, worker.settings.memory_mib, [architecture]) == (
        props["Timeout"],
        props["MemorySize"],
        props["Architectures"],
    )


def test_lambda_target_function_has_no_reserved_concurrency(apps: dict[str, Synthesized]) -> None:
    """No function of any switched environment reserves concurrency (it would throttle the mapping: aws-cdk#24180)."""
    for name in ("fn", "fn-pollers", "fn-window"):
        assert "ReservedConcurrentExecutions" not in function_props(apps[name])


def test_lambda_target_function_runs_the_lambda_entry_through_the_runtime_interface_client(
    apps: dict[str, Synthesized],
) -> None:
    """The image runs python -m awslambdaric consumer.lambda_entry.handler."""
    props = function_props(apps["fn"])
    assert {"Command": LAMBDA_COMMAND, "EntryPoint": LAMBDA_ENTRYPOINT} == props["ImageConfig"]
    assert "Image" == props["PackageType"]


def test_lambda_target_function_image_is_the_ecs_tasks_asset(apps: dict[str, Synthesized]) -> None:
    """The function's image is the asset the same worker's ECS task runs, built once (same hash)."""
    original = apps[ORIGINAL]
    container = original.container(WORKER if len(original.stack.workers) > 1 else None)
    task_image = json.dumps(container["Image"]).rsplit(":", 1)[-1]
    function_image = json.dumps(function_props(apps["fn"])["Code"]["ImageUri"]).rsplit(":", 1)[-1]
    assert task_image == function_image


def test_lambda_target_function_environment_is_the_containers_plus_the_queue_arn(apps: dict[str, Synthesized]) -> None:
    """The contract's variables, the bindings (the role id the function's), handler_environment and QUEUE_ARN."""
    env = apps["fn"]
    worker, consumer, target = built(env)
    variables = function_props(env)["Environment"]["Variables"]
    bindings = BINDING_KEYS - ({IDEMPOTENCY_TABLE_ENV} if target.contract.idempotent else set())
    expected = set(target.contract.to_env()) | bindings | {QUEUE_ARN_ENV} | set(worker.settings.handler_environment)
    assert sorted(expected) == sorted(variables)
    assert {k: variables[k] for k in target.contract.to_env()} == target.contract.to_env()
    assert {"Fn::GetAtt": [env.logical_id(consumer.role), "RoleId"]} == variables[TASK_ROLE_ID_ENV]
    assert {"Fn::GetAtt": [env.logical_id(worker.queues.queue), "Arn"]} == variables[QUEUE_ARN_ENV]


def test_lambda_target_mapping_follows_the_target(apps: dict[str, Synthesized]) -> None:
    """BatchSize esm_batch_size, partial batch answers, MaximumConcurrency, no window at 0, on the worker's source."""
    env = apps["fn"]
    worker, _, target = built(env)
    assert {
        "BatchSize": target.esm_batch_size,
        "EventSourceArn": {"Fn::GetAtt": [env.logical_id(worker.queues.queue), "Arn"]},
        "FunctionName": {"Ref": env.logical_id(built(env)[1].function)},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": target.maximum_concurrency},
    } == mapping_props(env)


def test_lambda_target_mapping_waits_for_the_roles_policy(apps: dict[str, Synthesized]) -> None:
    """The mapping is created after the role's policy: CreateEventSourceMapping checks the role may receive."""
    env = apps["fn"]
    _, consumer, _ = built(env)
    mapping = env.resources("AWS::Lambda::EventSourceMapping")[env.logical_id(consumer.mapping)]
    (policy,) = [c for c in consumer.role.node.find_all() if c.node.id == "Resource" and "Policy" in c.node.path]
    assert env.logical_id(policy) in mapping["DependsOn"]


def test_lambda_target_batch_handler_mapping_takes_its_window(apps: dict[str, Synthesized]) -> None:
    """A batch handler's max_batch is BatchSize and its batch_window the mapping's batching window."""
    env = apps["fn-window"]
    _, _, target = built(env)
    props = mapping_props(env)
    assert (50, 5) == (target.esm_batch_size, target.batching_window_seconds)
    assert (target.esm_batch_size, target.batching_window_seconds) == (
        props["BatchSize"],
        props["MaximumBatchingWindowInSeconds"],
    )


def test_lambda_target_provisioned_pollers_replace_maximum_concurrency(apps: dict[str, Synthesized]) -> None:
    """With provisioned_pollers the mapping has a ProvisionedPollerConfig and no ScalingConfig."""
    props = mapping_props(apps["fn-pollers"])
    assert {"MinimumPollers": POLLERS["minimum"], "MaximumPollers": POLLERS["maximum"]} == props[
        "ProvisionedPollerConfig"
    ]
    assert "ScalingConfig" not in props


def test_lambda_target_source_visibility_is_the_targets_in_place(apps: dict[str, Synthesized]) -> None:
    """The source's VisibilityTimeout is queue_visibility_seconds, under the logical id the ECS worker's source has;
    its redrive and retention are the contract's, as for ECS."""
    env, original = apps["fn"], apps[ORIGINAL]
    worker, _, target = built(env)
    before = original.stack.workers[WORKER].queues.queue
    logical_id = env.logical_id(worker.queues.queue)
    source = env.json["Resources"][logical_id]["Properties"]
    ecs_source = original.json["Resources"][original.logical_id(before)]["Properties"]
    assert original.logical_id(before) == logical_id
    assert target.queue_visibility_seconds == source["VisibilityTimeout"]
    changed = {key for key in {*source, *ecs_source} if source.get(key) != ecs_source.get(key)}
    assert {"VisibilityTimeout", "QueueName"} >= changed


def test_lambda_target_keeps_the_ecs_workers_table_and_log_group(apps: dict[str, Synthesized]) -> None:
    """The idempotency table and the log group keep the logical ids the ECS worker's have."""
    env, original = apps["fn"], apps[ORIGINAL]
    _, consumer, _ = built(env)
    ecs = original.stack.workers[WORKER].consumer
    assert [original.logical_id(ecs.idempotency_table), original.logical_id(ecs.log_group)] == [
        env.logical_id(consumer.idempotency_table),
        env.logical_id(consumer.log_group),
    ]


def test_lambda_target_log_group_keeps_the_environments_retention(apps: dict[str, Synthesized]) -> None:
    """The function logs to its own log group, kept log_retention_days."""
    env = apps["fn"]
    _, consumer, _ = built(env)
    group = env.resources("AWS::Logs::LogGroup")[env.logical_id(consumer.log_group)]["Properties"]
    assert env.stack.settings.log_retention_days == group["RetentionInDays"]
    assert {"LogGroup": {"Ref": env.logical_id(consumer.log_group)}} == function_props(env)["LoggingConfig"]


def test_lambda_target_role_holds_exactly_the_mappings_and_the_functions_actions(
    apps: dict[str, Synthesized],
) -> None:
    """Source: the mapping's receive/delete/visibility/attributes and the function's sends; DLQ: send; the guard's
    table; its own log group. Nothing managed, nothing inline, nothing else."""
    env = apps["fn"]
    worker, consumer, _ = built(env)
    role = env.json["Resources"][env.logical_id(consumer.role)]["Properties"]
    assert {"ManagedPolicyArns", "Policies"}.isdisjoint(role)

    def arn(construct: Any) -> dict[str, Any]:
        return {"Fn::GetAtt": [env.logical_id(construct), "Arn"]}

    assert consumer.idempotency_table is not None
    expected = [
        {"Action": list(SOURCE_QUEUE_ACTIONS), "Effect": "Allow", "Resource": arn(worker.queues.queue)},
        {"Action": DEAD_LETTER_QUEUE_ACTIONS[0], "Effect": "Allow", "Resource": arn(worker.queues.dead_letter_queue)},
        {"Action": list(IDEMPOTENCY_TABLE_ACTIONS), "Effect": "Allow", "Resource": arn(consumer.idempotency_table)},
        {"Action": list(LOG_ACTIONS), "Effect": "Allow", "Resource": arn(consumer.log_group)},
    ]
    env.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {"Statement": expected, "Version": "2012-10-17"},
            "Roles": [{"Ref": env.logical_id(consumer.role)}],
        },
    )
    assert [
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
        "sqs:SendMessage",
    ] == list(SOURCE_QUEUE_ACTIONS)


def test_lambda_target_role_trusts_lambda_of_this_account_only(apps: dict[str, Synthesized]) -> None:
    """The function's role trusts lambda.amazonaws.com with aws:SourceAccount this account."""
    env = apps["fn"]
    _, consumer, _ = built(env)
    role = env.json["Resources"][env.logical_id(consumer.role)]["Properties"]
    assert [
        {
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
        }
    ] == role["AssumeRolePolicyDocument"]["Statement"]


def test_lambda_target_worker_has_no_service_task_or_scaling(apps: dict[str, Synthesized]) -> None:
    """A one-worker environment on Lambda has no ECS service, task definition or scalable target."""
    env = apps["fn-window"]
    assert {} == {
        kind: env.resources(kind)
        for kind in ("AWS::ECS::Service", "AWS::ECS::TaskDefinition", "AWS::ApplicationAutoScaling::ScalableTarget")
        if env.resources(kind)
    }


def test_lambda_target_alarms_add_the_functions_and_drop_the_task_count(apps: dict[str, Synthesized]) -> None:
    """The ECS worker's alarms, less StalledNoRunningTasks, plus FunctionErrors, FunctionThrottles and
    MappingAtMaximum; without a MaximumConcurrency (provisioned pollers), no MappingAtMaximum."""
    ids = {name: set(w.alarms.severity) | {i.node.id for i in w.alarms.stalled_inputs} for name, w in _workers(apps)}
    ecs = ids[ORIGINAL]
    assert ecs - {"StalledNoRunningTasks"} | {"FunctionErrors", "FunctionThrottles", "MappingAtMaximum"} == ids["fn"]
    assert ids["fn"] - {"MappingAtMaximum"} == ids["fn-pollers"]


def _workers(apps: dict[str, Synthesized]) -> list[tuple[str, Worker]]:
    return [(name, apps[name].stack.workers[WORKER]) for name in (ORIGINAL, "fn", "fn-pollers")]


@pytest.mark.parametrize(
    ("alarm", "severity", "metric", "statistic", "periods"),
    [
        ("FunctionErrors", "page", "Errors", "Sum", 1),
        ("FunctionThrottles", "ticket", "Throttles", "Sum", 3),
        ("MappingAtMaximum", "ticket", "ConcurrentExecutions", "Maximum", 15),
    ],
)
def test_lambda_target_function_alarm_reads_its_function(
    apps: dict[str, Synthesized], alarm: str, severity: str, metric: str, statistic: str, periods: int
) -> None:
    """Each function alarm reads AWS/Lambda for this function, routed by its severity, missing data not breaching."""
    env = apps["fn"]
    worker, consumer, target = built(env)
    (found,) = [a for a in worker.alarms.function_alarms if a.node.id == alarm]
    props = env.json["Resources"][env.logical_id(found)]["Properties"]
    threshold = target.maximum_concurrency if alarm == "MappingAtMaximum" else 1
    assert severity == worker.alarms.severity[alarm]
    expected = {
        "Namespace": "AWS/Lambda",
        "MetricName": metric,
        "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": env.logical_id(consumer.function)}}],
        "Statistic": statistic,
        "Period": 60,
        "EvaluationPeriods": periods,
        "Threshold": threshold,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "notBreaching",
    }
    assert expected == {key: props[key] for key in expected}


def test_lambda_target_stalled_description_names_the_mapping(apps: dict[str, Synthesized]) -> None:
    """A lambda worker's ConsumerStalled points at its event source mapping, never at an ECS service."""
    env = apps["fn"]
    worker, consumer, _ = built(env)
    text = env.json["Resources"][env.logical_id(worker.alarms.consumer_stalled)]["Properties"]["AlarmDescription"]
    assert "aws lambda list-event-source-mappings --function-name" in text and "ecs" not in text


def test_lambda_target_output_names_the_function(apps: dict[str, Synthesized]) -> None:
    """The worker's outputs name its function instead of a service."""
    env = apps["fn-window"]
    _, consumer, _ = built(env)
    assert {"Value": {"Ref": env.logical_id(consumer.function)}} == {
        "Value": env.json["Outputs"]["FunctionName"]["Value"]
    }
    assert "ServiceName" not in env.json["Outputs"]


def test_lambda_target_stacks_have_no_open_or_acknowledged_finding_on_a_function(
    apps: dict[str, Synthesized],
) -> None:
    """cdk-nag left no open finding, and no acknowledgement covers a lambda worker's resources."""
    for name in ("fn", "fn-pollers", "fn-window"):
        env = apps[name]
        open_findings, _ = nag_results(env.outdir, env.stack.stack_name)
        report = json.loads((env.outdir / "validation-report.json").read_text())
        paths = [
            c["constructPath"]
            for plugin in report["pluginReports"]
            for violation in plugin.get("suppressedViolations", [])
            for c in violation["violatingConstructs"]
        ]
        consumer = built(env)[1].node.path
        assert ([], []) == (open_findings, [p for p in paths if p.startswith(f"{consumer}/")])


def test_lambda_target_leaves_the_environment_that_stays_on_ecs_unchanged(
    apps: dict[str, Synthesized], reference: dict[str, Synthesized]
) -> None:
    """The environment the lambda ones were copied from synthesizes exactly as the reference does."""
    assert reference[ORIGINAL].json == apps[ORIGINAL].json


def test_lambda_target_dashboard_draws_the_mapping_maximum(apps: dict[str, Synthesized]) -> None:
    """The worker's concurrency graph draws MappingAtMaximum's threshold, MaximumConcurrency."""
    env = apps["fn"]
    _, _, target = built(env)
    lines = [
        annotation
        for widget in dashboard_body(env)["widgets"]
        for annotation in widget.get("properties", {}).get("annotations", {}).get("horizontal", [])
        if annotation["label"] == "MappingAtMaximum alarm (MaximumConcurrency)"
    ]
    assert [target.maximum_concurrency] == [line["value"] for line in lines]


def test_lambda_target_template_matches_a_function_with_every_derived_value(apps: dict[str, Synthesized]) -> None:
    """The function resource as aws_cdk.assertions reads it: timeout, memory, image config and no reservation."""
    env = apps["fn"]
    worker, _, target = built(env)
    env.template.has_resource_properties(
        "AWS::Lambda::Function",
        Match.object_like(
            {
                "Timeout": target.function_timeout_seconds,
                "MemorySize": target.memory_mib,
                "ReservedConcurrentExecutions": Match.absent(),
                "ImageConfig": {"Command": LAMBDA_COMMAND, "EntryPoint": LAMBDA_ENTRYPOINT},
            }
        ),
    )


def test_lambda_target_refusal_ends_app_py_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What Lambda cannot run exits python app.py with 2 and one stderr line naming the worker's target, no
    traceback, nothing synthesized."""
    from infra.app import main

    context = {CONTEXT_KEY: {"fn": {**SHARED, "handler": FIVE_MINUTES, "target": LAMBDA}}}
    assert main(context=context, outdir=str(tmp_path)) == 2
    out, err = capsys.readouterr()
    assert ("", 1) == (out, err.count("\n"))
    assert err.startswith(
        f'invalid configuration: "{CONTEXT_KEY}.fn.target" cannot be "lambda" for {FIVE_MINUTES}: its @worker'
        " declaration's max_duration_seconds must be at most 288"
    )
    assert not list(tmp_path.glob("*.template.json"))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"target": LAMBDA, "cpu": 512},
            f'"cpu" is an ECS setting, refused on a lambda worker: {ECS_ONLY_KEYS["cpu"]}: 512',
        ),
        (
            {"target": LAMBDA, "secrets": {"TOKEN_URL": SecretSource(service="ssm", name="/a")}},
            f"\"secrets\" {LAMBDA_SECRETS_RULE}: ['TOKEN_URL']",
        ),
        (
            {"provisioned_pollers": (2, 4)},
            '"provisioned_pollers" is a lambda worker\'s setting: needs target "lambda": (2, 4)',
        ),
        ({"target": "batch"}, f"\"target\" {TARGET_RULE}: 'batch'"),
    ],
    ids=["cpu", "secrets", "pollers-on-ecs", "target"],
)
def test_lambda_target_worker_construct_refuses_what_the_settings_refuse(
    arguments: dict[str, Any], message: str
) -> None:
    """A team's own app building the Worker directly is refused as cdk.json is, in one line."""
    with pytest.raises(SettingsError) as refused:
        standalone_worker(NOTIFICATIONS, **arguments)
    assert message == str(refused.value)


@pytest.mark.parametrize("check", list(TEMPLATE_CHECKS))
def test_lambda_target_framework_template_checks_hold(apps: dict[str, Synthesized], check: str) -> None:
    """Every framework check of tests/infra/checks.py holds on every lambda environment, as on an ECS one."""
    for name in ("fn", "fn-pollers", "fn-window"):
        TEMPLATE_CHECKS[check](apps[name])
