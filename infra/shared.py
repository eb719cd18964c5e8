"""What every worker of a stack shares: the stack-level constructs it is built on and the environment's settings."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns

from infra.removal import RETAIN_DATA
from infra.tracing_settings import TracingSettings

#: Where alarm descriptions point for their runbook sections (``<runbook_url>#<section>``), by default.
DEFAULT_RUNBOOK_URL = "docs/runbook.md"


@dataclass(frozen=True, kw_only=True)
class SharedResources:
    """The pieces one stack gives each of its :class:`infra.worker.Worker` constructs, the same for all of them.

    ``WorkerStack`` builds one per environment from ``cdk.json`` (its ``shared`` attribute); a team's own stack builds
    its own (docs/construct.md). Only ``cluster`` and the two topics are required; every other default is behaviour:

    * the tasks run in ``cluster.vpc`` (its private subnets with egress, else its public ones with a public IP);
    * ``running_tasks_reliable``: the cluster publishes Container Insights (a cluster created with it), so a missing
      running-task count means no task: the consumer-stalled alarm then pages, and a worker may scale to zero;
    * ``runbook_url``: every alarm description links its section in ``docs/runbook.md``;
    * ``log_retention``: each consumer's log group keeps a month;
    * ``data_removal_policy``: the queues, idempotency tables and logs outlive the stack and any replacement, not the
      rollback of the deploy that created them (:data:`infra.removal.RETAIN_DATA`);
    * ``producers``: none named, so IAM alone decides who may send to a source queue (named: those and the worker's
      own task role send to its source, the task role alone to its DLQ);
    * ``tracing``: None, no collector sidecar (:class:`infra.tracing_settings.TracingSettings` adds one per task).

    The dashboard is not here: ``infra.dashboard.WorkerDashboard`` is built after the workers, from each one's
    ``dashboard_section``.
    """

    #: The ECS cluster every worker's service runs in; its VPC is the tasks'.
    cluster: ecs.ICluster
    #: The topic the page-level alarms notify (a low-urgency environment may pass the ticket topic here too).
    page_topic: sns.ITopic
    #: The topic the ticket-level alarms notify.
    ticket_topic: sns.ITopic
    running_tasks_reliable: bool = True
    runbook_url: str = DEFAULT_RUNBOOK_URL
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    data_removal_policy: RemovalPolicy = RETAIN_DATA
    #: IAM role or user ARNs: the only principals, besides each consumer's task role, that may send to a source.
    producers: tuple[str, ...] = ()
    tracing: TracingSettings | None = None
