"""The permissions tier's tooling: scenarios as data, turned into IAM simulations of a resolved template.

A :class:`Row` is one request and what AWS must answer: (principal, action, resource, context,
expected). Principals and resources are named by role (``task-role``, ``source``, ``{topic}``, ...)
and bound per worker by :class:`Bindings`, from the resolved template itself: the worker's task
definition's roles and container environment, its alarms' actions, the topics' keys. A resource named
``sibling:<resource>`` is the same resource of every other worker of the stack, so a grant that leaks
across workers is a row that fails. Each request is
then evaluated by ``tests/infra/simulate.mjs`` (``@cloud-copilot/iam-simulate``) with the principal's
identity policies and the resource's policy (queue policy, topic policy, key policy) together, as AWS
evaluates them; all requests of a run go to Node in one batch. Who may assume each role is evaluated the same
way (:func:`trust_scenarios`): ``sts:AssumeRole`` on the role, its trust policy as the resource policy, for every
``AWS::IAM::Role`` of the template, so a role the tier does not know about is evaluated too. A call from the task to
DynamoDB or S3 is evaluated under the policy of the gateway endpoint on its subnets' route tables too, as AWS does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tests.infra.resolve import ResolvedTemplate, ResolveError, Resource

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = Path(__file__).with_name("simulate.mjs")
EVALUATOR_PACKAGE = ROOT / "node_modules" / "@cloud-copilot" / "iam-simulate"
RUNTIME_CALLS_FILE = Path(__file__).with_name("runtime_calls.json")

ALLOWED, DENIED, EXPLICITLY_DENIED = "Allowed", "Denied", "ExplicitlyDenied"
#: An account that is not this stack's: its principals and alarms must be refused.
OTHER_ACCOUNT = "444455556666"
#: The ECS task id a task role session is named after (any id: the policies scope to the cluster).
TASK_ID = "0123456789abcdef0123456789abcdef"
#: Row placeholders repeated for each secret the container declares, by the service holding it.
SECRET_PLACEHOLDERS = {"ssm_parameter": "ssm", "secretsmanager_secret": "secretsmanager"}
#: A row resource starting so names that resource of every other worker of the stack (none: no scenario).
SIBLING = "sibling:"
#: IAM actions recorded for calls that need no permission (see runtime_call_recorder.NO_PERMISSION_NEEDED).
NO_ACTION = "none"
#: Everything allowed to a principal of another account by its own account: a refusal then comes from
#: the resource's policy alone, as it must.
ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
#: The policy AWS gives a VPC endpoint created without one: full access.
#: https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-access.html
DEFAULT_ENDPOINT_POLICY = {
    "Version": "2008-10-17",
    "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"}],
}
#: The principals whose calls leave from the task's network interface, so through a gateway endpoint on its subnets'
#: route tables: the consumer (task role) and Fargate acting for the task (execution role: image, logs, secrets).
TASK_PRINCIPALS = ("task-role", "execution-role")


class Row(NamedTuple):
    """One request and the answer AWS must give; placeholders in ``{}`` are bound per environment."""

    principal: str
    action: str
    resource: str
    context: Mapping[str, str]
    expected: str
    why: str


@dataclass(frozen=True)
class Scenario:
    """A row bound to one environment: concrete principal, resource ARN and context."""

    environment: str
    category: str
    principal: str
    action: str
    resource: str
    context: tuple[tuple[str, str], ...]
    expected: str
    why: str
    simulation: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    def describe(self, got: str) -> str:
        context = ", ".join(f"{k}={v}" for k, v in self.context)
        return (
            f"{self.environment}: {self.principal} {self.action} on {self.resource} [{context}]:"
            f" expected {self.expected}, got {got} ({self.why})"
        )

    def matches(self, got: str | None) -> bool:
        if self.expected == DENIED:
            return got in ("ImplicitlyDenied", "ExplicitlyDenied")
        return got == self.expected


def load_runtime_calls(path: Path = RUNTIME_CALLS_FILE) -> list[dict[str, Any]]:
    """The runtime's recorded calls (tests/integration keeps the list complete)."""
    return json.loads(path.read_text())["calls"]


