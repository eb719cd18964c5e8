"""One environment's stack: queue pair, paging topic, alarms and the consumer service."""

from __future__ import annotations

from typing import cast

from aws_cdk import (
    Annotations,
    CfnCondition,
    CfnElement,
    CfnOutput,
    CfnParameter,
    Environment,
    Fn,
    RemovalPolicy,
    Stack,
)
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.alarms import QueueAlarms
from infra.dashboard import WorkerDashboard
from infra.metrics import WorkerMetrics
from infra.nag import acknowledge
from infra.paging import PagingTopic
from infra.queues import WorkerQueues
from infra.service import ConsumerService, container_secrets
from infra.settings import (
    LOG_RETENTION_DAYS,
    PAGING_ENDPOINT_PARAMETER,
    PAGING_ENDPOINT_PATTERN,
    PAGING_ENDPOINT_RULE,
    EnvironmentSettings,
    is_placeholder,
)

# CDK's RetentionDays names the same CloudWatch values, in the same order (INFINITE last).
RETENTION_DAYS = dict(zip(LOG_RETENTION_DAYS, list(logs.RetentionDays)[: len(LOG_RETENTION_DAYS)], strict=True))


class WorkerStack(Stack):
    """Everything one environment needs, from its ``cdk.json`` settings.

    Construct ids are a contract: renaming one replaces the resource (and a
    replaced queue loses its messages). Attributes: ``settings``, ``contract``,
    ``queues``, ``paging``, ``tickets``, ``consumer``, ``metrics``, ``alarms``, ``dashboard``.
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
        self.contract = settings.contract()
        removal = RemovalPolicy.RETAIN if settings.retain_queues else RemovalPolicy.DESTROY

        self.queues = WorkerQueues(self, "Queues", contract=self.contract, removal_policy=removal)
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

        cluster = self._cluster(settings)
        self.consumer = ConsumerService(
            self,
            "Consumer",
            queues=self.queues,
            contract=self.contract,
            handler=settings.handler,
            cluster=cluster,
            min_tasks=settings.min_tasks,
            max_tasks=settings.max_tasks,
            cpu=settings.cpu,
            memory_mib=settings.memory_mib,
            log_retention=RETENTION_DAYS[settings.log_retention_days],
            handler_environment=settings.handler_environment,
            secrets=container_secrets(Construct(self, "Secrets"), settings.secrets),
            data_removal_policy=removal,
        )
        if settings.producers:
            self.queues.restrict_senders(settings.producers, requeuer=self.consumer.task_role)
        self.metrics = WorkerMetrics(queues=self.queues, service=self.consumer.service)
        self.alarms = QueueAlarms(
            self,
            "Alarms",
            metrics=self.metrics,
            contract=self.contract,
            page_topic=self.tickets.topic if settings.pages_to_tickets else self.paging.topic,
            ticket_topic=self.tickets.topic,
            runbook_url=settings.runbook_url,
            # Container Insights is on for a cluster this stack creates; an existing one may not publish.
            running_tasks_reliable=settings.cluster_name is None,
        )
        for topic in (self.paging, self.tickets):
            topic.admit_alarms(self.alarms.notifying_alarm_names)
        self.dashboard = WorkerDashboard(
            self, "Dashboard", metrics=self.metrics, alarms=self.alarms, contract=self.contract
        )
        acknowledge(
            self.consumer.task_definition,
            "AwsSolutions-ECS2",
            "The environment holds only non-secret values: queue URLs, the handler path, the worker"
            " contract's timings and handler_environment, which refuses secret-like names (SECRET, PASSWORD,"
            " TOKEN, API_KEY, ...) at synth. Secrets travel as ECS secrets (the secrets setting): SSM"
            " SecureString parameters or Secrets Manager secrets, read by the execution role at task start,"
            " which may read exactly those and nothing else.",
        )
        acknowledge(
            self.consumer.task_role,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/"
            f"{self._cluster_name_in_finding(cluster)}/*]",
            "Task scale-in protection is set by each task on itself; task ids are not known at deploy"
            " time, so the resource is every task of this cluster only.",
        )
        execution_role = self.consumer.task_definition.obtain_execution_role()
        acknowledge(
            execution_role,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken has no resource-level permissions; the ECR pull actions"
            " themselves are scoped to the asset repository by CDK.",
        )

        for output_id, value, description in (
            ("QueueUrl", self.queues.queue.queue_url, "Source queue URL (QUEUE_URL)"),
            ("DeadLetterQueueUrl", self.queues.dead_letter_queue.queue_url, "Dead-letter queue URL (DLQ_URL)"),
            ("QueueArn", self.queues.queue.queue_arn, "Source queue ARN"),
            ("DeadLetterQueueArn", self.queues.dead_letter_queue.queue_arn, "Dead-letter queue ARN"),
            ("PagingTopicArn", self.paging.topic.topic_arn, "SNS topic the page-level alarms notify"),
            ("TicketTopicArn", self.tickets.topic.topic_arn, "SNS topic the ticket-level alarms notify"),
            ("DashboardName", self.dashboard.dashboard.dashboard_name, "CloudWatch dashboard of this environment"),
            ("ClusterName", cluster.cluster_name, "ECS cluster running the consumer"),
            ("ServiceName", self.consumer.service.service_name, "ECS service running the consumer"),
        ):
            CfnOutput(self, output_id, value=value, description=description)

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

    def _cluster(self, settings: EnvironmentSettings) -> ecs.ICluster:
        if settings.vpc is not None:
            vpc = ec2.Vpc.from_vpc_attributes(
                self,
                "Vpc",
                vpc_id=settings.vpc.vpc_id,
                availability_zones=list(settings.vpc.availability_zones),
                private_subnet_ids=list(settings.vpc.private_subnet_ids),
            )
        else:
            vpc = ec2.Vpc(self, "Vpc", max_azs=2, nat_gateways=settings.nat_gateways)
            vpc.add_flow_log("FlowLog")
        if settings.cluster_name is not None:
            return ecs.Cluster.from_cluster_attributes(
                self, "Cluster", cluster_name=settings.cluster_name, vpc=vpc, security_groups=[]
            )
        return ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)

    def _cluster_name_in_finding(self, cluster: ecs.ICluster) -> str:
        """How cdk-nag spells the cluster name inside a finding id (a Ref for a new cluster)."""
        if self.settings.cluster_name is not None:
            return self.settings.cluster_name
        # A new cluster's default child is its CfnCluster; jsii types node.default_child as IConstruct | None.
        return f"<{self.get_logical_id(cast(CfnElement, cluster.node.default_child))}>"
