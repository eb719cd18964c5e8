"""The SQS event of AWS Lambda's event source mapping, and boto3's ``receive_message`` messages: each from the other.

A Lambda function fed by an SQS event source mapping gets ``{"Records": [...]}``, one record per message, spelt in
camelCase; https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html shows the event (standard and FIFO queue), and
Powertools for AWS Lambda (Python) reads the same fields (``aws_lambda_powertools/utilities/data_classes/sqs_event.py``
and ``utilities/parser/models/sqs.py`` in github.com/aws-powertools/powertools-lambda-python). The runtime reads
boto3's messages (:meth:`consumer.message.Message.from_sqs`): :func:`records_of` turns an event into them,
:func:`record_to_sqs` one record, and :func:`batch_item_failures` is what the function returns so that Lambda retries
only the messages that failed. :func:`sqs_to_record` and :func:`event_of` go the other way, from messages received with
every attribute to what the event source mapping would deliver for them: the local demo's event source mapping loop,
the simulation and the tests build events with them.

A record, field by field, and what boto3 gives for the same message:

* ``messageId``, ``receiptHandle``, ``body``, ``md5OfBody``: ``MessageId``, ``ReceiptHandle``, ``Body``, ``MD5OfBody``.
* ``attributes``: ``Attributes``, unchanged (``ApproximateReceiveCount``, ``SentTimestamp``, ``SenderId``,
  ``ApproximateFirstReceiveTimestamp``; on a FIFO queue ``MessageGroupId``, ``MessageDeduplicationId`` and
  ``SequenceNumber``; ``AWSTraceHeader`` when the sender traced; any other SQS adds).
* ``messageAttributes``: ``MessageAttributes``, each ``{"dataType", "stringValue" | "binaryValue"}`` as
  ``{"DataType", "StringValue" | "BinaryValue"}``, where Lambda writes a binary value as base64 text and boto3 gives
  bytes. Lambda also writes ``stringListValues`` and ``binaryListValues`` in every attribute, empty: SQS does not
  implement them ("Not implemented. Reserved for future use.",
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_MessageAttributeValue.html). An empty
  list is left out, as moto's ``receive_message`` leaves it out (tests/integration/test_lambda_event.py compares
  whole messages); one with values is kept, binary ones decoded to bytes.
* ``md5OfMessageAttributes``: ``MD5OfMessageAttributes``, null in a record without message attributes, where a
  received message has neither it nor ``MessageAttributes``.
* ``eventSource`` (``"aws:sqs"``), ``eventSourceARN`` (the queue's ARN) and ``awsRegion`` are Lambda's own: a received
  message has no place for them. :func:`record_to_sqs` refuses a record of another source, :func:`records_of` a
  record of another queue.

Standard library only (tests/unit/test_architecture.py): a shape conversion needs neither boto3 nor the CDK.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

#: What a record of an SQS event source mapping says its ``eventSource`` is.
EVENT_SOURCE = "aws:sqs"
#: The fields of a record without which there is no message to hand a handler and settle, each a string.
REQUIRED_RECORD_FIELDS = ("messageId", "receiptHandle", "body")

_MISSING = object()


def _shown(value: object) -> str:
    return "missing" if value is _MISSING else repr(value)


def record_to_sqs(record: Mapping[str, Any]) -> dict[str, Any]:
    """One record of a Lambda SQS event as the message boto3's ``receive_message`` returns for it, with every
    attribute: what :meth:`consumer.message.Message.from_sqs` reads.

    Raises ValueError naming the field when the record lacks ``messageId``, ``receiptHandle`` or ``body`` (or one is
    not a string), when its ``eventSource`` is not ``"aws:sqs"``, or when a message attribute has no ``dataType`` or
    a ``binaryValue`` that is not base64.

    Example::

        message = Message.from_sqs(record_to_sqs(event["Records"][0]))
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"a Lambda SQS record must be an object: {type(record).__name__}")
    for name in REQUIRED_RECORD_FIELDS:
        value = record.get(name, _MISSING)
        if not isinstance(value, str):
            raise ValueError(f'"{name}" must be a string in a Lambda SQS record: {_shown(value)}')
    source = record.get("eventSource", _MISSING)
    if source != EVENT_SOURCE:
        raise ValueError(f'"eventSource" must be "{EVENT_SOURCE}" in a Lambda SQS record: {_shown(source)}')
    message: dict[str, Any] = {"MessageId": record["messageId"], "ReceiptHandle": record["receiptHandle"]}
    if record.get("md5OfBody") is not None:
        message["MD5OfBody"] = record["md5OfBody"]
    message["Body"] = record["body"]
    message["Attributes"] = dict(record.get("attributes") or {})
    if record.get("md5OfMessageAttributes") is not None:
        message["MD5OfMessageAttributes"] = record["md5OfMessageAttributes"]
    attributes = {
        name: _attribute_to_sqs(name, value) for name, value in (record.get("messageAttributes") or {}).items()
    }
    if attributes:
        message["MessageAttributes"] = attributes
    return message