def _single(items: Sequence[Any], what: str) -> Any:
    if len(items) != 1:
        raise ResolveError(f"expected exactly one {what}, found {len(items)}")
    return items[0]


class Bindings:
    """What the placeholders of the rows mean for one worker of a resolved template.

    ``owned`` is the logical ids of the worker's own resources (task definition, service, alarms, ...); None
    means the whole template, which must then hold one worker. ``siblings`` (set once every worker of the
    stack is bound) are the other workers' bindings, which ``sibling:`` rows reach into.
    """

    def __init__(self, environment: str, template: ResolvedTemplate, owned: Collection[str] | None = None) -> None:
        self.environment = environment
        self.template = template
        self.owned = frozenset(template.resources if owned is None else owned)
        self.siblings: list[Bindings] = []
        functions = self._owned("AWS::Lambda::Function")
        #: A lambda worker's function (infra/function.py; None for an ECS worker): its role is the consumer's role
        #: (``task-role`` in the rows), it has no execution role, no container and no task.
        self.function: Resource | None = _single(functions, "AWS::Lambda::Function") if functions else None
        self.container: dict[str, Any] = {}
        #: The gateway endpoints on the route tables of the task's subnets, by the service they reach (``dynamodb``,
        #: ``s3``): AWS evaluates such an endpoint's policy on every call of the task to that service, with the
        #: caller's own. None in an existing VPC, whose routes are not in the template, and for a function, which
        #: runs in no VPC.
        self.endpoints: dict[str, Resource] = {}
        if self.function is None:
            self._bind_task()
            environment_variables = {e["Name"]: e["Value"] for e in self.container.get("Environment", [])}
        else:
            self.task_role = self._role_with_arn(self.function.properties["Role"])
            self.execution_role = None
            self.cluster_name = _cluster_of(template)
            environment_variables = dict(self.function.properties["Environment"]["Variables"])
        table = environment_variables.get("CONSUMER_IDEMPOTENCY_TABLE")
        #: False for a handler idempotent by itself: no guard, no table; the guard's calls bind to a table of this
        #: account the worker does not have, and must be refused (:meth:`scenarios`).
        self.guarded = table is not None
        self.resources = {
            "source": self._queue_with_url(environment_variables["QUEUE_URL"]).attributes["Arn"],
            "dlq": self._queue_with_url(environment_variables["DLQ_URL"]).attributes["Arn"],
            "idempotency-table": self._table_named(table).attributes["Arn"]
            if table is not None
            else template.arn("dynamodb", f"table/{template.stack_name}-no-guard-has-no-table"),
            "task": template.arn("ecs", f"task/{self.cluster_name}/{TASK_ID}"),
            "asset-repository": template.arn("ecr", f"repository/{self._image_repository()}"),
            "log-stream": self._log_stream() if self.function is None else self._function_log_stream(),
            "*": "*",
            "other-queue": template.arn("sqs", "someone-elses-queue"),
            "other-account-queue": template.arn("sqs", "someone-elses-queue", account=OTHER_ACCOUNT),
            "other-table": template.arn("dynamodb", "table/someone-elses-table"),
            "other-task": template.arn("ecs", f"task/someone-elses-cluster/{TASK_ID}"),
            "other-repository": template.arn("ecr", "repository/someone-elses-image"),
            "other-log-stream": template.arn("logs", "log-group:someone-elses-logs:log-stream:app/1"),
            "any-secret": template.arn("secretsmanager", "secret:someone-elses-secret-AbCdEf"),
            "any-parameter": template.arn("ssm", "parameter/someone-elses-parameter"),
            "other-key": template.arn("kms", "key/00000000-0000-0000-0000-000000000000"),
        }
        #: The container's secrets by the service ECS reads them from, as the ARN a request names.
        self.secrets: dict[str, list[str]] = {"ssm": [], "secretsmanager": []}
        for secret in self.container.get("Secrets", []):
            arn = str(secret["ValueFrom"])
            service = arn.split(":")[2]
            if service == "secretsmanager":
                # ECS calls GetSecretValue on the ValueFrom without its ":<json key>:<stage>:<version>" tail,
                # exactly as written: a partial ARN (no "-" and six characters) is requested as it is, and
                # IAM matches the grant against that, so nothing may be appended here.
                arn = ":".join(arn.split(":")[:7])
            self.secrets[service].append(arn)

    def _bind_task(self) -> None:
        """An ECS worker's task: its consumer container, task and execution roles, cluster and gateway endpoints."""
        definition = _single(self._owned("AWS::ECS::TaskDefinition"), "AWS::ECS::TaskDefinition")
        # The consumer is the task's one essential container; a tracing sidecar (infra/tracing.py) is not essential.
        self.container = _single(
            [c for c in definition.properties["ContainerDefinitions"] if c.get("Essential", True)],
            "essential container in the task definition",
        )
        self.task_role = self._role_with_arn(definition.properties["TaskRoleArn"])
        self.execution_role: Resource | None = self._role_with_arn(definition.properties["ExecutionRoleArn"])
        service = _single(self._owned("AWS::ECS::Service"), "AWS::ECS::Service")
        self.cluster_name = str(service.properties.get("Cluster", "default")).rsplit("/", 1)[-1]
        self.endpoints = self._gateway_endpoints(service)

    # -- lookups in the resolved template -------------------------------------------------------------

    def _owned(self, resource_type: str) -> list[Resource]:
        return [r for r in self.template.of_type(resource_type) if r.logical_id in self.owned]

    def _role_with_arn(self, arn: str) -> Resource:
        return _single([r for r in self.template.of_type("AWS::IAM::Role") if r.attributes["Arn"] == arn], arn)

    def resource_of(self, arn: str) -> Resource:
        """The template's resource whose ``Arn`` is ``arn``."""
        return _single([r for r in self.template.resources.values() if r.attributes.get("Arn") == arn], arn)

    def _queue_with_url(self, url: str) -> Resource:
        return _single([q for q in self.template.of_type("AWS::SQS::Queue") if q.ref == url], f"queue {url}")

    def _table_named(self, name: str) -> Resource:
        return _single([t for t in self.template.of_type("AWS::DynamoDB::Table") if t.name == name], f"table {name}")

    def _gateway_endpoints(self, service: Resource) -> dict[str, Resource]:
        subnets = set(service.properties["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"])
        tables = {
            a.properties["RouteTableId"]
            for a in self.template.of_type("AWS::EC2::SubnetRouteTableAssociation")
            if a.properties["SubnetId"] in subnets
        }
        return {
            str(e.properties["ServiceName"]).rsplit(".", 1)[-1]: e
            for e in self.template.of_type("AWS::EC2::VPCEndpoint")
            if e.properties.get("VpcEndpointType") == "Gateway" and tables & set(e.properties["RouteTableIds"])
        }

    def endpoint_policies(self, principal: str, action: str) -> list[dict[str, Any]]:
        """The policy of the gateway endpoint a call of ``principal`` (a row's label) to ``action`` goes through, as
        iam-simulate takes it (none for a call from outside the task, or to a service without an endpoint)."""
        endpoint = self.endpoints.get(action.split(":")[0]) if principal in TASK_PRINCIPALS else None
        if endpoint is None:
            return []
        return [
            {"name": endpoint.logical_id, "policy": endpoint.properties.get("PolicyDocument", DEFAULT_ENDPOINT_POLICY)}
        ]

    def _image_repository(self) -> str:
        image = str(  # <account>.dkr.ecr.<region>.<suffix>/<repository>:<tag>
            self.container["Image"] if self.function is None else self.function.properties["Code"]["ImageUri"]
        )
        return image.split("/", 1)[1].split(":", 1)[0].split("@", 1)[0]

    def _log_stream(self) -> str:
        options = self.container["LogConfiguration"]["Options"]
        # awslogs names each stream <prefix>/<container name>/<task id>.
        stream = f"{options['awslogs-stream-prefix']}/{self.container['Name']}/{TASK_ID}"
        return self.template.arn("logs", f"log-group:{options['awslogs-group']}:log-stream:{stream}")

    def _function_log_stream(self) -> str:
        assert self.function is not None
        group = self.function.properties["LoggingConfig"]["LogGroup"]
        # Lambda names each execution environment's stream <date>/[<version>]<id>.
        # https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html
        return self.template.arn("logs", f"log-group:{group}:log-stream:2026/11/30/[$LATEST]{TASK_ID}")

    def alarm_actions(self) -> list[tuple[str, str, str | None]]:
        """(alarm ARN, topic ARN, the topic's key ARN or None) for every ALARM and OK action of the worker's alarms.

        A wake-up alarm's action (a min_tasks 0 worker's, infra/scaling.py) is its StepScaling policy, not a topic:
        CloudWatch invokes Application Auto Scaling, which acts with its service-linked role, so no topic or key
        policy is involved; such a target is left out, and only where it is a step policy of the template."""
        step_policies = {
            p.ref
            for p in self.template.of_type("AWS::ApplicationAutoScaling::ScalingPolicy")
            if p.properties.get("PolicyType") == "StepScaling"
        }
        found = []
        for alarm in [*self._owned("AWS::CloudWatch::Alarm"), *self._owned("AWS::CloudWatch::CompositeAlarm")]:
            targets = dict.fromkeys([*alarm.properties.get("AlarmActions", []), *alarm.properties.get("OKActions", [])])
            for topic_arn in targets:
                if topic_arn in step_policies:
                    continue
                found.append((alarm.attributes["Arn"], topic_arn, self._key_of_topic(topic_arn)))
        return found

    def _key_of_topic(self, topic_arn: str) -> str | None:
        topic = _single([t for t in self.template.of_type("AWS::SNS::Topic") if t.ref == topic_arn], topic_arn)
        key = topic.properties.get("KmsMasterKeyId")
        if key is None:
            return None
        return _single(
            [
                k.attributes["Arn"]
                for k in self.template.of_type("AWS::KMS::Key")
                if key in (k.ref, k.attributes["Arn"])
            ],
            f"KMS key {key} of topic {topic_arn}",
        )

    def topics(self) -> list[str]:
        return [t.ref for t in self.template.of_type("AWS::SNS::Topic")]

    def identity_policies(self, role: Resource) -> list[dict[str, Any]]:
        """The role's inline policies and every AWS::IAM::Policy attached to it."""
        if role.properties.get("ManagedPolicyArns"):
            raise ResolveError(
                f"role {role.logical_id} has managed policies {role.properties['ManagedPolicyArns']}: their"
                " documents are not in the template, so this tier cannot evaluate them"
            )
        policies = [
            {"name": p["PolicyName"], "policy": p["PolicyDocument"]} for p in role.properties.get("Policies", [])
        ]
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in self.template.of_type(kind):
                if role.ref in policy.properties.get("Roles", []):
                    policies.append({"name": policy.logical_id, "policy": policy.properties["PolicyDocument"]})
        return policies

    def resource_policy(self, arn: str) -> dict[str, Any] | None:
        """The policy AWS evaluates on the resource side: queue policy, topic policy, key policy, table policy."""
        service = arn.split(":")[2] if arn.startswith("arn:") else ""
        if service == "sqs":
            return self._attached_policy("AWS::SQS::QueuePolicy", "Queues", self._ref_of("AWS::SQS::Queue", arn), arn)
        if service == "sns":
            policy = self._attached_policy("AWS::SNS::TopicPolicy", "Topics", arn, arn)
            if policy is None and arn in self.topics():
                raise ResolveError(f"topic {arn} has no AWS::SNS::TopicPolicy; SNS's default policy is not modelled")
            return policy
        if service == "kms":
            keys = [k for k in self.template.of_type("AWS::KMS::Key") if k.attributes["Arn"] == arn]
            if not keys:
                return None
            return _single(keys, arn).properties["KeyPolicy"]
        if service == "dynamodb":
            tables = [t for t in self.template.of_type("AWS::DynamoDB::Table") if t.attributes["Arn"] == arn]
            return tables[0].properties.get("ResourcePolicy", {}).get("PolicyDocument") if tables else None
        return None

    def _ref_of(self, resource_type: str, arn: str) -> str | None:
        matches = [r.ref for r in self.template.of_type(resource_type) if r.attributes.get("Arn") == arn]
        return matches[0] if matches else None

    def _attached_policy(self, policy_type: str, targets: str, ref: str | None, arn: str) -> dict[str, Any] | None:
        if ref is None:
            return None  # not this stack's resource: no policy of ours applies
        attached = [p for p in self.template.of_type(policy_type) if ref in p.properties[targets]]
        if len(attached) > 1:
            # Each policy resource replaces the whole policy: only one of them would be in force.
            raise ResolveError(f"{len(attached)} {policy_type} resources set the policy of {arn}; AWS keeps one")
        return attached[0].properties["PolicyDocument"] if attached else None

    # -- principals -----------------------------------------------------------------------------------

    def principal(self, label: str) -> tuple[Any, str, list[dict[str, Any]], dict[str, str]]:
        """(request principal, its description, identity policies, the context AWS adds for it)."""
        account = self.template.account
        if label in ("task-role", "execution-role"):
            role = self.task_role if label == "task-role" else self.execution_role
            if role is None:
                raise ResolveError(f"{self.environment}: a function has no {label}; its rows are not bound")
            session = f"arn:aws:sts::{account}:assumed-role/{role.name}/{TASK_ID}"
            context = {
                "aws:PrincipalArn": role.attributes["Arn"],
                "aws:PrincipalAccount": account,
                "aws:PrincipalType": "AssumedRole",
                "aws:userid": f"{role.attributes['RoleId']}:{TASK_ID}",
            }
            kind = "function-role" if self.function is not None and label == "task-role" else label
            return session, f"{kind} {role.name}", self.identity_policies(role), context
        return principal(label, account)

    # -- rows to scenarios -----------------------------------------------------------------------------

    def scenarios(self, category: str, rows: Iterable[Row]) -> list[Scenario]:
        """Bind ``rows``; a row naming ``{alarm}``, ``{topic}`` or ``{key}`` is repeated for every alarm action,
        ``{ssm_parameter}`` / ``{secretsmanager_secret}`` for every container secret of that service, and a
        ``sibling:`` resource for that resource of every other worker (none: no scenario)."""
        bound = []
        for row in rows:
            if self.function is not None and row.principal == "execution-role":
                continue  # a function has no execution role: Lambda pulls its image and writes its logs itself
            if not self.guarded and row.resource == "idempotency-table" and row.expected == ALLOWED:
                # A worker without the guard calls no table; a DynamoDB grant would be one it never needed.
                row = row._replace(expected=DENIED, why="no idempotency guard: no table, no DynamoDB action")
            if self.function is not None and row.resource == "task" and row.expected == ALLOWED:
                # A function runs in no task: an ECS grant would be one it never needed.
                row = row._replace(expected=DENIED, why="a function has no task: no ECS action")
            if row.resource.startswith(SIBLING):
                # This worker's principal on each other worker's resource: bound there, requested from here.
                bound += [
                    self._scenario(category, row._replace(resource=arn), {})
                    for sibling in self.siblings
                    for arn in sibling.arns(row.resource)
                ]
                continue
            text = json.dumps(row)
            if "{alarm}" in text or "{topic}" in text or "{key}" in text:
                values = [
                    {"alarm": alarm, "topic": topic, "key": key}
                    for alarm, topic, key in self.alarm_actions()
                    if key is not None or "{key}" not in text
                ]
            elif placeholder := next((p for p in SECRET_PLACEHOLDERS if "{" + p + "}" in text), None):
                values = [{placeholder: arn} for arn in self.arns(placeholder)]
            elif "{any_topic}" in text:
                values = [{"any_topic": topic} for topic in self.topics()]
            else:
                values = [{}]
            bound += [self._scenario(category, row, value) for value in values]
        return list(dict.fromkeys(bound))

    def arns(self, resource: str) -> list[str]:
        """What ``resource`` (``sibling:`` stripped) names in this worker: a :attr:`resources` key or a secret
        placeholder (every declared secret of that service)."""
        name = resource.removeprefix(SIBLING)
        if name in self.resources:
            return [self.resources[name]]
        placeholder = name.strip("{}")
        if placeholder in SECRET_PLACEHOLDERS:
            return self.secrets[SECRET_PLACEHOLDERS[placeholder]]
        raise ResolveError(f"resource {resource!r} is not known to the permissions tier")

    def _scenario(self, category: str, row: Row, value: Mapping[str, str]) -> Scenario:
        names = {
            **value,
            "account": self.template.account,
            "other_account_alarm": self.template.arn("cloudwatch", "alarm:SqsWorker-x-DlqDepth", account=OTHER_ACCOUNT),
            "other_app_alarm": self.template.arn("cloudwatch", "alarm:OtherApp-HighCpu"),
            "sibling_alarm": self.template.arn("cloudwatch", f"alarm:{self.template.stack_name}-2-DlqDepth"),
        }
        resource = self.resources.get(row.resource) or row.resource.format(**names)
        principal, described, identity_policies, principal_context = self.principal(row.principal)
        context = {
            "aws:SecureTransport": "true",
            **principal_context,
            **{k: v.format(**names) for k, v in row.context.items()},
        }
        simulation = {
            "request": {
                "principal": principal,
                "action": row.action,
                "resource": {"resource": resource, "accountId": _account_of(resource, self.template.account)},
                "contextVariables": context,
            },
            "identityPolicies": identity_policies,
            "serviceControlPolicies": [],
            "resourceControlPolicies": [],
        }
        policy = self.resource_policy(resource)
        if policy is not None:
            simulation["resourcePolicy"] = policy
        endpoints = self.endpoint_policies(row.principal, row.action)
        if endpoints:
            simulation["vpcEndpointPolicies"] = endpoints
        shown = tuple(sorted((k, v) for k, v in context.items() if k in row.context or k == "aws:SecureTransport"))
        return Scenario(
            self.environment, category, described, row.action, resource, shown, row.expected, row.why, simulation
        )


