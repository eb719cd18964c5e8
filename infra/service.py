"""The consumer service: a Fargate task running ``python -m consumer run``, scaled on backlog per task."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TypedDict, cast

from aws_cdk import Annotations, ArnFormat, Duration, IgnoreMode, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from consumer.contract import (
    BINDING_KEYS,
    DLQ_URL_ENV,
    HANDLER_ENV,
    IDEMPOTENCY_TABLE_ENV,
    QUEUE_URL_ENV,
    TASK_ROLE_ID_ENV,
    WorkerContract,
)
from consumer.limits import HEALTH_CHECK_RETRIES, HEALTH_CHECK_TIMEOUT_SECONDS
from infra.capacity_settings import DEFAULT_ARCHITECTURE, SpotSettings
from infra.queues import WorkerQueues
from infra.scaling import WorkerScaling
from infra.shared import SharedResources
from infra.tracing import TracingSidecar
from infra.trust import ECS_TASKS, confine_trust, ecs_task_principal, this_account
from infra.worker_settings import SecretSource, WorkerSettings, beyond_one_process

#: The image's build context: the repository root, through its .dockerignore, which lets in only the runtime
#: (consumer/) and the team package (workers/). One image serves every worker of the app; each service picks its
#: handler with CONSUMER_HANDLER (docs/deploy.md, "One image for every worker").
IMAGE_CONTEXT = Path(__file__).resolve().parent.parent
#: The Dockerfile, relative to the context.
IMAGE_DOCKERFILE = "consumer/Dockerfile"
CONTAINER_COMMAND = ["python", "-m", "consumer", "run"]
#: The ``architecture`` setting as the task's CPU architecture and as the image's build platform.
CPU_ARCHITECTURES = {"x86_64": ecs.CpuArchitecture.X86_64, "arm64": ecs.CpuArchitecture.ARM64}
IMAGE_PLATFORMS = {"x86_64": ecr_assets.Platform.LINUX_AMD64, "arm64": ecr_assets.Platform.LINUX_ARM64}
#: Run by ECS inside the container (same image, working directory /app): fails when a poll loop or the heartbeat
#: stalls, so ECS replaces the task (consumer/runtime/liveness.py). Exec form: the image needs no shell for it.
HEALTH_CHECK_COMMAND = ["CMD", "python", "-m", "consumer", "health"]
CONTAINER_USER = "10001:10001"  # matches the Dockerfile's non-root user
#: Exactly what the consumer calls (tests/infra/runtime_calls.json, recorded from the integration tests).
#: Batch calls need no separate action: DeleteMessageBatch is authorised by sqs:DeleteMessage, and so on.
#: sqs:SendMessage: a hand-back on a standard queue is a fresh copy sent to the source
#: (consumer/runtime/settlement.py, Settlement.hand_back), so it keeps its retry budget.
SOURCE_QUEUE_ACTIONS = (
    "sqs:ChangeMessageVisibility",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
    "sqs:ReceiveMessage",
    "sqs:SendMessage",
)
DEAD_LETTER_QUEUE_ACTIONS = ("sqs:SendMessage",)
#: The idempotency guard's writes (consumer/runtime/idempotency.py DynamoDBStore): a claim's conditional PutItem (and
#: its GetItem fallback), a renewal's UpdateItem, a release's DeleteItem, and the completions, a BatchWriteItem per
#: batch of deletes.
IDEMPOTENCY_TABLE_ACTIONS = (
    "dynamodb:BatchWriteItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
)
#: Attribute names the consumer's DynamoDBStore uses.
IDEMPOTENCY_PARTITION_KEY = "pk"
IDEMPOTENCY_TTL_ATTRIBUTE = "expires_at"
# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html
#: Only PUT: the runtime sets its protection and never reads it back (tests/infra/runtime_calls.json).
TASK_PROTECTION_ACTIONS = ("ecs:UpdateTaskProtection",)


class ConsumerService(Construct):
    """Fargate service for the consumer, bound to a :class:`WorkerQueues` pair, running ``settings.handler``
    (:class:`infra.worker_settings.WorkerSettings`: its tasks, size, architecture, Spot, variables and secrets) in
    ``shared.cluster`` (:class:`infra.shared.SharedResources`: also the log retention, the removal policy of its data,
    the tracing and the runbook of the wake-up alarm).

    * image from :func:`consumer_image` (``consumer/Dockerfile``); command ``python -m consumer run``;
      non-root user; read-only root file system with a writable ``/tmp``;
    * the contract's ``to_env()`` plus ``QUEUE_URL``, ``DLQ_URL`` and
      ``CONSUMER_HANDLER`` in the environment (the construct, not the caller,
      injects the binding), plus ``settings.handler_environment``;
    * ``stopTimeout`` from the contract, so SIGTERM leaves time to drain;
    * a container health check, ``python -m consumer health``, timed by the contract
      (``health_check_interval_seconds``, ``health_check_start_period_seconds``): ECS replaces a task
      whose poll loop or heartbeat stalled;
    * a task role with exactly :data:`SOURCE_QUEUE_ACTIONS` on the source,
      :data:`DEAD_LETTER_QUEUE_ACTIONS` on the DLQ, :data:`IDEMPOTENCY_TABLE_ACTIONS`
      on the idempotency table and task scale-in protection on this cluster's tasks; it and the execution
      role trust ECS tasks of this account only (:mod:`infra.trust`);
    * the idempotency table (on-demand, TTL on ``expires_at``, point-in-time recovery), unless the handler is
      declared idempotent by itself (``contract.idempotent``: no guard, no table, no DynamoDB action);
    * Container Insights on a new cluster (needed for ``RunningTaskCount``);
    * no deletion protection on the idempotency table (``shared.data_removal_policy`` keeps it, see below); every
      Linux capability dropped; ``settings.secrets`` as ECS secrets (:func:`container_secrets`), read at task start
      by the execution role, which may read exactly those;
    * target tracking on backlog per task (metric math, an L1 policy because
      the L2 rejects math expressions) between ``settings.min_tasks`` and ``settings.max_tasks``.
      Scale-in does not stop busy tasks: the consumer holds ECS task scale-in
      protection while it has messages in flight.

    * with ``shared.tracing``, an AWS Distro for OpenTelemetry collector sidecar exporting to X-Ray, its variables in
      the consumer's environment and ``xray:PutTraceSegments`` for the task role
      (:class:`infra.tracing.TracingSidecar`).

    * the tasks in the VPC's private subnets without a public IP; in its public subnets with a public IP where it
      has no private subnet with egress (``nat_gateways: 0``); no inbound rule either way.

    ``name_prefix`` (default the stack's name: one service per stack) starts the scaling policies' and the wake-up
    alarm's names and is the traces' service name.

    Attributes: ``service``, ``cluster``, ``task_definition``, ``container``,
    ``task_role``, ``log_group``, ``scaling_policy``, ``tracing``, ``public_ip``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: WorkerQueues,
        contract: WorkerContract,
        settings: WorkerSettings,
        shared: SharedResources,
        name_prefix: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.cluster = cluster = shared.cluster
        # The data this service keeps: its log group and its idempotency table.
        data_removal_policy = shared.data_removal_policy
        handler_environment, architecture, spot = settings.handler_environment, settings.architecture, settings.spot
        secrets = container_secrets(Construct(self, "Secrets"), settings.secrets)
        #: The idempotency guard's table; None for a handler declared idempotent by itself (@worker(idempotent=True)),
        #: which runs no guard. Its construct id is a contract (tests/infra/test_upgrades.py).
        self.idempotency_table = idempotency_table(self, contract, data_removal_policy)
        self.task_role = iam.Role(
            self,
            "TaskRole",
            # ECS tasks of this account only (aws:SourceAccount, aws:SourceArn): infra/trust.py.
            assumed_by=ecs_task_principal(self),
            description="SQS consumer: receive/delete/extend/hand back on the source, send poison messages to the DLQ",
        )
        # The collector sidecar's variables (infra/tracing.py), its service named after name_prefix.
        tracing = shared.tracing
        traced = tracing.environment(name_prefix or stack.stack_name) if tracing is not None else {}
        environment = consumer_environment(
            contract=contract,
            bindings=bindings_of(queues, settings, self.idempotency_table, self.task_role),
            construct_variables=traced,
            handler_environment=handler_environment,
            secrets=set(secrets),
        )

        grant_consumer(self.task_role, queues, self.idempotency_table, source_actions=SOURCE_QUEUE_ACTIONS)
        self.task_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(TASK_PROTECTION_ACTIONS),
                resources=[stack.format_arn(service="ecs", resource="task", resource_name=f"{cluster.cluster_name}/*")],
            )
        )

        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            cpu=settings.cpu,
            memory_limit_mib=settings.memory_mib,
            task_role=self.task_role,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=CPU_ARCHITECTURES[architecture],
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self.task_definition.add_volume(name="tmp")
        beyond = beyond_one_process(settings.cpu)
        if beyond is not None:
            # A warning, not a refusal: a handler in native code may use the cores (cdk synth and deploy print it).
            Annotations.of(self.task_definition).add_warning_v2("sqs-worker:cpu-beyond-one-process", beyond)
        self.log_group = logs.LogGroup(self, "Logs", retention=shared.log_retention, removal_policy=data_removal_policy)
        # The consumer needs no Linux capability: a compromised handler gets none of Docker's defaults either.
        # Fargate accepts any drop (it restricts only additions, to SYS_PTRACE).
        linux_parameters = ecs.LinuxParameters(self, "LinuxParameters")
        linux_parameters.drop_capabilities(ecs.Capability.ALL)
        self.container = self.task_definition.add_container(
            "Consumer",
            image=consumer_image(architecture=architecture),
            command=CONTAINER_COMMAND,
            user=CONTAINER_USER,
            readonly_root_filesystem=True,
            linux_parameters=linux_parameters,
            environment=environment,
            # Read by the execution role at task start; CDK grants it read on exactly these parameters/secrets.
            secrets=secrets,
            stop_timeout=Duration.seconds(contract.stop_timeout_seconds or 0),
            health_check=ecs.HealthCheck(
                command=HEALTH_CHECK_COMMAND,
                interval=Duration.seconds(contract.health_check_interval_seconds),
                timeout=Duration.seconds(HEALTH_CHECK_TIMEOUT_SECONDS),
                retries=HEALTH_CHECK_RETRIES,
                start_period=Duration.seconds(contract.health_check_start_period_seconds),
            ),
            logging=ecs.LogDriver.aws_logs(stream_prefix="consumer", log_group=self.log_group),
        )
        self.container.add_mount_points(ecs.MountPoint(container_path="/tmp", source_volume="tmp", read_only=False))
        #: The collector sidecar where the environment traces; None without ``tracing`` (nothing added).
        self.tracing = (
            TracingSidecar(
                self,
                "Tracing",
                task_definition=self.task_definition,
                consumer=self.container,
                task_role=self.task_role,
                log_group=self.log_group,
                tracing=tracing,
            )
            if tracing is not None
            else None
        )
        # The CDK created the execution role (image pull, logs, secrets) with an unconditioned trust: infra/trust.py.
        confine_trust(self.task_definition.obtain_execution_role(), ECS_TASKS, this_account(self))

        #: True where the tasks run in a public subnet with a public IP: the cluster's VPC has no private subnet with
        #: egress (a VPC without NAT, docs/deploy.md "No NAT"), and SQS, ECR and CloudWatch Logs are reached through
        #: its internet gateway, which only a public IP can use. Either way the service's security group admits
        #: nothing inbound (the CDK's default group for a service: all outbound, no ingress rule).
        self.public_ip = not cluster.vpc.private_subnets and bool(cluster.vpc.public_subnets)
        # ECS's UpdateService moves a service between a launch type and capacity providers only along the transitions
        # it lists, and "FARGATE launch type -> Fargate capacity providers" is not one of them
        # (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateService.html, capacityProviderStrategy).
        # So a Spot service has a construct id of its own: turning spot on or off replaces the service (CloudFormation
        # creates the new one, then deletes the old one, whose tasks drain on SIGTERM as in a deploy) instead of an
        # update ECS may refuse. Without spot the id is "Service": every logical id is the one a deployed stack holds.
        self.service = ecs.FargateService(
            self,
            "Service" if spot is None else "SpotService",
            cluster=cluster,
            task_definition=self.task_definition,
            min_healthy_percent=100,
            max_healthy_percent=200,
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            assign_public_ip=self.public_ip,
            vpc_subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PUBLIC if self.public_ip else ec2.SubnetType.PRIVATE_WITH_EGRESS
            ),
            # Without spot: the FARGATE launch type, and no capacity provider strategy in the template.
            capacity_provider_strategies=capacity_strategy(spot) if spot is not None else None,
        )
        if spot is not None:
            # ECS refuses a strategy naming a provider the cluster has no association with, and the CDK's association
            # (made at synth, under the cluster) is not waited for by the service: the CfnService depending on the
            # cluster's whole construct is (https://github.com/aws/containers-roadmap/issues/631#issuecomment-816354807).
            cast(ecs.CfnService, self.service.node.default_child).node.add_dependency(cluster)

        #: Backlog-per-task target tracking between min_tasks and max_tasks, and the wake-up of a worker at zero.
        self.scaling = WorkerScaling(
            self,
            queues=queues,
            service=self.service,
            contract=contract,
            settings=settings,
            shared=shared,
            name_prefix=name_prefix or stack.stack_name,
        )
        self.scaling_policy = self.scaling.policy


