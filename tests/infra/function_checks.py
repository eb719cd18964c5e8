"""The framework's checks of a lambda worker (``"target": "lambda"``), for whatever valid settings it was built from:
tests/infra/checks.py runs them where a worker's consumer is a function instead of a service.

Every expected value is derived from the worker's settings and contract through
:func:`infra.worker_settings.lambda_target_of`, never read back from the construct it checks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from consumer.contract import BINDING_KEYS, IDEMPOTENCY_TABLE_ENV, QUEUE_ARN_ENV, TASK_ROLE_ID_ENV, WorkerContract
from consumer.errors import ContractError
from consumer.lambda_target import LambdaTarget
from consumer.stack_outputs import WORKER_METADATA_KEY
from infra.function import LAMBDA_COMMAND, LAMBDA_ENTRYPOINT, LOG_ACTIONS, SOURCE_QUEUE_ACTIONS, ConsumerFunction
from infra.service import DEAD_LETTER_QUEUE_ACTIONS, IDEMPOTENCY_TABLE_ACTIONS
from infra.settings import parse_environment
from infra.worker import Worker
from infra.worker_settings import ECS_ONLY_KEYS, LAMBDA, WorkerSettings, lambda_target_of
from tests.infra.conftest import Synthesized

#: Each function alarm: (metric, statistic, evaluation periods, severity); MappingAtMaximum's threshold is the
#: target's MaximumConcurrency, the others' 1.
FUNCTION_ALARMS = {
    "FunctionErrors": ("Errors", "Sum", 1, "page"),
    "FunctionThrottles": ("Throttles", "Sum", 3, "ticket"),
    "MappingAtMaximum": ("ConcurrentExecutions", "Maximum", 15, "ticket"),
}


def target_of(worker: WorkerSettings, contract: WorkerContract) -> LambdaTarget:
    return lambda_target_of(worker, contract)


def lambda_ready(environments: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first (environment, worker) of ``environments`` (cdk.json's mapping) whose handler Lambda can run."""
    for name, raw in environments.items():
        settings = parse_environment(name, raw)
        for worker in settings.workers:
            try:
                lambda_target_of(dataclasses.replace(worker, target=LAMBDA), settings.contract(worker))
            except ContractError:
                continue
            return name, worker.name
    return None


def move_to_lambda(environment: dict[str, Any], worker: str, **extra: Any) -> dict[str, Any]:
    """``environment`` (a cdk.json mapping, changed in place) with ``worker`` on Lambda: its ECS-only settings and its
    secrets left out, ``extra`` added."""
    settings = environment["workers"][worker] if "workers" in environment else environment
    for key in (*ECS_ONLY_KEYS, "secrets"):
        settings.pop(key, None)
    settings.update(target=LAMBDA, **extra)
    return environment


def role_grants(env: Synthesized, role: Any, label: str, problems: list[str]) -> dict[str, list[str]]:
    """Every action ``role``'s policies allow, by resource (as JSON); a Deny statement is a problem."""
    granted: dict[str, list[str]] = {}
    for policy in env.resources("AWS::IAM::Policy").values():
        if {"Ref": env.logical_id(role)} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if statement["Effect"] != "Allow":
                problems.append(f"{label}: {role.node.id}'s policy has a {statement['Effect']} statement")
            granted[json.dumps(statement["Resource"], sort_keys=True)] = sorted(actions)
    return granted


def _props(env: Synthesized, construct: Any) -> dict[str, Any]:
    properties: dict[str, Any] = env.json["Resources"][env.logical_id(construct)]["Properties"]
    return properties


def _expect(problems: list[str], label: str, what: str, found: object, expected: object) -> None:
    if found != expected:
        problems.append(f"{label}: {what} is {found!r}, expected {expected!r}")


def check_function(
    env: Synthesized,
    label: str,
    built: Worker,
    worker: WorkerSettings,
    contract: WorkerContract,
    expected_variables: dict[str, str],
    problems: list[str],
) -> None:
    """The function: its environment (``expected_variables``: the contract's, the handler's, the sources'), the
    bindings and QUEUE_ARN; timeout, memory, architecture, image command; its log group; no reserved concurrency;
    the mapping on its source with the target's batch, window, concurrency or pollers and partial batch answers."""
    consumer = built.consumer
    assert isinstance(consumer, ConsumerFunction)
    target = target_of(worker, contract)
    function = _props(env, consumer.function)
    variables = function["Environment"]["Variables"]
    bindings = BINDING_KEYS - {IDEMPOTENCY_TABLE_ENV} if contract.idempotent else BINDING_KEYS
    _expect(
        problems, label, "function variable keys", set(variables), set(expected_variables) | bindings | {QUEUE_ARN_ENV}
    )
    for key, value in expected_variables.items():
        _expect(problems, label, key, variables.get(key), value)
    if WorkerContract.from_env(variables) != contract:
        problems.append(f"{label}: the function's environment does not read back as its contract")
    queue = built.queues.queue
    _expect(
        problems, label, QUEUE_ARN_ENV, variables.get(QUEUE_ARN_ENV), {"Fn::GetAtt": [env.logical_id(queue), "Arn"]}
    )
    role_id = {"Fn::GetAtt": [env.logical_id(consumer.role), "RoleId"]}
    _expect(problems, label, TASK_ROLE_ID_ENV, variables.get(TASK_ROLE_ID_ENV), role_id)
    _expect(
        problems,
        label,
        "function timeout, memory, architecture",
        (function["Timeout"], function["MemorySize"], function["Architectures"]),
        (target.function_timeout_seconds, worker.memory_mib, [worker.architecture]),
    )
    _expect(
        problems,
        label,
        "image config",
        function["ImageConfig"],
        {"Command": LAMBDA_COMMAND, "EntryPoint": LAMBDA_ENTRYPOINT},
    )
    if "ReservedConcurrentExecutions" in function:
        problems.append(f"{label}: the function reserves concurrency, which throttles its mapping")
    metadata = env.json["Resources"][env.logical_id(consumer.function)].get("Metadata", {}).get(WORKER_METADATA_KEY)
    _expect(problems, label, "worker metadata", metadata, worker.name)
    retention = _props(env, consumer.log_group)["RetentionInDays"]
    _expect(problems, label, "log retention", retention, env.stack.settings.log_retention_days)
    _expect(
        problems,
        label,
        "log group",
        function["LoggingConfig"],
        {"LogGroup": {"Ref": env.logical_id(consumer.log_group)}},
    )
    mapping = _props(env, consumer.mapping)
    pollers = target.provisioned_pollers
    expected_mapping = {
        "BatchSize": target.esm_batch_size,
        "EventSourceArn": {"Fn::GetAtt": [env.logical_id(queue), "Arn"]},
        "FunctionName": {"Ref": env.logical_id(consumer.function)},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        **(
            {"MaximumBatchingWindowInSeconds": target.batching_window_seconds} if target.batching_window_seconds else {}
        ),
        **(
            {"ScalingConfig": {"MaximumConcurrency": target.maximum_concurrency}}
            if pollers is None
            else {"ProvisionedPollerConfig": {"MinimumPollers": pollers[0], "MaximumPollers": pollers[1]}}
        ),
    }
    _expect(problems, label, "event source mapping", mapping, expected_mapping)