def principal(label: str, account: str) -> tuple[Any, str, list[dict[str, Any]], dict[str, str]]:
    """A principal that is no role of the stack, for a request to ``account``: (request principal, its description,
    identity policies, the context AWS adds for it)."""
    if label == "other-account" or label.startswith("other-account/"):
        name = label.partition("/")[2] or "admin"
        role_arn = f"arn:aws:iam::{OTHER_ACCOUNT}:role/{name}"
        context = {
            "aws:PrincipalArn": role_arn,
            "aws:PrincipalAccount": OTHER_ACCOUNT,
            "aws:PrincipalType": "AssumedRole",
        }
        return (
            f"arn:aws:sts::{OTHER_ACCOUNT}:assumed-role/{name}/s",
            f"{name} of another account (all actions allowed by its account)",
            [{"name": "admin", "policy": ADMIN_POLICY}],
            context,
        )
    if label.startswith(("role/", "admin-role/")):
        kind, name = label.split("/", 1)
        role_arn = f"arn:aws:iam::{account}:role/{name}"
        context = {
            "aws:PrincipalArn": role_arn,
            "aws:PrincipalAccount": account,
            "aws:PrincipalType": "AssumedRole",
        }
        policies = [{"name": "admin", "policy": ADMIN_POLICY}] if kind == "admin-role" else []
        described = f"{name} of this account" + (" (every action allowed by its own IAM policy)" if policies else "")
        return f"arn:aws:sts::{account}:assumed-role/{name}/s", described, policies, context
    if label.startswith("arn:"):  # a producer cdk.json names: a role (a session of it calls) or a user
        principal_account, kind_name = label.split(":")[4], label.split(":", 5)[5]
        kind, _, path_name = kind_name.partition("/")
        name = path_name.rsplit("/", 1)[-1]
        context = {
            "aws:PrincipalArn": label,
            "aws:PrincipalAccount": principal_account,
            "aws:PrincipalType": "AssumedRole" if kind == "role" else "User",
        }
        caller = f"arn:aws:sts::{principal_account}:assumed-role/{name}/s" if kind == "role" else label
        # Another account's producer is allowed everything by its own account; this account's, nothing of its own:
        # either way only the queue's policy can let it send.
        policies = [{"name": "admin", "policy": ADMIN_POLICY}] if principal_account != account else []
        return caller, f"producer {label}", policies, context
    if label == "anonymous":
        return {"type": "Anonymous"}, "anonymous", [], {}
    if label.endswith(".amazonaws.com"):
        context = {"aws:PrincipalServiceName": label, "aws:PrincipalIsAWSService": "true"}
        return label, label, [], context
    raise ResolveError(f"principal {label!r} is not known to the permissions tier")


