"""The consumer function as Lambda runs its image: a worker's synthesized ``AWS::Lambda::Function``, its queues and
table created on moto's server from the same template, and its container started with what Lambda gives one.

Everything about the function comes from the template, never retyped: the image (the container asset its
``Code.ImageUri`` names), ``ImageConfig``'s entry point and command, ``Environment.Variables`` (each reference
resolved to the local resources), ``MemorySize``, ``Timeout``, ``EphemeralStorage`` and the mapping's batch.
What Lambda supplies from outside the template is added here, each from Lambda's documentation:

- the runtime's variables (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime):
  ``AWS_LAMBDA_RUNTIME_API`` (here a :class:`consumer.local.runtime_api.RuntimeApi` on 127.0.0.1, reached over the
  host's network as the tier's task is), the function's name, memory and version, the region, ``_HANDLER``,
  ``LAMBDA_TASK_ROOT`` (the image's working directory, where its code is), ``TZ``, and credentials (here the local
  endpoint's, with ``AWS_ENDPOINT_URL`` pointing the SDK at it);
- the file system and user (https://docs.aws.amazon.com/lambda/latest/dg/images-create.html): "The container image
  must be able to run on a read-only file system. Your function code can access a writable /tmp directory with
  between 512 MB and 10,240 MB", and "Lambda follows security best practices by defining a default Linux user with
  least-privileged permissions": its own user, whatever the image's ``USER``;
- memory, and CPU in proportion to it
  (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html: 1,769 MB is one vCPU).

consumer/local/stack.py provisions a stack's ECS workers; this module needs only the function's queues and table, so
it creates those itself, from the template's own resources, with moto's CloudFormation.
"""

from __future__ import annotations

import copy
import json
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.local.image import IMAGE_REPOSITORY, Engine
from consumer.local.stack import LOCAL_CREDENTIALS, LOCAL_REGION, local_client
from consumer.local.task import LoggedProcess, TaskDefinitionError, entry_point_arguments, image_asset_hash, read_json
from consumer.stack_outputs import WORKER_METADATA_KEY

FUNCTION_TYPE = "AWS::Lambda::Function"
MAPPING_TYPE = "AWS::Lambda::EventSourceMapping"
#: The resources the function's variables name, created locally from the template: its queues and table.
LOCAL_TYPES = ("AWS::SQS::Queue", "AWS::DynamoDB::Table")
#: /tmp's size when the function sets no EphemeralStorage (https://docs.aws.amazon.com/lambda/latest/dg/API_EphemeralStorage.html).
DEFAULT_EPHEMERAL_STORAGE_MIB = 512
#: The memory at which a function has one vCPU (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
ONE_VCPU_MIB = 1769
#: The user Lambda runs the image as: Lambda's own least-privileged user, not the image's USER (10001) nor root. Its uid
#: is Lambda's to choose (one seen is sbx_user1051, 993:990); any uid the image did not name shows the image's files
#: are readable by a user it did not choose, as Lambda's requirement says.
LAMBDA_USER = "993:990"


@dataclass(frozen=True)
class FunctionContainer:
    """One worker's function in a stack's template (picked by its ``sqs-worker:worker`` metadata), with the mapping
    that feeds it and the container asset it runs."""

    stack_name: str
    worker: str
    properties: Mapping[str, Any]
    mapping: Mapping[str, Any]
    resources: Mapping[str, Any]
    asset_hash: str

    @classmethod
    def from_assembly(cls, outdir: Path, stack_name: str, worker: str) -> FunctionContainer:
        resources = read_json(outdir / f"{stack_name}.template.json")["Resources"]
        functions = {
            logical_id: resource
            for logical_id, resource in resources.items()
            if resource["Type"] == FUNCTION_TYPE and resource.get("Metadata", {}).get(WORKER_METADATA_KEY) == worker
        }
        if len(functions) != 1:
            raise TaskDefinitionError(f'{stack_name}: "worker" must name one lambda worker\'s function: {worker!r}')
        ((logical_id, function),) = functions.items()
        mappings = [r["Properties"] for r in resources.values() if r["Type"] == MAPPING_TYPE]
        (mapping,) = [m for m in mappings if m.get("FunctionName") == {"Ref": logical_id}]
        properties = function["Properties"]
        asset_hash = image_asset_hash(properties["Code"]["ImageUri"], stack_name)
        return cls(stack_name, worker, properties, mapping, resources, asset_hash)

    @property
    def image_tag(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.asset_hash}"

    @property
    def entry_point(self) -> list[str]:
        return list(self.properties.get("ImageConfig", {}).get("EntryPoint", []))

    @property
    def command(self) -> list[str]:
        return list(self.properties.get("ImageConfig", {}).get("Command", []))

    @property
    def memory_mib(self) -> int:
        return int(self.properties["MemorySize"])

    @property
    def timeout_seconds(self) -> int:
        return int(self.properties["Timeout"])

    @property
    def ephemeral_storage_mib(self) -> int:
        return int(self.properties.get("EphemeralStorage", {}).get("Size", DEFAULT_EPHEMERAL_STORAGE_MIB))

    @property
    def variables(self) -> Mapping[str, Any]:
        """``Environment.Variables`` as the template has them (references unresolved)."""
        variables: Mapping[str, Any] = self.properties.get("Environment", {}).get("Variables", {})
        return variables

    def lambda_variables(self, engine: Engine, *, runtime_api: str, endpoint: str, image: str) -> dict[str, str]:
        """What Lambda sets in every execution environment (see the module), pointed at the local endpoint."""
        working_directory = engine("image", "inspect", "--format", "{{.Config.WorkingDir}}", image).stdout.strip()
        return {
            "AWS_LAMBDA_RUNTIME_API": runtime_api,
            "AWS_LAMBDA_FUNCTION_NAME": str(self.properties.get("FunctionName", self.worker)),
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory_mib),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_REGION": LOCAL_REGION,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "_HANDLER": self.command[0] if self.command else "",
            "LAMBDA_TASK_ROOT": working_directory,
            "TZ": ":UTC",
            **LOCAL_CREDENTIALS,
            "AWS_SESSION_TOKEN": "local",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def run_arguments(self, engine: Engine, *, name: str, environment: Mapping[str, str], image: str) -> list[str]:
        """``<engine> run ...`` for one execution environment: Lambda's user, a read-only root with a writable /tmp
        of the function's ephemeral storage, its memory and CPU, ``environment``, and the ImageConfig's entry point
        and command in place of the image's."""
        arguments = [*engine.command, "run", "--name", name, *engine.run_options, "--user", LAMBDA_USER]
        arguments += ["--read-only", "--tmpfs", f"/tmp:rw,size={self.ephemeral_storage_mib}m,mode=1777"]
        if engine.name == "podman":
            arguments.append("--read-only-tmpfs=false")  # podman adds writable /run, /var/tmp otherwise
        arguments += ["--memory", f"{self.memory_mib}m", "--cpus", f"{self.memory_mib / ONE_VCPU_MIB:.3f}"]
        for key, value in environment.items():
            arguments += ["--env", f"{key}={value}"]
        options, after_image = entry_point_arguments(engine, self.entry_point, self.command)
        return [*arguments, *options, image, *after_image]


