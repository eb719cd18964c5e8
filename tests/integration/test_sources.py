"""A worker's declared sources through the real runtime, on the simulated clock (tests/integration/virtual.py: moto's
SQS, SNS and EventBridge in this process, on virtual time): an SNS topic subscribed to the worker's queue (raw message
delivery off and on) and published to, an EventBridge rule with the queue as its target, and what the consumer makes
of what they deliver (consumer/sources.py): the handler sees the inner message, an undeclared topic's envelope is left
alone, an event is read, an envelope that cannot be read and a poison unwrapped message end in the DLQ with the
envelope intact, a redelivered publish is one piece of work, and a handed-back copy is unwrapped again."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest

from consumer import BatchResult, DownstreamUnavailable, Message, PoisonMessage
from consumer.exit_codes import ExitCode
from consumer.runtime.dead_letter import read_reason
from consumer.sources import Sources
from consumer.testing import depth, drain, eventbridge_event, sns_envelope
from tests.integration.conftest import REGION, QueuePair, create_pair
from tests.integration.support import fast_contract, holds_nothing
from tests.integration.virtual import Virtual


def queue_arn(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def topic_feeding(virtual: Virtual, pair: QueuePair, *, raw: bool) -> tuple[Any, str]:
    """A new SNS topic subscribed to ``pair``'s source queue (``raw``: raw message delivery on); (sns client, ARN)."""
    sns = virtual.source_client("sns")
    topic = sns.create_topic(Name=f"t-{uuid.uuid4().hex[:12]}")["TopicArn"]
    attributes = {"RawMessageDelivery": "true"} if raw else {}
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(virtual.sqs, pair.queue_url), Attributes=attributes
    )
    return sns, topic


def dead(sqs: Any, dlq_url: str) -> dict[str, tuple[str, str]]:
    """Each DLQ message's body -> (kind, reason)."""
    found = {}
    for moved in drain(sqs, dlq_url):
        record = read_reason(moved.get("MessageAttributes", {})) or {}
        found[moved["Body"]] = (record.get("kind", ""), record.get("reason", ""))
    return found


PUBLISHED_ATTRIBUTES = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "count": {"DataType": "Number", "StringValue": "3"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
}


def test_a_topic_without_raw_delivery_feeds_the_handler_its_message_and_attributes(virtual: Virtual) -> None:
    """Two topics feed one queue: the declared one without raw delivery (unwrapped: the published body, its
    attributes in SQS's shape, message.sns) and one with raw delivery (as published, nothing to unwrap). On the
    virtual clock."""
    contract = fast_contract(concurrency=2)
    seen: dict[str, Message] = {}

    def handle(message: Message) -> None:
        seen[message.body] = message

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sns, wrapped = topic_feeding(virtual, pair, raw=False)
        _, raw = topic_feeding(virtual, pair, raw=True)
        published = sns.publish(
            TopicArn=wrapped, Message='{"order": 1}', Subject="Placed", MessageAttributes=PUBLISHED_ATTRIBUTES
        )
        sns.publish(TopicArn=raw, Message='{"order": 2}', MessageAttributes={"tenant": PUBLISHED_ATTRIBUTES["tenant"]})
        sources = Sources(sns_envelope_topics=frozenset({wrapped}))
        with virtual.running(virtual.consumer_of(pair, contract, handle, sources=sources)) as exit_code:
            virtual.wait_until(lambda: len(seen) == 2 and holds_nothing(sqs, pair.queue_url), timeout=20)
        assert set(seen) == {'{"order": 1}', '{"order": 2}'}
        unwrapped = seen['{"order": 1}']
        assert unwrapped.message_attributes == PUBLISHED_ATTRIBUTES
        assert unwrapped.sns is not None
        assert (unwrapped.sns.topic_arn, unwrapped.sns.message_id) == (wrapped, published["MessageId"])
        assert unwrapped.sns.subject == "Placed"
        assert json.loads(unwrapped.sqs_body)["Message"] == '{"order": 1}'  # what SQS delivered, kept
        as_published = seen['{"order": 2}']
        assert as_published.sns is None
        assert as_published.message_attributes["tenant"]["StringValue"] == "acme"
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


