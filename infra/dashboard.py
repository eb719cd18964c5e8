"""One CloudWatch dashboard per environment, every widget drawn from the metrics the alarms use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from consumer.contract import WorkerContract
from infra.metrics import WorkerMetrics
from infra.queue_alarms import DOWNSTREAM_EVALUATION_PERIODS, QueueAlarms

WIDTH = 24
HALF, THIRD = WIDTH // 2, WIDTH // 3
HEIGHT = 6


#: CloudWatch draws at most 100 alarms in one alarm status widget (the "any worker paging" view).
MAX_ALARMS_PER_STATUS_WIDGET = 100


@dataclass(frozen=True, kw_only=True)
class DashboardSection:
    """What the dashboard draws for one worker: its title (its name), metrics, alarms and contract."""

    title: str
    metrics: WorkerMetrics
    alarms: QueueAlarms
    contract: WorkerContract


class WorkerDashboard(Construct):
    """``<stack>``: alarm status, then per worker: source and DLQ depth and age, deletes and receives, the
    consumer's own metrics (processed, failed, poisoned, duration percentiles, visibility extensions, SQS requests
    per message), the downstream circuit (opens per alarm period against DownstreamUnavailable's threshold, the
    longest time open), running tasks and backlog per task against the scaling target (a lambda worker: its function's
    invocations, errors, throttles and concurrency against MaximumConcurrency); for a worker that declares
    ``fair_queue``, a row of SQS's fair-queue metrics (noisy groups, the quiet groups' depth and oldest age).

    With one section the dashboard is exactly that worker's; with several, the first rows are the "any worker
    paging" view (every worker's notifying alarms, in as many status widgets as CloudWatch's limit of
    :data:`MAX_ALARMS_PER_STATUS_WIDGET` per widget needs) and each worker's rows follow under a heading with its
    name, and every widget of a worker's rows is titled with its name (:func:`widget_title`), so a graph read on its
    own (in a full-screen view, a link, a screenshot pasted into an incident) still says whose it is. With one
    section the titles stay as they are: the dashboard, named after the stack, is that worker's. An alarm's
    threshold appears as a horizontal line read from the alarm itself (:func:`threshold_line`), so the graph draws
    what the alarm compares, wake-up allowance included; the scaling target and max_duration come from the contract.
    Attribute: ``dashboard``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, sections: Sequence[DashboardSection]) -> None:
        super().__init__(scope, construct_id)
        if not sections:
            raise ValueError('"sections" must hold at least one worker\'s section: 0')
        alarms = [alarm for section in sections for alarm in section.alarms.paging_alarms]
        title = "Alarms" if len(sections) == 1 else "Alarms: any worker paging"
        # Six alarms a worker: 17 workers' 102 need two widgets (CloudWatch draws at most 100 in one).
        chunks = [
            alarms[start : start + MAX_ALARMS_PER_STATUS_WIDGET]
            for start in range(0, len(alarms), MAX_ALARMS_PER_STATUS_WIDGET)
        ]
        rows: list[list[cloudwatch.IWidget]] = [
            [
                cloudwatch.AlarmStatusWidget(
                    title=title if len(chunks) == 1 else f"{title} ({number} of {len(chunks)})",
                    alarms=chunk,
                    width=WIDTH,
                    height=3,
                )
            ]
            for number, chunk in enumerate(chunks, start=1)
        ]
        for section in sections:
            if len(sections) > 1:
                rows.append([cloudwatch.TextWidget(markdown=f"## Worker {section.title}", width=WIDTH, height=1)])
            rows.extend(_section_rows(section, section.title if len(sections) > 1 else None))
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=Stack.of(self).stack_name, widgets=rows)


def widget_title(worker: str | None, title: str) -> str:
    """A worker's widget title: ``[reports] Source queue: depth`` on a dashboard of several workers (``worker``),
    ``title`` alone on a one-worker dashboard (None)."""
    return title if worker is None else f"[{worker}] {title}"


def threshold_line(alarm: cloudwatch.Alarm, label: str) -> cloudwatch.HorizontalAnnotation:
    """A horizontal line at ``alarm``'s own threshold, named ``label``."""
    return cloudwatch.HorizontalAnnotation(value=alarm.to_annotation().value, label=label)


def _section_rows(section: DashboardSection, worker: str | None) -> list[list[cloudwatch.IWidget]]:
    """One worker's graphs, a row per subject: source, DLQ, consumer, service; titled with ``worker`` when given."""
    m, contract, alarms = section.metrics, section.contract, section.alarms
    oldest, _ = alarms.dlq_expiring_inputs

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
            title=widget_title(worker, title),
            left=left,
            right=right or [],
            left_annotations=lines or [],
            width=width,
            height=HEIGHT,
        )

    rows: list[list[cloudwatch.IWidget]] = [
        [
            graph("Source queue: depth", [m.source_visible, m.source_in_flight]),
            graph(
                "Source queue: oldest message age (s)",
                [m.source_age],
                # On a fair queue BacklogAge watches the quiet groups' age: its line is drawn there (the fair row).
                lines=[threshold_line(alarms.stalled_backlog_late, "late backlog (ConsumerStalled input)")]
                + ([] if m.fair is not None else [threshold_line(alarms.backlog_age, "BacklogAge alarm")]),
            ),
            graph("Source queue: received and deleted per minute", [m.source_received, m.source_deleted]),
        ],
        [
            graph("DLQ: depth and new arrivals", [m.dlq_visible, m.dlq_new_arrivals], width=HALF),
            graph(
                "DLQ: oldest message age (s)",
                [m.dlq_age],
                width=HALF,
                lines=[threshold_line(oldest, "DlqAge (DlqExpiring input)")],
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
    rows.append(
        [
            graph(
                "Downstream circuit: opens per alarm period",
                [m.circuit_opens],
                width=HALF,
                lines=[
                    threshold_line(
                        alarms.downstream_unavailable,
                        f"DownstreamUnavailable alarm ({DOWNSTREAM_EVALUATION_PERIODS} periods in a row)",
                    )
                ],
            ),
            graph("Downstream circuit: longest time open (ms)", [m.circuit_open], width=HALF),
        ]
    )
    if m.fair is not None:
        rows.append(
            [
                graph("Fair queue: noisy tenants (message groups)", [m.fair.noisy_groups]),
                graph("Fair queue: quiet groups' depth", [m.fair.quiet_visible, m.fair.quiet_in_flight]),
                graph(
                    "Fair queue: oldest message age, quiet groups and whole queue (s)",
                    [m.fair.quiet_age, m.source_age],
                    lines=[threshold_line(alarms.backlog_age, "BacklogAge alarm (quiet groups)")],
                ),
            ]
        )
    if m.function is not None:
        function = m.function
        rows.append(
            [
                graph(
                    "Function: invocations, errors and throttles per minute",
                    [function.invocations, function.errors, function.throttles],
                    width=HALF,
                ),
                graph(
                    "Function: concurrent executions",
                    [function.concurrent_executions],
                    width=HALF,
                    lines=[
                        threshold_line(alarm, "MappingAtMaximum alarm (MaximumConcurrency)")
                        for alarm in alarms.function_alarms
                        if alarm.node.id == "MappingAtMaximum"
                    ],
                ),
            ]
        )
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
    return rows
