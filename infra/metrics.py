"""Every metric the alarms and the dashboard use, built once, so a graph shows exactly what pages.

SQS publishes queue metrics once a minute; the consumer's own metrics are the EMF
lines it writes (namespace ``SqsWorker``, dimension ``Queue`` = the source queue's name),
which the awslogs driver turns into CloudWatch metrics.
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
"""

from __future__ import annotations

import math
from typing import NamedTuple, TypedDict

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_

from consumer.contract import METRICS_NAMESPACE, WorkerContract
from consumer.limits import SQS_MAX_WAIT_SECONDS
from infra.queues import WorkerQueues

SQS_METRIC_PERIOD = Duration.minutes(1)
CONSUMER_PERIOD = Duration.minutes(1)
#: The DlqExpiring alarm's held input counts hours: CloudWatch allows up to seven days of evaluation with periods of an hour
#: or more (one day below), and half the retention gap can reach seven days.
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
DLQ_HELD_PERIOD = Duration.hours(1)
#: The runtime writes its EMF counts when a flush is due (consumer/runtime/heartbeat.py: METRICS_FLUSH_SECONDS,
#: checked every 0.5 s tick), so a count's datapoint carries a time up to this much after the event; a test
#: holds the two equal (infra imports no runtime module).
METRICS_FLUSH_SECONDS = 60
METRICS_FLUSH_SLACK_SECONDS = 1


def circuit_period_seconds(contract: WorkerContract) -> int:
    """The period of ``circuit_opens`` for the DownstreamUnavailable alarm: the longest gap between two of its
    datapoints while the downstream stays down, rounded up to a minute (CloudWatch: a multiple of 60 s).

    ``retry_backoff_max + 20 + max_duration + 60 + 1``: an open pauses receiving for at most
    ``retry_backoff_max`` (consumer/runtime/circuit.py caps every pause there), the probe's receive may long-poll
    20 s, its handler may run ``max_duration`` before it raises (or is given up on, which frees the next probe),
    and the flush may stamp one open up to a minute later than the one before it. So every period of an outage
    holds an open and the alarm does not flap; a shorter period would leave some empty.
    """
    gap = (
        contract.retry_backoff_max_seconds
        + SQS_MAX_WAIT_SECONDS
        + contract.max_duration_seconds
        + METRICS_FLUSH_SECONDS
        + METRICS_FLUSH_SLACK_SECONDS
    )
    return 60 * math.ceil(gap / 60)


class _Statistic(TypedDict):
    """The metric options every queue metric here sets (the ``metric_*`` methods take them as keywords)."""

    period: Duration
    statistic: str


#: SQS fair queues' metric names, in :class:`FairQueueMetrics`' field order.
FAIR_QUEUE_METRIC_NAMES = (
    "ApproximateNumberOfNoisyGroups",
    "ApproximateNumberOfMessagesVisibleInQuietGroups",
    "ApproximateNumberOfMessagesNotVisibleInQuietGroups",
    "ApproximateAgeOfOldestMessageInQuietGroups",
)


class FairQueueMetrics(NamedTuple):
    """SQS fair queues' metrics of a source queue: AWS/SQS, dimension QueueName, like the queue-level ones; each
    ``InQuietGroups`` metric is its queue-level one less the messages of the tenants SQS counts as noisy.
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html#fair-queues-cloudwatch-metrics
    """

    noisy_groups: cloudwatch.IMetric
    quiet_visible: cloudwatch.IMetric
    quiet_in_flight: cloudwatch.IMetric
    quiet_age: cloudwatch.IMetric


class FunctionMetrics(NamedTuple):
    """A lambda worker's function metrics (AWS/Lambda, dimension FunctionName, one-minute periods), and the
    MaximumConcurrency its mapping keeps to (None with provisioned pollers: the mapping sets none).
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html"""

    invocations: cloudwatch.IMetric
    #: Invocations that ended in an error of the function itself: the entry raises only for its own faults (a
    #: configuration it cannot start with, an event from another queue), and Lambda counts timeouts and crashes.
    errors: cloudwatch.IMetric
    #: Invocation requests Lambda refused for lack of concurrency (the account's, shared by every function).
    throttles: cloudwatch.IMetric
    #: The most execution environments processing events at once, each minute: Lambda emits it for every function,
    #: reserved concurrency or not. https://docs.aws.amazon.com/lambda/latest/dg/monitoring-concurrency.html
    concurrent_executions: cloudwatch.IMetric
    maximum_concurrency: int | None


