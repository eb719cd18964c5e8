"""One CloudWatch dashboard per environment, every widget drawn from the metrics the alarms use."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from consumer.contract import WorkerContract
from infra.alarms import QueueAlarms
from infra.metrics import WorkerMetrics

WIDTH = 24
HALF, THIRD = WIDTH // 2, WIDTH // 3
HEIGHT = 6


class WorkerDashboard(Construct):
    """``<stack>``: alarm status, source and DLQ depth and age, deletes and receives, the consumer's own
    metrics (processed, failed, poisoned, duration percentiles, visibility extensions, SQS requests per
    message), running tasks and backlog per task against the scaling target.

    Thresholds appear as horizontal lines taken from the same contract values the alarms use.
    Attribute: ``dashboard``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: WorkerMetrics,
        alarms: QueueAlarms,
        contract: WorkerContract,
    ) -> None:
        super().__init__(scope, construct_id)
        m = metrics

        def line(value: float, label: str) -> cloudwatch.HorizontalAnnotation:
            return cloudwatch.HorizontalAnnotation(value=value, label=label)

        def graph(
            title: str,
            left: list[cloudwatch.IMetric],
            *,
            width: int = THIRD,
            lines: list[cloudwatch.HorizontalAnnotation] | None = None,
            right: list[cloudwatch.IMetric] | None = None,
        ) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(
                title=title,
                left=left,
                right=right or [],
                left_annotations=lines or [],
                width=width,
                height=HEIGHT,
            )

        rows: list[list[cloudwatch.IWidget]] = [
            [cloudwatch.AlarmStatusWidget(title="Alarms", alarms=alarms.paging_alarms, width=WIDTH, height=3)],
            [
                graph("Source queue: depth", [m.source_visible, m.source_in_flight]),
                graph(
                    "Source queue: oldest message age (s)",
                    [m.source_age],
                    lines=[
                        line(contract.acceptable_latency_seconds, "acceptable latency (stalled input)"),
                        line(contract.backlog_age_alarm_seconds, "BacklogAge alarm"),
                    ],
                ),
                graph("Source queue: received and deleted per minute", [m.source_received, m.source_deleted]),
            ],
            [
                graph("DLQ: depth and new arrivals", [m.dlq_visible, m.dlq_new_arrivals], width=HALF),
                graph(
                    "DLQ: oldest message age (s)",
                    [m.dlq_age],
                    width=HALF,
                    lines=[line(contract.dlq_age_alarm_seconds, "DlqAge alarm")],
                ),
            ],
            [
                graph("Consumer: outcomes per minute", [m.processed, m.failed, m.poisoned, m.timed_out]),
                graph(
                    "Consumer: handler duration (ms)",
                    list(m.duration.values()),
                    lines=[line(contract.max_duration_seconds * 1000, "max_duration")],
                ),
                graph(
                    "Consumer: SQS cost and leases",
                    [m.requests_per_message],
                    right=[m.visibility_extensions],
                ),
            ],
        ]
        if m.running_tasks is not None and m.desired_tasks is not None and m.backlog_per_task is not None:
            rows.append(
                [
                    graph("Service: tasks", [m.running_tasks, m.desired_tasks], width=HALF),
                    graph(
                        "Service: backlog per task",
                        [m.backlog_per_task],
                        width=HALF,
                        lines=[line(contract.scaling_target_backlog_per_task, "scaling target")],
                    ),
                ]
            )
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=Stack.of(self).stack_name, widgets=rows)
