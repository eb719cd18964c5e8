"""The DLQ tool's message records: the JSON line ``export`` writes and ``import`` reads, the checks a line
(and a folded ``x-original-attributes``) passes before anything is sent, and the send entries built from them.

A line is ``{"message_id", "body", "message_attributes", "attributes", "reason"}``: message attributes as
``{name: {"DataType", "StringValue" | "BinaryValue" (base64)}}``, SQS's system attributes as strings, the
consumer's reason record or null. Other keys (``peek --json`` adds ``fingerprint``) are ignored.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from consumer.limits import SQS_MAX_BATCH, SQS_MAX_MESSAGE_ATTRIBUTES
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE
from consumer.runtime.dead_letter import (
    ORIGINAL_ATTRIBUTES,
    REASON_ATTRIBUTE,
    attributes_from_json,
    attributes_to_json,
    read_reason_safely,
)

T = TypeVar("T")

#: SQS's SendMessageBatch payload limit is larger today; 256 KiB is safe everywhere.
MAX_BATCH_BYTES = 262_144
SHOWN_VALUE_CHARS = 80
_ATTRIBUTES_SHAPE = "an object of attribute name to {DataType, StringValue or BinaryValue}"
#: SQS's rules for a message attribute's name and data type (SendMessage's MessageAttribute.N.Name / DataType).
_ATTRIBUTE_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!.*\.\Z)(?!(?i:aws\.|amazon\.))[A-Za-z0-9_.-]{1,256}\Z")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[^\s]+)?\Z")
#: The characters SQS accepts in a body or a string value (XML 1.0's); anything else fails the send.
_NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class RecordError(ValueError):
    """A field of a DLQ record breaks a rule; the message names the field, the rule and the value (as JSON)."""

    def __init__(self, field: str, rule: str, value: object) -> None:
        self.field, self.rule, self.value = field, rule, value
        super().__init__(f'"{field}" {rule}: {shown(value)}')


def shown(value: object) -> str:
    """``value`` as the file has it (JSON), cut to SHOWN_VALUE_CHARS: enough to find it, not a whole body."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 1] + "…"


def _check_text(field: str, value: str) -> None:
    bad = _NOT_SQS_TEXT.search(value)
    if bad:
        raise RecordError(field, f"must hold only characters SQS accepts; character {bad.start() + 1} is not", bad[0])


def check_message_attributes(value: object, field: str) -> None:
    """Raise :class:`RecordError` unless ``value`` is message attributes as JSON that SQS would accept.

    Binary values must be strict base64 (``validate=True``): the lenient decoder drops characters it
    does not know and would send other bytes than the file holds.
    """
    if not isinstance(value, dict):
        raise RecordError(field, f"must be {_ATTRIBUTES_SHAPE}", value)
    if len(value) > SQS_MAX_MESSAGE_ATTRIBUTES:
        raise RecordError(field, f"must hold at most {SQS_MAX_MESSAGE_ATTRIBUTES} attributes", sorted(value))
    for name, attribute in value.items():
        where = f"{field}.{name}"
        if not _ATTRIBUTE_NAME.match(name):
            raise RecordError(
                field, "must name attributes with 1-256 of A-Z a-z 0-9 _ - . (no AWS./Amazon. prefix, no ..)", name
            )
        if not isinstance(attribute, dict) or not isinstance(attribute.get("DataType"), str):
            raise RecordError(where, "must be an object with a DataType", attribute)
        unknown = sorted(set(attribute) - {"DataType", "StringValue", "BinaryValue"})
        if unknown:
            raise RecordError(where, "may hold only DataType, StringValue and BinaryValue", unknown)
        data_type = attribute["DataType"]
        if not _DATA_TYPE.match(data_type) or len(data_type) > 256:
            raise RecordError(f"{where}.DataType", "must be String, Number or Binary (optionally .label)", data_type)
        kind = data_type.split(".", 1)[0]
        wanted, other = ("BinaryValue", "StringValue") if kind == "Binary" else ("StringValue", "BinaryValue")
        if wanted not in attribute or other in attribute:
            raise RecordError(where, f"must have a {wanted} (DataType {data_type})", attribute)
        payload = attribute[wanted]
        if not isinstance(payload, str):
            raise RecordError(f"{where}.{wanted}", "must be a string", payload)
        if kind == "Binary":
            try:
                base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                raise RecordError(f"{where}.BinaryValue", "must be strict base64", payload) from None
            continue
        _check_text(f"{where}.StringValue", payload)
        if kind == "Number" and not _is_number(payload):
            raise RecordError(f"{where}.StringValue", "must be a number (DataType Number)", payload)


def _is_number(text: str) -> bool:
    try:
        return decimal.Decimal(text).is_finite()
    except decimal.InvalidOperation:
        return False


def check_line(record: object) -> Mapping[str, Any]:
    """Raise :class:`RecordError` unless ``record`` (one parsed line) is an export line ``import`` can send."""
    if not isinstance(record, dict):
        raise RecordError("line", "must be a JSON object", record)
    body = record.get("body")
    if not isinstance(body, str) or not body:
        raise RecordError("body", "must be a non-empty string", body)
    _check_text("body", body)
    if "message_id" in record and not isinstance(record["message_id"], str):
        raise RecordError("message_id", "must be a string", record["message_id"])
    # null is how an empty mapping may have been written; anything else must have the shape.
    message_attributes = record.get("message_attributes")
    check_message_attributes({} if message_attributes is None else message_attributes, "message_attributes")
    attributes = {} if record.get("attributes") is None else record["attributes"]
    if not isinstance(attributes, dict):
        raise RecordError("attributes", "must be an object of SQS attribute name to string", attributes)
    for name, value in attributes.items():
        if not isinstance(value, str):
            raise RecordError(f"attributes.{name}", "must be a string", value)
    reason = record.get("reason")
    if reason is not None and not isinstance(reason, dict):
        raise RecordError("reason", "must be an object or null", reason)
    dedup = (reason or {}).get("original_deduplication_id")
    if dedup is not None and not isinstance(dedup, str):
        raise RecordError("reason.original_deduplication_id", "must be a string or null", dedup)
    return record


