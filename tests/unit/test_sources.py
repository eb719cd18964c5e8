"""What a worker's declared sources deliver, read without a queue: consumer/sources.py, Message.from_sqs with
``sources``, the idempotency key, the DLQ and hand-back parameters, the configuration and consumer.testing's builders.
The runtime's handling of the same messages on moto: tests/integration/test_sources.py."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from consumer import ConfigurationError, Message
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE
from consumer.runtime.config import load_config
from consumer.runtime.dead_letter import requeue_parameters, send_parameters
from consumer.runtime.idempotency import idempotency_key
from consumer.sources import (
    EVENTBRIDGE_EVENTS_ENV,
    SNS_ENVELOPE_TOPICS_ENV,
    EventBridgeEvent,
    Sources,
    sqs_message_attributes,
)
from consumer.testing import delivered, eventbridge_event, sns_envelope

TOPIC = "arn:aws:sns:eu-west-1:123456789012:orders"
OTHER_TOPIC = "arn:aws:sns:eu-west-1:123456789012:refunds"
ROLE_ID = "AROAEXAMPLEROLEID001"
SOURCES = Sources(sns_envelope_topics=frozenset({TOPIC}), eventbridge_events=True)


def raw(body: str, **message_attributes: Any) -> dict[str, Any]:
    return {
        "MessageId": "sqs-1",
        "ReceiptHandle": "rh",
        "Body": body,
        "Attributes": {"ApproximateReceiveCount": "1", "SenderId": f"{ROLE_ID}:task"},
        "MessageAttributes": message_attributes,
    }


# --- reading an SNS envelope ---------------------------------------------------------------------------


def test_a_declared_topics_envelope_is_unwrapped_with_its_attributes_in_sqs_shape() -> None:
    """The handler sees the published message and attributes (String, Number, Binary as bytes, String.Array), and
    the envelope's own fields as message.sns; what SQS delivered stays in sqs_body / sqs_message_attributes."""
    attributes = {
        "tenant": "acme",
        "count": 3,
        "blob": b"\x00\xff",
        "tags": {"DataType": "String.Array", "StringValue": '["a", "b"]'},
    }
    body = sns_envelope('{"order": 1}', topic_arn=TOPIC, attributes=attributes, subject="Placed", message_id="sns-1")
    message = Message.from_sqs(raw(body), sources=SOURCES)
    assert message.body == '{"order": 1}'
    assert message.message_attributes == {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "count": {"DataType": "Number", "StringValue": "3"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
        "tags": {"DataType": "String.Array", "StringValue": '["a", "b"]'},
    }
    assert message.sns is not None
    assert (message.sns.topic_arn, message.sns.message_id, message.sns.subject) == (TOPIC, "sns-1", "Placed")
    assert message.sns.timestamp == json.loads(body)["Timestamp"]
    assert (message.sqs_body, message.sqs_message_attributes) == (body, {})
    assert message.event is None and message.unreadable is None
    assert message.message_id == "sqs-1"  # SQS's id of this delivery, as for any message


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "{not json either",
        '["a list"]',
        '{"order": 1}',
        sns_envelope("hi", topic_arn=OTHER_TOPIC),  # an undeclared topic's envelope: as delivered
        json.dumps({"TopicArn": ["not", "a", "string"], "Type": "Notification"}),
        "{" * 100_000 + "}" * 100_000,  # too deep for json: left alone, never a crash
    ],
)
def test_anything_else_reaches_the_handler_as_delivered(body: str) -> None:
    message = Message.from_sqs(raw(body, tenant={"DataType": "String", "StringValue": "x"}), sources=SOURCES)
    assert (message.body, message.sns, message.event, message.unreadable) == (body, None, None, None)
    assert message.message_attributes == {"tenant": {"DataType": "String", "StringValue": "x"}}


