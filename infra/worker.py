"""One worker: a handler's queue pair, consumer fleet, alarms and dashboard section, all from its contract."""

from __future__ import annotations

from typing import cast

from aws_cdk import CfnElement, CfnResource, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from consumer.contract import WorkerContract, check_int
from consumer.lambda_target import LambdaTarget
from consumer.sources import EVENTBRIDGE_EVENTS_ENV, SNS_ENVELOPE_TOPICS_ENV
from consumer.stack_outputs import WORKER_METADATA_KEY, output_prefix
from infra.capacity_settings import (
    SPOT_ARCHITECTURES,
    ZERO_NEEDS_INSIGHTS,
    CapacityError,
    check_architecture,
)
from infra.dashboard import DashboardSection
from infra.function import ConsumerFunction
from infra.limits import check_function_variables
from infra.metrics import WorkerMetrics, circuit_period_seconds, function_metrics
from infra.nag import acknowledge
from infra.queue_alarms import QueueAlarms
from infra.queues import WorkerQueues
from infra.service import ConsumerService
from infra.shared import SharedResources
from infra.sources import WorkerSources
from infra.worker_settings import (
    ECS,
    ECS_ONLY_KEYS,
    LAMBDA,
    LAMBDA_SECRETS_RULE,
    MAX_TASKS_LIMIT,
    SOURCE_ENV_KEYS,
    TARGET_RULE,
    SettingsError,
    WorkerSettings,
    check_task_size,
    check_worker_name,
    lambda_target_of,
)

#: The construct id of the worker holding the stack's unprefixed resources (identity "default", infra/identities.py):
#: the CDK leaves an id "Default" out of every logical id below it (makeUniqueId's HIDDEN_ID, in aws-cdk-lib
#: core/lib/private/uniqueid.ts), so ``<stack>/Default/Queues/Queue`` is ``QueuesQueueD811C857``, the
#: logical id of ``<stack>/Queues/Queue``.
DEFAULT_WORKER_ID = "Default"