def _attribute_to_sqs(name: str, attribute: Any) -> dict[str, Any]:
    """A record's message attribute in boto3's shape: binary values decoded, empty (unimplemented) lists left out."""
    data_type = attribute.get("dataType", _MISSING) if isinstance(attribute, Mapping) else _MISSING
    if not isinstance(data_type, str):
        raise ValueError(f'"dataType" of message attribute {name!r} must be a string: {_shown(data_type)}')
    converted: dict[str, Any] = {"DataType": data_type}
    if attribute.get("stringValue") is not None:
        converted["StringValue"] = attribute["stringValue"]
    if attribute.get("binaryValue") is not None:
        converted["BinaryValue"] = _decoded(name, "binaryValue", attribute["binaryValue"])
    if attribute.get("stringListValues"):
        converted["StringListValues"] = list(attribute["stringListValues"])
    if attribute.get("binaryListValues"):
        converted["BinaryListValues"] = [_decoded(name, "binaryListValues", v) for v in attribute["binaryListValues"]]
    return converted


def _decoded(name: str, field: str, value: Any) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ValueError(f'"{field}" of message attribute {name!r} must be base64 text: {value!r}') from None


def sqs_to_record(message: Mapping[str, Any], *, queue_arn: str, region: str) -> dict[str, Any]:
    """What the event source mapping of the queue ``queue_arn`` (in ``region``) delivers for ``message``, a message
    boto3's ``receive_message`` returned with every attribute (``MessageSystemAttributeNames=["All"]``, or the older
    ``AttributeNames=["All"]``, and ``MessageAttributeNames=["All"]``). The inverse of :func:`record_to_sqs`.

    Binary attribute values become base64 text (the record is JSON, as Lambda delivers it); every attribute gets the
    empty ``stringListValues`` and ``binaryListValues`` Lambda writes (or the message's, should SQS ever fill them).

    Example::

        record = sqs_to_record(received, queue_arn="arn:aws:sqs:eu-west-1:123456789012:orders", region="eu-west-1")
    """
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: _attribute_to_record(attribute) for name, attribute in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "md5OfMessageAttributes": message.get("MD5OfMessageAttributes"),
        "eventSource": EVENT_SOURCE,
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def _attribute_to_record(attribute: Mapping[str, Any]) -> dict[str, Any]:
    """A received message attribute as a record spells it: binary values base64-encoded, both lists always there."""
    record: dict[str, Any] = {}
    if "StringValue" in attribute:
        record["stringValue"] = attribute["StringValue"]
    if "BinaryValue" in attribute:
        record["binaryValue"] = _encoded(attribute["BinaryValue"])
    record["stringListValues"] = list(attribute.get("StringListValues", []))
    record["binaryListValues"] = [_encoded(value) for value in attribute.get("BinaryListValues", [])]
    record["dataType"] = attribute["DataType"]
    return record


def _encoded(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def event_of(messages: Iterable[Mapping[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    """The event the event source mapping of ``queue_arn`` delivers for ``messages``: ``{"Records": [...]}``, one
    :func:`sqs_to_record` each, in the order given.

    Example::

        event = event_of(received, queue_arn=queue_arn, region="eu-west-1")
        response = lambda_handler(event, context)
    """
    return {"Records": [sqs_to_record(message, queue_arn=queue_arn, region=region) for message in messages]}


def records_of(event: Mapping[str, Any], *, queue_arn: str) -> list[dict[str, Any]]:
    """Every record of a Lambda SQS event as the message boto3 would have received (:func:`record_to_sqs`), in order.

    Raises ValueError when the event has no ``Records`` list, when a record cannot be read (:func:`record_to_sqs`), or
    when a record's ``eventSourceARN`` is not ``queue_arn``, naming the ARN found: the runtime would settle a message
    of another queue as one of its own queue, sending a copy of it to this queue or moving it to this queue's DLQ.
    Raising fails the invocation, so Lambda makes the whole batch visible again in the queues it came from.

    Example::

        messages = [Message.from_sqs(raw) for raw in records_of(event, queue_arn=queue_arn)]
    """
    records = event.get("Records", _MISSING)
    if not isinstance(records, list):
        raise ValueError(f'"Records" must be a list in a Lambda SQS event: {_shown(records)}')
    messages = []
    for index, record in enumerate(records):
        message = record_to_sqs(record)
        found = record.get("eventSourceARN", _MISSING)
        if found != queue_arn:
            raise ValueError(
                f'"eventSourceARN" must be the queue\'s, {queue_arn}, in every record: record {index}'
                f" ({message['MessageId']}) is from {_shown(found)}"
            )
        messages.append(message)
    return messages


def batch_item_failures(message_ids: Iterable[str]) -> dict[str, list[dict[str, str]]]:
    """The response that has Lambda make only these messages visible again and delete the rest of the batch:
    ``{"batchItemFailures": [{"itemIdentifier": <message id>}, ...]}``, in the order given, each id once.

    The event source mapping reads it only with ``ReportBatchItemFailures`` among its ``FunctionResponseTypes``; an
    empty list deletes the whole batch. Lambda treats the whole batch as failed when an ``itemIdentifier`` is empty,
    null, or not the id of a message in the event
    (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html, "Success and failure conditions"), so
    an empty id or one that is not a string raises ValueError here, and so does a single string passed for the
    iterable (its characters would be reported as ids). On a FIFO queue, report the first failed message and every
    message after it in the batch, to keep each group's order (the same page).

    Example::

        return batch_item_failures(m.message_id for m in failed)
    """
    if isinstance(message_ids, str):
        raise ValueError(f'"message_ids" must be an iterable of message ids, not one string: {message_ids!r}')
    ids = list(dict.fromkeys(message_ids))
    wrong = next((i for i in ids if not isinstance(i, str) or not i), _MISSING)
    if wrong is not _MISSING:
        raise ValueError(
            '"message_ids" must be non-empty strings (Lambda fails the whole batch on an empty or null itemIdentifier):'
            f" {wrong!r}"
        )
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in ids]}