def envelope_without(*names: str, **changes: Any) -> str:
    document = json.loads(sns_envelope("inner", topic_arn=TOPIC, attributes={"tenant": "acme"}))
    for name in names:
        del document[name]
    document.update(changes)
    return json.dumps(document)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (envelope_without("Message"), "without Message as a string"),
        (envelope_without("MessageId", "Timestamp"), "without MessageId, Timestamp as a string"),
        (envelope_without(Message=7), "without Message as a string"),
        (envelope_without(Subject=["x"]), "without Subject as a string"),
        (envelope_without("Type"), "without an SNS Type"),
        (envelope_without(Type="SubscriptionConfirmation"), "'SubscriptionConfirmation' message"),
        (envelope_without(MessageAttributes={"a": {"Type": "Binary", "Value": "***"}}), "'a' is Binary but"),
        (envelope_without(MessageAttributes={"a": {"Type": "Object", "Value": "x"}}), "'a' is not a String"),
        (envelope_without(MessageAttributes={"a": {"Type": "String"}}), "'a' is not a String"),
        (envelope_without(MessageAttributes=["a"]), "MessageAttributes is not an object"),
    ],
)
def test_a_declared_topics_envelope_that_cannot_be_read_is_marked_unreadable_and_left_as_delivered(
    body: str, why: str
) -> None:
    """Never guessed at: the reason says what is wrong, and the body and SQS's attributes stay as delivered (the
    runtime moves it to the DLQ with that reason: tests/integration/test_sources.py)."""
    message = Message.from_sqs(raw(body, trace={"DataType": "String", "StringValue": "t"}), sources=SOURCES)
    assert message.unreadable is not None and why in message.unreadable and TOPIC in message.unreadable
    assert (message.body, message.sns) == (body, None)
    assert message.message_attributes == {"trace": {"DataType": "String", "StringValue": "t"}}


def test_sqs_message_attributes_converts_what_moto_and_sns_write() -> None:
    encoded = base64.b64encode(b"\x01\x02").decode()
    assert sqs_message_attributes(
        {"b": {"Type": "Binary", "Value": encoded}, "n": {"Type": "Number", "Value": "1.5"}}
    ) == {"b": {"DataType": "Binary", "BinaryValue": b"\x01\x02"}, "n": {"DataType": "Number", "StringValue": "1.5"}}


def test_the_carried_receives_come_from_sqs_attributes_never_from_the_envelope() -> None:
    """A copy the task role requeued carries x-prior-receives as an SQS attribute beside the envelope: counted. An
    x-prior-receives inside an envelope is a publisher's attribute: never counted."""
    carried = {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "2"}}
    copy = Message.from_sqs(raw(sns_envelope("x", topic_arn=TOPIC), **carried), own_role_id=ROLE_ID, sources=SOURCES)
    assert (copy.prior_receives, copy.receive_count) == (2, 3)
    forged = sns_envelope("x", topic_arn=TOPIC, attributes={PRIOR_RECEIVES_ATTRIBUTE: "900"})
    assert Message.from_sqs(raw(forged), own_role_id=ROLE_ID, sources=SOURCES).prior_receives == 0


