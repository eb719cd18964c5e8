"""A worker's scaling: backlog-per-task target tracking between min_tasks and max_tasks, and the wake-up of a
worker allowed to scale to zero (``min_tasks: 0``).

Target tracking divides the visible backlog by the running tasks (AWS's recipe, below), so at zero tasks its metric
has no value and it does nothing: it can scale in to zero but never out of it. The wake-up closes that gap: an alarm
in ALARM once messages have been visible with no task running for two one-minute periods in a row, whose step policy
adds one task (ChangeInCapacity +1: from zero, one task). From there target tracking takes over.

The wake-up can only raise the desired count: CloudWatch invokes the policy every minute its alarm is in ALARM, and
Container Insights may publish a RunningTaskCount datapoint late or not at all, which the alarm reads as "no task"
(a service with no task publishes none, so a missing datapoint must read as zero for a sleeping worker to wake). An
exact capacity of 1 would then cut a fleet target tracking had grown; an added task cannot, and within the policy's
cooldown Application Auto Scaling counts the task it added, so a repeat invocation while that task starts adds
nothing. Two periods in a row keep one late datapoint alone from acting at all. How long a wake-up may take is
:data:`infra.capacity_settings.WAKE_UP_SECONDS`; the alarms allow for it (infra/queue_alarms.py).

The constructs are children of the service's scope, so their logical ids are the ones the service always had.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from consumer.contract import WorkerContract
from infra.capacity_settings import TASK_START_SECONDS, WAKE_UP_ALARM_PERIODS, WAKE_UP_PERIOD_SECONDS
from infra.queues import WorkerQueues
from infra.shared import SharedResources
from infra.worker_settings import WorkerSettings

SCALING_SERVICE = "ecs.application-autoscaling.amazonaws.com"
SCALING_ROLE = "AWSServiceRoleForApplicationAutoScaling_ECSService"
SCALE_OUT_COOLDOWN = Duration.minutes(1)
SCALE_IN_COOLDOWN = Duration.minutes(5)
#: The wake-up alarm's expression: 1 while messages are visible and no task runs (a service with no task may publish
#: no RunningTaskCount at all: FILL makes that a 0), else 0; the alarm needs it in WAKE_UP_ALARM_PERIODS in a row.
WAKE_UP_EXPRESSION = "IF(FILL(visible, 0) > 0 AND FILL(tasks, 0) < 1, 1, 0)"
#: The wake-up's step: one more task (it never lowers the desired count) from the alarm's threshold up.
WAKE_UP_TASKS_ADDED = 1
#: The added task's start, its first counted minute and one more for that datapoint to be late: the alarm's repeats
#: meanwhile add nothing (within the cooldown the policy counts the task it added).
WAKE_UP_COOLDOWN = Duration.seconds(TASK_START_SECONDS + 2 * WAKE_UP_PERIOD_SECONDS)


class WorkerScaling:
    """The scalable target, the target tracking policy and, where ``settings.min_tasks`` is 0, the wake-up, built in
    ``scope`` (the :class:`infra.service.ConsumerService`) for its ``service``: between ``settings.min_tasks`` and
    ``settings.max_tasks``, on ``queues``' backlog per task with the ``contract``'s target, in ``shared.cluster``;
    policy and alarm names start with ``name_prefix``, the wake-up alarm's description links ``shared.runbook_url``.

    Attributes: ``target``, ``policy`` (the target tracking policy), ``wake_up_alarm`` and ``wake_up`` (the step
    policy), both None unless the worker may scale to zero.
    """

    def __init__(
        self,
        scope: Construct,
        *,
        queues: WorkerQueues,
        service: ecs.FargateService,
        contract: WorkerContract,
        settings: WorkerSettings,
        shared: SharedResources,
        name_prefix: str,
    ) -> None:
        stack = Stack.of(scope)
        cluster = shared.cluster
        self.target = appscaling.ScalableTarget(
            scope,
            "ScalableTarget",
            service_namespace=appscaling.ServiceNamespace.ECS,
            resource_id=f"service/{cluster.cluster_name}/{service.service_name}",
            scalable_dimension="ecs:service:DesiredCount",
            min_capacity=settings.min_tasks,
            max_capacity=settings.max_tasks,
            # The service-linked role ECS scaling uses anyway; no extra IAM role to own.
            role=iam.Role.from_role_arn(
                scope,
                "ScalingRole",
                stack.format_arn(
                    service="iam",
                    region="",
                    resource="role",
                    resource_name=f"aws-service-role/{SCALING_SERVICE}/{SCALING_ROLE}",
                ),
                mutable=False,
            ),
        )
        self.target.node.add_dependency(service)
        self.policy = appscaling.CfnScalingPolicy(
            scope,
            "BacklogPerTaskScaling",
            policy_name=f"{name_prefix}-backlog-per-task",
            policy_type="TargetTrackingScaling",
            scaling_target_id=self.target.scalable_target_id,
            target_tracking_scaling_policy_configuration=_backlog_per_task_tracking(
                queue_name=queues.queue.queue_name,
                cluster_name=cluster.cluster_name,
                service_name=service.service_name,
                target=contract.scaling_target_backlog_per_task,
            ),
        )
        self.wake_up_alarm: cloudwatch.Alarm | None = None
        self.wake_up: appscaling.StepScalingAction | None = None
        if settings.min_tasks == 0:
            self._wake_up(
                scope,
                queues=queues,
                cluster=cluster,
                service=service,
                name_prefix=name_prefix,
                runbook_url=shared.runbook_url,
            )

    def _wake_up(
        self,
        scope: Construct,
        *,
        queues: WorkerQueues,
        cluster: ecs.ICluster,
        service: ecs.FargateService,
        name_prefix: str,
        runbook_url: str,
    ) -> None:
        period = Duration.seconds(WAKE_UP_PERIOD_SECONDS)
        self.wake_up = appscaling.StepScalingAction(
            scope,
            "WakeUp",
            scaling_target=self.target,
            policy_name=f"{name_prefix}-wake-up",
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            cooldown=WAKE_UP_COOLDOWN,
        )
        self.wake_up.add_adjustment(adjustment=WAKE_UP_TASKS_ADDED, lower_bound=0)
        self.wake_up_alarm = cloudwatch.Alarm(
            scope,
            "WakeUpAlarm",
            alarm_name=f"{name_prefix}-WakeUp",
            alarm_description=(
                "Scaling only, no page: messages visible and no consumer task running for 2 minutes, so the wake-up"
                " policy adds a task (min_tasks 0). ConsumerStalled pages if no task then deletes them in time;"
                f" its step 4 is what to check when a worker does not wake. Runbook: {runbook_url}#consumer-stalled"
            ),
            metric=cloudwatch.MathExpression(
                expression=WAKE_UP_EXPRESSION,
                using_metrics={
                    "visible": queues.queue.metric_approximate_number_of_messages_visible(
                        statistic=cloudwatch.Stats.MAXIMUM, period=period
                    ),
                    "tasks": cloudwatch.Metric(
                        namespace="ECS/ContainerInsights",
                        metric_name="RunningTaskCount",
                        dimensions_map={"ClusterName": cluster.cluster_name, "ServiceName": service.service_name},
                        statistic=cloudwatch.Stats.MAXIMUM,
                        period=period,
                    ),
                },
                period=period,
                label="messages waiting, no task",
            ),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=WAKE_UP_ALARM_PERIODS,
            datapoints_to_alarm=WAKE_UP_ALARM_PERIODS,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.wake_up_alarm.add_alarm_action(actions.ApplicationScalingAction(self.wake_up))


def _backlog_per_task_tracking(
    *, queue_name: str, cluster_name: str, service_name: str, target: int
) -> appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty:
    """Visible messages / running tasks, kept near ``target`` (AWS's backlog-per-task recipe).

    https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-target-tracking-metric-math.html
    """
    policy = appscaling.CfnScalingPolicy

    def metric(
        query_id: str, namespace: str, name: str, dimensions: dict[str, str], stat: str
    ) -> appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty:
        return policy.TargetTrackingMetricDataQueryProperty(
            id=query_id,
            return_data=False,
            metric_stat=policy.TargetTrackingMetricStatProperty(
                stat=stat,
                metric=policy.TargetTrackingMetricProperty(
                    namespace=namespace,
                    metric_name=name,
                    dimensions=[
                        policy.TargetTrackingMetricDimensionProperty(name=k, value=v) for k, v in dimensions.items()
                    ],
                ),
            ),
        )

    return policy.TargetTrackingScalingPolicyConfigurationProperty(
        target_value=target,
        scale_out_cooldown=SCALE_OUT_COOLDOWN.to_seconds(),
        scale_in_cooldown=SCALE_IN_COOLDOWN.to_seconds(),
        customized_metric_specification=policy.CustomizedMetricSpecificationProperty(
            metrics=[
                metric("backlog", "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": queue_name}, "Sum"),
                metric(
                    "tasks",
                    "ECS/ContainerInsights",
                    "RunningTaskCount",
                    {"ClusterName": cluster_name, "ServiceName": service_name},
                    "Average",
                ),
                policy.TargetTrackingMetricDataQueryProperty(
                    id="backlogPerTask", expression="backlog / tasks", label="Backlog per task", return_data=True
                ),
            ]
        ),
    )