def capacity_strategy(spot: SpotSettings) -> list[ecs.CapacityProviderStrategy]:
    """The ``spot`` setting as ECS's capacity provider strategy: the base on FARGATE, the rest by weight.

    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html
    """
    return [
        ecs.CapacityProviderStrategy(
            capacity_provider="FARGATE", base=spot.on_demand_base, weight=spot.on_demand_weight
        ),
        ecs.CapacityProviderStrategy(capacity_provider="FARGATE_SPOT", weight=spot.spot_weight),
    ]


class ImageAssetOptions(TypedDict):
    """How the consumer image is built as a CDK asset: the options the ECS task's and the function's assets share, so
    both name the same asset (one hash, one image in the assets repository) for the same architecture."""

    file: str
    exclude: list[str]
    ignore_mode: IgnoreMode
    platform: ecr_assets.Platform


def image_asset_options(architecture: str = DEFAULT_ARCHITECTURE) -> ImageAssetOptions:
    """The consumer image's asset options: ``consumer/Dockerfile`` for ``architecture``.

    Built for the task's or the function's ``architecture`` whatever the deploying machine is (an arm64 laptop would
    otherwise push an arm64 image that X86_64 Fargate cannot start: "exec format error", and the reverse for arm64
    tasks). The CDK reads ``.dockerignore`` at the context root into the asset's exclusions; ``ignore_mode`` says to
    read it as Docker does (``*`` then ``!`` exceptions), whatever the app's feature flags. The CDK re-includes
    ``Dockerfile`` by its base name only, which matches a Dockerfile at the context root, so ``exclude`` re-includes
    ours, which .dockerignore keeps out of the image (aws-ecr-assets, DockerImageAsset: ``exclude.push('!' +
    path.basename(file))``).
    """
    return {
        "file": IMAGE_DOCKERFILE,
        "exclude": [f"!{IMAGE_DOCKERFILE}"],
        "ignore_mode": IgnoreMode.DOCKER,
        "platform": IMAGE_PLATFORMS[architecture],
    }