class Worker(Construct):
    """Everything one handler needs, derived from its :class:`WorkerContract`.

    Built from three objects: ``settings`` (:class:`infra.worker_settings.WorkerSettings`: the handler, the worker's
    name, tasks, size, architecture, Spot, variables, secrets and sources), its ``contract`` (every timing) and
    ``shared`` (:class:`infra.shared.SharedResources`: the cluster, the two topics and what holds for every worker of
    the stack); each is kept as an attribute of the same name.

    * ``queues``: a :class:`WorkerQueues` pair (source + DLQ) timed from the contract;
    * ``consumer``: a :class:`ConsumerService` running ``settings.handler`` between ``settings.min_tasks`` and
      ``settings.max_tasks`` (backlog-per-task scaling), with its idempotency table and a task role that reaches only
      this pair and table; with ``settings.target`` ``"lambda"``, a :class:`infra.function.ConsumerFunction` instead
      (a function behind an SQS event source mapping, every setting from ``target``, the worker's
      :class:`consumer.lambda_target.LambdaTarget`), and ``role`` either's role;
    * ``sources``: the SNS subscriptions and EventBridge rules of ``settings.sources`` (None without any);
    * ``metrics`` and ``alarms``: DLQ depth, new arrivals and age, backlog age and this worker's own
      consumer-stalled composite (and a function's errors, throttles and concurrency at its maximum), paging
      ``shared.page_topic`` and ticketing ``shared.ticket_topic``;
    * ``dashboard_section``: what :class:`infra.dashboard.WorkerDashboard` draws for it.

    Names and ids follow the construct id, the worker's identity (infra/identities.py): with ``"Default"``
    (:data:`DEFAULT_WORKER_ID`) the worker holds a one-worker stack's logical ids and names (``<stack>-source``,
    ``<stack>-DlqDepth``, ...) and its stack outputs have no prefix; with any other id, which must follow
    :data:`infra.worker_settings.WORKER_NAME_RULE`, logical ids start with the id (``exportsQueuesQueue...``) and
    names with ``<stack>-<id>`` (``<stack>-exports-source``), and its outputs with ``settings.name`` in PascalCase.
    The stack hosting it admits ``alarms.notifying_alarm_names`` on both topics
    (:meth:`infra.paging.PagingTopic.admit_alarms`).

    Defaults are behaviour, :class:`WorkerSettings`' and :class:`SharedResources`' (docs/construct.md lists them):
    1..2 tasks of 0.25 vCPU and 512 MiB, no extra variables, secrets or sources, logs kept a month, data (queues,
    table, logs) retained when the stack is deleted or a resource replaced, but not by the rollback of the deploy
    that created it (:data:`infra.removal.RETAIN_DATA`), IAM alone deciding who may send, the runbook at
    ``docs/runbook.md``, no tracing, and Container Insights assumed on (a cluster the app creates with it).

    Example, in a team's own CDK app::

        cluster = ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        shared = SharedResources(cluster=cluster, page_topic=paging.topic, ticket_topic=tickets.topic)
        emails = Worker(
            self,
            "emails",
            settings=WorkerSettings(name="emails", handler="workers.emails:handle", max_tasks=10),
            contract=contract_of(load_handler("workers.emails:handle")),
            shared=shared,
        )
        for topic in (paging, tickets):
            topic.admit_alarms(emails.alarms.notifying_alarm_names)
        WorkerDashboard(self, "Dashboard", sections=[emails.dashboard_section])
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: WorkerSettings,
        contract: WorkerContract,
        shared: SharedResources,
    ) -> None:
        unprefixed = construct_id == DEFAULT_WORKER_ID
        if not unprefixed:
            check_worker_name("construct_id", construct_id)
        worker_name = check_worker_name("name", settings.name)
        # What cdk.json's parser checks, checked here too: a team's own app calls this construct directly.
        target = _checked_target(settings, contract, shared)
        check_architecture("architecture", settings.architecture)  # ContractError quotes the parameter itself
        for option, names in (("handler_environment", settings.handler_environment), ("secrets", settings.secrets)):
            owned = sorted(set(names) & SOURCE_ENV_KEYS)  # written below from the sources, as service.py's own
            if owned:
                raise ValueError(f'"{option}" must not set variables the construct sets: {", ".join(owned)}')
        super().__init__(scope, construct_id)
        #: What it was built from.
        self.settings, self.contract, self.shared = settings, contract, shared
        #: The worker's name: ``settings.name``.
        self.name = worker_name
        stack = Stack.of(self).stack_name
        #: What its resource names start with (its identity's), and its stack outputs (its name's; "" under "Default").
        self.name_prefix = stack if unprefixed else f"{stack}-{construct_id}"
        self.output_prefix = "" if unprefixed else output_prefix(worker_name)
        #: A lambda worker's Lambda settings (None on ECS).
        self.target = target
        self.queues = WorkerQueues(
            self,
            "Queues",
            contract=contract,
            removal_policy=shared.data_removal_policy,
            name_prefix=self.name_prefix,
            attributes=None if target is None else target.queue_attributes(),
        )
        #: The ECS service (``target`` None) or the Lambda function, under the same construct id: the idempotency
        #: table and the log group keep their logical ids when a worker changes target.
        self.consumer: ConsumerService | ConsumerFunction
        runs: Construct  # what runs the consumer: the task definition, or the function
        if target is None:
            service = ConsumerService(
                self, "Consumer", queues=self.queues, contract=contract, settings=settings, shared=shared,
                name_prefix=self.name_prefix,
            )  # fmt: skip
            self.consumer, runs = service, service.task_definition
        else:
            function = ConsumerFunction(
                self, "Consumer", queues=self.queues, target=target, settings=settings, shared=shared,
                name_prefix=self.name_prefix,
            )  # fmt: skip
            self.consumer, runs = function, function.function
        # Which worker the task definition (or function) runs: the local tools read it (consumer/stack_outputs.py).
        cast(CfnResource, runs.node.default_child).add_metadata(WORKER_METADATA_KEY, self.name)
        #: The SNS subscriptions and EventBridge rules feeding the queue (None without sources: nothing is added).
        self.sources = (
            WorkerSources(
                self,
                "Sources",
                sources=settings.sources,
                queues=self.queues,
                contract=contract,
                name_prefix=self.name_prefix,
            )
            if settings.sources
            else None
        )
        if self.sources is not None:
            variables = {}
            if self.sources.envelope_topics:
                variables[SNS_ENVELOPE_TOPICS_ENV] = ",".join(self.sources.envelope_topics)
            if self.sources.has_rules:
                variables[EVENTBRIDGE_EVENTS_ENV] = "true"
            for variable, value in variables.items():
                self.consumer_environment(variable, value)
        if shared.producers:
            self.queues.restrict_senders(
                shared.producers,
                consumer=self.role,
                sources=self.sources.source_arns if self.sources is not None else (),
                dead_letter_sources=self.sources.dead_letter_arns if self.sources is not None else (),
            )
        consumer = self.consumer
        if isinstance(consumer, ConsumerFunction):
            setting = f"{settings.path}.handler_environment" if settings.path else "handler_environment"
            check_function_variables(Stack.of(self), consumer.environment, setting)
        self.metrics = WorkerMetrics(
            queues=self.queues,
            service=consumer.service if isinstance(consumer, ConsumerService) else None,
            fair_queue=contract.fair_queue,
            circuit_period_seconds=circuit_period_seconds(contract),
            function=None
            if isinstance(consumer, ConsumerService)
            else function_metrics(consumer.function, consumer.target.maximum_concurrency),
        )
        self.alarms = QueueAlarms(
            self,
            "Alarms",
            metrics=self.metrics,
            contract=contract,
            settings=settings,
            shared=shared,
            name_prefix=self.name_prefix,
        )
        self.dashboard_section = DashboardSection(
            title=self.name, metrics=self.metrics, alarms=self.alarms, contract=contract
        )
        if isinstance(self.consumer, ConsumerService):
            if unprefixed:
                self._keep_security_group_description(self.consumer)
            self._acknowledge(self.consumer, shared.cluster)

    @property
    def role(self) -> iam.IRole:
        """The role the consumer calls AWS with: the service's task role, or the function's."""
        consumer = self.consumer
        return consumer.task_role if isinstance(consumer, ConsumerService) else consumer.role

    def consumer_environment(self, variable: str, value: str) -> None:
        """Add ``variable`` to the consumer's environment: the container's, or the function's."""
        consumer = self.consumer
        if isinstance(consumer, ConsumerService):
            consumer.container.add_environment(variable, value)
        else:
            consumer.add_environment(variable, value)

    def _keep_security_group_description(self, consumer: ConsumerService) -> None:
        """The service's security group keeps the description it had before workers existed.

        CDK describes a security group by its construct path, which under the id "Default" holds "Default", and
        a changed GroupDescription makes CloudFormation replace the group (and update the service onto the new one).
        """
        for group in consumer.service.connections.security_groups:
            resource = cast(ec2.CfnSecurityGroup, group.node.default_child)
            if resource is not None:
                resource.group_description = group.node.path.replace(f"/{DEFAULT_WORKER_ID}/", "/", 1)

    def _acknowledge(self, consumer: ConsumerService, cluster: ecs.ICluster) -> None:
        """The cdk-nag findings a worker's service always has, each with why it is acceptable."""
        stack = Stack.of(self)
        acknowledge(
            consumer.task_definition,
            "AwsSolutions-ECS2",
            "The environment holds only non-secret values: queue URLs, the handler path, the worker"
            " contract's timings and handler_environment, which refuses secret-like names (SECRET, PASSWORD,"
            " TOKEN, API_KEY, ...) at synth. Secrets travel as ECS secrets (the secrets setting): SSM"
            " SecureString parameters or Secrets Manager secrets, read by the execution role at task start,"
            " which may read exactly those and nothing else.",
        )
        acknowledge(
            consumer.task_role,
            f"AwsSolutions-IAM5[Resource::arn:{_in_finding(stack.partition, 'AWS::Partition')}:ecs:"
            f"{_in_finding(stack.region, 'AWS::Region')}:"
            f"{_in_finding(stack.account, 'AWS::AccountId')}:task/{_cluster_name_in_finding(cluster)}/*]",
            "Task scale-in protection is set by each task on itself; task ids are not known at deploy"
            " time, so the resource is every task of this cluster only.",
        )
        acknowledge(
            consumer.task_definition.obtain_execution_role(),
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken has no resource-level permissions; the ECR pull actions"
            " themselves are scoped to the asset repository by CDK.",
        )


