"""AWS's limits a cdk.json can reach are refused before synthesis, in one line (infra/limits.py): each rule at and just
past its limit, then configurations that pass one, built (not synthesized) to the point of refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest

from consumer.errors import ContractError
from infra.app import build_app, cdk_json_context
from infra.limits import (
    CDK_METADATA_RESOURCES,
    MAX_ALARM_DESCRIPTION,
    MAX_ALARM_EXPRESSIONS,
    MAX_ALARM_METRICS,
    MAX_ALARM_NAME,
    MAX_ALARM_RULE,
    MAX_FUNCTION_VARIABLES_BYTES,
    MAX_STACK_RESOURCES,
    MAX_TEMPLATE_BYTES,
    SQS_POLICY_LIMITS,
    TOKEN_CHARS,
    alarm_excess,
    check_templates,
    function_variables_excess,
    policy_excess,
    stack_resources,
)
from infra.settings import MAX_WORKERS
from infra.worker_settings import CONTEXT_KEY

ALARM, COMPOSITE = "AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm"


def test_the_limits_are_aws_documented_values() -> None:
    """CloudWatch's are botocore's service model's; the others are the documented pages' numbers."""
    model = botocore.session.get_session().get_service_model("cloudwatch")

    def most(operation: str, member: str) -> int:
        shape = model.operation_model(operation).input_shape
        assert shape is not None
        return int(shape.members[member].metadata["max"])

    assert most("PutMetricAlarm", "AlarmName") == most("PutCompositeAlarm", "AlarmName") == MAX_ALARM_NAME
    assert most("PutMetricAlarm", "AlarmDescription") == MAX_ALARM_DESCRIPTION
    assert most("PutCompositeAlarm", "AlarmDescription") == MAX_ALARM_DESCRIPTION
    assert most("PutCompositeAlarm", "AlarmRule") == MAX_ALARM_RULE
    assert SQS_POLICY_LIMITS == {
        "bytes": 8192,
        "principals": 50,
        "statements": 20,
        "conditions": 10,
        "actions per statement": 7,
    }
    assert (MAX_STACK_RESOURCES, MAX_ALARM_METRICS, MAX_ALARM_EXPRESSIONS) == (500, 10, 10)


def test_resources_at_and_past_500() -> None:
    at = MAX_STACK_RESOURCES - CDK_METADATA_RESOURCES
    assert stack_resources(at) is None
    excess = stack_resources(at + 1)
    assert excess is not None and (excess.value, excess.limit) == (501, 500)


def statement(principals: int = 1, conditions: int = 0, actions: int = 1, padding: str = "") -> dict[str, Any]:
    return {
        "Effect": "Allow",
        "Principal": {"AWS": [f"arn:aws:iam::123456789012:role/p{i}" for i in range(principals)]},
        "Action": [f"sqs:A{i}" for i in range(actions)],
        "Resource": {"Fn::GetAtt": ["Queue", "Arn"]},
        "Condition": {"StringEquals": {f"k{i}": "v" for i in range(conditions)}},
        "Sid": padding,
    }


def document(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


@pytest.mark.parametrize(
    ("what", "build"),
    [
        ("principals", lambda n: document(statement(principals=n))),
        ("statements", lambda n: document(*[statement() for _ in range(n)])),
        ("conditions", lambda n: document(statement(conditions=n - 3), statement(conditions=3))),
        ("actions per statement", lambda n: document(statement(actions=n))),
    ],
)
def test_queue_policy_counts_at_and_past_their_limit(what: str, build: Any) -> None:
    limit = SQS_POLICY_LIMITS[what]
    assert policy_excess(build(limit)) is None
    excess = policy_excess(build(limit + 1))
    assert excess is not None and (excess.what, excess.value, excess.limit) == (what, limit + 1, limit)


def test_queue_policy_bytes_at_and_past_8192_tokens_counted_at_their_worst() -> None:
    base = policy_excess(document(statement()))
    assert base is None
    empty = len('{"Version":"2012-10-17","Statement":[]}') + len(
        '{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam::123456789012:role/p0"]},"Action":["sqs:A0"],'
        '"Resource":"","Condition":{"StringEquals":{}},"Sid":""}'
    )
    padding = 8192 - empty - TOKEN_CHARS
    assert policy_excess(document(statement(padding="s" * padding))) is None
    excess = policy_excess(document(statement(padding="s" * (padding + 1))))
    assert excess is not None and (excess.what, excess.value) == ("bytes", 8193)


@pytest.mark.parametrize(
    ("what", "properties", "limit"),
    [
        ("alarm name characters", lambda n: {"AlarmName": "a" * n}, MAX_ALARM_NAME),
        ("alarm description characters", lambda n: {"AlarmDescription": "d" * n}, MAX_ALARM_DESCRIPTION),
        ("metrics in one alarm", lambda n: {"Metrics": [{"MetricStat": 1}] * n}, MAX_ALARM_METRICS),
        ("metrics in one alarm", lambda n: {"Metrics": [{"metricStat": 1}] * n}, MAX_ALARM_METRICS),  # the CDK's L1
        ("expressions in one alarm", lambda n: {"Metrics": [{"Expression": 1}] * n}, MAX_ALARM_EXPRESSIONS),
        (
            "composite alarm rule characters",
            lambda n: {"AlarmRule": {"Fn::Join": ["", ["r" * (n - TOKEN_CHARS), {"Ref": "X"}]]}},
            MAX_ALARM_RULE,
        ),
    ],
)
def test_alarm_limits_at_and_past(what: str, properties: Any, limit: int) -> None:
    assert alarm_excess(COMPOSITE, properties(limit)) is None
    excess = alarm_excess(COMPOSITE, properties(limit + 1))
    assert excess is not None and (excess.what, excess.value, excess.limit) == (what, limit + 1, limit)


def refusal(environment: dict[str, Any]) -> str:
    """The one line building ``environment`` (as ``limits``) is refused with."""
    context = {**cdk_json_context(), CONTEXT_KEY: {"limits": environment}}
    with pytest.raises(ContractError) as refused:
        build_app(cdk.App(context=context))
    message = str(refused.value)
    assert "\n" not in message
    return message


SHARED = {"retain_queues": False, "pages_to_tickets": True, "source_retention_days": 1, "dlq_retention_days": 7}
WORKER = {"handler": "tests.team_handlers:invoices"}


def topics(worker: int, count: int) -> list[dict[str, str]]:
    return [{"topic_arn": f"arn:aws:sns:eu-west-1:123456789012:w{worker}-t{t}"} for t in range(count)]


def test_a_stack_past_500_resources_is_refused_naming_the_count() -> None:
    """The settings allow 17 workers; 17 that scale to zero, with two topics each, make more than CloudFormation takes."""
    workers = {f"w{i}": {**WORKER, "min_tasks": 0, "sources": topics(i, 2)} for i in range(MAX_WORKERS)}
    message = refusal({**SHARED, "workers": workers})
    assert message.startswith('"sqs-worker:environments.limits.workers" must stay within AWS\'s limit of 500 resources')
    assert "cloudformation-limits.html" in message
    assert "split the workers across environments" in message


PRODUCER_STATEMENT_PRINCIPALS = 2  # the TLS deny and the other senders' deny: Principal "*" each


def producers(count: int) -> list[str]:
    return [f"arn:aws:iam::123456789012:role/producer-{i}" for i in range(count)]


def test_producers_past_the_queue_policy_principals_are_refused() -> None:
    """Each producer is a principal of the source queue's allow: 60 would make a policy SQS refuses at deploy."""
    message = refusal({**SHARED, **WORKER, "producers": producers(60)})
    assert message.startswith(
        '"sqs-worker:environments.limits.producers" must stay within AWS\'s limit of 50 principals'
    )
    assert "quotas-policies.html" in message
    assert "this configuration makes 62" in message


