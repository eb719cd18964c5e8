"""What SQS must hold for a queue, in units, and its spelling in CreateQueue's ``Attributes``.

:meth:`consumer.contract.WorkerContract.queue_attributes` derives them. Standard library only, like the contract
(tests/unit/test_architecture.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from consumer.errors import ContractError

__all__ = ["QueueAttributes", "QueuePairAttributes"]


@dataclass(frozen=True, kw_only=True)
class QueueAttributes:
    """One queue's attributes, in units, with :meth:`to_sqs` spelling them as SQS's CreateQueue does.

    ``None`` leaves SQS's default: the DLQ has no visibility timeout or redrive policy of its own,
    and a benchmark queue sets only what it measures.
    """

    visibility_timeout_seconds: int | None = None
    message_retention_seconds: int | None = None
    maximum_message_bytes: int | None = None
    fifo: bool = False
    content_based_deduplication: bool = False
    #: The redrive policy's ``maxReceiveCount`` (towards the DLQ named when calling :meth:`to_sqs`).
    redrive_max_receive_count: int | None = None

    def to_sqs(self, *, dead_letter_target_arn: str | None = None) -> dict[str, str]:
        """CreateQueue's ``Attributes``; a redrive policy needs the DLQ's ARN, known once the DLQ exists."""
        numbers = {
            "VisibilityTimeout": self.visibility_timeout_seconds,
            "MessageRetentionPeriod": self.message_retention_seconds,
            "MaximumMessageSize": self.maximum_message_bytes,
        }
        attributes = {name: str(value) for name, value in numbers.items() if value is not None}
        if self.fifo:  # SQS's FIFO attributes exist on FIFO queues only
            attributes["FifoQueue"] = "true"
            attributes["ContentBasedDeduplication"] = "true" if self.content_based_deduplication else "false"
        if self.redrive_max_receive_count is not None:
            if not dead_letter_target_arn:
                raise ContractError(
                    "dead_letter_target_arn",
                    "must name the DLQ of a queue with a redrive policy",
                    dead_letter_target_arn,
                )
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": dead_letter_target_arn, "maxReceiveCount": self.redrive_max_receive_count}
            )
        return attributes


@dataclass(frozen=True)
class QueuePairAttributes:
    """The source queue's attributes and its DLQ's (:meth:`WorkerContract.queue_attributes`)."""

    source: QueueAttributes
    dead_letter: QueueAttributes