def check_function_role(env: Synthesized, label: str, built: Worker, problems: list[str]) -> None:
    """The function's role holds exactly the mapping's and the function's actions on its own queues, its table's and
    its log group's: nothing managed, nothing inline, nothing else; it trusts Lambda of this account only."""
    consumer = built.consumer
    assert isinstance(consumer, ConsumerFunction)
    role = _props(env, consumer.role)
    if "ManagedPolicyArns" in role or "Policies" in role:
        problems.append(f"{label}: the function role has managed or inline policies")
    trusted = [s["Principal"] for s in role["AssumeRolePolicyDocument"]["Statement"]]
    _expect(problems, label, "function role trust", trusted, [{"Service": "lambda.amazonaws.com"}])
    granted = role_grants(env, consumer.role, label, problems)
    grants: list[tuple[Any, tuple[str, ...]]] = [
        (built.queues.queue, SOURCE_QUEUE_ACTIONS),
        (built.queues.dead_letter_queue, DEAD_LETTER_QUEUE_ACTIONS),
        (consumer.log_group, LOG_ACTIONS),
    ]
    if consumer.idempotency_table is not None:
        grants.append((consumer.idempotency_table, IDEMPOTENCY_TABLE_ACTIONS))
    for construct, actions in grants:
        key = json.dumps({"Fn::GetAtt": [env.logical_id(construct), "Arn"]}, sort_keys=True)
        _expect(problems, label, f"actions on {construct.node.id}", granted.pop(key, None), sorted(actions))
    if granted:
        problems.append(f"{label}: the function role is granted more: {granted!r}")


def check_function_alarms(
    env: Synthesized, label: str, built: Worker, worker: WorkerSettings, problems: list[str]
) -> None:
    """FunctionErrors, FunctionThrottles and (with a MaximumConcurrency) MappingAtMaximum read this function's
    AWS/Lambda metrics at their thresholds; a function has no task to count (no StalledNoRunningTasks)."""
    consumer = built.consumer
    assert isinstance(consumer, ConsumerFunction)
    target = target_of(worker, built.contract)
    expected = {k: v for k, v in FUNCTION_ALARMS.items() if k != "MappingAtMaximum" or target.maximum_concurrency}
    found = {alarm.node.id: alarm for alarm in built.alarms.function_alarms}
    _expect(problems, label, "function alarms", sorted(found), sorted(expected))
    dimensions = [{"Name": "FunctionName", "Value": {"Ref": env.logical_id(consumer.function)}}]
    for construct_id, (metric, statistic, periods, severity) in expected.items():
        if construct_id not in found:
            continue
        props = _props(env, found[construct_id])
        threshold = target.maximum_concurrency if construct_id == "MappingAtMaximum" else 1
        _expect(
            problems,
            label,
            construct_id,
            (
                props["Namespace"],
                props["MetricName"],
                props["Dimensions"],
                props["Statistic"],
                props["EvaluationPeriods"],
            ),
            ("AWS/Lambda", metric, dimensions, statistic, periods),
        )
        _expect(problems, label, f"{construct_id} threshold", props["Threshold"], threshold)
        _expect(problems, label, f"{construct_id} severity", built.alarms.severity.get(construct_id), severity)
    inputs = [alarm.node.id for alarm in built.alarms.stalled_inputs]
    _expect(problems, label, "ConsumerStalled inputs", inputs, ["StalledBacklogLate", "StalledNothingDeleted"])


def function_reference_lines(env: Synthesized, built: Worker) -> dict[tuple[str, str], float]:
    """The line a lambda worker's concurrency graph draws: MappingAtMaximum's threshold (none without one)."""
    key = ("Function: concurrent executions", "MappingAtMaximum alarm (MaximumConcurrency)")
    at_maximum = [alarm for alarm in built.alarms.function_alarms if alarm.node.id == "MappingAtMaximum"]
    return dict((key, _props(env, alarm)["Threshold"]) for alarm in at_maximum)
