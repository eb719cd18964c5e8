"""A synthesized CloudFormation template resolved to concrete names and ARNs in a fixed fake account.

Test tooling for the permissions tier (no boto3, no AWS): every resource gets the physical name
CloudFormation would give it (its name property, else ``<stack>-<logical id>-<suffix>``) and the
``Ref`` / ``Fn::GetAtt`` values AWS documents for its type, so the policies in the template can be
evaluated against real-looking ARNs. ``Ref`` follows CloudFormation's return values, as
``consumer/local/stack.py`` does for ``consumer local up``: a queue's ``Ref`` is its URL, a cluster's its
name, a topic's its ARN.

Resolved: ``Ref`` (resources, parameters, pseudo parameters), ``Fn::GetAtt``, ``Fn::Join``,
``Fn::Sub``, ``Fn::Select``, ``Fn::Split``, ``Fn::GetAZs``, ``Fn::If``, ``Fn::FindInMap``,
``Fn::Base64``, ``Conditions`` (``Fn::Equals``, ``Fn::Not``, ``Fn::And``, ``Fn::Or``, ``Condition``)
and ``AWS::NoValue``. Anything else (an intrinsic, a resource type or an attribute not known here, a
parameter without a value) raises :class:`ResolveError` naming it: never a silent pass. Every
resource's properties are resolved eagerly, so a template using something new fails at once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FAKE_ACCOUNT = "111122223333"
FAKE_REGION = "eu-west-1"
FAKE_PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"
#: CloudFormation's Rules hold deploy-time assertions on parameters (the CDK bootstrap version);
#: they name nothing and grant nothing, so they are not evaluated.
IGNORED_SECTIONS = frozenset({"Rules", "Metadata", "Description", "AWSTemplateFormatVersion"})
KNOWN_SECTIONS = frozenset({"Resources", "Outputs", "Parameters", "Conditions", "Mappings"}) | IGNORED_SECTIONS


class ResolveError(Exception):
    """The template uses something this resolver does not know; the message names it and where."""


class _NoValue:
    """``AWS::NoValue``: the property or list element it stands for is removed."""


NO_VALUE = _NoValue()


@dataclass
class Resource:
    """One resolved resource: its type, resolved properties, physical name, ``Ref`` and attributes."""

    logical_id: str
    type: str
    properties: dict[str, Any]
    name: str
    ref: str | None
    attributes: dict[str, Any]


@dataclass
class ResolvedTemplate:
    """Every resource of a template resolved in one fake account and region."""

    stack_name: str
    account: str
    region: str
    partition: str
    resources: dict[str, Resource]
    outputs: dict[str, Any] = field(default_factory=dict)

    def of_type(self, resource_type: str) -> list[Resource]:
        return [r for r in self.resources.values() if r.type == resource_type]

    def arn(self, service: str, resource: str, *, region: str | None = None, account: str | None = None) -> str:
        """An ARN in this template's partition, region and account (``region=""`` for global services)."""
        return make_arn(
            self.partition,
            service,
            self.region if region is None else region,
            self.account if account is None else account,
            resource,
        )


def make_arn(partition: str, service: str, region: str, account: str, resource: str) -> str:
    return f"arn:{partition}:{service}:{region}:{account}:{resource}"


