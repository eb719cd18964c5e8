"""Moving a message to the DLQ ourselves: body, attributes and FIFO ids kept, a reason added.

SQS's own redrive moves a message only after ``maxReceiveCount`` receives and
says nothing about why. A message the handler declares poison goes now, without
spending the retry budget, and carries the reason for whoever reads the DLQ.
The caller deletes it from the source only after this send succeeded.

This module is the one home of the DLQ message format: the reason attribute, the folded original
attributes, how a message goes in (:func:`send_parameters`) and how it is read and sent back out
(:func:`read_reason`, :func:`read_reason_safely`, :func:`send_entry`, used by the DLQ tool).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from consumer.limits import DLQ_REASON_HEADROOM_BYTES, SQS_MAX_DELAY_SECONDS, SQS_MAX_MESSAGE_ATTRIBUTES
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE, Message

REASON_ATTRIBUTE = "x-dlq-reason"
ORIGINAL_ATTRIBUTES = "x-original-attributes"
MAX_REASON_CHARS = 1_000
#: The reason attribute's JSON value at most, in UTF-8 bytes: with its name and type it stays within
#: the headroom the source queue keeps below SQS's message size limit, so a message of any size the
#: source accepts can be moved to the DLQ with its reason.
MAX_REASON_RECORD_BYTES = DLQ_REASON_HEADROOM_BYTES // 2


def reason_record(
    message: Message, *, reason: str, kind: str, source_queue_url: str, failed_at: float | None = None
) -> dict[str, Any]:
    """What the DLQ reader needs: why, from where, which message, after how many receives; ``failed_at`` is when
    (seconds since the epoch, the consumer's clock; now when None)."""
    return {
        "kind": kind,  # "poison" | "non_retryable" | "exhausted" | "unattempted"
        "reason": reason[:MAX_REASON_CHARS],
        "source_queue_url": source_queue_url,
        "original_message_id": message.message_id,
        "receive_count": message.receive_count,
        "original_deduplication_id": message.attributes.get("MessageDeduplicationId"),
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(failed_at)),
    }


def send_parameters(
    message: Message, *, dlq_url: str, reason: str, kind: str, source_queue_url: str, failed_at: float | None = None
) -> dict[str, Any]:
    """Arguments for ``sqs.send_message`` that move ``message`` to the DLQ intact (``failed_at``: as
    :func:`reason_record`)."""
    record = reason_record(message, reason=reason, kind=kind, source_queue_url=source_queue_url, failed_at=failed_at)
    attributes = attributes_from_json(message.sqs_message_attributes)  # as delivered: an SNS envelope's stay wrapped
    # The receives spent are in the reason record; a message redriven from the DLQ starts a new budget.
    attributes.pop(PRIOR_RECEIVES_ATTRIBUTE, None)
    if len(attributes) + 1 > SQS_MAX_MESSAGE_ATTRIBUTES:
        # No room for the reason: keep every original attribute, folded into one JSON attribute.
        attributes = {
            ORIGINAL_ATTRIBUTES: {"DataType": "String", "StringValue": json.dumps(attributes_to_json(attributes))}
        }
    attributes[REASON_ATTRIBUTE] = {"DataType": "String", "StringValue": _bounded_json(record)}
    params: dict[str, Any] = {"QueueUrl": dlq_url, "MessageBody": message.sqs_body, "MessageAttributes": attributes}
    group = message.attributes.get("MessageGroupId")
    if group is not None:  # FIFO: the order key; standard: the tenant (fair queues)
        params["MessageGroupId"] = group
    if group is not None and dlq_url.endswith(".fifo"):  # SQS takes a deduplication id on FIFO queues only
        # Deduplicate on this delivery's MessageId: a double move of the same message (crash
        # between send and delete) is absorbed by SQS's 5 min window, but a message redriven
        # and failing again gets a new MessageId, so its second move is never silently dropped
        # (the original dedup id would be, if reused within 5 min, and the message then lost).
        params["MessageDeduplicationId"] = message.message_id
    return _with_trace(params, message.attributes.get("AWSTraceHeader"))


