"""Messages that reach a worker's queue from its declared sources: SNS topics and EventBridge rules.

The stack (infra/) declares the sources from cdk.json and tells the consumer what to expect through two task
environment variables; the consumer (this module) reads them (:meth:`Sources.from_env`) and understands what those
sources deliver (:meth:`Sources.read`, called by :meth:`consumer.message.Message.from_sqs` for each message):

* An SNS topic whose subscription has raw message delivery off wraps each message in SNS's JSON envelope
  (``{"Type": "Notification", "TopicArn": ..., "Message": ..., "MessageAttributes": {...}, "Signature": ...}``).
  The consumer unwraps an envelope only when its ``TopicArn`` is one of ``CONSUMER_SNS_ENVELOPE_TOPICS``: the handler
  then sees the inner message as ``body``, the envelope's attributes as ``message_attributes`` (in SQS's shape), and
  the envelope's own fields as ``message.sns`` (:class:`SnsNotification`). Any other body, an envelope of another
  topic included, reaches the handler as SQS delivered it. A topic with raw delivery on needs nothing: SQS delivers
  the message and its attributes as published.
* An EventBridge rule delivers the whole event as the body. With ``CONSUMER_EVENTBRIDGE_EVENTS=true`` a body that is
  an EventBridge event is also read into ``message.event`` (:class:`EventBridgeEvent`); the body stays the event.

Who may send is the queue policy's business (docs/security.md), never the envelope's: its ``Signature``,
``SigningCertURL`` and the rest are not verified, and ``message.sns`` says what the body says, not who sent it. Any
principal the queue policy admits can write a body shaped like an envelope naming a declared topic, so a handler must
not treat ``message.sns.topic_arn`` as proof of origin. SQS's ``SenderId`` stays the only identity the consumer uses
(``x-prior-receives``, :func:`consumer.message.sent_by_role`).

An envelope naming a declared topic that cannot be read (a field missing, an attribute SNS would never write, a
``SubscriptionConfirmation``) is not guessed at: the message is marked unreadable and the runtime moves it to the DLQ
with the reason, as if its handler had raised ``PoisonMessage``, without calling the handler.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from consumer.contract import ENV_PREFIX
from consumer.errors import ConfigurationError

#: Comma-separated ARNs of the SNS topics whose subscription delivers the SNS JSON envelope (raw message delivery
#: off); the stack writes it only when there is one. The consumer unwraps an envelope only from one of these.
SNS_ENVELOPE_TOPICS_ENV = f"{ENV_PREFIX}SNS_ENVELOPE_TOPICS"
#: "true" when at least one EventBridge rule targets the worker's queue; the stack writes it only then.
EVENTBRIDGE_EVENTS_ENV = f"{ENV_PREFIX}EVENTBRIDGE_EVENTS"

#: An SNS topic ARN: partition, region, 12-digit account, name (letters, digits, - and _, up to 256; .fifo allowed).
_TOPIC_ARN = re.compile(r"arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(?:\.fifo)?")
#: The envelope's fields a notification must carry, as strings, for the consumer to read it.
_REQUIRED_SNS_FIELDS = ("MessageId", "Message", "Timestamp")
#: An EventBridge event's fields (https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html):
#: each must be a string, ``resources`` a list of strings, ``detail`` present. ``account`` may be absent (moto's SQS
#: target leaves it out; AWS writes it) and reads as "".
_EVENT_STRING_FIELDS = ("version", "id", "detail-type", "source", "time", "region")
#: SNS attribute types (https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html): the part before a dot.
_SNS_ATTRIBUTE_TYPES = ("String", "Number", "Binary")


@dataclass(frozen=True)
class SnsNotification:
    """The SNS envelope's own fields of a message a declared topic delivered with raw message delivery off.

    Read-only facts the envelope states: ``topic_arn``, ``message_id`` (SNS's, the same on each redelivery of one
    publish), ``timestamp`` (ISO 8601, when SNS received the publish), ``subject`` (None when the publish had none),
    ``sequence_number`` (FIFO topics only). Not verified: any sender the queue policy admits could write them.

    ``envelope`` and ``sqs_message_attributes`` are what SQS delivered (the envelope's JSON, SQS's own message
    attributes): what the consumer sends on when it hands the message back or moves it to the DLQ, so that the copy
    is unwrapped again the same way (:attr:`consumer.message.Message.sqs_body`).
    """

    topic_arn: str
    message_id: str
    timestamp: str
    subject: str | None = None
    sequence_number: str | None = None
    envelope: str = field(default="", repr=False, compare=False)
    sqs_message_attributes: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class EventBridgeEvent:
    """An EventBridge event an SQS target delivered (the message body is the whole event, as JSON).

    ``detail`` is the event's ``detail`` as parsed JSON (usually a dict); ``detail_type`` is its ``detail-type``;
    ``resources`` its ARNs. Not verified either: a producer's JSON of the same shape reads the same.
    """

    id: str
    source: str
    detail_type: str
    detail: Any
    time: str
    account: str
    region: str
    resources: tuple[str, ...] = ()
    version: str = "0"


class Reading(NamedTuple):
    """What :meth:`Sources.read` makes of a body: what the handler sees, and why it cannot be read, if so."""

    body: str
    message_attributes: Mapping[str, Any]
    sns: SnsNotification | None = None
    event: EventBridgeEvent | None = None
    unreadable: str | None = None


@dataclass(frozen=True)
class Sources:
    """What the worker's declared sources deliver, as the stack wrote it (:meth:`from_env`); empty (falsy) when none.

    ``sns_envelope_topics``: the topics whose envelope the consumer unwraps. ``eventbridge_events``: whether a body
    that is an EventBridge event is read into ``message.event``.

    Example::

        sources = Sources(sns_envelope_topics=frozenset({"arn:aws:sns:eu-west-1:123456789012:orders"}))
        message = Message.from_sqs(raw, sources=sources)  # message.body: the published message
    """

    sns_envelope_topics: frozenset[str] = frozenset()
    eventbridge_events: bool = False

    def __bool__(self) -> bool:
        return bool(self.sns_envelope_topics) or self.eventbridge_events

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Sources:
        """Read ``CONSUMER_SNS_ENVELOPE_TOPICS`` and ``CONSUMER_EVENTBRIDGE_EVENTS``; unset means none.

        A malformed value refuses to start (:class:`ConfigurationError` naming the variable, the rule and the value):
        a topic misspelt here would hand its envelopes to the handler unopened.
        """
        topics: frozenset[str] = frozenset()
        listed = environ.get(SNS_ENVELOPE_TOPICS_ENV, "")
        if listed.strip():
            arns = [arn.strip() for arn in listed.split(",")]
            wrong = next((arn for arn in arns if not _TOPIC_ARN.fullmatch(arn)), None)
            if wrong is not None:
                raise ConfigurationError(
                    SNS_ENVELOPE_TOPICS_ENV,
                    "must be SNS topic ARNs (arn:aws:sns:<region>:<account>:<topic>) separated by commas;"
                    f" {wrong!r} is not one",
                    listed,
                )
            topics = frozenset(arns)
        flag = environ.get(EVENTBRIDGE_EVENTS_ENV, "")
        if flag not in ("", "true", "false"):
            raise ConfigurationError(EVENTBRIDGE_EVENTS_ENV, 'must be "true", "false" or unset', flag)
        return cls(sns_envelope_topics=topics, eventbridge_events=flag == "true")

    def read(self, body: str, message_attributes: Mapping[str, Any]) -> Reading | None:
        """What the handler sees of ``body`` and its SQS ``message_attributes``; None when it sees them as they are.

        Never raises: a body that is not JSON, not an object, or neither a declared topic's envelope nor an event
        (with ``eventbridge_events``) is left alone. A declared topic's envelope that cannot be read comes back with
        ``unreadable`` set and the body and attributes as delivered.
        """
        if not body.lstrip().startswith("{"):  # neither an envelope nor an event: no JSON parse at all
            return None
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(document, dict):
            return None
        topic = document.get("TopicArn")
        if isinstance(topic, str) and topic in self.sns_envelope_topics:
            return _unwrap(document, body, message_attributes)
        if self.eventbridge_events:
            event = _event(document)
            if event is not None:
                return Reading(body, message_attributes, event=event)
        return None


def _unwrap(document: dict[str, Any], body: str, sqs_attributes: Mapping[str, Any]) -> Reading:
    """A declared topic's envelope: the inner message and attributes, or why it cannot be read."""
    topic = document["TopicArn"]
    kind = document.get("Type")
    if not isinstance(kind, str):
        return Reading(body, sqs_attributes, unreadable=f"a body naming {topic} without an SNS Type: not an envelope")
    if kind != "Notification":
        why = (
            f"an SNS {kind!r} message from {topic}, not a Notification: the consumer confirms no subscription"
            " (the stack's needs none; confirm one made across accounts by hand)"
        )
        return Reading(body, sqs_attributes, unreadable=why)
    missing = [name for name in _REQUIRED_SNS_FIELDS if not isinstance(document.get(name), str)]
    subject, sequence = document.get("Subject"), document.get("SequenceNumber")
    missing += [
        name
        for name, value in (("Subject", subject), ("SequenceNumber", sequence))
        if value is not None and not isinstance(value, str)
    ]
    if missing:
        why = f"an SNS envelope from {topic} without {', '.join(missing)} as a string: it cannot be unwrapped"
        return Reading(body, sqs_attributes, unreadable=why)
    try:
        attributes = sqs_message_attributes(document.get("MessageAttributes") or {})
    except ValueError as error:
        return Reading(body, sqs_attributes, unreadable=f"an SNS envelope from {topic}: {error}")
    sns = SnsNotification(
        topic_arn=topic,
        message_id=document["MessageId"],
        timestamp=document["Timestamp"],
        subject=subject,
        sequence_number=sequence,
        envelope=body,
        sqs_message_attributes=sqs_attributes,
    )
    return Reading(document["Message"], attributes, sns=sns)


