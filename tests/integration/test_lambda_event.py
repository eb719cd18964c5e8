"""Messages moto received, through a Lambda SQS event and back (consumer/lambda_event.py): what the runtime makes of
each (Message.from_sqs, with the task role's id and the declared sources as the consumer passes them) is the same as
what it makes of the message received, field for field, on a standard and a FIFO queue, with String, Number and
Binary attributes, a carried receive count, a trace header and an SNS envelope for a body. The same conversion on the
AWS documentation's example events: tests/unit/test_lambda_event.py."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from consumer import Message
from consumer.lambda_event import event_of, record_to_sqs, records_of, sqs_to_record
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE
from consumer.sources import Sources
from consumer.testing import receive_visible, sns_envelope
from tests.integration.conftest import REGION
from tests.integration.support import MOTO_SENDER_ID

TOPIC = "arn:aws:sns:eu-west-1:123456789012:orders"
SOURCES = Sources(sns_envelope_topics=frozenset({TOPIC}))
TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
ATTRIBUTES = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "count": {"DataType": "Number.int", "StringValue": "3"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff"},
}


def queue(sqs: Any, *, fifo: bool = False) -> tuple[str, str]:
    """A new queue (FIFO with content-based deduplication off when ``fifo``): (URL, ARN)."""
    name = f"t-{uuid.uuid4().hex[:12]}" + (".fifo" if fifo else "")
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return str(url), str(arn)


def through_lambda(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """``message`` as its event source mapping delivers it (a record, as the JSON Lambda sends), read back."""
    record = json.loads(json.dumps(sqs_to_record(message, queue_arn=queue_arn, region=REGION)))
    return record_to_sqs(record)


def exposed(message: Message) -> dict[str, Any]:
    """Every field a Message exposes but its attempt (the consumer's, not the message's), and what SQS delivered
    (``sqs_body``, ``sqs_message_attributes``: an SNS envelope's are not compared by ``Message.sns``)."""
    fields = {f.name: getattr(message, f.name) for f in dataclasses.fields(Message) if f.name != "attempt"}
    return {**fields, "sqs_body": message.sqs_body, "sqs_message_attributes": message.sqs_message_attributes}


def read(raw: dict[str, Any]) -> dict[str, Any]:
    """What the runtime makes of ``raw``: with the task role's id (moto's SenderId) and the declared sources."""
    return exposed(Message.from_sqs(raw, own_role_id=MOTO_SENDER_ID, sources=SOURCES))


def test_a_standard_queues_messages_read_the_same_through_a_lambda_event(sqs: Any) -> None:
    """String, Number and Binary attributes, a carried receive count, a trace header, and a message without
    attributes: each message read through its record is the message received, and the Message made of it too."""
    url, arn = queue(sqs)
    sqs.send_message(
        QueueUrl=url,
        MessageBody='{"order": 1}',
        MessageAttributes=ATTRIBUTES,
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}},
    )
    carried = {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "2"}}
    sqs.send_message(QueueUrl=url, MessageBody='{"order": 2}', MessageAttributes=carried)
    sqs.send_message(QueueUrl=url, MessageBody="plain")
    messages = receive_visible(sqs, url)
    assert len(messages) == 3
    for message in messages:
        assert through_lambda(message, arn) == message
        assert read(through_lambda(message, arn)) == read(message)
    seen = {m["Body"]: Message.from_sqs(through_lambda(m, arn), own_role_id=MOTO_SENDER_ID) for m in messages}
    assert seen['{"order": 1}'].message_attributes == ATTRIBUTES
    assert seen['{"order": 1}'].attributes["AWSTraceHeader"] == TRACE
    assert (seen['{"order": 2}'].prior_receives, seen['{"order": 2}'].receive_count) == (2, 3)


def test_a_fifo_queues_messages_read_the_same_through_a_lambda_event(sqs: Any) -> None:
    """On a FIFO queue the group and deduplication ids come through the record, and the messages read the same."""
    url, arn = queue(sqs, fifo=True)
    for index, group in enumerate(("tenant-a", "tenant-b")):
        sqs.send_message(
            QueueUrl=url,
            MessageBody=f"fifo {index}",
            MessageGroupId=group,
            MessageDeduplicationId=f"dedup-{index}",
            MessageAttributes=ATTRIBUTES,
        )
    messages = receive_visible(sqs, url)
    assert len(messages) == 2
    for message in messages:
        assert through_lambda(message, arn) == message
        assert read(through_lambda(message, arn)) == read(message)
    attributes = [Message.from_sqs(through_lambda(m, arn)).attributes for m in messages]
    assert sorted((a["MessageGroupId"], a["MessageDeduplicationId"]) for a in attributes) == [
        ("tenant-a", "dedup-0"),
        ("tenant-b", "dedup-1"),
    ]


def test_an_sns_envelope_is_unwrapped_the_same_through_a_lambda_event(sqs: Any) -> None:
    """A body that is a declared topic's SNS envelope (its Binary attribute base64 inside the JSON) is unwrapped the
    same from the record as from the message received: the published body, attributes and message.sns."""
    url, arn = queue(sqs)
    body = sns_envelope('{"order": 3}', topic_arn=TOPIC, attributes={"blob": b"\x00\xff", "tenant": "acme"})
    sqs.send_message(QueueUrl=url, MessageBody=body)
    (message,) = receive_visible(sqs, url)
    assert read(through_lambda(message, arn)) == read(message)
    unwrapped = Message.from_sqs(through_lambda(message, arn), sources=SOURCES)
    assert unwrapped.body == '{"order": 3}'
    assert unwrapped.sns is not None and unwrapped.sns.topic_arn == TOPIC
    assert unwrapped.message_attributes["blob"] == {"DataType": "Binary", "BinaryValue": b"\x00\xff"}
    assert unwrapped.sqs_body == body


def test_records_of_the_event_of_a_receive_are_its_messages_in_order(sqs: Any) -> None:
    """One receive's messages as one event (the event source mapping's batch): records_of gives them back in the
    order received."""
    url, arn = queue(sqs)
    for index in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"batch {index}", MessageAttributes=ATTRIBUTES)
    messages = receive_visible(sqs, url)
    event = json.loads(json.dumps(event_of(messages, queue_arn=arn, region=REGION)))
    assert records_of(event, queue_arn=arn) == messages
