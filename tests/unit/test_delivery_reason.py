"""What the DLQ tool shows for a message SNS or EventBridge moved to the DLQ (their delivery dead-letter queue): no
consumer reason. EventBridge's error attributes become the reason; an SNS delivery shows as a message without one."""

from __future__ import annotations

from typing import Any

from consumer.ops.queues import NO_REASON_KIND, fingerprint
from consumer.ops.records import DELIVERY_REASON_KIND, check_line, message_record

RULE = "arn:aws:events:eu-west-1:123456789012:rule/SqsWorker-prod-placed"


def received(attributes: dict[str, str]) -> dict[str, Any]:
    """A message as ReceiveMessage returns it, with these string attributes."""
    return {
        "MessageId": "m-1",
        "Body": '{"detail": {}}',
        "MessageAttributes": {k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
        "Attributes": {},
    }


def test_an_event_eventbridge_moved_has_its_error_as_the_reason() -> None:
    message = received(
        {
            "ERROR_CODE": "SDK_CLIENT_ERROR",
            "ERROR_MESSAGE": "Access denied to the queue",
            "RULE_ARN": RULE,
            "TARGET_ARN": "arn:aws:sqs:eu-west-1:123456789012:SqsWorker-prod-source",
        }
    )
    record = message_record(message)
    assert record["reason"] == {
        "kind": DELIVERY_REASON_KIND,
        "reason": f"EventBridge did not deliver: SDK_CLIENT_ERROR: Access denied to the queue (rule {RULE})",
    }
    assert fingerprint(record["reason"])[0] == DELIVERY_REASON_KIND
    check_line(record)  # what export writes, import reads


def test_the_consumers_reason_wins_and_a_message_without_any_shows_no_reason() -> None:
    ours = received({"x-dlq-reason": '{"kind": "poison", "reason": "bad"}', "ERROR_CODE": "X"})
    assert message_record(ours)["reason"] == {"kind": "poison", "reason": "bad"}
    # An SNS delivery moved to the DLQ carries no reason of ours and no EventBridge error: shown without a reason.
    record = message_record(received({}))
    assert record["reason"] is None
    assert fingerprint(record["reason"])[0] == NO_REASON_KIND