def consumer_image(context: Path = IMAGE_CONTEXT, architecture: str = DEFAULT_ARCHITECTURE) -> ecs.ContainerImage:
    """The consumer image as a container asset: ``context`` (the repository root) through its ``.dockerignore``, built
    as :func:`image_asset_options` says."""
    return ecs.ContainerImage.from_asset(str(context), **image_asset_options(architecture))


def idempotency_table(
    scope: Construct, contract: WorkerContract, removal_policy: RemovalPolicy
) -> dynamodb.Table | None:
    """The idempotency guard's table, ``IdempotencyTable`` under ``scope`` (its construct id is a contract:
    tests/infra/test_upgrades.py); None for a handler declared idempotent by itself (``@worker(idempotent=True)``),
    which runs no guard. On-demand, TTL on ``expires_at``, point-in-time recovery, no deletion protection."""
    if contract.idempotent:
        return None
    return dynamodb.Table(
        scope,
        "IdempotencyTable",
        partition_key=dynamodb.Attribute(name=IDEMPOTENCY_PARTITION_KEY, type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        time_to_live_attribute=IDEMPOTENCY_TTL_ATTRIBUTE,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        removal_policy=removal_policy,
        # Off, explicitly, wherever the data is retained: "When enabled, the table cannot be deleted by any
        # user or process" (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-dynamodb-table.html#cfn-dynamodb-table-deletionprotectionenabled),
        # CloudFormation's rollback included, so a failed first deploy would end in ROLLBACK_FAILED with the
        # table stuck in it. RETAIN_DATA already keeps the table through stack deletes, replacements and removal
        # from the template, and the consumer's role may not DeleteTable (tests/infra/test_permissions.py).
        deletion_protection=False,
    )


def grant_consumer(
    role: iam.IRole, queues: WorkerQueues, table: dynamodb.Table | None, *, source_actions: Sequence[str]
) -> None:
    """``role`` may do ``source_actions`` on the source, :data:`DEAD_LETTER_QUEUE_ACTIONS` on the DLQ and
    :data:`IDEMPOTENCY_TABLE_ACTIONS` on the guard's table (none without one): the consumer's calls, the service's
    or the function's."""
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(source_actions), resources=[queues.queue.queue_arn]))
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=list(DEAD_LETTER_QUEUE_ACTIONS), resources=[queues.dead_letter_queue.queue_arn])
    )
    if table is not None:
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(IDEMPOTENCY_TABLE_ACTIONS), resources=[table.table_arn])
        )