def test_no_sources_reads_no_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path: with no source declared (None or empty), from_sqs parses no JSON at all."""

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("a body was parsed")

    monkeypatch.setattr(json, "loads", refuse)  # the module consumer/sources.py parses with
    body = sns_envelope("x", topic_arn=TOPIC)
    for sources in (None, Sources()):
        message = Message.from_sqs(raw(body), sources=sources)
        assert (message.body, message.sns) == (body, None)
    with pytest.raises(AssertionError, match="parsed"):
        Message.from_sqs(raw(body), sources=SOURCES)


def test_from_sqs_sets_every_field_on_the_unwrapped_path_too() -> None:
    message = Message.from_sqs(raw(sns_envelope("x", topic_arn=TOPIC)), sources=SOURCES)
    assert set(vars(message)) == {f.name for f in dataclasses.fields(Message)}


# --- EventBridge -----------------------------------------------------------------------------------------


def test_an_eventbridge_event_is_read_into_message_event_and_the_body_stays_the_event() -> None:
    body = eventbridge_event(
        {"order": 1}, source="shop.orders", detail_type="OrderPlaced", resources=["arn:r"], event_id="ev-1"
    )
    message = Message.from_sqs(raw(body), sources=SOURCES)
    assert message.body == body and message.sns is None
    assert message.event == EventBridgeEvent(
        id="ev-1",
        source="shop.orders",
        detail_type="OrderPlaced",
        detail={"order": 1},
        time=json.loads(body)["time"],
        account="123456789012",
        region="eu-west-1",
        resources=("arn:r",),
    )
    off = Sources(sns_envelope_topics=frozenset({TOPIC}))  # no rule declared: not read
    assert Message.from_sqs(raw(body), sources=off).event is None
    # moto's SQS target leaves out "account" (AWS writes it): still an event, its account "".
    document = json.loads(body)
    del document["account"]
    without_account = Message.from_sqs(raw(json.dumps(document)), sources=SOURCES).event
    assert without_account is not None and without_account.account == ""


@pytest.mark.parametrize("drop", ["id", "detail-type", "source", "detail", "time"])
def test_json_that_is_not_a_whole_event_is_no_event(drop: str) -> None:
    """Nothing tells an event from a producer's JSON but its shape: short of a field, it is a plain body (no DLQ)."""
    document = json.loads(eventbridge_event({}, source="s", detail_type="d"))
    del document[drop]
    message = Message.from_sqs(raw(json.dumps(document)), sources=SOURCES)
    assert (message.event, message.unreadable) == (None, None)


# --- the idempotency key ----------------------------------------------------------------------------------


def test_the_key_of_an_unwrapped_message_is_its_sns_message_id_unless_it_carries_its_own() -> None:
    """Two deliveries of one publish: one key; two publishes of the same body: two keys (the inner body's hash
    would merge them); the publisher's idempotency-key attribute wins."""
    first = delivered(sns_envelope("same", topic_arn=TOPIC, message_id="p-1"), sources=SOURCES)
    again = delivered(sns_envelope("same", topic_arn=TOPIC, message_id="p-1"), sources=SOURCES)
    other = delivered(sns_envelope("same", topic_arn=TOPIC, message_id="p-2"), sources=SOURCES)
    assert idempotency_key(first) == idempotency_key(again) == "sns:p-1"
    assert idempotency_key(other) == "sns:p-2"
    keyed = delivered(sns_envelope("same", topic_arn=TOPIC, attributes={"idempotency-key": "k"}), sources=SOURCES)
    assert idempotency_key(keyed) == "attr:k"
    long = delivered(sns_envelope("x", topic_arn=TOPIC, message_id="i" * 2000), sources=SOURCES)
    assert idempotency_key(long).startswith("sns-sha256:")


def test_the_key_of_an_event_is_its_id() -> None:
    body = eventbridge_event({"a": 1}, source="s", detail_type="d", event_id="ev-9")
    assert idempotency_key(delivered(body, sources=SOURCES)) == "event:ev-9"
    # The same body without EventBridge declared: the body's hash, the last-resort key.
    assert idempotency_key(delivered(body, sources=Sources())).startswith("sha256:")


# --- hand-backs and DLQ moves keep what SQS delivered -----------------------------------------------------


def test_a_copy_and_a_dlq_move_send_the_envelope_and_sqs_attributes_not_the_unwrapped_ones() -> None:
    body = sns_envelope("inner", topic_arn=TOPIC, attributes={"tenant": "acme"})
    trace = {"DataType": "String", "StringValue": "t"}
    message = Message.from_sqs(raw(body, trace=trace), sources=SOURCES)
    copy = requeue_parameters(message, queue_url="q", attempted=True)
    assert copy["MessageBody"] == body
    assert copy["MessageAttributes"] == {
        "trace": trace,
        PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "1"},
    }
    moved = send_parameters(message, dlq_url="d", reason="bad", kind="poison", source_queue_url="q")
    assert moved["MessageBody"] == body
    assert set(moved["MessageAttributes"]) == {"trace", "x-dlq-reason"}
    # Read again, the copy is unwrapped the same way.
    again = Message.from_sqs(raw(copy["MessageBody"], **copy["MessageAttributes"]), sources=SOURCES)
    assert (again.body, again.message_attributes, again.sns) == (message.body, message.message_attributes, message.sns)