def test_producers_up_to_the_principals_limit_build() -> None:
    fits = SQS_POLICY_LIMITS["principals"] - PRODUCER_STATEMENT_PRINCIPALS
    context = {**cdk_json_context(), CONTEXT_KEY: {"limits": {**SHARED, **WORKER, "producers": producers(fits)}}}
    _, (stack,) = build_app(cdk.App(context=context))
    assert len(stack.settings.producers) == fits


def test_a_runbook_url_too_long_for_an_alarm_description_is_refused() -> None:
    message = refusal({**SHARED, **WORKER, "runbook_url": "https://wiki.example.com/" + "r" * 1000 + "/runbook.md"})
    assert message.startswith('"sqs-worker:environments.limits.runbook_url" must leave every alarm description within')
    assert "CloudWatch's 1024 characters" in message


def test_a_template_past_1_mb_is_refused_after_synthesis(tmp_path: Path) -> None:
    """CloudFormation reads at most 1 MB of template from S3, which 17 long-named workers with 48 producers pass within
    500 resources; checked on the written template (infra.app.main and infra.report run it)."""
    from types import SimpleNamespace

    def assembly(size: int) -> Any:
        template = tmp_path / f"{size}.template.json"
        template.write_bytes(b" " * size)
        return SimpleNamespace(stacks=[SimpleNamespace(template_full_path=str(template), stack_name="SqsWorker-prod")])

    check_templates(assembly(MAX_TEMPLATE_BYTES))
    with pytest.raises(ContractError) as refused:
        check_templates(assembly(MAX_TEMPLATE_BYTES + 1))
    assert str(refused.value).startswith(
        '"sqs-worker:environments.prod.workers" must stay within AWS\'s limit of 1000000 template bytes'
    )