class FunctionRun(LoggedProcess):
    """One execution environment of a :class:`FunctionContainer`: its container, stdout to a log file."""

    def __init__(self, engine: Engine, function: FunctionContainer, log_path: Path, **run: Any) -> None:
        super().__init__(function.run_arguments(engine, **run), log_path)
        self.engine = engine
        self.name: str = run["name"]

    def remove(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.engine("kill", self.name, check=False)
            self.process.wait(timeout=60)
        self.engine("rm", "--force", self.name, check=False)


def provision_function(endpoint: str, function: FunctionContainer) -> dict[str, str]:
    """Create the template's queues and tables on the emptied moto server at ``endpoint`` (moto's CloudFormation, from
    their own properties; a table moto's CloudFormation skips is created from its properties); the function's
    variables with every reference resolved to them."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    kept = copy.deepcopy({k: r for k, r in function.resources.items() if r["Type"] in LOCAL_TYPES})
    for logical_id, resource in kept.items():
        if resource["Type"] == "AWS::DynamoDB::Table":
            resource["Properties"].setdefault("TableName", f"{function.stack_name}-{logical_id}")
    cloudformation = local_client("cloudformation", endpoint)
    name = f"{function.stack_name}-{uuid.uuid4().hex[:8]}"
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps({"Resources": kept}))
    waiter = cloudformation.get_waiter("stack_create_complete")
    waiter.wait(StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.describe_stack_resources(StackName=name)["StackResources"]
    }
    dynamodb = local_client("dynamodb", endpoint)
    for logical_id, resource in kept.items():
        table = resource["Properties"]
        if (
            resource["Type"] == "AWS::DynamoDB::Table"
            and table["TableName"] not in dynamodb.list_tables()["TableNames"]
        ):
            dynamodb.create_table(
                TableName=table["TableName"],
                KeySchema=table["KeySchema"],
                AttributeDefinitions=table["AttributeDefinitions"],
                BillingMode=table.get("BillingMode", "PAY_PER_REQUEST"),
            )
        physical.setdefault(logical_id, table.get("TableName", ""))
    resolve = _Resolver(endpoint, kept, physical)
    return {key: resolve(value) for key, value in function.variables.items()}


@dataclass(frozen=True)
class _Resolver:
    endpoint: str
    resources: Mapping[str, Any]
    physical: Mapping[str, str]

    def __call__(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in self.resources:
            return self._name_or_url(value["Ref"])
        if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
            logical_id, attribute = value["Fn::GetAtt"]
            if attribute == "Arn" and self.resources.get(logical_id, {}).get("Type") == "AWS::SQS::Queue":
                sqs = local_client("sqs", self.endpoint)
                url = self._name_or_url(logical_id)
                arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
                return arn
            if attribute == "RoleId":
                # The function role's RoleId names whose requeued copies carry a trusted receive count, by the
                # SenderId SQS records; moto records one fixed SenderId for every sender (as consumer/local/stack.py).
                from moto.sqs.models import DEFAULT_SENDER_ID

                return DEFAULT_SENDER_ID
        raise TaskDefinitionError(f"cannot resolve {json.dumps(value)} from the function's local resources")

    def _name_or_url(self, logical_id: str) -> str:
        """A queue's Ref is its URL (on the local endpoint), a table's its name."""
        if self.resources[logical_id]["Type"] == "AWS::SQS::Queue":
            name = self.physical[logical_id].rsplit("/", 1)[-1]
            url: str = local_client("sqs", self.endpoint).get_queue_url(QueueName=name)["QueueUrl"]
            return url
        return self.physical[logical_id]
