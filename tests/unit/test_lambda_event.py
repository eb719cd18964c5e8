"""consumer/lambda_event.py without a queue: the AWS documentation's example events read as boto3's messages, binary
attributes, FIFO ids and the trace header carried both ways, the refusals with their whole messages, and the partial
batch response. The same round trip on messages moto received: tests/integration/test_lambda_event.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from consumer import Message
from consumer.lambda_event import batch_item_failures, event_of, record_to_sqs, records_of, sqs_to_record
from consumer.runtime.dead_letter import requeue_parameters

#: The example events of https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html ("Example Amazon SQS message event
#: (standard queue)" and "(FIFO queue)"), verbatim from the page's source: doc_source/with-sqs.md in
#: github.com/awsdocs/aws-lambda-developer-guide, commit 119ccaa5539325ed9381061642f0cdd2f230f2f5.
AWS_STANDARD_QUEUE_EVENT = json.loads("""
{
    "Records": [
        {
            "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
            "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a...",
            "body": "Test message.",
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1545082649183",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1545082649185"
            },
            "messageAttributes": {},
            "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue",
            "awsRegion": "us-east-2"
        },
        {
            "messageId": "2e1424d4-f796-459a-8184-9c92662be6da",
            "receiptHandle": "AQEBzWwaftRI0KuVm4tP+/7q1rGgNqicHq...",
            "body": "Test message.",
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1545082650636",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1545082650649"
            },
            "messageAttributes": {},
            "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue",
            "awsRegion": "us-east-2"
        }
    ]
}
""")
AWS_FIFO_QUEUE_EVENT = json.loads("""
{
    "Records": [
        {
            "messageId": "11d6ee51-4cc7-4302-9e22-7cd8afdaadf5",
            "receiptHandle": "AQEBBX8nesZEXmkhsmZeyIE8iQAMig7qw...",
            "body": "Test message.",
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1573251510774",
                "SequenceNumber": "18849496460467696128",
                "MessageGroupId": "1",
                "SenderId": "AIDAIO23YVJENQZJOL4VO",
                "MessageDeduplicationId": "1",
                "ApproximateFirstReceiveTimestamp": "1573251510774"
            },
            "messageAttributes": {},
            "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:fifo.fifo",
            "awsRegion": "us-east-2"
        }
    ]
}
""")
AWS_QUEUE_ARN = "arn:aws:sqs:us-east-2:123456789012:my-queue"
QUEUE_ARN = "arn:aws:sqs:eu-west-1:123456789012:orders"
REGION = "eu-west-1"
TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def received(**fields: Any) -> dict[str, Any]:
    """A message as boto3's receive_message returns it with every attribute (``fields`` added or replaced)."""
    message = {
        "MessageId": "5fea7756-0ea4-451a-a703-a558b933e274",
        "ReceiptHandle": "MbZj6wDWli+JvwwJaBV+3dcjk2YW2vA3+STFFljTM8tJJg6HRG6PYSasuWXPJB+Cw",
        "MD5OfBody": "fafb00f5732ab283681e124bf8747ed1",
        "Body": "This is a test message",
        "Attributes": {
            "SenderId": "AROAEXAMPLEROLEID001:task",
            "SentTimestamp": "1545082649183",
            "ApproximateReceiveCount": "2",
            "ApproximateFirstReceiveTimestamp": "1545082649185",
        },
    }
    return {**message, **fields}


