"""The tracing sidecar: an AWS Distro for OpenTelemetry collector beside a worker's consumer, exporting to X-Ray.

Added by :class:`infra.service.ConsumerService` where the environment sets ``tracing`` (:mod:`infra.tracing_settings`);
without it, nothing of tracing is in the task definition, the task role or the container's variables.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.nag import acknowledge
from infra.tracing_settings import TracingSettings

#: The collector's image, pinned by its exact release tag (https://github.com/aws-observability/aws-otel-collector
#: releases; v0.49.0, July 2026). Public ECR: pulled without credentials, so the execution role needs nothing for it.
COLLECTOR_IMAGE = "public.ecr.aws/aws-observability/aws-otel-collector:v0.49.0"
#: A configuration the image ships (the repository's config/ is copied to /etc/): an OTLP receiver on 4317 (gRPC)
#: and 4318 (HTTP), the resourcedetection processor (env, system, ecs, ec2: the task metadata endpoint, no AWS call
#: without EC2 tags configured) and a batch, and the awsxray exporter, traces only: no metrics, no EMF logs.
COLLECTOR_CONFIG = "/etc/ecs/ecs-xray.yaml"
#: The container's name in the task definition (and its log streams' middle part).
COLLECTOR_CONTAINER = "OtelCollector"
#: Its log streams in the worker's log group: ``otel-collector/OtelCollector/<task id>``.
COLLECTOR_LOG_PREFIX = "otel-collector"
#: What the collector may count on (a soft limit) and may never pass (a hard limit: over it, only the collector is
#: killed, and restarted): a traces-only pipeline batching 50 segments at a time. The rest of the task's memory is
#: the consumer's: at least the task's memory_mib - 128 (384 MiB of the smallest task, 512 MiB).
COLLECTOR_MEMORY_RESERVATION_MIB = 64
COLLECTOR_MEMORY_LIMIT_MIB = 128
#: ECS restarts the collector after it exits, once it has run this long (ECS's minimum, 60 s): restart policy,
#: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-restart-policy.html
COLLECTOR_RESTART_PERIOD = Duration.seconds(60)
#: Exactly what the awsxray exporter calls with that configuration: PutTraceSegments for every batch. It calls
#: PutTelemetryRecords only with ``telemetry: {enabled: true}`` (off in ecs-xray.yaml), and no sampling API: the
#: SDK samples by ratio (OTEL_TRACES_SAMPLER), not by X-Ray's sampling rules.
#: opentelemetry-collector-contrib exporter/awsxrayexporter/awsxray.go (v0.156.0, which v0.49.0 builds on).
XRAY_ACTIONS = ("xray:PutTraceSegments",)
#: Where AWS lists xray:PutTraceSegments with no resource type: a policy must give it on "*".
XRAY_PERMISSIONS_DOC = "https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsx-ray.html"


class TracingSidecar(Construct):
    """An ADOT collector container in ``task_definition``, which ``consumer`` sends its spans to over OTLP/HTTP.

    * image :data:`COLLECTOR_IMAGE` with :data:`COLLECTOR_CONFIG` (OTLP in, X-Ray out);
    * not essential: if it stops, the consumer keeps processing (its spans are dropped) and ECS restarts it;
    * :data:`COLLECTOR_MEMORY_RESERVATION_MIB` reserved, :data:`COLLECTOR_MEMORY_LIMIT_MIB` at most; CPU shared;
    * its logs in ``log_group`` under the stream prefix :data:`COLLECTOR_LOG_PREFIX`;
    * the consumer starts after it has started, and (dependencies reverse on shutdown) stops before it, so the
      spans of a drain are still exported;
    * ``task_role`` may :data:`XRAY_ACTIONS` on ``*`` (X-Ray has no resource-level permissions), acknowledged to
      cdk-nag with that reason.

    ``sample_ratio`` and the consumer's variables come from ``tracing``
    (:meth:`infra.tracing_settings.TracingSettings.environment`, which the consumer service writes). Attributes:
    ``container``, ``statement``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        task_definition: ecs.TaskDefinition,
        consumer: ecs.ContainerDefinition,
        task_role: iam.IRole,
        log_group: logs.ILogGroup,
        tracing: TracingSettings,
    ) -> None:
        super().__init__(scope, construct_id)
        self.tracing = tracing
        # Like the consumer, it needs no Linux capability (its receivers listen above port 1024).
        linux_parameters = ecs.LinuxParameters(self, "LinuxParameters")
        linux_parameters.drop_capabilities(ecs.Capability.ALL)
        self.container = task_definition.add_container(
            COLLECTOR_CONTAINER,
            image=ecs.ContainerImage.from_registry(COLLECTOR_IMAGE),
            command=[f"--config={COLLECTOR_CONFIG}"],
            essential=False,
            memory_reservation_mib=COLLECTOR_MEMORY_RESERVATION_MIB,
            memory_limit_mib=COLLECTOR_MEMORY_LIMIT_MIB,
            readonly_root_filesystem=True,
            linux_parameters=linux_parameters,
            enable_restart_policy=True,
            restart_attempt_period=COLLECTOR_RESTART_PERIOD,
            logging=ecs.LogDriver.aws_logs(stream_prefix=COLLECTOR_LOG_PREFIX, log_group=log_group),
        )
        consumer.add_container_dependencies(
            ecs.ContainerDependency(container=self.container, condition=ecs.ContainerDependencyCondition.START)
        )
        self.statement = iam.PolicyStatement(actions=list(XRAY_ACTIONS), resources=["*"])
        task_role.add_to_principal_policy(self.statement)
        acknowledge(
            task_role,
            "AwsSolutions-IAM5[Resource::*]",
            f"The tracing sidecar's {', '.join(XRAY_ACTIONS)} has no resource type in AWS's service authorization"
            f" reference, so a policy must give it on every resource ({XRAY_PERMISSIONS_DOC}); the task role gets"
            " this one write action and no X-Ray read.",
        )
