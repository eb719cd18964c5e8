"""Start-up drift check: the live queue must match the worker contract before any message is received.

The stack sets the queue's visibility timeout, redrive policy and retention
from the contract; the consumer re-derives the same values from its own copy
of the contract. If the two disagree (the image and the stack were deployed
from different declarations, or someone edited the queue by hand), the
consumer must not run: a visibility timeout shorter than the handler's
attempt means duplicates, a missing redrive policy means poison messages loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from consumer.contract import WorkerContract
from consumer.queue_attributes import QueueAttributes
from consumer.runtime.aws_errors import error_code, is_missing_queue

if TYPE_CHECKING:  # the stubs are a development dependency; the image never carries them
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeFilterType

CHECKED_ATTRIBUTES: tuple[QueueAttributeFilterType, ...] = (
    "VisibilityTimeout",
    "RedrivePolicy",
    "MessageRetentionPeriod",
    "FifoQueue",
    "QueueArn",
)
REDEPLOY = "redeploy the stack (cdk deploy -c env=...) or change the handler's @worker declaration"


class StartupError(Exception):
    """The consumer cannot start: the message says what is wrong and how to fix it."""


class QueueDriftError(StartupError):
    """The live queue differs from the contract; ``differences`` lists each one."""

    def __init__(self, queue_url: str, differences: list[str]) -> None:
        self.queue_url = queue_url
        self.differences = differences
        lines = "\n".join(f"  - {d}" for d in differences)
        super().__init__(f"queue {queue_url} does not match the worker contract:\n{lines}\nFix: {REDEPLOY}.")


@dataclass(frozen=True)
class QueueBinding:
    """What the check confirmed: the source queue's ARN and its DLQ's ARN."""

    queue_arn: str
    dead_letter_queue_arn: str


def queue_name_from_url(url: str) -> tuple[str, str]:
    """(account, queue name) from a queue URL, AWS's or a local endpoint's."""
    parts = [p for p in urlparse(url).path.split("/") if p]
    if len(parts) != 2:
        raise StartupError(f'"queue URL" must look like https://sqs.<region>.amazonaws.com/<account>/<name>: {url!r}')
    return parts[0], parts[1]


def check_queue(
    client: SQSClient,
    *,
    queue_url: str,
    dlq_url: str | None,
    contract: WorkerContract,
    check_retention: bool = True,
    expected: QueueAttributes | None = None,
) -> QueueBinding:
    """Compare the live source queue with ``contract``; raise :class:`QueueDriftError` on any difference.

    ``dlq_url`` None (a local run without the stack's environment) skips the DLQ
    identity check; ``check_retention`` False skips retention, which only the
    stack's environment knows (the handler does not declare it). ``expected``: the source queue's attributes the
    contract derives for the target (the container's, ``contract.queue_attributes().source``, when None; a Lambda
    worker's are ``LambdaTarget.queue_attributes().source``).

    Needs only ``sqs:GetQueueAttributes`` on the source queue. Errors reaching
    the queue (missing, access denied, bad credentials, unreachable endpoint)
    become :class:`StartupError` naming the operation and the queue.
    """
    try:
        attributes = client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(CHECKED_ATTRIBUTES))[
            "Attributes"
        ]
    except ClientError as error:
        if is_missing_queue(error):
            raise StartupError(
                f"GetQueueAttributes on {queue_url}: the queue does not exist (QUEUE_URL is wrong, or the"
                " stack is not deployed in this account and region); the consumer never creates queues"
            ) from error
        raise StartupError(f"GetQueueAttributes on {queue_url} failed: {error_code(error)}: {error}") from error
    except EndpointConnectionError as error:
        raise StartupError(
            f"GetQueueAttributes on {queue_url} failed: {error}: nothing answers there; check QUEUE_URL and"
            " AWS_ENDPOINT_URL, and for a local run that `python -m consumer local up` is serving"
        ) from error
    except BotoCoreError as error:
        raise StartupError(f"GetQueueAttributes on {queue_url} failed: {error}") from error

    if expected is None:
        expected = contract.queue_attributes().source
    differences = []
    visibility = int(attributes.get("VisibilityTimeout", "-1"))
    if visibility != expected.visibility_timeout_seconds:
        differences.append(
            f"VisibilityTimeout is {visibility} s, the contract derives {expected.visibility_timeout_seconds} s"
            f" from max_duration {contract.max_duration_seconds} s"
        )
    retention = int(attributes.get("MessageRetentionPeriod", "-1"))
    if check_retention and retention != expected.message_retention_seconds:
        differences.append(
            f"MessageRetentionPeriod is {retention} s, the contract says {expected.message_retention_seconds} s"
        )
    fifo = attributes.get("FifoQueue", "false") == "true"
    if fifo != expected.fifo:
        differences.append(f"FifoQueue is {str(fifo).lower()}, the contract says {str(expected.fifo).lower()}")

    raw_redrive = attributes.get("RedrivePolicy")
    dlq_arn = ""
    if not raw_redrive:
        differences.append("the queue has no RedrivePolicy: failing messages would never reach the DLQ")
    else:
        redrive = json.loads(raw_redrive)
        dlq_arn = str(redrive.get("deadLetterTargetArn", ""))
        if int(redrive.get("maxReceiveCount", -1)) != expected.redrive_max_receive_count:
            differences.append(
                f"RedrivePolicy maxReceiveCount is {redrive.get('maxReceiveCount')}, the contract derives"
                f" {expected.redrive_max_receive_count} (max_receive_count {contract.max_receive_count} + backstop)"
            )
        if dlq_url is not None:
            dlq_account, dlq_name = queue_name_from_url(dlq_url)
            if not dlq_arn.endswith(f":{dlq_account}:{dlq_name}"):
                differences.append(f"RedrivePolicy sends to {dlq_arn}, but DLQ_URL is {dlq_url}")
    if differences:
        raise QueueDriftError(queue_url, differences)
    return QueueBinding(queue_arn=attributes["QueueArn"], dead_letter_queue_arn=dlq_arn)