# -- who may assume each role: its trust policy -----------------------------------------------------------

#: The services a role of the stack may trust, each with the source ARN its ``sts:AssumeRole`` request carries
#: for this stack (``aws:SourceArn``; ``aws:SourceAccount`` is the account): infra/trust.py cites each service's
#: documentation. A role trusting a service missing here fails the tier, naming the role and the service.
TRUSTED_SERVICES: dict[str, Callable[[ResolvedTemplate, Resource], str]] = {
    # ECS assumes a task's roles for the task: the source is the task (any cluster: ECS scopes no further).
    "ecs-tasks.amazonaws.com": lambda template, _role: template.arn("ecs", f"task/{_cluster_of(template)}/{TASK_ID}"),
    # Flow logs assume the role of the flow log that delivers with it.
    "vpc-flow-logs.amazonaws.com": lambda template, role: template.arn(
        "ec2", f"vpc-flow-log/{_flow_log_of(template, role)}"
    ),
    # Lambda assumes a function's execution role for that function (a CDK custom resource provider's).
    "lambda.amazonaws.com": lambda template, role: template.arn("lambda", f"function:{_function_of(template, role)}"),
}
#: A service no role of the stack trusts, asking with this account's source: refused by every role.
UNTRUSTED_SERVICE = ("ec2.amazonaws.com", "instance/i-0123456789abcdef0")
#: Principals that are no service: each refused by every role, whatever its own IAM policy allows.
NOT_SERVICES = {
    "admin-role/admin": "an admin of this account (a trust policy naming the account would delegate to IAM)",
    "other-account": "another account's principal",
    "anonymous": "nobody unsigned",
}