def test_an_undeclared_topics_envelope_reaches_the_handler_as_delivered(virtual: Virtual) -> None:
    """A topic without raw delivery that CONSUMER_SNS_ENVELOPE_TOPICS does not name: its envelope is the body, not
    unwrapped (a producer could send a body shaped like one). It also has the fields consumer.testing's builder
    writes: the builder delivers what SNS does. On the virtual clock."""
    contract = fast_contract(concurrency=1)
    seen: list[Message] = []

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sns, undeclared = topic_feeding(virtual, pair, raw=False)
        sns.publish(TopicArn=undeclared, Message="hello", Subject="s", MessageAttributes=PUBLISHED_ATTRIBUTES)
        declared = undeclared.rsplit(":", 1)[0] + ":another-topic"
        sources = Sources(sns_envelope_topics=frozenset({declared}))
        with virtual.running(virtual.consumer_of(pair, contract, seen.append, sources=sources)):
            virtual.wait_until(lambda: len(seen) == 1 and holds_nothing(sqs, pair.queue_url), timeout=20)
        (message,) = seen
        assert message.sns is None and message.message_attributes == {}
        envelope = json.loads(message.body)
        assert (envelope["Type"], envelope["TopicArn"], envelope["Message"]) == ("Notification", undeclared, "hello")
        built = json.loads(sns_envelope("hello", topic_arn=undeclared, subject="s", attributes=PUBLISHED_ATTRIBUTES))
        assert set(built) == set(envelope)
        assert built["MessageAttributes"] == envelope["MessageAttributes"]

    virtual.run(body)


def test_an_eventbridge_rule_delivers_an_event_the_handler_reads_as_message_event(virtual: Virtual) -> None:
    """A rule on the default bus with the queue as its SQS target: the matching event arrives whole as the body,
    and message.event holds its fields (its region the bus's); the event the pattern does not match never arrives.
    On the virtual clock."""
    contract = fast_contract(concurrency=1)
    seen: list[Message] = []

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        events = virtual.source_client("events")
        rule = f"r-{uuid.uuid4().hex[:12]}"
        events.put_rule(Name=rule, EventPattern=json.dumps({"source": ["shop.orders"]}))
        events.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": queue_arn(sqs, pair.queue_url)}])
        entry = {"DetailType": "OrderPlaced", "Detail": json.dumps({"order": 1}), "Resources": ["arn:aws:shop:o-1"]}
        put = events.put_events(Entries=[{"Source": "shop.orders", **entry}, {"Source": "shop.refunds", **entry}])
        sources = Sources(eventbridge_events=True)
        with virtual.running(virtual.consumer_of(pair, contract, seen.append, sources=sources)):
            virtual.wait_until(lambda: len(seen) == 1 and holds_nothing(sqs, pair.queue_url), timeout=20)
        (message,) = seen
        assert message.event is not None
        assert (message.event.id, message.event.source) == (put["Entries"][0]["EventId"], "shop.orders")
        assert (message.event.detail_type, message.event.detail) == ("OrderPlaced", {"order": 1})
        region = events.meta.region_name
        assert (message.event.resources, message.event.region) == (("arn:aws:shop:o-1",), region)
        assert json.loads(message.body)["detail"] == {"order": 1}  # the body stays the whole event
        built = json.loads(eventbridge_event({"order": 1}, source="shop.orders", detail_type="OrderPlaced"))
        # moto's target leaves out account; AWS writes it
        assert set(built) - {"account"} == set(json.loads(message.body))

    virtual.run(body)


def shaped(shape: str, handle: Any) -> tuple[Any, Any]:
    """(contract, handler) of ``shape``: a thread's one-message handler (guarded, or idempotent by itself), a batch
    handler, or an async one, each calling ``handle(message)``. The batch and async ones are idempotent by
    themselves: without a guard to claim, each shape's own check for an unreadable message is what sends it on."""
    if shape == "batch":

        def batch(messages: list[Message]) -> BatchResult:
            result = BatchResult()
            for message in messages:
                try:
                    handle(message)
                except Exception as error:  # noqa: BLE001 (reported per message, as a batch handler does)
                    result.failed(message, error)
                else:
                    result.succeeded(message)
            return result

        return fast_contract(concurrency=1, max_batch=10, batch_window_seconds=1, idempotent=True), batch
    if shape == "async":

        async def coroutine(message: Message) -> None:
            handle(message)

        return fast_contract(concurrency=2, asynchronous=True, idempotent=True), coroutine
    return fast_contract(concurrency=2, idempotent=shape == "idempotent"), handle


