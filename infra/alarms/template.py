"""Read a CloudFormation template's alarms, with the template's own names resolved, so a synthesized one works as is.

Ref, Fn::GetAtt, Fn::Join, Fn::Sub and Fn::Select on the template's resources, parameters (their defaults) and
pseudo parameters resolve to the names CloudFormation would give; a resource without a name property gets
``<stack>-<logical id>``, the same in every metric and rule that reads it. Any other intrinsic, attribute or alarm
property the evaluator does not implement is refused in one line naming it.
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-alarm.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-compositealarm.html
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

from infra.alarms.definitions import (
    ALARM,
    COMPARISONS,
    INSUFFICIENT_DATA,
    MISSING,
    OK,
    TREAT_MISSING,
    CompositeAlarm,
    MetricAlarm,
    MetricStat,
    Query,
    Unsupported,
    metric_key,
)

#: Pseudo parameters: a fixed account and region (no account is needed to evaluate; names keep their shape).
PSEUDO = {
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
}
#: The property that names each resource type, where a template may set it.
NAME_PROPERTY = {
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::ECS::Cluster": "ClusterName",
    "AWS::ECS::Service": "ServiceName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::CloudWatch::CompositeAlarm": "AlarmName",
}
#: Properties of an alarm the evaluator reads; any other set property is refused (it would change the outcome).
METRIC_ALARM_PROPERTIES = {
    "AlarmName", "AlarmDescription", "ActionsEnabled", "AlarmActions", "OKActions", "InsufficientDataActions",
    "ComparisonOperator", "DatapointsToAlarm", "EvaluationPeriods", "Threshold", "TreatMissingData",
    "Namespace", "MetricName", "Dimensions", "Period", "Statistic", "ExtendedStatistic", "Metrics",
}  # fmt: skip
COMPOSITE_PROPERTIES = {
    "AlarmName", "AlarmDescription", "ActionsEnabled", "AlarmActions", "OKActions", "InsufficientDataActions",
    "AlarmRule",
}  # fmt: skip
ACTION_PROPERTIES = {ALARM: "AlarmActions", OK: "OKActions", INSUFFICIENT_DATA: "InsufficientDataActions"}


def stack_name_of(path: Path) -> str:
    """``SqsWorker-prod.template.json`` → ``SqsWorker-prod`` (the CDK's file naming); else the file's stem."""
    name = path.name
    return name.removesuffix(".template.json") if name.endswith(".template.json") else path.stem


class Resolver:
    """Resolves a template's intrinsic functions to plain values."""

    def __init__(self, template: Mapping[str, Any], stack_name: str) -> None:
        self.resources: Mapping[str, Any] = template.get("Resources", {})
        self.parameters: Mapping[str, Any] = template.get("Parameters", {})
        self.stack_name = stack_name

    def physical_name(self, logical_id: str) -> str:
        resource = self.resources[logical_id]
        prop = NAME_PROPERTY.get(resource.get("Type", ""))
        if prop and prop in resource.get("Properties", {}):
            return str(self.resolve(resource["Properties"][prop]))
        return f"{self.stack_name}-{logical_id}"

    def arn(self, logical_id: str) -> str:
        kind = self.resources[logical_id].get("Type", "")
        name = self.physical_name(logical_id)
        region, account = PSEUDO["AWS::Region"], PSEUDO["AWS::AccountId"]
        services = {
            "AWS::SQS::Queue": f"arn:aws:sqs:{region}:{account}:{name}",
            "AWS::SNS::Topic": f"arn:aws:sns:{region}:{account}:{name}",
            "AWS::CloudWatch::Alarm": f"arn:aws:cloudwatch:{region}:{account}:alarm:{name}",
            "AWS::CloudWatch::CompositeAlarm": f"arn:aws:cloudwatch:{region}:{account}:alarm:{name}",
            "AWS::ECS::Cluster": f"arn:aws:ecs:{region}:{account}:cluster/{name}",
        }
        if kind not in services:
            raise Unsupported(f"template: the ARN of {logical_id} ({kind}) is not implemented")
        return services[kind]

    def ref(self, name: str) -> str:
        if name == "AWS::StackName":
            return self.stack_name
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.parameters:
            default = self.parameters[name].get("Default")
            if default is None:
                raise Unsupported(f"template: parameter {name} has no Default to evaluate with")
            return str(default)
        if name not in self.resources:
            raise ValueError(f"template: Ref to {name!r}, which is neither a resource nor a parameter")
        kind = self.resources[name].get("Type", "")
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{PSEUDO['AWS::Region']}.amazonaws.com/{PSEUDO['AWS::AccountId']}/{self.physical_name(name)}"
        if kind in ("AWS::SNS::Topic", "AWS::ECS::Service"):
            return self.arn(name) if kind == "AWS::SNS::Topic" else f"arn:aws:ecs:service/{self.physical_name(name)}"
        return self.physical_name(name)

    def get_att(self, logical_id: str, attribute: str) -> str:
        if logical_id not in self.resources:
            raise ValueError(f"template: Fn::GetAtt on {logical_id!r}, which is not a resource")
        kind = self.resources[logical_id].get("Type", "")
        if attribute == "Arn" or (kind == "AWS::SNS::Topic" and attribute == "TopicArn"):
            return self.arn(logical_id)
        names = {
            ("AWS::SQS::Queue", "QueueName"),
            ("AWS::SNS::Topic", "TopicName"),
            ("AWS::ECS::Service", "Name"),
            ("AWS::ECS::Cluster", "ClusterName"),
        }
        if (kind, attribute) in names:
            return self.physical_name(logical_id)
        if (kind, attribute) == ("AWS::SQS::Queue", "QueueUrl"):
            return self.ref(logical_id)
        raise Unsupported(f"template: Fn::GetAtt {logical_id}.{attribute} ({kind}) is not implemented")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1:
            return {k: self.resolve(v) for k, v in value.items()}
        ((function, argument),) = value.items()
        if function == "Ref":
            return self.ref(argument)
        if function == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return self.get_att(logical_id, attribute)
        if function == "Fn::Join":
            separator, parts = argument
            return str(separator).join(str(self.resolve(part)) for part in self.resolve(parts))
        if function == "Fn::Select":
            index, items = argument
            return self.resolve(items)[int(self.resolve(index))]
        if function == "Fn::Sub":
            return self.sub(argument)
        if function.startswith("Fn::") or function == "Condition":
            raise Unsupported(f"template: intrinsic {function} is not implemented")
        return {function: self.resolve(argument)}

    def sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        out: list[str] = []
        rest = str(text)
        while "${" in rest:
            before, _, after = rest.partition("${")
            name, _, rest = after.partition("}")
            out.append(before)
            if name.startswith("!"):
                out.append("${" + name[1:] + "}")
            elif name in variables:
                out.append(str(self.resolve(variables[name])))
            elif "." in name:
                logical_id, attribute = name.split(".", 1)
                out.append(self.get_att(logical_id, attribute))
            else:
                out.append(self.ref(name))
        return "".join(out) + rest


def _actions(
    resolver: Resolver, properties: Mapping[str, Any], topics: Mapping[str, str]
) -> dict[str, tuple[str, ...]]:
    """The notified targets per new state: a topic of the template by its logical id, anything else as written."""
    if properties.get("ActionsEnabled", True) in (False, "false"):
        return {}
    actions = {}
    for state, prop in ACTION_PROPERTIES.items():
        targets = []
        for action in properties.get(prop, []):
            if isinstance(action, dict) and set(action) == {"Ref"} and action["Ref"] in topics.values():
                targets.append(action["Ref"])
                continue
            resolved = str(resolver.resolve(action))
            targets.append(next((lid for arn, lid in topics.items() if arn == resolved), resolved))
        actions[state] = tuple(targets)
    return actions


def _number(alarm: str, prop: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"alarm {alarm}: {prop} must be a number, got {value!r}") from None


def _metric_stat(resolver: Resolver, alarm: str, metric: Mapping[str, Any], stat: str, period: Any) -> MetricStat:
    dimensions = {str(d["Name"]): str(resolver.resolve(d["Value"])) for d in metric.get("Dimensions", [])}
    key = metric_key(str(metric["Namespace"]), str(metric["MetricName"]), dimensions)
    return MetricStat(key=key, stat=str(stat), period=int(_number(alarm, "Period", period)))


def _queries(resolver: Resolver, name: str, properties: Mapping[str, Any]) -> tuple[tuple[Query, ...], int]:
    if "Metrics" not in properties:
        stat = properties.get("Statistic") or properties.get("ExtendedStatistic")
        if stat is None or "MetricName" not in properties:
            raise ValueError(f"alarm {name}: needs MetricName and Statistic (or ExtendedStatistic), or Metrics")
        metric = _metric_stat(resolver, name, properties, stat, properties.get("Period"))
        return (Query(id="m1", metric=metric),), metric.period
    queries = []
    for entry in properties["Metrics"]:
        unknown = set(entry) - {"Id", "Expression", "MetricStat", "Period", "ReturnData", "Label"}
        if unknown:
            raise Unsupported(f"alarm {name}: Metrics entry property {sorted(unknown)[0]} is not implemented")
        if "MetricStat" in entry:
            ms = entry["MetricStat"]
            if "Unit" in ms:
                raise Unsupported(f"alarm {name}: MetricStat.Unit is not implemented (series carry no units)")
            metric = _metric_stat(resolver, name, ms["Metric"], ms["Stat"], ms["Period"])
            queries.append(Query(id=entry["Id"], metric=metric, return_data=entry.get("ReturnData", True)))
        else:
            period = entry.get("Period")
            queries.append(
                Query(
                    id=entry["Id"],
                    expression=str(resolver.resolve(entry["Expression"])),
                    period=int(period) if period is not None else None,
                    return_data=entry.get("ReturnData", True),
                )
            )
    periods = {q.metric.period for q in queries if q.metric is not None} | {q.period for q in queries if q.period}
    if len(periods) != 1:
        raise Unsupported(f"alarm {name}: metrics with different periods {sorted(periods)} are not implemented")
    return tuple(queries), periods.pop()


def _alarm_properties(
    resolver: Resolver, logical_id: str, implemented: Set[str], kind: str
) -> tuple[Mapping[str, Any], str]:
    """An alarm resource's properties and its physical name; a property not implemented is refused by name."""
    properties = resolver.resources[logical_id].get("Properties", {})
    name = resolver.physical_name(logical_id)
    unknown = set(properties) - implemented
    if unknown:
        raise Unsupported(f"{kind} {name}: property {sorted(unknown)[0]} is not implemented")
    return properties, name


def metric_alarm(resolver: Resolver, logical_id: str, topics: Mapping[str, str]) -> MetricAlarm:
    properties, name = _alarm_properties(resolver, logical_id, METRIC_ALARM_PROPERTIES, "alarm")
    comparison = properties.get("ComparisonOperator")
    if comparison not in COMPARISONS:
        raise Unsupported(f"alarm {name}: ComparisonOperator {comparison} is not implemented")
    treat = properties.get("TreatMissingData", MISSING)
    if treat not in TREAT_MISSING:
        raise ValueError(f"alarm {name}: TreatMissingData must be one of {', '.join(TREAT_MISSING)}, got {treat!r}")
    queries, period = _queries(resolver, name, properties)
    evaluation_periods = int(_number(name, "EvaluationPeriods", properties.get("EvaluationPeriods")))
    datapoints = int(_number(name, "DatapointsToAlarm", properties.get("DatapointsToAlarm", evaluation_periods)))
    if not 1 <= datapoints <= evaluation_periods:
        raise ValueError(
            f"alarm {name}: DatapointsToAlarm must be 1 to EvaluationPeriods ({evaluation_periods}), got {datapoints}"
        )
    return MetricAlarm(
        logical_id=logical_id,
        name=name,
        period=period,
        evaluation_periods=evaluation_periods,
        datapoints_to_alarm=datapoints,
        threshold=_number(name, "Threshold", properties.get("Threshold")),
        comparison=comparison,
        treat_missing=treat,
        queries=queries,
        actions=_actions(resolver, properties, topics),
    )


def composite_alarm(resolver: Resolver, logical_id: str, topics: Mapping[str, str]) -> CompositeAlarm:
    properties, name = _alarm_properties(resolver, logical_id, COMPOSITE_PROPERTIES, "composite alarm")
    return CompositeAlarm(
        logical_id=logical_id,
        name=name,
        rule=str(resolver.resolve(properties["AlarmRule"])),
        actions=_actions(resolver, properties, topics),
    )


def read_alarms(template: Mapping[str, Any], stack_name: str) -> tuple[list[MetricAlarm], list[CompositeAlarm]]:
    """Every AWS::CloudWatch::Alarm and AWS::CloudWatch::CompositeAlarm of ``template``, names resolved."""
    resolver = Resolver(template, stack_name)
    resources = resolver.resources
    topics = {resolver.arn(lid): lid for lid, r in resources.items() if r.get("Type") == "AWS::SNS::Topic"}
    metric_alarms = [
        metric_alarm(resolver, lid, topics) for lid, r in resources.items() if r.get("Type") == "AWS::CloudWatch::Alarm"
    ]
    composites = [
        composite_alarm(resolver, lid, topics)
        for lid, r in resources.items()
        if r.get("Type") == "AWS::CloudWatch::CompositeAlarm"
    ]
    return metric_alarms, composites


def load_template(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"TEMPLATE {path}: cannot be read as JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
        raise ValueError(f"TEMPLATE {path}: must be a CloudFormation template with a Resources object")
    return document