def _suffix(*parts: str, length: int = 12) -> str:
    """CloudFormation's generated-name suffix, made deterministic (same template, same names)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length].upper()


class _Resolver:
    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        account: str,
        region: str,
        partition: str,
        parameters: Mapping[str, Any],
    ) -> None:
        unknown = set(template) - KNOWN_SECTIONS
        if unknown:
            raise ResolveError(f"template section(s) not known to the resolver: {', '.join(sorted(unknown))}")
        self.template = template
        self.stack_name = stack_name
        self.account = account
        self.region = region
        self.partition = partition
        self.parameters = dict(parameters)
        self.declared_resources: dict[str, Any] = dict(template.get("Resources", {}))
        self.resources: dict[str, Resource] = {}
        self.conditions: dict[str, bool] = {}
        self._resolving: list[str] = []
        self.pseudo = {
            "AWS::AccountId": account,
            "AWS::Region": region,
            "AWS::Partition": partition,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": stack_name,
            "AWS::StackId": f"arn:{partition}:cloudformation:{region}:{account}:stack/{stack_name}/"
            f"{_suffix(stack_name, length=8).lower()}-0000-0000-0000-000000000000",
            "AWS::NotificationARNs": [],
        }

    # -- conditions ---------------------------------------------------------------------------------

    def condition(self, name: str) -> bool:
        if name not in self.conditions:
            declared = self.template.get("Conditions", {})
            if name not in declared:
                raise ResolveError(f"condition {name!r} is not declared in the template's Conditions")
            self.conditions[name] = self._condition_value(declared[name], f"Conditions.{name}")
        return self.conditions[name]

    def _condition_value(self, value: Any, where: str) -> bool:
        if not (isinstance(value, dict) and len(value) == 1):
            raise ResolveError(f"{where}: a condition must be one condition function, got {json.dumps(value)}")
        ((function, argument),) = value.items()
        if function == "Condition":
            return self.condition(argument)
        if function == "Fn::Equals":
            left, right = (self.value(a, where) for a in argument)
            return str(left) == str(right)
        if function == "Fn::Not":
            (inner,) = argument
            return not self._condition_value(inner, where)
        if function == "Fn::And":
            return all(self._condition_value(a, where) for a in argument)
        if function == "Fn::Or":
            return any(self._condition_value(a, where) for a in argument)
        raise ResolveError(f"{where}: condition function {function!r} is not known to the resolver")

    # -- values ---------------------------------------------------------------------------------------

    def value(self, value: Any, where: str) -> Any:
        """``value`` with every intrinsic function resolved (``NO_VALUE`` where AWS::NoValue removes it)."""
        if isinstance(value, list):
            items = [self.value(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return [v for v in items if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref" or key.startswith("Fn::"):
                return self._intrinsic(key, argument, where)
        resolved = {k: self.value(v, f"{where}.{k}") for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def _intrinsic(self, function: str, argument: Any, where: str) -> Any:
        handler = self._INTRINSICS.get(function)
        if handler is None:
            raise ResolveError(f"{where}: intrinsic function {function!r} is not known to the resolver")
        return handler(self, argument, where)

    def _ref(self, name: Any, where: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.template.get("Parameters", {}):
            return self._parameter(name, where)
        resource = self.resource(name, where)
        if resource.ref is None:
            raise ResolveError(
                f"{where}: the Ref of {resource.type} ({name}) is not known to the resolver; add the type to RESOURCE_TYPES"
            )
        return resource.ref

    def _parameter(self, name: str, where: str) -> Any:
        declared = self.template["Parameters"][name]
        if name in self.parameters:
            value = self.parameters[name]
        elif "Default" in declared and not declared.get("Type", "").startswith("AWS::SSM::Parameter::Value"):
            value = declared["Default"]
        else:
            raise ResolveError(
                f"{where}: parameter {name!r} ({declared.get('Type')}) has no value; pass it in parameters="
            )
        if declared.get("Type") == "CommaDelimitedList" and isinstance(value, str):
            return value.split(",")
        return value

    def _get_att(self, argument: Any, where: str) -> Any:
        logical_id, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
        resource = self.resource(self.value(logical_id, where), where)
        if attribute not in resource.attributes:
            raise ResolveError(
                f"{where}: Fn::GetAtt {attribute!r} of {resource.type} ({logical_id}) is not known to the resolver"
            )
        return resource.attributes[attribute]

    def _join(self, argument: Any, where: str) -> str:
        delimiter, items = argument
        values = self.value(items, where)
        return str(delimiter).join(_scalar(v, where) for v in values)

    def _sub(self, argument: Any, where: str) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        bound = {k: self.value(v, where) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in bound:
                return _scalar(bound[name], where)
            if "." in name and name.split(".", 1)[0] in self.declared_resources:
                return _scalar(self._get_att(name, where), where)
            return _scalar(self._ref(name, where), where)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def _select(self, argument: Any, where: str) -> Any:
        index, items = argument
        values = self.value(items, where)
        position = int(self.value(index, where))
        if not 0 <= position < len(values):
            raise ResolveError(f"{where}: Fn::Select index {position} outside a list of {len(values)}")
        return values[position]

    def _split(self, argument: Any, where: str) -> list[str]:
        delimiter, text = argument
        return str(self.value(text, where)).split(delimiter)

    def _get_azs(self, argument: Any, where: str) -> list[str]:
        region = self.value(argument, where) or self.region
        return [f"{region}{zone}" for zone in "abc"]

    def _if(self, argument: Any, where: str) -> Any:
        name, when_true, when_false = argument
        return self.value(when_true if self.condition(name) else when_false, where)

    def _find_in_map(self, argument: Any, where: str) -> Any:
        mapping, top, second = (self.value(a, where) for a in argument)
        try:
            return self.template["Mappings"][mapping][top][second]
        except KeyError as missing:
            raise ResolveError(f"{where}: Fn::FindInMap {mapping}/{top}/{second} not found ({missing})") from None

    def _base64(self, argument: Any, where: str) -> str:
        import base64

        return base64.b64encode(str(self.value(argument, where)).encode()).decode()

    _INTRINSICS: dict[str, Callable[..., Any]] = {
        "Ref": _ref,
        "Fn::GetAtt": _get_att,
        "Fn::Join": _join,
        "Fn::Sub": _sub,
        "Fn::Select": _select,
        "Fn::Split": _split,
        "Fn::GetAZs": _get_azs,
        "Fn::If": _if,
        "Fn::FindInMap": _find_in_map,
        "Fn::Base64": _base64,
    }

    # -- resources ------------------------------------------------------------------------------------

    def included(self, logical_id: str) -> bool:
        condition = self.declared_resources[logical_id].get("Condition")
        return condition is None or self.condition(condition)

    def resource(self, logical_id: str, where: str) -> Resource:
        if logical_id in self.resources:
            return self.resources[logical_id]
        if logical_id not in self.declared_resources:
            raise ResolveError(f"{where}: {logical_id!r} is not a resource, parameter or pseudo parameter")
        if not self.included(logical_id):
            raise ResolveError(f"{where}: {logical_id!r} is not created (its condition is false)")
        if logical_id in self._resolving:
            raise ResolveError(f"reference cycle: {' -> '.join([*self._resolving, logical_id])}")
        self._resolving.append(logical_id)
        try:
            declared = self.declared_resources[logical_id]
            kind = declared["Type"]
            properties = self.value(declared.get("Properties", {}), f"{logical_id}.Properties")
            namer = RESOURCE_TYPES.get(kind)
            if namer is None:
                # Only resources something refers to need a rule (a Ref or Fn::GetAtt of this one fails loudly);
                # the rest are resolved for their properties.
                resolved = Resource(logical_id, kind, properties, "", None, {})
            else:
                resolved = namer(self, logical_id, properties)
                resolved.type = kind
            self.resources[logical_id] = resolved
            return resolved
        finally:
            self._resolving.pop()

    def generated_name(self, logical_id: str, max_length: int = 255) -> str:
        """CloudFormation's name for an unnamed resource: ``<stack>-<logical id>-<suffix>``, cut to fit."""
        suffix = _suffix(self.stack_name, logical_id)
        head = f"{self.stack_name}-{logical_id}"[: max_length - len(suffix) - 1]
        return f"{head}-{suffix}"

    def arn(self, service: str, resource: str, *, region: str | None = None) -> str:
        return make_arn(self.partition, service, self.region if region is None else region, self.account, resource)


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ResolveError(f"{where}: expected a string, got {json.dumps(value)}")