def test_function_variables_at_and_past_4_kb_tokens_counted_at_their_worst() -> None:
    """A function's variables, as their JSON object with each token at its worst length, against Lambda's 4 KB."""
    token = {"Ref": "QueuesQueueD811C857"}
    fixed = len('{"QUEUE_URL":"","PAD":""}') + TOKEN_CHARS
    padding = MAX_FUNCTION_VARIABLES_BYTES - fixed
    assert function_variables_excess({"QUEUE_URL": token, "PAD": "p" * padding}) is None
    excess = function_variables_excess({"QUEUE_URL": token, "PAD": "p" * (padding + 1)})
    assert excess is not None and (excess.what, excess.value, excess.limit) == (
        "function variable bytes",
        MAX_FUNCTION_VARIABLES_BYTES + 1,
        MAX_FUNCTION_VARIABLES_BYTES,
    )


def test_a_lambda_worker_past_4_kb_of_variables_is_refused_naming_its_handler_environment() -> None:
    """The contract's, the bindings' and the handler's variables together past Lambda's 4 KB: one line, the worker's
    handler_environment."""
    variables = {f"SETTING_{i}": "v" * 200 for i in range(12)}
    message = refusal({**SHARED, "workers": {"fn": {**WORKER, "target": "lambda", "handler_environment": variables}}})
    assert message.startswith(
        '"sqs-worker:environments.limits.workers.fn.handler_environment" must stay within AWS\'s limit of 4096'
        " function variable bytes (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)"
    )


def test_a_stack_of_lambda_workers_past_500_resources_is_refused() -> None:
    """Lambda workers' functions, mappings, roles and alarms count as the services' do: 17 with five topics each pass
    CloudFormation's 500."""
    workers = {f"w{i}": {**WORKER, "target": "lambda", "sources": topics(i, 5)} for i in range(MAX_WORKERS)}
    message = refusal({**SHARED, "workers": workers})
    assert message.startswith('"sqs-worker:environments.limits.workers" must stay within AWS\'s limit of 500 resources')
