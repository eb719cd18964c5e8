"""Alarms that page when the DLQ gets a message, when a DLQ message nears expiry, or when the consumer stalls."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from consumer.contract import WorkerContract
from infra.queues import WorkerQueues

# SQS publishes queue metrics once a minute.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/monitoring-using-cloudwatch.html
SQS_METRIC_PERIOD = Duration.minutes(1)
BACKLOG_AGE_EVALUATION_MINUTES = 3


class QueueAlarms(Construct):
    """Three alarms on a :class:`WorkerQueues` pair, each sending ALARM and OK to ``topic``.

    * ``dlq_depth``: any visible message in the DLQ (Maximum >= 1 over one
      1-minute period), so a single failed message pages within about a minute.
    * ``dlq_age``: the DLQ's oldest message is older than the contract's
      ``dlq_age_alarm_seconds``, half the retention gap: it fires while the
      message still has at least that long before it expires.
    * ``backlog_age``: the source's oldest message is older than the contract's
      ``backlog_age_alarm_seconds`` for 3 minutes in a row: the consumer is
      stalled, crashed or far behind.

    Missing data is ``NOT_BREACHING`` on all three, deliberately: SQS stops
    publishing metrics for a queue that has been empty and untouched for six
    hours, so missing data means "nothing there", not "unknown". A queue that
    holds messages always publishes.
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html

    Attributes: ``dlq_depth``, ``dlq_age``, ``backlog_age`` (``cloudwatch.Alarm``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: WorkerQueues,
        contract: WorkerContract,
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        dlq, source = queues.dead_letter_queue, queues.queue
        action = actions.SnsAction(topic)

        def alarm(
            construct_id: str,
            description: str,
            metric: cloudwatch.Metric,
            threshold: int,
            comparison: cloudwatch.ComparisonOperator,
            minutes: int = 1,
        ) -> cloudwatch.Alarm:
            created = cloudwatch.Alarm(
                self,
                construct_id,
                alarm_description=description,
                metric=metric,
                threshold=threshold,
                comparison_operator=comparison,
                evaluation_periods=minutes,
                datapoints_to_alarm=minutes,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            created.add_alarm_action(action)
            created.add_ok_action(action)
            return created

        def maximum(metric_factory) -> cloudwatch.Metric:  # noqa: ANN001 (a bound Queue.metric_* method)
            return metric_factory(period=SQS_METRIC_PERIOD, statistic=cloudwatch.Stats.MAXIMUM)

        self.dlq_depth = alarm(
            "DlqDepth",
            "A message reached the dead-letter queue: it failed max_receive_count times or was"
            " poison. Read its reason attributes (aws sqs receive-message --queue-url <DLQ_URL>"
            " --message-attribute-names All), fix the cause, then redrive it to the source.",
            maximum(dlq.metric_approximate_number_of_messages_visible),
            1,
            cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )
        self.dlq_age = alarm(
            "DlqAge",
            f"A dead-letter message is older than {contract.dlq_age_alarm_seconds} s (half the"
            " retention gap between the DLQ and the source): redrive or export it before it expires.",
            maximum(dlq.metric_approximate_age_of_oldest_message),
            contract.dlq_age_alarm_seconds,
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )
        self.backlog_age = alarm(
            "BacklogAge",
            f"The oldest source message is older than {contract.backlog_age_alarm_seconds} s"
            " (acceptable latency plus three retry cycles): the consumer is stalled, crashed or"
            " far behind. Check the ECS service's running tasks and the consumer's logs.",
            maximum(source.metric_approximate_age_of_oldest_message),
            contract.backlog_age_alarm_seconds,
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            minutes=BACKLOG_AGE_EVALUATION_MINUTES,
        )
