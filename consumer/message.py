"""What a handler receives, and how it says a message can never succeed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class PoisonMessage(Exception):
    """Raise from a handler when a message can never succeed (bad JSON, failed schema check...).

    The consumer moves it to the DLQ at once, with ``reason`` as an attribute,
    without spending the retry budget.

    Example::

        raise PoisonMessage("body is not JSON: Expecting value at line 1")
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, kw_only=True)
class Message:
    """One SQS message as a handler sees it.

    ``attributes`` are SQS system attributes (``ApproximateReceiveCount``,
    ``SentTimestamp``, ``MessageGroupId``...); ``message_attributes`` are the
    sender's own, as boto3 returns them.
    """

    body: str
    message_id: str
    receipt_handle: str = field(repr=False)
    receive_count: int = 1
    attributes: Mapping[str, str] = field(default_factory=dict)
    message_attributes: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_sqs(cls, raw: Mapping[str, Any]) -> Message:
        """Build from one entry of a boto3 ``receive_message`` response's ``Messages``."""
        attributes = dict(raw.get("Attributes", {}))
        return cls(
            body=raw.get("Body", ""),
            message_id=raw["MessageId"],
            receipt_handle=raw["ReceiptHandle"],
            receive_count=int(attributes.get("ApproximateReceiveCount", "1")),
            attributes=attributes,
            message_attributes=dict(raw.get("MessageAttributes", {})),
        )
