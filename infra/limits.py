"""AWS's documented limits a cdk.json can reach, checked on the built stack before synthesis.

:func:`check_limits` runs at the end of :class:`infra.stack.WorkerStack` and refuses, in one line naming the setting,
the limit with its documentation page, the value and the way out (a :class:`SettingsError`, which ``python app.py``
and ``make run`` print without a traceback), what CloudFormation or the CDK would otherwise refuse later:

- resources per stack (500), counted on what the configuration really builds: each worker's wake-up, sources,
  tracing sidecar and FIFO shape included, and the CDK's metadata resource;
- each queue policy's size, principals, statements, conditions and actions per statement (SQS's policy quotas): the
  producers and the sources fill the source queue's;
- each alarm's name and description, a composite alarm's rule, and a metric math alarm's metrics and expressions;
- a lambda worker's function variables, 4 KB in all (Lambda's quota), tokens counted at their worst length
  (:func:`check_function_variables`, which the worker's construct runs once its variables are all added);
- after synthesis (:func:`check_templates`), each template's size against the 1 MB CloudFormation reads.

Where botocore's service model states a limit (alarm names, descriptions, rules), a test compares it. Limits
no cdk.json can reach (outputs, widgets per dashboard, alarms per status widget) are shown unreachable by
``tests/infra/test_workers.py`` on the largest configuration.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import CfnResource, Stack, cx_api
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sqs as sqs

from infra.worker_settings import CONTEXT_KEY, SettingsError

CFN_QUOTAS_URL = "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html"
SQS_POLICY_QUOTAS_URL = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-policies.html"
)
ALARM_LIMITS_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html"
PUT_METRIC_ALARM_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html"
PUT_COMPOSITE_ALARM_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutCompositeAlarm.html"

LAMBDA_QUOTAS_URL = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"

MAX_STACK_RESOURCES = 500
#: "Function environment variables: 4 KB, for all environment variables associated with the function, in aggregate";
#: measured as their JSON object, which counts every name and value and more: a bound, never an understatement.
MAX_FUNCTION_VARIABLES_BYTES = 4096
#: A template CloudFormation reads from S3 (the CDK uploads every template it deploys): at most 1 MB.
MAX_TEMPLATE_BYTES = 1_000_000
#: The resource the CDK adds at synthesis (``AWS::CDK::Metadata``, version reporting): counted, never built here.
CDK_METADATA_RESOURCES = 1
#: SQS's policy quotas. "Conditions" is read as condition keys across the policy's statements: the page does not
#: say how it counts, and no deploy has checked this reading (counting each key's values would refuse sooner).
SQS_POLICY_LIMITS = {"bytes": 8192, "principals": 50, "statements": 20, "conditions": 10, "actions per statement": 7}
#: A metric math alarm: at most 10 metrics (MetricStat) and 10 expressions.
MAX_ALARM_METRICS, MAX_ALARM_EXPRESSIONS = 10, 10
#: What an unresolved token (a queue or role ARN, a Ref) counts for in a policy's size: longer than any ARN one
#: stands for here (an SQS ARN with an 80-character name, an IAM role ARN with a 64-character name, in any partition).
TOKEN_CHARS = 160


#: CloudWatch's PutMetricAlarm and PutCompositeAlarm limits (tests/infra/test_limits.py reads them from botocore's
#: service model: synthesis imports no AWS SDK).
MAX_ALARM_NAME, MAX_ALARM_DESCRIPTION, MAX_ALARM_RULE = 255, 1024, 10240


@dataclass(frozen=True)
class Excess:
    """One limit passed: what, by how much, where it is documented, and what to do."""

    what: str
    value: int
    limit: int
    url: str


def stack_resources(built: int) -> Excess | None:
    """``built`` CloudFormation resources, plus the CDK's metadata, against CloudFormation's 500 per stack."""
    total = built + CDK_METADATA_RESOURCES
    return Excess("resources", total, MAX_STACK_RESOURCES, CFN_QUOTAS_URL) if total > MAX_STACK_RESOURCES else None


def policy_excess(document: Mapping[str, Any]) -> Excess | None:
    """The first of SQS's policy quotas a resolved policy document passes, tokens counted at :data:`TOKEN_CHARS`."""
    statements = list(document.get("Statement", []))
    measured = {
        "bytes": len(json.dumps(_sized(document), separators=(",", ":"))),
        "principals": sum(_principals(s.get("Principal")) for s in statements),
        "statements": len(statements),
        "conditions": sum(len(keys) for s in statements for keys in s.get("Condition", {}).values()),
        "actions per statement": max((len(_listed(s.get("Action"))) for s in statements), default=0),
    }
    for what, value in measured.items():
        if value > SQS_POLICY_LIMITS[what]:
            return Excess(what, value, SQS_POLICY_LIMITS[what], SQS_POLICY_QUOTAS_URL)
    return None


