"""One environment's stack: queue pair, paging topic, alarms and the consumer service."""

from __future__ import annotations

from aws_cdk import (
    Annotations,
    CfnCondition,
    CfnOutput,
    CfnParameter,
    Environment,
    Fn,
    RemovalPolicy,
    Stack,
)
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from consumer.errors import ContractError
from consumer.stack_outputs import WORKER_NAMES_OUTPUT
from infra.dashboard import WorkerDashboard
from infra.identities import DEFAULT_IDENTITY
from infra.limits import check_limits
from infra.network import environment_vpc
from infra.paging import PagingTopic
from infra.removal import data_removal_policy
from infra.service import ConsumerService
from infra.settings import (
    LOG_RETENTION_DAYS,
    PAGING_ENDPOINT_PARAMETER,
    PAGING_ENDPOINT_PATTERN,
    PAGING_ENDPOINT_RULE,
    EnvironmentSettings,
    is_placeholder,
)
from infra.shared import SharedResources
from infra.trust import confine_provider_roles
from infra.worker import DEFAULT_WORKER_ID, Worker
from infra.worker_settings import CONTEXT_KEY, SettingsError, WorkerSettings

# CDK's RetentionDays names the same CloudWatch values, in the same order (INFINITE last).
RETENTION_DAYS = dict(zip(LOG_RETENTION_DAYS, list(logs.RetentionDays)[: len(LOG_RETENTION_DAYS)], strict=True))