def _cluster_of(template: ResolvedTemplate) -> str:
    services = template.of_type("AWS::ECS::Service")
    return str(services[0].properties.get("Cluster", "default")).rsplit("/", 1)[-1] if services else "default"


def _flow_log_of(template: ResolvedTemplate, role: Resource) -> str:
    flow_logs = [
        f.ref
        for f in template.of_type("AWS::EC2::FlowLog")
        if f.properties.get("DeliverLogsPermissionArn") == role.attributes["Arn"]
    ]
    return str(flow_logs[0]) if flow_logs else "fl-0123456789abcdef0"


def _function_of(template: ResolvedTemplate, role: Resource) -> str:
    functions = [
        f.name for f in template.of_type("AWS::Lambda::Function") if f.properties["Role"] == role.attributes["Arn"]
    ]
    return functions[0] if functions else "a-function"


def trust_problems(template: ResolvedTemplate) -> list[str]:
    """Why a role's trust policy admits more than one known service's ``sts:AssumeRole``: one line per statement that
    is not an Allow of exactly that action to service principals of :data:`TRUSTED_SERVICES`."""
    problems = []
    for role in template.of_type("AWS::IAM::Role"):
        statements = role.properties["AssumeRolePolicyDocument"]["Statement"]
        for statement in statements if isinstance(statements, list) else [statements]:
            principal_block = statement.get("Principal")
            services = _as_list(principal_block.get("Service")) if isinstance(principal_block, dict) else []
            unknown = [s for s in services if s not in TRUSTED_SERVICES]
            if (
                statement.get("Effect") != "Allow"
                or _as_list(statement.get("Action")) != ["sts:AssumeRole"]
                or not isinstance(principal_block, dict)
                or set(principal_block) != {"Service"}
                or unknown
                or {"NotPrincipal", "NotAction"} & set(statement)
            ):
                problems.append(
                    f"role {role.logical_id} trusts what the tier does not know"
                    f"{' (' + ', '.join(unknown) + ': add its confused-deputy source to TRUSTED_SERVICES)' if unknown else ''}:"
                    f" {json.dumps(statement, sort_keys=True)}"
                )
    return problems


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def trusted_services(role: Resource) -> list[str]:
    """The known services ``role``'s trust policy names (:func:`trust_problems` reports anything else)."""
    statements = role.properties["AssumeRolePolicyDocument"]["Statement"]
    named = [
        service
        for statement in (statements if isinstance(statements, list) else [statements])
        if isinstance(statement.get("Principal"), dict)
        for service in _as_list(statement["Principal"].get("Service"))
    ]
    return [service for service in dict.fromkeys(named) if service in TRUSTED_SERVICES]