# --- configuration -----------------------------------------------------------------------------------------


def test_sources_from_env_reads_both_variables() -> None:
    environ = {SNS_ENVELOPE_TOPICS_ENV: f"{TOPIC}, {OTHER_TOPIC}", EVENTBRIDGE_EVENTS_ENV: "true"}
    assert Sources.from_env(environ) == Sources(frozenset({TOPIC, OTHER_TOPIC}), eventbridge_events=True)
    assert Sources.from_env({}) == Sources() and not Sources.from_env({SNS_ENVELOPE_TOPICS_ENV: ""})
    fifo = "arn:aws-cn:sns:cn-north-1:123456789012:orders.fifo"
    assert Sources.from_env({SNS_ENVELOPE_TOPICS_ENV: fifo}).sns_envelope_topics == {fifo}
    assert not Sources.from_env({EVENTBRIDGE_EVENTS_ENV: "false"})


@pytest.mark.parametrize(
    ("environ", "wrong"),
    [
        ({SNS_ENVELOPE_TOPICS_ENV: f"{TOPIC},orders"}, "'orders' is not one"),
        ({SNS_ENVELOPE_TOPICS_ENV: f"{TOPIC},,{OTHER_TOPIC}"}, "'' is not one"),
        ({SNS_ENVELOPE_TOPICS_ENV: "arn:aws:sqs:eu-west-1:123456789012:orders"}, "is not one"),
        ({SNS_ENVELOPE_TOPICS_ENV: "arn:aws:sns:eu-west-1:12345:orders"}, "is not one"),
        ({EVENTBRIDGE_EVENTS_ENV: "yes"}, 'must be "true", "false" or unset'),
    ],
)
def test_a_malformed_source_variable_refuses_to_start_naming_it(environ: dict[str, str], wrong: str) -> None:
    with pytest.raises(ConfigurationError, match="SNS topic ARNs|must be") as raised:
        Sources.from_env(environ)
    ((variable, value),) = environ.items()
    assert raised.value.parameter == variable and raised.value.value == value
    assert wrong in str(raised.value)


def test_load_config_reads_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/q", "CONSUMER_HANDLER": HANDLER}
    assert load_config(base).sources == Sources()
    config = load_config({**base, SNS_ENVELOPE_TOPICS_ENV: TOPIC, EVENTBRIDGE_EVENTS_ENV: "true"})
    assert config.sources == SOURCES
    with pytest.raises(ConfigurationError, match=SNS_ENVELOPE_TOPICS_ENV):
        load_config({**base, SNS_ENVELOPE_TOPICS_ENV: "topic"})


HANDLER = "tests.integration.handlers:slow"  # declared, no start-up check


# --- consumer.testing's builders -----------------------------------------------------------------------------


def test_the_builders_write_what_sns_and_eventbridge_deliver() -> None:
    """The envelope's and the event's fields, as AWS documents them (the integration test compares them with what
    moto's SNS and EventBridge deliver)."""
    envelope = json.loads(sns_envelope("m", topic_arn=TOPIC, subject="s", attributes={"a": "b"}))
    assert set(envelope) == {
        "Type",
        "MessageId",
        "TopicArn",
        "Subject",
        "Message",
        "Timestamp",
        "SignatureVersion",
        "Signature",
        "SigningCertURL",
        "UnsubscribeURL",
        "MessageAttributes",
    }
    assert envelope["MessageAttributes"] == {"a": {"Type": "String", "Value": "b"}}
    assert "Subject" not in json.loads(sns_envelope("m", topic_arn=TOPIC))
    event = json.loads(eventbridge_event({"k": 1}, source="s", detail_type="d"))
    assert set(event) == {"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"}