def _checked_target(settings: WorkerSettings, contract: WorkerContract, shared: SharedResources) -> LambdaTarget | None:
    """What cdk.json's parser checks of a worker's fleet, checked again for a team's own app; a lambda worker's
    :class:`LambdaTarget` (None for an ECS worker), refusing an ECS-only setting given a value of its own."""
    if settings.target == LAMBDA:
        defaults = WorkerSettings(name=settings.name, handler=settings.handler)
        for key, why in ECS_ONLY_KEYS.items():
            if getattr(settings, key) != getattr(defaults, key):
                raise SettingsError(
                    key, f"is an ECS setting, refused on a lambda worker: {why}", getattr(settings, key)
                )
        if settings.secrets:
            raise SettingsError("secrets", LAMBDA_SECRETS_RULE, sorted(settings.secrets))
        return lambda_target_of(settings, contract)
    if settings.target != ECS:
        raise SettingsError("target", TARGET_RULE, settings.target)
    if settings.provisioned_pollers is not None:
        raise SettingsError(
            "provisioned_pollers",
            f'is a lambda worker\'s setting: needs target "{LAMBDA}"',
            settings.provisioned_pollers,
        )
    check_task_size(settings.cpu, settings.memory_mib)
    reliable = shared.running_tasks_reliable
    min_tasks, max_tasks = settings.min_tasks, settings.max_tasks
    why_not_zero = "" if reliable else ZERO_NEEDS_INSIGHTS
    check_int("min_tasks", min_tasks, 0 if reliable else 1, MAX_TASKS_LIMIT, why_not_zero)
    check_int("max_tasks", max_tasks, max(1, min_tasks), MAX_TASKS_LIMIT, " (from min_tasks, and at least 1)")
    if settings.spot is not None:
        if settings.architecture not in SPOT_ARCHITECTURES:
            raise CapacityError(
                "spot", "needs architecture x86_64: Fargate Spot runs no ARM64 task", settings.architecture
            )
        check_int("spot.on_demand_base", settings.spot.on_demand_base, 0, max_tasks, " (up to max_tasks)")
    return None


def _in_finding(value: str, pseudo_parameter: str) -> str:
    """How cdk-nag spells a stack's partition, region or account inside a finding id: the value where the stack has a concrete
    environment (``env=``, cdk.json's account/region), else the pseudo parameter it stands for."""
    return f"<{pseudo_parameter}>" if Token.is_unresolved(value) else value


def _cluster_name_in_finding(cluster: ecs.ICluster) -> str:
    """How cdk-nag spells the cluster name inside a finding id: a Ref for a cluster of this stack, else its name."""
    # A new cluster's default child is its CfnCluster; an imported one has none and a plain name.
    child = cluster.node.default_child
    if child is None:
        return cluster.cluster_name
    return f"<{Stack.of(cluster).get_logical_id(cast(CfnElement, child))}>"