def bindings_of(
    queues: WorkerQueues, settings: WorkerSettings, table: dynamodb.Table | None, role: iam.IRole
) -> dict[str, str]:
    """The binding variables the construct injects: the queues' URLs, the handler, the guard's table (none without
    one) and the role whose requeued copies are trusted (SQS's SenderId is its RoleId). In this order (a task
    definition keeps it), so a worker's task definition stays the same across upgrades."""
    return {
        QUEUE_URL_ENV: queues.queue.queue_url,
        DLQ_URL_ENV: queues.dead_letter_queue.queue_url,
        HANDLER_ENV: settings.handler,
        **({} if table is None else {IDEMPOTENCY_TABLE_ENV: table.table_name}),
        TASK_ROLE_ID_ENV: role.role_id,
    }


def consumer_environment(
    *,
    contract: WorkerContract,
    bindings: Mapping[str, str],
    construct_variables: Mapping[str, str],
    handler_environment: Mapping[str, str],
    secrets: Collection[str] = (),
) -> dict[str, str]:
    """The consumer's variables: the contract's ``to_env()``, then ``bindings``, the construct's own variables
    (tracing's, the Lambda target's), then ``handler_environment``; ``ValueError`` where ``handler_environment`` or
    ``secrets`` name a variable the construct sets, or each other's (each variable has one source; the error says
    which two an option's names clash between)."""
    environment = contract.to_env()
    owned, plain = set(environment) | BINDING_KEYS | set(construct_variables), set(handler_environment)
    for option, names, taken, rule in (
        ("handler_environment", plain, owned, "must not set variables the construct sets"),
        ("secrets", set(secrets), owned, "must not set variables the construct sets"),
        ("secrets", set(secrets), plain, "must not repeat a handler_environment variable (one source per variable)"),
    ):
        clashes = sorted(names & taken)
        if clashes:
            raise ValueError(f'"{option}" {rule}: {", ".join(clashes)}')
    return {**environment, **bindings, **construct_variables, **handler_environment}