def lambda_delivered(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` through an event source mapping and back: its record as the JSON Lambda delivers, read again."""
    record = json.loads(json.dumps(sqs_to_record(message, queue_arn=QUEUE_ARN, region=REGION)))
    return record_to_sqs(record)


# --- the AWS documentation's examples ------------------------------------------------------------------


def test_records_of_the_aws_standard_queue_example_are_boto3s_messages() -> None:
    """The documentation's standard queue event reads as the two messages boto3 would have received: camelCase to
    PascalCase, attributes unchanged, no MessageAttributes (the record has none), Lambda's own fields dropped."""
    assert records_of(AWS_STANDARD_QUEUE_EVENT, queue_arn=AWS_QUEUE_ARN) == [
        {
            "MessageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
            "ReceiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a...",
            "MD5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
            "Body": "Test message.",
            "Attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1545082649183",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1545082649185",
            },
        },
        {
            "MessageId": "2e1424d4-f796-459a-8184-9c92662be6da",
            "ReceiptHandle": "AQEBzWwaftRI0KuVm4tP+/7q1rGgNqicHq...",
            "MD5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
            "Body": "Test message.",
            "Attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1545082650636",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1545082650649",
            },
        },
    ]


def test_the_aws_standard_queue_example_is_what_event_of_writes_for_its_messages() -> None:
    """event_of of the messages records_of read is the documentation's event again, but for the two fields Lambda
    writes that the page leaves out: the attributes' MD5 (null without attributes) is written as null."""
    messages = records_of(AWS_STANDARD_QUEUE_EVENT, queue_arn=AWS_QUEUE_ARN)
    expected = {"Records": [{**r, "md5OfMessageAttributes": None} for r in AWS_STANDARD_QUEUE_EVENT["Records"]]}
    assert event_of(messages, queue_arn=AWS_QUEUE_ARN, region="us-east-2") == expected


def test_record_to_sqs_keeps_the_fifo_attributes_of_the_aws_fifo_queue_example() -> None:
    """The FIFO example's group id, deduplication id and sequence number stay in Attributes, where the runtime
    reads the group (Message.attributes) for its copies and DLQ moves."""
    (record,) = AWS_FIFO_QUEUE_EVENT["Records"]
    message = Message.from_sqs(record_to_sqs(record))
    assert message.attributes == {
        "ApproximateReceiveCount": "1",
        "SentTimestamp": "1573251510774",
        "SequenceNumber": "18849496460467696128",
        "MessageGroupId": "1",
        "SenderId": "AIDAIO23YVJENQZJOL4VO",
        "MessageDeduplicationId": "1",
        "ApproximateFirstReceiveTimestamp": "1573251510774",
    }
    assert (message.message_id, message.body, message.receive_count) == (record["messageId"], "Test message.", 1)


# --- attributes both ways --------------------------------------------------------------------------------


def test_binary_attributes_are_base64_text_in_a_record_and_bytes_again_after() -> None:
    """A Binary (and a Binary with a custom label) attribute is base64 text in the record, JSON as Lambda delivers
    it, and the same bytes once read back; String and Number attributes pass as they are."""
    attributes = {
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff"},
        "image": {"DataType": "Binary.png", "BinaryValue": b"\x89PNG\r\n"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "count": {"DataType": "Number.int", "StringValue": "3"},
    }
    message = received(MessageAttributes=attributes, MD5OfMessageAttributes="d25a6aea97eb8f585bfa92d314504a92")
    record = sqs_to_record(message, queue_arn=QUEUE_ARN, region=REGION)
    assert record["messageAttributes"]["blob"] == {
        "binaryValue": "AAH+/w==",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "Binary",
    }
    assert record["messageAttributes"]["count"] == {
        "stringValue": "3",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "Number.int",
    }
    assert lambda_delivered(message) == message


def test_record_to_sqs_keeps_list_values_only_when_they_hold_some() -> None:
    """The empty stringListValues and binaryListValues Lambda writes in every attribute (SQS does not implement
    them) are left out; lists with values are kept, binary ones decoded."""
    record = sqs_to_record(received(), queue_arn=QUEUE_ARN, region=REGION)
    record["messageAttributes"] = {
        "empty": {"stringValue": "x", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
        "listed": {"stringListValues": ["abc", "123"], "binaryListValues": ["MA==", "MQ=="], "dataType": "Binary"},
    }
    assert record_to_sqs(record)["MessageAttributes"] == {
        "empty": {"DataType": "String", "StringValue": "x"},
        "listed": {"DataType": "Binary", "StringListValues": ["abc", "123"], "BinaryListValues": [b"0", b"1"]},
    }


def test_a_message_without_attributes_has_neither_attributes_nor_their_md5_after_a_record() -> None:
    """A record's null md5OfMessageAttributes and empty messageAttributes are left out, as in a received message
    without attributes."""
    record = sqs_to_record(received(), queue_arn=QUEUE_ARN, region=REGION)
    assert (record["md5OfMessageAttributes"], record["messageAttributes"]) == (None, {})
    assert record_to_sqs(record) == received()


def test_the_trace_header_survives_a_record_and_reaches_a_copy_of_the_message() -> None:
    """AWSTraceHeader stays in the attributes both ways, so a copy the runtime sends of a message Lambda delivered
    (requeue_parameters) stays in its trace."""
    message = received(Attributes={**received()["Attributes"], "AWSTraceHeader": TRACE})
    delivered = lambda_delivered(message)
    assert delivered["Attributes"]["AWSTraceHeader"] == TRACE
    copy = requeue_parameters(Message.from_sqs(delivered), queue_url="https://sqs.eu-west-1.amazonaws.com/1/orders")
    assert copy["MessageSystemAttributes"] == {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}


def test_records_of_an_event_of_messages_gives_them_back_in_order() -> None:
    """event_of then records_of: the same messages, in the order given."""
    messages = [received(MessageId=f"m-{index}", Body=f"body {index}") for index in range(3)]
    assert records_of(event_of(messages, queue_arn=QUEUE_ARN, region=REGION), queue_arn=QUEUE_ARN) == messages


# --- refusals ----------------------------------------------------------------------------------------------


def a_record(**fields: Any) -> dict[str, Any]:
    """A record of QUEUE_ARN's event source mapping, ``fields`` replaced; a field given as None is removed."""
    base = sqs_to_record(received(), queue_arn=QUEUE_ARN, region=REGION)
    return {k: v for k, v in {**base, **fields}.items() if v is not None}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"messageId": None}, '"messageId" must be a string in a Lambda SQS record: missing'),
        ({"receiptHandle": None}, '"receiptHandle" must be a string in a Lambda SQS record: missing'),
        ({"body": None}, '"body" must be a string in a Lambda SQS record: missing'),
        ({"body": 7}, '"body" must be a string in a Lambda SQS record: 7'),
        ({"eventSource": "aws:sns"}, '"eventSource" must be "aws:sqs" in a Lambda SQS record: \'aws:sns\''),
        ({"eventSource": None}, '"eventSource" must be "aws:sqs" in a Lambda SQS record: missing'),
        (
            {"messageAttributes": {"blob": {"binaryValue": "AAH+/w==!", "dataType": "Binary"}}},
            "\"binaryValue\" of message attribute 'blob' must be base64 text: 'AAH+/w==!'",
        ),
        (
            {"messageAttributes": {"tenant": {"stringValue": "acme"}}},
            "\"dataType\" of message attribute 'tenant' must be a string: missing",
        ),
    ],
    ids=[
        "no-messageId",
        "no-receiptHandle",
        "no-body",
        "body-not-a-string",
        "sns-record",
        "no-eventSource",
        "binary-not-base64",
        "no-dataType",
    ],
)
def test_record_to_sqs_refuses_a_record_it_cannot_read(fields: dict[str, Any], error: str) -> None:
    """A record without one of the message's fields, from another event source, or with an attribute that cannot
    be read: ValueError naming the field, the rule and the value."""
    with pytest.raises(ValueError) as raised:
        record_to_sqs(a_record(**fields))
    assert str(raised.value) == error


def test_records_of_refuses_an_event_with_a_record_of_another_queue() -> None:
    """One record from another queue refuses the whole event, naming the queue's ARN and the one found."""
    other = "arn:aws:sqs:eu-west-1:123456789012:refunds"
    event = {"Records": [a_record(), a_record(messageId="m-2", eventSourceARN=other)]}
    with pytest.raises(ValueError) as raised:
        records_of(event, queue_arn=QUEUE_ARN)
    assert str(raised.value) == (
        f"\"eventSourceARN\" must be the queue's, {QUEUE_ARN}, in every record: record 1 (m-2) is from '{other}'"
    )


@pytest.mark.parametrize(
    ("event", "error"),
    [
        ({"detail-type": "Scheduled Event"}, '"Records" must be a list in a Lambda SQS event: missing'),
        ({"Records": ["m-1"]}, "a Lambda SQS record must be an object: str"),
    ],
    ids=["no-records", "record-not-an-object"],
)
def test_records_of_refuses_an_event_that_is_not_an_sqs_event(event: dict[str, Any], error: str) -> None:
    """An event that is not an SQS event source mapping's (no Records list, a record that is no object): ValueError."""
    with pytest.raises(ValueError) as raised:
        records_of(event, queue_arn=QUEUE_ARN)
    assert str(raised.value) == error


# --- the partial batch response ------------------------------------------------------------------------


def test_batch_item_failures_lists_each_id_once_in_the_order_given() -> None:
    """Ids in the order given, a repeated one once."""
    assert batch_item_failures(["m-3", "m-1", "m-3", "m-2", "m-1"]) == {
        "batchItemFailures": [{"itemIdentifier": "m-3"}, {"itemIdentifier": "m-1"}, {"itemIdentifier": "m-2"}]
    }


def test_batch_item_failures_of_no_ids_reports_the_whole_batch_done() -> None:
    """No failures: an empty list, which Lambda reads as a complete success."""
    assert batch_item_failures([]) == {"batchItemFailures": []}


@pytest.mark.parametrize(
    ("message_ids", "error"),
    [
        (
            ["m-1", ""],
            '"message_ids" must be non-empty strings (Lambda fails the whole batch on an empty or null'
            " itemIdentifier): ''",
        ),
        (
            ["m-1", None],
            '"message_ids" must be non-empty strings (Lambda fails the whole batch on an empty or null'
            " itemIdentifier): None",
        ),
        ("m-1", "\"message_ids\" must be an iterable of message ids, not one string: 'm-1'"),
    ],
    ids=["empty", "null", "one-string"],
)
def test_batch_item_failures_refuses_an_id_lambda_would_fail_the_batch_on(message_ids: Any, error: str) -> None:
    """An empty or null id (Lambda would fail the whole batch) or one string for the list: ValueError."""
    with pytest.raises(ValueError) as raised:
        batch_item_failures(message_ids)
    assert str(raised.value) == error
