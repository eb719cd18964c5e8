"""Local runs: moto's SQS server on 127.0.0.1, provisioned from the synthesized CloudFormation template.

What runs locally is what ``cdk deploy`` would create: the stack is created from
``cdk.out/<stack>.template.json`` by moto's CloudFormation. moto skips a few
resource types (alarms, the DynamoDB table); those are created here from the
same template's own properties, never from a second hand-written definition.
The environment printed is the task definition's container environment with
every reference resolved to the local resources.

moto is a development dependency: it is imported inside the functions, so the
consumer image (which does not install it) never needs it.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import time
import urllib.request
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from consumer.contract import TRACING_ENV
from consumer.stack_outputs import (
    WORKER_METADATA_KEY,
    WORKER_NAMES_OUTPUT,
    consumer_container,
    task_definitions,
    worker_functions,
)

LOCAL_REGION = "eu-west-1"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
#: A local consumer logs at DEBUG: one ``message_processed`` line per message, which the walkthrough, the demo's
#: accounting and the chaos suite read. A deployed one logs at INFO, where that line is left out (docs/runtime.md).
LOCAL_LOG_LEVEL = {"CONSUMER_LOG_LEVEL": "DEBUG"}
STACK_TIMEOUT_SECONDS = 60


class LocalProvisioningError(Exception):
    """The template could not be turned into local resources; the message says which and why."""


@dataclass
class LocalStack:
    """What was created locally: the endpoint, the stack outputs and each worker's task environment.

    ``workers`` maps each worker's name to its task definition's container environment, in the template's
    order (the first is the stack's first worker); ``task_environment`` is the first worker's.
    """

    endpoint: str
    stack_name: str
    outputs: dict[str, str]
    workers: dict[str, dict[str, str]]
    alarms: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: The workers that run as a Lambda function (``"target": "lambda"``): ``python -m consumer local function`` runs
    #: them, where the others run ``python -m consumer run``.
    functions: frozenset[str] = frozenset()

    def command(self, worker: str) -> str:
        """What runs ``worker`` locally: ``run`` (its ECS task's command) or ``local function`` (as Lambda runs it)."""
        return "local function" if worker in self.functions else "run"

    @property
    def task_environment(self) -> dict[str, str]:
        """The first worker's task environment (a one-worker stack's only one)."""
        return next(iter(self.workers.values()))

    def worker_environment(self, worker: str | None) -> dict[str, str]:
        """``worker``'s task environment (None: the first worker's); :class:`LocalProvisioningError` names the
        workers there are when it is not one of them."""
        if worker is None:
            return self.task_environment
        if worker not in self.workers:
            raise LocalProvisioningError(
                f'"--worker" must be one of the workers of {self.stack_name} ({", ".join(self.workers)}): {worker!r}'
            )
        return self.workers[worker]

    def process_environment(self, worker: str | None = None) -> dict[str, str]:
        """``worker``'s task environment (default the first) plus what a local process needs to reach the endpoint."""
        return {
            **self.worker_environment(worker),
            **LOCAL_CREDENTIALS,
            **LOCAL_LOG_LEVEL,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "AWS_REGION": LOCAL_REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def start_server(port: int = 0) -> tuple[Any, str]:
    """Start moto's server on 127.0.0.1 (a free port by default); returns (server, endpoint URL).

    :class:`LocalProvisioningError` names the port when it is taken.
    """
    from moto.server import ThreadedMotoServer

    from consumer.local.moto_atomic import serialize_moto_sqs

    if port:
        _check_port_free(port)

    # One access-log line per request would bury the caller's own output, and moto's CloudFormation
    # warns (twice) for every resource type it skips: the policies and scaling, which have no local
    # effect, and the alarms and table, which provision() creates from the template itself.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Tried to parse .* but it's not supported", category=UserWarning)
    serialize_moto_sqs()  # one message, one holder at a time, as SQS (see the module)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return server, f"http://{host}:{bound}"


def _check_port_free(port: int) -> None:
    """Raise a one-line error when ``port`` on 127.0.0.1 cannot be bound.

    ThreadedMotoServer binds in its own thread and, when that fails, waits forever for a server that
    never starts: so try the bind here first, with the same SO_REUSEADDR werkzeug sets (it still
    refuses a port another socket listens on).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            rule = (
                "is in use (another `local up`?)" if error.errno == errno.EADDRINUSE else f"cannot be bound ({error})"
            )
            raise LocalProvisioningError(
                f'"--port" must be a free port on 127.0.0.1: {port} {rule}; stop what holds it or pass'
                " --port N (0 = any free port)"
            ) from error


def local_client(service: str, endpoint: str) -> Any:
    """A boto3 client for ``service`` on the local endpoint, with the local region and credentials."""
    make: Any = boto3.client  # any service by name: the stubs' overloads want a literal one
    return make(
        service,
        endpoint_url=endpoint,
        region_name=LOCAL_REGION,
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def provision_fresh(endpoint: str, template_path: Path) -> LocalStack:
    """:func:`provision` on an emptied moto server (``/moto-api/reset``): each run starts from the template alone."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    return provision(endpoint, template_path)


def provision(endpoint: str, template_path: Path, stack_name: str | None = None) -> LocalStack:
    """Create the stack in ``template_path`` on the local endpoint; returns what was created."""
    if not template_path.exists():
        raise LocalProvisioningError(
            f"template {template_path} does not exist; synthesize first (python app.py or make run)"
        )
    template = json.loads(template_path.read_text())
    stack_name = stack_name or template_path.name.removesuffix(".template.json")
    template_resources = dict(template["Resources"])
    functions = worker_functions(template_resources)  # before they go: their environments are the workers'
    skipped = _drop_locally_skipped(template)
    _name_tables(template, stack_name)
    _drop_bootstrap_check(template)
    cloudformation = local_client("cloudformation", endpoint)
    cloudformation.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(template),
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    stack = _wait_for_stack(cloudformation, stack_name)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    physical = {
        r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
        for r in cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
        if "LogicalResourceId" in r
    }
    # A Lambda worker's function is not created, but its alarms name it (FunctionName): by the name it would have.
    for name, function in functions:
        logical_id = next(k for k, v in template_resources.items() if v is function)
        physical[logical_id] = str(function["Properties"].get("FunctionName") or f"{stack_name}-{name}-consumer")
    resources = template["Resources"]
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::DynamoDB::Table" and not physical.get(logical_id):
            physical[logical_id] = _create_table(endpoint, resource["Properties"])
    local = LocalStack(
        endpoint=endpoint,
        stack_name=stack_name,
        outputs=outputs,
        workers=_in_stack_order(_worker_environments(resources, physical, endpoint, functions), outputs),
        functions=frozenset(name for name, _ in functions),
    )
    cloudwatch = local_client("cloudwatch", endpoint)
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            properties, dropped = _without_scaling_actions(resource["Properties"], resources)
            local.alarms.append(_create_alarm(cloudwatch, endpoint, stack_name, logical_id, properties, physical))
            skipped += [f"{action} (action of {logical_id}: no Application Auto Scaling locally)" for action in dropped]
    local.skipped = skipped
    return local


#: Resources moto cannot create, and why; none has an effect on a local run.
LOCAL_SKIPPED_TYPES = {
    "AWS::CloudWatch::CompositeAlarm": "moto has no composite alarms",
    "AWS::CloudWatch::Dashboard": "its alarm widget references alarms moto's CloudFormation skips",
    # The CDK's provider for restrictDefaultSecurityGroup (it strips the rules of the VPC's default security group), and
    # a Lambda worker's function: `python -m consumer local function` runs its entry point with its environment.
    "AWS::Lambda::Function": "a function's code is an asset in the bootstrap bucket; a Lambda worker's runs as"
    " `python -m consumer local function`",
    "AWS::Lambda::EventSourceMapping": "a Lambda worker's mapping: `python -m consumer local function` plays it",
    "Custom::VpcRestrictDefaultSG": "strips the VPC's default security group rules, which nothing local uses",
}


def _drop_locally_skipped(template: dict[str, Any]) -> list[str]:
    """Remove LOCAL_SKIPPED_TYPES resources (and outputs naming them) from ``template``; returns what went."""
    resources = template["Resources"]
    dropped = {k: LOCAL_SKIPPED_TYPES[v["Type"]] for k, v in resources.items() if v["Type"] in LOCAL_SKIPPED_TYPES}
    for logical_id in dropped:
        del resources[logical_id]
    outputs = template.get("Outputs", {})
    for key in [k for k, v in outputs.items() if any(f'"{d}"' in json.dumps(v) for d in dropped)]:
        del outputs[key]
    return [f"{logical_id} ({why})" for logical_id, why in dropped.items()]


def _drop_bootstrap_check(template: dict[str, Any]) -> None:
    """Remove the CDK's bootstrap version check (the ``BootstrapVersion`` parameter, read from SSM, and the
    ``CheckBootstrapVersion`` rule on it): it checks the account's bootstrap stack, which a local run has none of.
    Without it moto's CloudFormation reads no SSM parameter."""
    template.get("Parameters", {}).pop("BootstrapVersion", None)
    template.get("Rules", {}).pop("CheckBootstrapVersion", None)


def _without_scaling_actions(
    properties: Mapping[str, Any], resources: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """An alarm's properties without the actions that invoke a scaling policy of the template (a worker at
    ``min_tasks: 0``'s wake-up, infra/scaling.py), and those actions' logical ids: locally the harness runs the tasks,
    and no Application Auto Scaling acts on them."""

    def scaling(action: object) -> str | None:
        target = action.get("Ref") if isinstance(action, dict) and set(action) == {"Ref"} else None
        policy = "AWS::ApplicationAutoScaling::ScalingPolicy"
        return target if isinstance(target, str) and resources.get(target, {}).get("Type") == policy else None

    actions = properties.get("AlarmActions", [])
    dropped = [policy for policy in map(scaling, actions) if policy is not None]
    return {**properties, "AlarmActions": [a for a in actions if scaling(a) is None]}, dropped


def _name_tables(template: dict[str, Any], stack_name: str) -> None:
    """Give each unnamed DynamoDB table the name ``<stack>-<logical id>`` (and :func:`_create_table` uses it).

    CloudFormation (and moto's) names an unnamed table with a random suffix: a new name on every
    ``local up``, which would leave the environment written before a restart pointing at a table
    that is gone. The queues are named in the template already, so with this the whole environment
    is the same on every restart on the same port.
    """
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::DynamoDB::Table":
            resource.setdefault("Properties", {}).setdefault("TableName", f"{stack_name}-{logical_id}"[:255])


def _wait_for_stack(cloudformation: Any, stack_name: str) -> dict[str, Any]:
    deadline = time.monotonic() + STACK_TIMEOUT_SECONDS
    while True:
        stack: dict[str, Any] = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        if status == "CREATE_COMPLETE":
            return stack
        if not status.endswith("IN_PROGRESS") or time.monotonic() > deadline:
            raise LocalProvisioningError(
                f"local stack {stack_name} ended in {status}: {stack.get('StackStatusReason', 'no reason given')}"
            )
        time.sleep(0.2)


def _queue_url(value: str, endpoint: str) -> str:
    """moto's CloudFormation names queues with AWS's URL; point them at the local endpoint."""
    account_and_name = value.split("/", 3)[-1]
    return f"{endpoint}/{account_and_name}"


def _resolve(value: Any, physical: Mapping[str, str], endpoint: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"}:
        resolved = physical.get(value["Ref"])
        if resolved and resolved.startswith("arn:aws:ecs:"):
            return resolved.rsplit("/", 1)[-1]  # a cluster's Ref is its name
        if resolved:
            return _queue_url(resolved, endpoint) if resolved.startswith("https://sqs.") else resolved
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        resolved = physical.get(logical_id, "")
        if attribute == "QueueName" and resolved:
            return resolved.rsplit("/", 1)[-1]
        if attribute == "Arn" and resolved.startswith("arn:"):
            return resolved
        if attribute == "Arn" and resolved.startswith("https://sqs."):
            # A queue's ARN (a Lambda worker's QUEUE_ARN): its physical id is its URL, https://sqs.<region>.<domain>/
            # <account>/<name>, the ARN moto's records carry as their eventSourceARN.
            region = resolved.split(".")[1]
            account, name = resolved.rsplit("/", 2)[-2:]
            return f"arn:aws:sqs:{region}:{account}:{name}"
        if attribute == "Name" and resolved:
            return resolved.rsplit("/", 1)[-1]
        if attribute == "RoleId" and resolved:
            # The task role's RoleId (CONSUMER_TASK_ROLE_ID) names whose requeued copies carry a trusted
            # receive count, by the SenderId SQS records. moto records one fixed SenderId for every
            # message, whoever sent it, so locally the role is that id (and every sender is trusted).
            from moto.sqs.models import DEFAULT_SENDER_ID

            return DEFAULT_SENDER_ID
    raise LocalProvisioningError(f"cannot resolve {json.dumps(value)} from the local stack's resources")


def _worker_environments(
    resources: Mapping[str, Any],
    physical: Mapping[str, str],
    endpoint: str,
    functions: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> dict[str, dict[str, str]]:
    """Each worker's environment, references resolved, by name, in the template's order: a task definition's
    container environment, or a Lambda worker's function's variables (``functions``, read before the functions were
    dropped).

    The worker's name is the ``sqs-worker:worker`` metadata; a template with one task definition and no such metadata
    (a stack built before workers, or by hand) names it ``default``.
    """
    definitions = task_definitions(resources)
    if not definitions and not functions:
        raise LocalProvisioningError("expected an AWS::ECS::TaskDefinition in the template, found none")
    raw: dict[str, Mapping[str, Any]] = {}
    for name, definition in definitions:
        if name is None:
            if len(definitions) > 1:
                raise LocalProvisioningError(
                    f"{len(definitions)} task definitions in the template, and one has no {WORKER_METADATA_KEY!r}"
                    " metadata naming its worker"
                )
            name = "default"
        container = consumer_container(definition)  # not a tracing collector sidecar
        raw[name] = {e["Name"]: e["Value"] for e in container.get("Environment", [])}
    for name, function in functions:
        raw[name] = function["Properties"].get("Environment", {}).get("Variables", {})
    workers: dict[str, dict[str, str]] = {}
    for name, variables in raw.items():
        environment = {key: _resolve(value, physical, endpoint) for key, value in variables.items()}
        if environment.get(TRACING_ENV) == "otlp":
            # An environment traced on AWS (cdk.json "tracing") exports to its task's collector sidecar, which no local
            # run has: its spans would only fail to export. A local run traces with CONSUMER_TRACING=global instead.
            environment[TRACING_ENV] = "off"
        workers[name] = environment
    return workers


def _in_stack_order(workers: dict[str, dict[str, str]], outputs: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``workers`` in the order the stack's ``WorkerNames`` output lists them (its first worker first), whatever each
    one's target; as found where the output names none of them (a stack built before workers)."""
    listed = [name for name in outputs.get(WORKER_NAMES_OUTPUT, "").split(",") if name in workers]
    return {name: workers[name] for name in listed + [n for n in workers if n not in listed]}


def _create_table(endpoint: str, properties: Mapping[str, Any]) -> str:
    name: str = properties["TableName"]  # set by _name_tables
    dynamodb = local_client("dynamodb", endpoint)
    dynamodb.create_table(
        TableName=name,
        KeySchema=properties["KeySchema"],
        AttributeDefinitions=properties["AttributeDefinitions"],
        BillingMode=properties.get("BillingMode", "PAY_PER_REQUEST"),
    )
    ttl = properties.get("TimeToLiveSpecification")
    if ttl:
        dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
    return name


def _create_alarm(
    cloudwatch: Any,
    endpoint: str,
    stack_name: str,
    logical_id: str,
    properties: Mapping[str, Any],
    physical: Mapping[str, str],
) -> str:
    name = f"{stack_name}-{logical_id}"

    def dimensions(raw: list[Mapping[str, Any]]) -> list[dict[str, str]]:
        return [{"Name": d["Name"], "Value": _resolve(d["Value"], physical, endpoint)} for d in raw]

    arguments: dict[str, Any] = {
        "AlarmName": name,
        "AlarmDescription": properties.get("AlarmDescription", ""),
        "EvaluationPeriods": properties["EvaluationPeriods"],
        "Threshold": float(properties["Threshold"]),
        "ComparisonOperator": properties["ComparisonOperator"],
        "TreatMissingData": properties.get("TreatMissingData", "missing"),
        "AlarmActions": [_resolve(a, physical, endpoint) for a in properties.get("AlarmActions", [])],
        "OKActions": [_resolve(a, physical, endpoint) for a in properties.get("OKActions", [])],
    }
    if "Metrics" in properties:  # a metric math alarm
        queries = []
        for query in properties["Metrics"]:
            resolved = {k: v for k, v in query.items() if k != "MetricStat"}
            if "MetricStat" in query:
                stat = query["MetricStat"]
                resolved["MetricStat"] = {
                    **stat,
                    "Metric": {**stat["Metric"], "Dimensions": dimensions(stat["Metric"].get("Dimensions", []))},
                }
            queries.append(resolved)
        arguments["Metrics"] = queries
    else:
        arguments |= {
            "Namespace": properties["Namespace"],
            "MetricName": properties["MetricName"],
            "Statistic": properties["Statistic"],
            "Period": properties["Period"],
            "Dimensions": dimensions(properties["Dimensions"]),
        }
    if "DatapointsToAlarm" in properties:
        arguments["DatapointsToAlarm"] = properties["DatapointsToAlarm"]
    cloudwatch.put_metric_alarm(**arguments)
    return name