def trust_scenarios(environment: str, category: str, template: ResolvedTemplate) -> list[Scenario]:
    """``sts:AssumeRole`` on every role of ``template``, its trust policy as the resource policy (as STS evaluates it):
    each trusted service with this stack's source allowed; the same service for another account's resource, any
    other service, an admin of this account, another account and anonymous refused."""
    account = template.account
    scenarios = []
    for role in template.of_type("AWS::IAM::Role"):
        requests: list[tuple[str, dict[str, str], str, str]] = []
        for service in trusted_services(role):
            source = TRUSTED_SERVICES[service](template, role)
            other = source.replace(f":{account}:", f":{OTHER_ACCOUNT}:", 1)
            requests += [
                (
                    service,
                    {"aws:SourceAccount": account, "aws:SourceArn": source},
                    ALLOWED,
                    "its service, for this stack",
                ),
                (service, {"aws:SourceAccount": OTHER_ACCOUNT, "aws:SourceArn": other}, DENIED, "confused deputy"),
            ]
        untrusted, resource = UNTRUSTED_SERVICE
        untrusted_source = template.arn(untrusted.split(".")[0], resource)
        requests.append(
            (untrusted, {"aws:SourceAccount": account, "aws:SourceArn": untrusted_source}, DENIED, "another service")
        )
        requests += [(label, {}, DENIED, why) for label, why in NOT_SERVICES.items()]
        for label, source_context, expected, why in requests:
            request_principal, described, identity_policies, principal_context = principal(label, account)
            context = {"aws:SecureTransport": "true", **principal_context, **source_context}
            simulation = {
                "request": {
                    "principal": request_principal,
                    "action": "sts:AssumeRole",
                    "resource": {"resource": role.attributes["Arn"], "accountId": account},
                    "contextVariables": context,
                },
                "identityPolicies": identity_policies,
                "serviceControlPolicies": [],
                "resourceControlPolicies": [],
                "resourcePolicy": role.properties["AssumeRolePolicyDocument"],
            }
            shown = tuple(sorted(source_context.items()))
            scenarios.append(
                Scenario(
                    environment,
                    category,
                    described,
                    "sts:AssumeRole",
                    role.attributes["Arn"],
                    shown,
                    expected,
                    f"{why}; role {role.logical_id}",
                    simulation,
                )
            )
    return scenarios