def parse_json(text: str, field: str) -> object:
    """``text`` parsed as JSON; :class:`RecordError` saying where it stops being JSON otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordError(field, f"must be JSON ({error.msg} at character {error.pos + 1})", text) from None


def unfold(folded: str) -> dict[str, Any]:
    """The original attributes the consumer folded into ``x-original-attributes``, checked (RecordError if not)."""
    originals = parse_json(folded, ORIGINAL_ATTRIBUTES)
    check_message_attributes(originals, ORIGINAL_ATTRIBUTES)
    assert isinstance(originals, dict)  # checked above
    return attributes_from_json(originals)


def original_dedup_id(reason: Mapping[str, Any] | None) -> str | None:
    """The deduplication id the message had in the source, from the consumer's reason record (if a string)."""
    value = (reason or {}).get("original_deduplication_id")
    return value if isinstance(value, str) else None


def source_attributes(message_attributes: Mapping[str, Any], *, keep_reason: bool) -> dict[str, Any]:
    """The attributes a message goes back to the source with: reason dropped, folded originals unfolded.

    With ``keep_reason`` the reason stays; folded originals are then unfolded
    only if they and the reason fit in SQS's 10 attributes. A carried receive
    count (on a copy SQS's own backstop redrive moved) is dropped: a redrive starts a new budget
    (SQS's native move task, which does not come through here, keeps it). Malformed folded
    originals raise :class:`RecordError`.
    """
    attributes = attributes_from_json(attributes_to_json(message_attributes))
    attributes.pop(PRIOR_RECEIVES_ATTRIBUTE, None)
    reason = attributes.pop(REASON_ATTRIBUTE, None)
    folded = attributes.get(ORIGINAL_ATTRIBUTES)
    if folded is not None:
        originals = unfold(str(folded.get("StringValue", "")))
        if not keep_reason or reason is None or len(originals) + 1 <= SQS_MAX_MESSAGE_ATTRIBUTES:
            del attributes[ORIGINAL_ATTRIBUTES]
            attributes = {**originals, **attributes}
    if keep_reason and reason is not None:
        attributes[REASON_ATTRIBUTE] = reason
    return attributes


#: The reason kind of an event EventBridge moved to the DLQ (its rule's target is the worker's queue).
DELIVERY_REASON_KIND = "delivery"
#: The message attributes EventBridge adds to an event it moves to a target's dead-letter queue.
#: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html
EVENTBRIDGE_ERROR_CODE, EVENTBRIDGE_ERROR_MESSAGE, EVENTBRIDGE_RULE_ARN = "ERROR_CODE", "ERROR_MESSAGE", "RULE_ARN"


def delivery_reason(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The reason of an event EventBridge gave up delivering to the queue and moved to the DLQ (no consumer reason,
    EventBridge's ``ERROR_CODE``), or None. An SNS delivery moved there shows without a reason (none is read from it)."""
    attributes = message.get("MessageAttributes", {})

    def text(name: str) -> str:
        return str(attributes.get(name, {}).get("StringValue") or "")

    code = text(EVENTBRIDGE_ERROR_CODE)
    if not code:
        return None
    reason = (
        f"EventBridge did not deliver: {code}: {text(EVENTBRIDGE_ERROR_MESSAGE)} (rule {text(EVENTBRIDGE_RULE_ARN)})"
    )
    return {"kind": DELIVERY_REASON_KIND, "reason": reason}


def message_record(message: Mapping[str, Any]) -> dict[str, Any]:
    """One message as a JSON object: the line ``export`` writes, ``import`` reads and ``peek --json`` prints. A
    message without the consumer's reason that EventBridge moved there has EventBridge's error as its reason."""
    return {
        "message_id": message["MessageId"],
        "body": message.get("Body", ""),
        "message_attributes": attributes_to_json(message.get("MessageAttributes", {})),
        "attributes": dict(message.get("Attributes", {})),
        "reason": read_reason_safely(message) or delivery_reason(message),
    }


def entry_bytes(entry: Mapping[str, Any]) -> int:
    size = len(entry["MessageBody"].encode())
    for name, value in entry.get("MessageAttributes", {}).items():
        payload = value.get("StringValue") or value.get("BinaryValue") or b""
        size += len(name.encode()) + len(value["DataType"].encode()) + len(payload)
    return size


def size_batches(entries: list[T], size: Callable[[T], int]) -> Iterator[list[T]]:
    """Consecutive batches of at most SQS_MAX_BATCH entries and :data:`MAX_BATCH_BYTES` (one oversized entry goes alone)."""
    batch: list[T] = []
    total = 0
    for entry in entries:
        entry_size = size(entry)
        if batch and (len(batch) == SQS_MAX_BATCH or total + entry_size > MAX_BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(entry)
        total += entry_size
    if batch:
        yield batch