def alarm_excess(resource_type: str, properties: Mapping[str, Any]) -> Excess | None:
    """The first of CloudWatch's limits an alarm's resolved properties pass (name, description, rule, metrics)."""
    metrics = list(properties.get("Metrics", []))
    measured: list[tuple[str, int, int, str]] = [
        ("alarm name characters", _length(properties.get("AlarmName", "")), MAX_ALARM_NAME, PUT_METRIC_ALARM_URL),
        (
            "alarm description characters",
            _length(properties.get("AlarmDescription", "")),
            MAX_ALARM_DESCRIPTION,
            PUT_METRIC_ALARM_URL,
        ),
        ("metrics in one alarm", _having(metrics, "MetricStat"), MAX_ALARM_METRICS, ALARM_LIMITS_URL),
        (
            "expressions in one alarm",
            _having(metrics, "Expression"),
            MAX_ALARM_EXPRESSIONS,
            PUT_METRIC_ALARM_URL,
        ),
    ]
    if resource_type == "AWS::CloudWatch::CompositeAlarm":
        rule = ("composite alarm rule characters", _length(properties.get("AlarmRule", "")), MAX_ALARM_RULE)
        measured.append((*rule, PUT_COMPOSITE_ALARM_URL))
    for what, value, limit, url in measured:
        if value > limit:
            return Excess(what, value, limit, url)
    return None


def function_variables_excess(variables: Mapping[str, Any]) -> Excess | None:
    """A function's resolved ``Environment.Variables`` against Lambda's 4 KB, tokens at :data:`TOKEN_CHARS`."""
    size = len(json.dumps(_sized(dict(variables)), separators=(",", ":")).encode())
    if size > MAX_FUNCTION_VARIABLES_BYTES:
        return Excess("function variable bytes", size, MAX_FUNCTION_VARIABLES_BYTES, LAMBDA_QUOTAS_URL)
    return None


def check_function_variables(stack: Stack, variables: Mapping[str, str], setting: str) -> None:
    """Refuse a function's ``variables`` (tokens and all) past Lambda's 4 KB, naming ``setting`` (the worker's
    ``handler_environment``): the function's construct checks its own, once every variable is added."""
    excess = function_variables_excess(stack.resolve(dict(variables)))
    if excess is not None:
        refuse(
            setting,
            excess,
            "the contract's and the bindings' variables take about 1.5 KB: move large values out of"
            " handler_environment (read them from SSM in the handler)",
        )


def check_limits(stack: Stack, environment: str) -> None:
    """Refuse ``stack`` (environment ``environment``) where it passes a limit of this module, in one line."""
    prefix = f"{CONTEXT_KEY}.{environment}"
    resources = [c for c in stack.node.find_all() if isinstance(c, CfnResource)]
    excess = stack_resources(len(resources))
    if excess is not None:
        refuse(
            f"{prefix}.workers",
            excess,
            "split the workers across environments (each is a stack of its own), or declare fewer sources",
        )
    for resource, kind, properties in _resolved(stack, resources):
        if kind == "AWS::SQS::QueuePolicy":
            excess = policy_excess(properties.get("PolicyDocument", {}))
            if excess is not None:
                refuse(
                    f"{prefix}.producers",
                    excess,
                    f"the policy of {resource.node.path} holds each producer twice and a statement per source:"
                    " name fewer producers (one role they assume, say) or declare fewer sources",
                )
        elif kind in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm"):
            excess = alarm_excess(kind, properties)
            if excess is not None:
                refuse(
                    f"{prefix}.runbook_url" if "description" in excess.what else prefix,
                    excess,
                    f"alarm {resource.node.path} (a shorter runbook_url, environment or worker name)",
                )