def _account_of(arn: str, default: str) -> str:
    parts = arn.split(":")
    return parts[4] if len(parts) > 4 and parts[4] else default


def evaluate(scenarios: Sequence[Scenario]) -> list[str | None]:
    """Every scenario's answer from iam-simulate, in one Node process; a simulation error raises."""
    node = shutil.which("node")
    if node is None or not EVALUATOR_PACKAGE.exists():
        raise RuntimeError(
            f"the permissions tier needs Node and {EVALUATOR_PACKAGE.relative_to(ROOT)}: run `make test`"
            " (or `npm install`) first"
        )
    done = subprocess.run(
        [node, str(SIMULATOR)],
        input=json.dumps([s.simulation for s in scenarios]),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{SIMULATOR.name} failed ({done.returncode}): {done.stderr[-3000:]}")
    answers = json.loads(done.stdout)
    problems = [
        f"{s.describe('an error')}: {a['errors'] or 'ignored context keys ' + str(a['ignoredContextKeys'])}"
        for s, a in zip(scenarios, answers, strict=True)
        if a["errors"] or a["ignoredContextKeys"]
    ]
    if problems:
        # A request the evaluator cannot take as given (unknown action, wrong resource type, a context key
        # the action does not have) is a mistake in the scenario, never a pass.
        raise RuntimeError("the evaluator refused scenarios:\n" + "\n".join(problems))
    return [a["result"] for a in answers]


def mismatches(scenarios: Iterable[Scenario], answers: Mapping[Scenario, str | None]) -> list[str]:
    """One readable line per scenario whose answer differs from what it expects."""
    return [s.describe(str(answers[s])) for s in scenarios if not s.matches(answers[s])]