@pytest.mark.parametrize("shape", ["thread", "idempotent", "batch", "async"])
def test_what_cannot_be_read_and_a_poison_unwrapped_message_end_in_the_dlq_with_the_envelope_intact(
    virtual: Virtual, shape: str
) -> None:
    """From the declared topic: an envelope without its Message and a SubscriptionConfirmation go to the DLQ with
    the reason, the handler never called; a published message the handler finds poison goes there as the envelope
    SNS delivered (so a redrive is unwrapped again), with the handler's reason. The good one is deleted. On the
    virtual clock."""
    seen: list[str] = []
    lock = threading.Lock()  # held for an append only: no wait inside

    def handle(message: Message) -> None:
        with lock:
            seen.append(message.body)
        if message.body == "poison":
            raise PoisonMessage("not an order")

    contract, handler = shaped(shape, handle)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sns, topic = topic_feeding(virtual, pair, raw=False)
        no_message = json.loads(sns_envelope("lost", topic_arn=topic))
        del no_message["Message"]
        confirmation = {**json.loads(sns_envelope("confirm", topic_arn=topic)), "Type": "SubscriptionConfirmation"}
        unreadable = {json.dumps(no_message): "without Message", json.dumps(confirmation): "'SubscriptionConfirmation'"}
        for unread in unreadable:
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=unread)
        sns.publish(TopicArn=topic, Message="poison", MessageAttributes={"tenant": PUBLISHED_ATTRIBUTES["tenant"]})
        sns.publish(TopicArn=topic, Message="good")
        sources = Sources(sns_envelope_topics=frozenset({topic}))
        with virtual.running(virtual.consumer_of(pair, contract, handler, sources=sources)) as exit_code:
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url) and depth(sqs, pair.dlq_url).visible == 3, 20)
        assert sorted(seen) == ["good", "poison"]
        moved = dead(sqs, pair.dlq_url)
        for unread, why in unreadable.items():
            kind, reason = moved.pop(unread)
            assert kind == "poison" and why in reason and topic in reason
        ((envelope, (kind, reason)),) = moved.items()
        assert json.loads(envelope)["Message"] == "poison" and json.loads(envelope)["TopicArn"] == topic
        assert json.loads(envelope)["MessageAttributes"] == {"tenant": {"Type": "String", "Value": "acme"}}
        assert (kind, reason) == ("poison", "not an order")
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


def test_a_redelivered_publish_is_one_piece_of_work_and_two_publishes_of_one_body_are_two(virtual: Virtual) -> None:
    """SNS may deliver one publish twice (the same SNS MessageId, a new SQS message each time): the handler runs
    once for it. Two publishes of the same body (two SNS MessageIds) both run: the key is the SNS MessageId, not
    the inner body's hash. On the virtual clock."""
    contract = fast_contract(concurrency=1)
    topic = f"arn:aws:sns:{REGION}:123456789012:orders"
    runs: list[str] = []

    def handle(message: Message) -> None:
        assert message.sns is not None
        runs.append(message.sns.message_id)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        first = sns_envelope("same body", topic_arn=topic, message_id="publish-1")
        for envelope in (first, first, sns_envelope("same body", topic_arn=topic, message_id="publish-2")):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=envelope)
        sources = Sources(sns_envelope_topics=frozenset({topic}))
        with virtual.running(virtual.consumer_of(pair, contract, handle, sources=sources)):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
        assert sorted(runs) == ["publish-1", "publish-2"]

    virtual.run(body)


def test_a_handed_back_copy_is_unwrapped_again(virtual: Virtual) -> None:
    """The circuit hands an unwrapped message back as a fresh copy: the copy carries the envelope and SQS's
    attributes, not the unwrapped ones, so its next attempt sees the same message, attributes and SNS fields. On
    the virtual clock."""
    contract = fast_contract(concurrency=1)
    attempts: list[Message] = []

    def handle(message: Message) -> None:
        attempts.append(message)
        if len(attempts) == 1:
            raise DownstreamUnavailable(retry_after=1)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sns, topic = topic_feeding(virtual, pair, raw=False)
        sns.publish(TopicArn=topic, Message="retry me", MessageAttributes={"tenant": PUBLISHED_ATTRIBUTES["tenant"]})
        sources = Sources(sns_envelope_topics=frozenset({topic}))
        with virtual.running(virtual.consumer_of(pair, contract, handle, sources=sources)):
            virtual.wait_until(lambda: len(attempts) == 2 and holds_nothing(sqs, pair.queue_url), timeout=20)
        first, second = attempts
        assert first.message_id != second.message_id  # a copy: SQS's new message
        assert (second.body, second.message_attributes, second.sns) == (first.body, first.message_attributes, first.sns)
        assert second.body == "retry me" and second.sns is not None

    virtual.run(body)