def check_templates(assembly: cx_api.CloudAssembly) -> None:
    """Refuse a synthesized template CloudFormation would not read (over :data:`MAX_TEMPLATE_BYTES`), in one line."""
    for artifact in assembly.stacks:
        size = Path(artifact.template_full_path).stat().st_size
        if size > MAX_TEMPLATE_BYTES:
            excess = Excess("template bytes", size, MAX_TEMPLATE_BYTES, CFN_QUOTAS_URL)
            environment = artifact.stack_name.removeprefix("SqsWorker-")
            refuse(
                f"{CONTEXT_KEY}.{environment}.workers",
                excess,
                f"{artifact.stack_name}: split the workers across environments, or shorten runbook_url and names",
            )


def refuse(parameter: str, excess: Excess, way_out: str) -> None:
    raise SettingsError(
        parameter,
        f"must stay within AWS's limit of {excess.limit} {excess.what} ({excess.url}); this configuration makes"
        f" {excess.value}: {way_out}",
        excess.value,
    )


def _resolved(stack: Stack, resources: list[CfnResource]) -> Iterator[tuple[CfnResource, str, Mapping[str, Any]]]:
    """The queue policies and alarms among ``resources``, with the properties checked here, resolved."""
    for resource in resources:
        if isinstance(resource, sqs.CfnQueuePolicy):
            yield resource, "AWS::SQS::QueuePolicy", {"PolicyDocument": stack.resolve(resource.policy_document)}
        elif isinstance(resource, cloudwatch.CfnAlarm):
            yield (
                resource,
                "AWS::CloudWatch::Alarm",
                {
                    "AlarmName": stack.resolve(resource.alarm_name),
                    "AlarmDescription": stack.resolve(resource.alarm_description) or "",
                    "Metrics": stack.resolve(resource.metrics) or [],
                },
            )
        elif isinstance(resource, cloudwatch.CfnCompositeAlarm):
            yield (
                resource,
                "AWS::CloudWatch::CompositeAlarm",
                {
                    "AlarmName": stack.resolve(resource.alarm_name),
                    "AlarmDescription": stack.resolve(resource.alarm_description) or "",
                    "AlarmRule": stack.resolve(resource.alarm_rule),
                },
            )


def _sized(value: Any) -> Any:
    """``value`` with every intrinsic function as a string of its worst length: ``Fn::Join`` joins its parts so sized,
    any other (``Ref``, ``Fn::GetAtt``, ...) is :data:`TOKEN_CHARS` characters."""
    if isinstance(value, Mapping):
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            sized = [_sized(part) for part in parts]
            if all(isinstance(part, str) for part in sized):
                return separator.join(sized)
        if any(k == "Ref" or str(k).startswith("Fn::") for k in value):
            return "x" * TOKEN_CHARS
        return {k: _sized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sized(v) for v in value]
    return value


def _having(metrics: list[Any], key: str) -> int:
    """How many of an alarm's ``Metrics`` hold ``key``, as the template spells it or as the CDK's L1 does (camelCase)."""
    camel = key[0].lower() + key[1:]
    return sum(key in m or camel in m for m in metrics)


def _length(value: Any) -> int:
    sized = _sized(value)
    return len(sized) if isinstance(sized, str) else len(json.dumps(sized))


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _principals(principal: Any) -> int:
    """How many principals a statement's ``Principal`` names ("*" and each ARN, account or service: one each)."""
    if principal is None:
        return 0
    if isinstance(principal, Mapping):
        return sum(len(_listed(v)) for v in principal.values())
    return 1