def _bounded_json(record: dict[str, Any]) -> str:
    """``record`` as JSON of at most MAX_REASON_RECORD_BYTES, shortening its reason text if needed.

    1,000 characters can be far more bytes once escaped (``\\uXXXX`` per non-ASCII character).
    """
    value, reason = json.dumps(record), record["reason"]
    while len(value.encode("utf-8")) > MAX_REASON_RECORD_BYTES and reason:
        reason = reason[: len(reason) // 2]
        value = json.dumps({**record, "reason": reason + " [truncated]"})
    return value


def can_carry_receives(message: Message) -> bool:
    """Whether a copy of ``message`` can carry its spent receives (SQS allows 10 attributes)."""
    attributes = message.sqs_message_attributes
    return PRIOR_RECEIVES_ATTRIBUTE in attributes or len(attributes) < SQS_MAX_MESSAGE_ATTRIBUTES


def requeue_parameters(
    message: Message, *, queue_url: str, delay_seconds: int = 0, attempted: bool = False
) -> dict[str, Any]:
    """Arguments for ``sqs.send_message`` that put a fresh copy of ``message`` on a standard queue.

    Same body, attributes and tenant (MessageGroupId) as SQS delivered them (an SNS envelope stays one, see
    :attr:`Message.sqs_body`), so the same idempotency key; SQS gives it a new
    MessageId and a receive count starting again at 1. So that the copy's retry
    budget is what the message had left, the copy carries ``x-prior-receives``:
    the receives spent on attempts so far, counting this one only if it was
    ``attempted`` (when :func:`can_carry_receives`; otherwise the count restarts).
    """
    attributes = attributes_from_json(message.sqs_message_attributes)
    if can_carry_receives(message):
        spent = message.receive_count - (0 if attempted else 1)
        attributes[PRIOR_RECEIVES_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(spent)}
    params: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": message.sqs_body, "MessageAttributes": attributes}
    group = message.attributes.get("MessageGroupId")
    if group is not None:
        # On a standard queue the group id is the message's tenant (fair queues): a copy without it would be served
        # and logged as nobody's. https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html
        params["MessageGroupId"] = group
    if delay_seconds:
        params["DelaySeconds"] = min(delay_seconds, SQS_MAX_DELAY_SECONDS)
    return _with_trace(params, message.attributes.get("AWSTraceHeader"))


def _with_trace(params: dict[str, Any], trace: str | None) -> dict[str, Any]:
    """Carry the X-Ray trace header along, so the move or copy stays in the message's trace."""
    if trace:
        params["MessageSystemAttributes"] = {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}
    return params


def _reason_text(message_attributes: Mapping[str, Any]) -> str | None:
    return message_attributes.get(REASON_ATTRIBUTE, {}).get("StringValue") or None


def read_reason(message_attributes: Mapping[str, Any]) -> dict[str, Any] | None:
    """The reason record a DLQ message carries, or None (moved by SQS's redrive); a malformed one raises."""
    raw = _reason_text(message_attributes)
    return json.loads(raw) if raw else None


def read_reason_safely(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The reason record of a received DLQ message, never raising: whoever reads a DLQ must get past any record.

    None when SQS's own redrive moved the message; ``{"kind": "unknown", "reason": <the text>}`` when the
    attribute is not a JSON object (someone else wrote it).
    """
    raw = _reason_text(message.get("MessageAttributes", {}))
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return {"kind": "unknown", "reason": raw}
    return record if isinstance(record, dict) else {"kind": "unknown", "reason": raw}


def send_entry(
    entry_id: str,
    *,
    body: str,
    message_attributes: Mapping[str, Any],
    attributes: Mapping[str, Any],
    fallback_dedup_id: str,
    fifo: bool,
    original_dedup_id: str | None = None,
) -> dict[str, Any]:
    """A SendMessageBatch entry keeping body, attributes, group id (a tenant on a standard queue), the FIFO
    deduplication id and the trace header.

    The DLQ tool's way back out of the DLQ (redrive, import), beside the consumer's way in
    (:func:`send_parameters`), so that both read and write one format.
    ``original_dedup_id`` (from the consumer's reason record) restores the id the message had in
    the source: the consumer moves FIFO messages to the DLQ under their delivery's MessageId.
    """
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": body}
    if message_attributes:
        entry["MessageAttributes"] = dict(message_attributes)
    if "MessageGroupId" in attributes:  # FIFO: the order key; standard: the tenant (fair queues)
        entry["MessageGroupId"] = attributes["MessageGroupId"]
    if fifo:
        entry["MessageDeduplicationId"] = original_dedup_id or attributes.get(
            "MessageDeduplicationId", fallback_dedup_id
        )
    return _with_trace(entry, attributes.get("AWSTraceHeader"))


def attributes_to_json(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Message attributes as JSON: binary values base64, boto3's empty list fields dropped."""
    return _attributes(attributes, lambda b: base64.b64encode(b).decode() if isinstance(b, bytes) else b)


def attributes_from_json(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """What SendMessage takes, from :func:`attributes_to_json` output or from what boto3 received."""
    return _attributes(attributes, lambda b: base64.b64decode(b) if isinstance(b, str) else b)


def _attributes(attributes: Mapping[str, Any], binary: Callable[[Any], Any]) -> dict[str, Any]:
    """Each attribute's DataType and value, its BinaryValue passed through ``binary``."""
    out = {}
    for name, value in attributes.items():
        entry: dict[str, Any] = {"DataType": value["DataType"]}
        if "StringValue" in value:
            entry["StringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            entry["BinaryValue"] = binary(value["BinaryValue"])
        out[name] = entry
    return out