# -- what each resource type's Ref and Fn::GetAtt return (CloudFormation's "Return values") ----------


def _named(r: _Resolver, logical_id: str, properties: Mapping[str, Any], key: str, max_length: int = 255) -> str:
    name = properties.get(key)
    return _scalar(name, f"{logical_id}.{key}") if name is not None else r.generated_name(logical_id, max_length)


def _queue(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    name = _named(r, logical_id, p, "QueueName", 80)
    if p.get("FifoQueue") and "QueueName" not in p:
        name = f"{r.generated_name(logical_id, 75)}.fifo"
    url = f"https://sqs.{r.region}.{URL_SUFFIX}/{r.account}/{name}"
    return Resource(logical_id, "", dict(p), name, url, {"Arn": r.arn("sqs", name), "QueueName": name, "QueueUrl": url})


def _topic(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    name = _named(r, logical_id, p, "TopicName", 256)
    if p.get("FifoTopic") and "TopicName" not in p:
        name = f"{r.generated_name(logical_id, 251)}.fifo"
    arn = r.arn("sns", name)
    return Resource(logical_id, "", dict(p), name, arn, {"TopicArn": arn, "TopicName": name})


def _key(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    digest = hashlib.sha256(f"{r.stack_name}/{logical_id}".encode()).hexdigest()
    key_id = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    return Resource(logical_id, "", dict(p), key_id, key_id, {"Arn": r.arn("kms", f"key/{key_id}"), "KeyId": key_id})


def _role(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    name = _named(r, logical_id, p, "RoleName", 64)
    path = p.get("Path", "/")
    arn = r.arn("iam", f"role{path}{name}", region="")
    return Resource(logical_id, "", dict(p), name, name, {"Arn": arn, "RoleId": f"AROA{_suffix(arn, length=17)}"})


def _named_resource(
    name_property: str,
    service: str = "",
    arn_resource: str = "",
    *,
    ref: str = "name",
    arn_attribute: str = "Arn",
    max_length: int = 255,
) -> Callable[..., Resource]:
    """Resources named by ``name_property`` whose ARN is ``arn:...:<service>:...:<arn_resource>``.

    ``arn_resource`` may use ``{name}`` and ``{suffix}`` (a generated id); ``ref`` says whether the
    ``Ref`` is the name or the ARN.
    """

    def make(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
        name = _named(r, logical_id, p, name_property, max_length)
        suffix = _suffix(r.stack_name, logical_id, length=6)
        arn = r.arn(service, arn_resource.format(name=name, suffix=suffix)) if service else None
        attributes = {arn_attribute: arn} if arn else {}
        return Resource(logical_id, "", dict(p), name, arn if ref == "arn" else name, attributes)

    return make


def _physical_id(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    """Resources whose Ref is an opaque physical id and which have no attributes used here."""
    name = r.generated_name(logical_id)
    return Resource(logical_id, "", dict(p), name, name, {})


def _service(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    name = _named(r, logical_id, p, "ServiceName")
    cluster = _scalar(p.get("Cluster", "default"), f"{logical_id}.Cluster").rsplit("/", 1)[-1]
    arn = r.arn("ecs", f"service/{cluster}/{name}")
    return Resource(logical_id, "", dict(p), name, arn, {"Name": name, "ServiceArn": arn})


def _ec2(prefix: str, **attributes: Callable[[str, Mapping[str, Any]], Any]) -> Callable[..., Resource]:
    """EC2 resources: the Ref is an id such as ``vpc-0a1b...``; ``attributes`` derive from it and the properties."""

    def make(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
        physical = f"{prefix}-{_suffix(r.stack_name, logical_id, length=17).lower()}"
        resolved = {name: derive(physical, p) for name, derive in attributes.items()}
        return Resource(logical_id, "", dict(p), physical, physical, resolved)

    return make


def _eip(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    digest = hashlib.sha256(f"{r.stack_name}/{logical_id}".encode()).digest()
    address = f"198.51.100.{digest[0] % 254 + 1}"  # TEST-NET-2, never a real address
    allocation = f"eipalloc-{digest.hex()[:17]}"
    return Resource(logical_id, "", dict(p), address, address, {"AllocationId": allocation, "PublicIp": address})


def _subscription(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    arn = f"{_scalar(p['TopicArn'], f'{logical_id}.TopicArn')}:{_suffix(r.stack_name, logical_id).lower()}"
    return Resource(logical_id, "", dict(p), arn, arn, {"Arn": arn})


def _events_rule(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    """An EventBridge rule: ``Ref`` is its name (``<bus>|<name>`` on a bus other than the default), its ARN
    ``...:rule/<name>`` or ``...:rule/<bus>/<name>``
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-events-rule.html)."""
    name = _named(r, logical_id, p, "Name", 64)
    bus = _scalar(p.get("EventBusName", "default"), f"{logical_id}.EventBusName").rsplit("/", 1)[-1]
    path = name if bus == "default" else f"{bus}/{name}"
    ref = name if bus == "default" else f"{bus}|{name}"
    return Resource(logical_id, "", dict(p), name, ref, {"Arn": r.arn("events", f"rule/{path}")})


def _scalable_target(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    target = "|".join(
        _scalar(p[k], f"{logical_id}.{k}") for k in ("ResourceId", "ScalableDimension", "ServiceNamespace")
    )
    return Resource(logical_id, "", dict(p), target, target, {"Id": target})


def _ssm_parameter(r: _Resolver, logical_id: str, p: Mapping[str, Any]) -> Resource:
    name = _named(r, logical_id, p, "Name", 2048)
    return Resource(logical_id, "", dict(p), name, name, {"Type": p.get("Type", "String"), "Value": p.get("Value")})


RESOURCE_TYPES: dict[str, Callable[[_Resolver, str, Mapping[str, Any]], Resource]] = {
    "AWS::SQS::Queue": _queue,
    "AWS::SQS::QueuePolicy": _physical_id,
    "AWS::SNS::Topic": _topic,
    "AWS::SNS::TopicPolicy": _physical_id,
    "AWS::SNS::Subscription": _subscription,
    "AWS::Events::Rule": _events_rule,
    "AWS::KMS::Key": _key,
    "AWS::DynamoDB::Table": _named_resource("TableName", "dynamodb", "table/{name}"),
    "AWS::IAM::Role": _role,
    "AWS::IAM::Policy": _physical_id,
    "AWS::ECS::Cluster": _named_resource("ClusterName", "ecs", "cluster/{name}"),
    "AWS::ECS::Service": _service,
    "AWS::ECS::TaskDefinition": _named_resource(
        "Family", "ecs", "task-definition/{name}:1", ref="arn", arn_attribute="TaskDefinitionArn"
    ),
    "AWS::Logs::LogGroup": _named_resource("LogGroupName", "logs", "log-group:{name}:*", max_length=512),
    "AWS::CloudWatch::Alarm": _named_resource("AlarmName", "cloudwatch", "alarm:{name}"),
    "AWS::CloudWatch::CompositeAlarm": _named_resource("AlarmName", "cloudwatch", "alarm:{name}"),
    "AWS::CloudWatch::Dashboard": _named_resource("DashboardName"),
    "AWS::ApplicationAutoScaling::ScalableTarget": _scalable_target,
    "AWS::ApplicationAutoScaling::ScalingPolicy": _named_resource(
        "PolicyName", "autoscaling", "scalingPolicy:{suffix}:policyName/{name}", ref="arn"
    ),
    "AWS::SecretsManager::Secret": _named_resource(
        "Name", "secretsmanager", "secret:{name}-{suffix}", ref="arn", arn_attribute="Id", max_length=512
    ),
    "AWS::SSM::Parameter": _ssm_parameter,
    "AWS::EC2::VPC": _ec2(
        "vpc", VpcId=lambda i, p: i, CidrBlock=lambda i, p: p.get("CidrBlock"), DefaultSecurityGroup=lambda i, p: "sg-0"
    ),
    "AWS::EC2::Subnet": _ec2(
        "subnet", SubnetId=lambda i, p: i, AvailabilityZone=lambda i, p: p.get("AvailabilityZone")
    ),
    "AWS::EC2::RouteTable": _ec2("rtb", RouteTableId=lambda i, p: i),
    "AWS::EC2::InternetGateway": _ec2("igw", InternetGatewayId=lambda i, p: i),
    "AWS::EC2::NatGateway": _ec2("nat", NatGatewayId=lambda i, p: i),
    "AWS::EC2::SecurityGroup": _ec2("sg", GroupId=lambda i, p: i, VpcId=lambda i, p: p.get("VpcId")),
    "AWS::EC2::EIP": _eip,
    "AWS::EC2::FlowLog": _ec2("fl", Id=lambda i, p: i),
    "AWS::EC2::Route": _ec2("r"),
    "AWS::EC2::SubnetRouteTableAssociation": _ec2("rtbassoc", Id=lambda i, p: i),
    "AWS::EC2::VPCGatewayAttachment": _ec2("igw-attach"),
    # The CDK's provider for @aws-cdk/aws-ec2:restrictDefaultSecurityGroup (a custom resource stripping the VPC's
    # default security group's rules, its Lambda function and the function's role).
    "AWS::Lambda::Function": _named_resource("FunctionName", "lambda", "function:{name}", max_length=64),
    # A lambda worker's event source mapping: its Ref is the mapping's UUID.
    "AWS::Lambda::EventSourceMapping": _physical_id,
    "Custom::VpcRestrictDefaultSG": _physical_id,
}


def resolve_template(
    template: Mapping[str, Any],
    *,
    stack_name: str,
    account: str = FAKE_ACCOUNT,
    region: str = FAKE_REGION,
    partition: str = FAKE_PARTITION,
    parameters: Mapping[str, Any] | None = None,
) -> ResolvedTemplate:
    """Resolve every resource (and output) of ``template``; raises :class:`ResolveError` on anything unknown.

    ``parameters`` gives CloudFormation parameters their deploy-time values; a parameter without one
    falls back to its ``Default`` (never for SSM-backed parameters, whose default is a parameter name).
    """
    resolver = _Resolver(
        template,
        stack_name=stack_name,
        account=account,
        region=region,
        partition=partition,
        parameters=parameters or {},
    )
    for logical_id in resolver.declared_resources:
        if resolver.included(logical_id):
            resolver.resource(logical_id, logical_id)
    outputs = {}
    for key, output in template.get("Outputs", {}).items():
        if "Condition" not in output or resolver.condition(output["Condition"]):
            outputs[key] = resolver.value(output["Value"], f"Outputs.{key}")
    return ResolvedTemplate(stack_name, account, region, partition, resolver.resources, outputs)