def function_metrics(function: lambda_.IFunction, maximum_concurrency: int | None) -> FunctionMetrics:
    """``function``'s :class:`FunctionMetrics` (no label: the alarms use them)."""
    total: _Statistic = {"period": SQS_METRIC_PERIOD, "statistic": cloudwatch.Stats.SUM}
    return FunctionMetrics(
        invocations=function.metric_invocations(**total),
        errors=function.metric_errors(**total),
        throttles=function.metric_throttles(**total),
        concurrent_executions=function.metric(
            "ConcurrentExecutions", period=SQS_METRIC_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
        ),
        maximum_concurrency=maximum_concurrency,
    )


class WorkerMetrics:
    """The queue pair's, the service's (or the function's) and the consumer's metrics (attributes are
    ``cloudwatch.IMetric``).

    Metrics an alarm uses carry no label: a labelled metric turns the alarm into a metric-math
    alarm, and the graph legends name the metric anyway.

    Example::

        metrics = WorkerMetrics(queues=queues, service=consumer.service)
        cloudwatch.Alarm(..., metric=metrics.dlq_visible, ...)

    ``circuit_period_seconds`` is the period of ``circuit_opens`` (the Worker passes
    :func:`circuit_period_seconds` of its contract, which the DownstreamUnavailable alarm needs).
    """

    def __init__(
        self,
        *,
        queues: WorkerQueues,
        service: ecs.FargateService | None,
        fair_queue: bool = False,
        circuit_period_seconds: int = 60,
        function: FunctionMetrics | None = None,
    ) -> None:
        self.queues = queues
        #: A lambda worker's function metrics (None for an ECS worker).
        self.function = function
        source, dlq = queues.queue, queues.dead_letter_queue
        maximum: _Statistic = {"period": SQS_METRIC_PERIOD, "statistic": cloudwatch.Stats.MAXIMUM}
        total: _Statistic = {"period": SQS_METRIC_PERIOD, "statistic": cloudwatch.Stats.SUM}
        self.source_visible = source.metric_approximate_number_of_messages_visible(**maximum)
        self.source_in_flight = source.metric_approximate_number_of_messages_not_visible(**maximum)
        self.source_age = source.metric_approximate_age_of_oldest_message(**maximum)
        self.source_received = source.metric_number_of_messages_received(**total)
        self.source_deleted = source.metric_number_of_messages_deleted(**total)
        #: SQS's fair-queue metrics, for a worker that declares fair_queue (None otherwise).
        self.fair: FairQueueMetrics | None = None
        if fair_queue:
            self.fair = FairQueueMetrics(*(source.metric(name, **maximum) for name in FAIR_QUEUE_METRIC_NAMES))
        self.dlq_visible = dlq.metric_approximate_number_of_messages_visible(**maximum)
        self.dlq_in_flight = dlq.metric_approximate_number_of_messages_not_visible(**maximum)
        self.dlq_age = dlq.metric_approximate_age_of_oldest_message(**maximum)
        # Every message the DLQ holds, visible or not: an operator's peek or export hides messages for a while
        # (in flight) without taking them out, so visible alone would dip and come back as "new arrivals".
        self.dlq_held = cloudwatch.MathExpression(
            expression="visible + hidden",
            using_metrics={"visible": self.dlq_visible, "hidden": self.dlq_in_flight},
            period=SQS_METRIC_PERIOD,
            label="DLQ messages (visible + in flight)",
        )
        # Messages that arrived in a DLQ that already held some: the held count went up from a non-zero value.
        self.dlq_new_arrivals = cloudwatch.MathExpression(
            expression="IF(DIFF(dlq) > 0 AND (dlq - DIFF(dlq)) > 0, DIFF(dlq), 0)",
            using_metrics={"dlq": self.dlq_held},
            period=SQS_METRIC_PERIOD,
            label="New arrivals in a non-empty DLQ",
        )
        # The DLQ was never empty in the hour: the DlqExpiring alarm's second input, for messages SQS's age metric leaves
        # out (a standard queue's message received three or more times: every peek is a receive). Hours in a row of it
        # are what one message held that long makes; a DLQ drained every day breaks the run, however often new
        # messages arrive (each hour's Maximum would not: a trickle of fresh messages keeps it at 1 or more).
        # CloudWatch takes each metric's statistic over the hour before the sum, so the exact least of visible + in
        # flight is out of reach; the least visible plus the most in flight is at least that, and a message an
        # operator's read hides over a sample still counts (the least in flight would drop the hour of any read that
        # leases it across a minute's end, and a daily look would keep the alarm from ever firing).
        # Its inputs carry the hour themselves: CDK would otherwise override their minute, with a synth warning.
        self.dlq_held_hourly = cloudwatch.MathExpression(
            expression="FILL(visible, 0) + FILL(hidden, 0)",
            using_metrics={
                "visible": dlq.metric_approximate_number_of_messages_visible(
                    period=DLQ_HELD_PERIOD, statistic=cloudwatch.Stats.MINIMUM
                ),
                "hidden": dlq.metric_approximate_number_of_messages_not_visible(
                    period=DLQ_HELD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                ),
            },
            period=DLQ_HELD_PERIOD,
            label="DLQ never empty this hour (least visible + most in flight)",
        )

        self.running_tasks: cloudwatch.IMetric | None = None
        self.desired_tasks: cloudwatch.IMetric | None = None
        self.backlog_per_task: cloudwatch.IMetric | None = None
        if service is not None:
            dimensions = {"ClusterName": service.cluster.cluster_name, "ServiceName": service.service_name}

            def insights(name: str) -> cloudwatch.Metric:
                # Container Insights: published per service every minute while the cluster has it enabled.
                return cloudwatch.Metric(
                    namespace="ECS/ContainerInsights",
                    metric_name=name,
                    dimensions_map=dimensions,
                    period=SQS_METRIC_PERIOD,
                    statistic=cloudwatch.Stats.MAXIMUM,
                )

            self.running_tasks = insights("RunningTaskCount")
            self.desired_tasks = insights("DesiredTaskCount")
            # What the target-tracking policy keeps near scaling_target_backlog_per_task.
            self.backlog_per_task = cloudwatch.MathExpression(
                expression="backlog / tasks",
                using_metrics={"backlog": self.source_visible, "tasks": self.running_tasks},
                period=SQS_METRIC_PERIOD,
                label="Backlog per task",
            )

        def consumer(
            name: str,
            statistic: str = cloudwatch.Stats.SUM,
            label: str | None = None,
            period: Duration = CONSUMER_PERIOD,
            labelled: bool = True,
        ) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=name,
                dimensions_map={"Queue": source.queue_name},
                period=period,
                statistic=statistic,
                label=(label or name) if labelled else None,
            )

        # The circuit's opens per alarm period (no label: the alarm uses it) and the longest open that closed in a
        # minute (the runtime writes circuit_open, in ms, when the circuit closes).
        self.circuit_opens = consumer("circuit_opens", period=Duration.seconds(circuit_period_seconds), labelled=False)
        self.circuit_open = consumer("circuit_open", cloudwatch.Stats.MAXIMUM, "circuit open, longest per close (ms)")
        #: Every move to the DLQ the consumer made (unlabelled: the DlqDepth alarm reads it), so the page does not wait
        #: for a sleeping DLQ's first metrics.
        self.dead_lettered = consumer("dead_lettered", labelled=False)
        # What the DlqDepth alarm compares with 1: held messages, or moves the consumer just made (missing = none).
        self.dlq_depth_or_moves = cloudwatch.MathExpression(
            expression="FILL(visible, 0) + FILL(hidden, 0) + FILL(moved, 0)",
            using_metrics={"visible": self.dlq_visible, "hidden": self.dlq_in_flight, "moved": self.dead_lettered},
            period=SQS_METRIC_PERIOD,
            label="DLQ messages, or moves to it",
        )
        self.processed = consumer("processed")
        self.failed = consumer("failed")
        self.poisoned = consumer("poisoned")
        self.timed_out = consumer("timed_out")
        self.visibility_extensions = consumer("visibility_extensions")
        self.sqs_requests = consumer("sqs_requests")
        self.duration = {
            p: consumer("duration", cloudwatch.Stats.percentile(p), f"duration p{p:g} (ms)") for p in (50, 90, 99)
        }
        self.requests_per_message = cloudwatch.MathExpression(
            expression="requests / processed",
            using_metrics={"requests": self.sqs_requests, "processed": self.processed},
            period=CONSUMER_PERIOD,
            label="SQS requests per processed message",
        )