class WorkerStack(Stack):
    """Everything one environment needs, from its ``cdk.json`` settings.

    One :class:`Worker` per entry of the environment's workers, sharing the VPC, the cluster, the paging and
    ticket topics and one dashboard with a section per worker. Construct ids are a contract: renaming one
    replaces the resource (and a replaced queue loses its messages); a worker's is its identity, never its place
    in cdk.json (infra/identities.py), and the worker holding identity "default" is ``Default``, so a one-worker
    environment keeps the ids it always had. Attributes: ``settings``, ``shared`` (what every worker is given),
    ``workers`` (by name), ``paging``, ``tickets``, ``dashboard``, and the first worker's (the "default" one's where
    there is one) ``contract``, ``queues``, ``consumer``, ``metrics`` and ``alarms``.
    """

    def __init__(self, scope: Construct, *, settings: EnvironmentSettings) -> None:
        env = (
            Environment(account=settings.account, region=settings.region)
            if settings.account or settings.region
            else None
        )
        super().__init__(
            scope,
            settings.stack_name,
            env=env,
            description=f"SQS worker ({settings.name}): queue pair, alarms and consumer service",
        )
        self.settings = settings
        # Every resource holding data follows retain_queues, the ones the CDK would retain by default too (the flow
        # log's log group): retained through deletes and replacements, never by a failed first deploy's rollback.
        removal = data_removal_policy(settings.retain_queues)

        self.paging = PagingTopic(
            self,
            "Paging",
            emails=settings.paging_emails,
            https_endpoints=settings.paging_https,
            removal_policy=removal,
        )
        #: The deploy-time paging subscription (None where cdk.json commits the subscriptions).
        self.paging_endpoint = self._paging_endpoint_parameter() if settings.paging_from_parameter else None
        # No subscription where paging is not required (dev, staging as shipped) is expected, not warned on
        # every synth: those alarms reach whoever subscribes (cdk.json "paging"/"tickets", docs/deploy.md), and
        # `make run`'s report shows each environment's subscription count once.
        # Where paging is required, settings refuse a placeholder; elsewhere it only earns this warning.
        placeholders = [s for s in (*settings.paging_emails, *settings.paging_https) if is_placeholder(s)]
        if placeholders:
            Annotations.of(self.paging).add_warning_v2(
                "sqs-worker:placeholder-subscription",
                f"{settings.name}: paging subscription {placeholders[0]} is a placeholder; set a real one in cdk.json",
            )
        # Ticket-level alarms (and, where pages_to_tickets, every alarm) go here; it shares the paging key.
        self.tickets = PagingTopic(
            self,
            "Tickets",
            emails=settings.ticket_emails,
            https_endpoints=settings.ticket_https,
            removal_policy=removal,
            key=self.paging.key,
        )

        cluster = self._cluster(settings, removal)
        #: What every worker of the environment is given: the cluster, the topics and the environment-wide settings.
        self.shared = SharedResources(
            cluster=cluster,
            page_topic=self.tickets.topic if settings.pages_to_tickets else self.paging.topic,
            ticket_topic=self.tickets.topic,
            # Container Insights is on for a cluster this stack creates; an existing one may not publish.
            running_tasks_reliable=settings.cluster_name is None,
            runbook_url=settings.runbook_url,
            log_retention=RETENTION_DAYS[settings.log_retention_days],
            data_removal_policy=removal,
            producers=settings.producers,
            tracing=settings.tracing,
        )
        #: The workers by name, in settings' order: the one holding identity "default" (construct id "Default", the
        #: stack's unprefixed resources) first. Each worker's construct id is its identity (infra/identities.py).
        self.workers: dict[str, Worker] = {}
        for worker in settings.workers:
            self.workers[worker.name] = self._worker(worker, settings)
        first = next(iter(self.workers.values()))
        # The first worker's parts, by the names a one-worker stack has always had.
        self.contract, self.queues, self.consumer = first.contract, first.queues, first.consumer
        self.metrics, self.alarms = first.metrics, first.alarms
        for topic in (self.paging, self.tickets):
            topic.admit_alarms([name for w in self.workers.values() for name in w.alarms.notifying_alarm_names])
        self.dashboard = WorkerDashboard(
            self, "Dashboard", sections=[w.dashboard_section for w in self.workers.values()]
        )

        def worker_outputs(w: Worker) -> list[tuple[str, str, str]]:
            of = f" of worker {w.name}" if w.output_prefix else ""
            consumer = w.consumer
            runs = (
                ("ServiceName", consumer.service.service_name, "ECS service running the consumer")
                if isinstance(consumer, ConsumerService)
                else ("FunctionName", consumer.function.function_name, "Lambda function running the consumer")
            )
            return [
                (f"{w.output_prefix}{output_id}", value, description + of)
                for output_id, value, description in (
                    ("QueueUrl", w.queues.queue.queue_url, "Source queue URL (QUEUE_URL)"),
                    ("DeadLetterQueueUrl", w.queues.dead_letter_queue.queue_url, "Dead-letter queue URL (DLQ_URL)"),
                    ("QueueArn", w.queues.queue.queue_arn, "Source queue ARN"),
                    ("DeadLetterQueueArn", w.queues.dead_letter_queue.queue_arn, "Dead-letter queue ARN"),
                    runs,
                )
            ]

        # The first worker's outputs keep their names (and order); the others' start with their PascalCase name.
        queue_outputs, service_output = worker_outputs(first)[:4], worker_outputs(first)[4]
        for output_id, value, description in (
            *queue_outputs,
            ("PagingTopicArn", self.paging.topic.topic_arn, "SNS topic the page-level alarms notify"),
            ("TicketTopicArn", self.tickets.topic.topic_arn, "SNS topic the ticket-level alarms notify"),
            ("DashboardName", self.dashboard.dashboard.dashboard_name, "CloudWatch dashboard of this environment"),
            ("ClusterName", cluster.cluster_name, "ECS cluster running the consumer"),
            service_output,
            (
                WORKER_NAMES_OUTPUT,
                ",".join(self.workers),
                "This stack's workers: the outputs of the one holding the stack's unprefixed resources (listed first)"
                " have no prefix, every other's start with its name in PascalCase (python -m consumer dlq ... --stack"
                " STACK --worker NAME reads them)",
            ),
            *(output for w in list(self.workers.values())[1:] for output in worker_outputs(w)),
        ):
            CfnOutput(self, output_id, value=value, description=description)
        # The CDK's own providers (restrictDefaultSecurityGroup's, for a VPC this stack creates) trust Lambda
        # for anyone's functions: this account's only, as every other role here (infra/trust.py).
        confine_provider_roles(self)
        check_limits(self, settings.name)

    def _worker(self, worker: WorkerSettings, settings: EnvironmentSettings) -> Worker:
        """``worker``'s construct, its id its identity; an environment setting it refuses named by its cdk.json path."""
        identity = worker.identity or worker.name
        try:
            return Worker(
                self,
                DEFAULT_WORKER_ID if identity == DEFAULT_IDENTITY else identity,
                settings=worker,
                contract=settings.contract(worker),
                shared=self.shared,
            )
        except ContractError as error:
            if error.parameter != "runbook_url":  # the one environment-wide setting the construct checks itself
                raise
            raise SettingsError(f"{CONTEXT_KEY}.{settings.name}.{error.parameter}", error.rule, error.value) from error

    def _paging_endpoint_parameter(self) -> CfnParameter:
        """PagingEndpoint: the real paging address, given at deploy and never committed, subscribed to the topic.

        No default, so the first ``cdk deploy`` without ``--parameters`` fails before anything is created; later
        deploys reuse the stack's previous value (the CDK CLI's ``--previous-parameters``, on by default).
        """
        endpoint = CfnParameter(
            self,
            PAGING_ENDPOINT_PARAMETER,
            type="String",
            description="Who the page-level alarms reach: an email address or an https:// endpoint of a paging service",
            allowed_pattern=PAGING_ENDPOINT_PATTERN,
            constraint_description=PAGING_ENDPOINT_RULE,
            # A paging service's https:// endpoint usually embeds its integration key: not shown by describe-stacks.
            no_echo=True,
        )
        # An https:// value splits into ["", rest] on "https://"; an email address does not start with it.
        is_https = CfnCondition(
            self,
            "PagingEndpointIsHttps",
            expression=Fn.condition_equals(Fn.select(0, Fn.split("https://", endpoint.value_as_string)), ""),
        )
        sns.CfnSubscription(
            self,
            "PagingEndpointSubscription",
            topic_arn=self.paging.topic.topic_arn,
            protocol=Fn.condition_if(is_https.logical_id, "https", "email").to_string(),
            endpoint=endpoint.value_as_string,
        )
        return endpoint

    def _cluster(self, settings: EnvironmentSettings, removal: RemovalPolicy) -> ecs.ICluster:
        vpc = environment_vpc(self, settings, removal)
        if settings.cluster_name is not None:
            return ecs.Cluster.from_cluster_attributes(
                self, "Cluster", cluster_name=settings.cluster_name, vpc=vpc, security_groups=[]
            )
        # FARGATE and FARGATE_SPOT associated only where a worker runs on Spot: no other template has the association.
        return ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
            enable_fargate_capacity_providers=any(w.spot for w in settings.workers) or None,
        )