def sqs_message_attributes(envelope_attributes: Any) -> dict[str, Any]:
    """The envelope's ``MessageAttributes`` (``{"Type": ..., "Value": ...}``) in the shape boto3 receives SQS's.

    ``String`` (and ``String.*``, such as ``String.Array``) and ``Number`` keep their type with a ``StringValue``;
    ``Binary`` becomes a ``BinaryValue`` of bytes (SNS writes it base64-encoded). Anything else raises ValueError
    saying which attribute and why.

    >>> sqs_message_attributes({"tenant": {"Type": "String", "Value": "acme"}})
    {'tenant': {'DataType': 'String', 'StringValue': 'acme'}}
    """
    if not isinstance(envelope_attributes, dict):
        raise ValueError(f"MessageAttributes is not an object: {type(envelope_attributes).__name__}")
    converted: dict[str, Any] = {}
    for name, attribute in envelope_attributes.items():
        kind = attribute.get("Type") if isinstance(attribute, dict) else None
        value = attribute.get("Value") if isinstance(attribute, dict) else None
        if not isinstance(kind, str) or kind.split(".")[0] not in _SNS_ATTRIBUTE_TYPES or not isinstance(value, str):
            raise ValueError(f"message attribute {name!r} is not a String, Number or Binary Type with a string Value")
        if kind.split(".")[0] == "Binary":
            try:
                converted[name] = {"DataType": kind, "BinaryValue": base64.b64decode(value, validate=True)}
            except binascii.Error:
                raise ValueError(f"message attribute {name!r} is Binary but its Value is not base64") from None
        else:
            converted[name] = {"DataType": kind, "StringValue": value}
    return converted


def _event(document: dict[str, Any]) -> EventBridgeEvent | None:
    """``document`` as an EventBridge event, or None when it lacks one of an event's fields."""
    if any(not isinstance(document.get(name), str) for name in _EVENT_STRING_FIELDS) or "detail" not in document:
        return None
    resources, account = document.get("resources", []), document.get("account", "")
    if (
        not isinstance(resources, list)
        or not all(isinstance(r, str) for r in resources)
        or not isinstance(account, str)
    ):
        return None
    return EventBridgeEvent(
        id=document["id"],
        source=document["source"],
        detail_type=document["detail-type"],
        detail=document["detail"],
        time=document["time"],
        account=account,
        region=document["region"],
        resources=tuple(resources),
        version=document["version"],
    )
