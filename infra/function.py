"""The consumer function: ``consumer.lambda_entry.handler`` in the consumer image, fed by an SQS event source mapping.

A worker with ``"target": "lambda"`` (infra/worker_settings.py) runs here instead of an ECS service. Every setting of
the function and its mapping comes from the worker's :class:`~consumer.lambda_target.LambdaTarget`, which derives
them from the handler's contract and refuses what Lambda cannot honour.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from consumer.contract import QUEUE_ARN_ENV
from consumer.lambda_target import LambdaTarget
from infra.queues import WorkerQueues
from infra.service import (
    IMAGE_CONTEXT,
    bindings_of,
    consumer_environment,
    grant_consumer,
    idempotency_table,
    image_asset_options,
)
from infra.shared import SharedResources
from infra.trust import LAMBDA, this_account
from infra.worker_settings import WorkerSettings, check_lambda_variables

#: The image's command on Lambda: the runtime interface client (awslambdaric, in consumer/requirements.txt) serving
#: ``consumer.lambda_entry.handler`` from the image's working directory, /app.
#: https://docs.aws.amazon.com/lambda/latest/dg/python-image.html#python-image-clients
LAMBDA_ENTRYPOINT = ["python", "-m", "awslambdaric"]
LAMBDA_COMMAND = ["consumer.lambda_entry.handler"]
CPU_ARCHITECTURES = {"x86_64": lambda_.Architecture.X86_64, "arm64": lambda_.Architecture.ARM_64}
#: What the event source mapping calls on the source queue with the function's role: "To read messages from the SQS
#: queue, Lambda needs ... sqs:ReceiveMessage, sqs:DeleteMessage, sqs:GetQueueAttributes" and ChangeMessageVisibility
#: for the messages of a failed batch. https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
MAPPING_SOURCE_ACTIONS = (
    "sqs:ChangeMessageVisibility",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
    "sqs:ReceiveMessage",
)
#: What the function itself calls on the source (consumer/runtime/batch_report.py, settlement.py): a backoff's or a
#: hand-back's ChangeMessageVisibilityBatch, a standard queue's hand-back copy (SendMessage), and the delete of a
#: message whose handler succeeded after its invocation answered (DeleteMessageBatch). A batch call needs its single
#: call's action.
FUNCTION_SOURCE_ACTIONS = ("sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:SendMessage")
#: Everything the role may do on the source: the mapping's calls and the function's, nothing else.
SOURCE_QUEUE_ACTIONS = tuple(sorted({*MAPPING_SOURCE_ACTIONS, *FUNCTION_SOURCE_ACTIONS}))
#: Its own log group only: Lambda creates each execution environment's stream and writes to it.
LOG_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")


def function_name_of(name_prefix: str) -> str:
    """A worker's function name: ``<name_prefix>-consumer`` (at most 61 characters for the longest prefix a worker
    can have, within Lambda's 64)."""
    return f"{name_prefix}-consumer"