def container_secrets(scope: Construct, sources: Mapping[str, SecretSource]) -> dict[str, ecs.Secret]:
    """ECS secrets for ``sources`` (the ``secrets`` setting): SecureString parameters or Secrets Manager secrets.

    Parameters and secrets are referenced, never created here: they exist before the first deploy. A secret is
    referenced by its complete ARN, given or built from its complete name in the stack's account and region.
    Encrypted with the default keys (``aws/ssm``, ``aws/secretsmanager``) they need no KMS grant.
    """
    secrets = {}
    for variable, source in sources.items():
        if source.service == "ssm":
            parameter = ssm.StringParameter.from_secure_string_parameter_attributes(
                scope, variable, parameter_name=source.name
            )
            secrets[variable] = ecs.Secret.from_ssm_parameter(parameter)
        else:
            # The complete ARN, suffix included: ECS requests exactly the ARN in ValueFrom, and a partial one
            # (from_secret_name_v2) never matches the "-??????" grant CDK gives for it (aws-cdk#18555, #20744).
            arn = source.arn or Stack.of(scope).format_arn(
                service="secretsmanager",
                resource="secret",
                resource_name=source.name,
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
            secret = secretsmanager.Secret.from_secret_complete_arn(scope, variable, arn)
            secrets[variable] = ecs.Secret.from_secrets_manager(secret, field=source.json_key)
    return secrets