class ConsumerFunction(Construct):
    """A Lambda function running ``settings.handler`` on a :class:`WorkerQueues` pair, every setting from ``target``.

    * the image: the ECS task's asset (``consumer/Dockerfile``, same build options and platform, so the same asset and
      image), run as ``python -m awslambdaric consumer.lambda_entry.handler`` (:data:`LAMBDA_ENTRYPOINT`,
      :data:`LAMBDA_COMMAND`);
    * memory ``target.memory_mib`` (the worker's ``memory_mib``), architecture ``settings.architecture``, timeout
      ``target.function_timeout_seconds``; no reserved concurrency: it throttles the mapping's invocations, whose
      messages then spend receives until the DLQ takes them (https://github.com/aws/aws-cdk/issues/24180); the
      mapping's MaximumConcurrency is the limit instead;
    * the container's environment (``contract.to_env()``, the bindings, ``settings.handler_environment``), with
      ``CONSUMER_TASK_ROLE_ID`` the function role's RoleId (whose copies are trusted) and ``QUEUE_ARN``;
    * a log group of its own, kept ``shared.log_retention`` under ``shared.data_removal_policy``;
    * the idempotency table as for ECS (none for a handler idempotent by itself);
    * an event source mapping on the source: ``ReportBatchItemFailures``, BatchSize ``target.esm_batch_size``, a
      batching window where ``target.batching_window_seconds`` is above 0, and MaximumConcurrency
      ``target.maximum_concurrency``, or the provisioned pollers ``target.provisioned_pollers``;
    * a role trusting Lambda for this account only (infra/trust.py) with exactly :data:`SOURCE_QUEUE_ACTIONS` on the
      source, ``infra.service.DEAD_LETTER_QUEUE_ACTIONS`` on the DLQ, the guard's actions on its table and
      :data:`LOG_ACTIONS` on its log group; the queues' SSE-SQS needs no KMS grant.

    The function runs outside any VPC: it reaches SQS, DynamoDB and CloudWatch Logs at their public endpoints, and no
    resource of the environment's VPC. ``name_prefix`` (default the stack's name) names it ``<name_prefix>-consumer``.
    Its construct ids under the worker's ``Consumer`` are those of an ECS service's table and log group, so a worker
    moved from one target to the other keeps both.

    Attributes: ``function``, ``role``, ``log_group``, ``idempotency_table``, ``mapping``, ``target``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: WorkerQueues,
        target: LambdaTarget,
        settings: WorkerSettings,
        shared: SharedResources,
        name_prefix: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        check_lambda_variables("handler_environment", settings.handler_environment)
        self.target = target
        contract = target.contract
        prefix = name_prefix or Stack.of(self).stack_name
        #: The guard's table (None for a handler idempotent by itself), at the ECS service's construct path.
        self.idempotency_table = idempotency_table(self, contract, shared.data_removal_policy)
        self.role = iam.Role(
            self,
            "FunctionRole",
            assumed_by=iam.ServicePrincipal(LAMBDA).with_conditions(dict(this_account(self))),
            description="SQS consumer function: its mapping receives and deletes; it extends, hands back and moves"
            " poison messages to the DLQ",
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=shared.log_retention, removal_policy=shared.data_removal_policy
        )
        environment = consumer_environment(
            contract=contract,
            bindings=bindings_of(queues, settings, self.idempotency_table, self.role),
            construct_variables={QUEUE_ARN_ENV: queues.queue.queue_arn},
            handler_environment=settings.handler_environment,
        )
        #: The function's variables, as :meth:`add_environment` keeps them (the CDK's L2 does not show its own).
        self.environment = environment
        self.function = lambda_.DockerImageFunction(
            self,
            "Function",
            function_name=function_name_of(prefix),
            description=f"SQS consumer of {queues.source_name}: {settings.handler}",
            code=lambda_.DockerImageCode.from_image_asset(
                str(IMAGE_CONTEXT),
                cmd=LAMBDA_COMMAND,
                entrypoint=LAMBDA_ENTRYPOINT,
                **image_asset_options(settings.architecture),
            ),
            architecture=CPU_ARCHITECTURES[settings.architecture],
            memory_size=target.memory_mib,
            timeout=Duration.seconds(target.function_timeout_seconds),
            role=self.role,
            environment=environment,
            log_group=self.log_group,
        )
        self._grant(queues)
        pollers = target.provisioned_pollers
        window = target.batching_window_seconds
        #: The mapping: the source's messages to the function in batches; its uuid is the mapping's Ref.
        self.mapping = lambda_.EventSourceMapping(
            self,
            "Mapping",
            target=self.function,
            event_source_arn=queues.queue.queue_arn,
            batch_size=target.esm_batch_size,
            max_batching_window=Duration.seconds(window) if window > 0 else None,
            max_concurrency=target.maximum_concurrency,
            provisioned_poller_config=None
            if pollers is None
            else lambda_.ProvisionedPollerConfig(minimum_pollers=pollers[0], maximum_pollers=pollers[1]),
            report_batch_item_failures=True,
        )
        # CreateEventSourceMapping checks the role may receive from the source: the mapping waits for its policy.
        self.mapping.node.add_dependency(self.role)

    def add_environment(self, variable: str, value: str) -> None:
        """Add ``variable`` to the function's environment (a source's, once the worker knows its sources)."""
        self.environment[variable] = value
        self.function.add_environment(variable, value)

    def _grant(self, queues: WorkerQueues) -> None:
        """Exactly the mapping's and the function's calls, on this worker's queues, table and log group."""
        grant_consumer(self.role, queues, self.idempotency_table, source_actions=SOURCE_QUEUE_ACTIONS)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(LOG_ACTIONS), resources=[self.log_group.log_group_arn])
        )
