"""Helpers for testing a handler, and the consumer itself, against an SQS double such as moto.

In the spirit of ``structlog.testing``: what this project's own tests and benchmarks use, shipped
so that a team can test its handler the same way. Standard library only at import (the image
carries this module and has neither moto nor pytest); the SQS client is passed in, so the same
helpers work in-process under moto's ``mock_aws``, against moto's server or ministack, and on AWS.

Example (the README's "Testing a handler" runs it)::

    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody='{"order": 1}')
        consumer = Consumer(sqs, queue_url=url, dlq_url=None, contract=contract_of(handle), handler=handle)
        with running(consumer) as run:
            wait_until(lambda: depth(sqs, url).total == 0, timeout=10, what="the order handled and deleted")
        assert run.exit_code == 0

A handler's declared samples (``@worker(samples=...)``) go to a queue with :func:`send_samples`, so a test can
check that each valid one is processed and each ``poison=True`` one ends in the DLQ.

What a worker's declared sources deliver is built by :func:`sns_envelope` (an SNS topic's subscription with raw
message delivery off) and :func:`eventbridge_event` (an EventBridge rule's SQS target): send the body to a queue, or
read it into a :class:`~consumer.message.Message` as the consumer would with :func:`delivered`.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from consumer.declaration import samples_of
from consumer.limits import SQS_MAX_BATCH
from consumer.message import Message
from consumer.sources import Sources

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consumer.declaration import Sample
    from consumer.runtime.tracing_spans import AttemptTracer

__all__ = [
    "QueueDepth",
    "Run",
    "WaitTimeoutError",
    "delivered",
    "depth",
    "drain",
    "eventbridge_event",
    "in_memory_tracing",
    "poll_until",
    "receive_visible",
    "running",
    "send_samples",
    "sns_envelope",
    "wait_until",
]

_DEPTH_ATTRIBUTES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


class WaitTimeoutError(AssertionError):
    """A condition did not hold in time. An AssertionError, so a test runner reports it as a failure."""


class Runnable(Protocol):
    """What :func:`running` runs: :class:`consumer.runtime.consumer.Consumer`, or anything shaped like it."""

    def run(self) -> int: ...

    def stop(self) -> None: ...


@dataclass
class Run:
    """A consumer running in a thread; ``exit_code`` is what ``run()`` returned, None until it has."""

    exit_code: int | None = None


@contextmanager
def running(consumer: Runnable, *, stop_timeout: float = 30.0) -> Iterator[Run]:
    """Run ``consumer`` in a thread for the ``with`` block; on leaving, stop it and wait for its exit code.

    Raises :class:`WaitTimeoutError` if it has not stopped within ``stop_timeout`` seconds (a
    consumer that ignores ``stop()`` must fail the test, not hang it). The thread is a daemon so a
    stuck consumer cannot keep the test process alive either.
    """
    run = Run()

    def target() -> None:
        run.exit_code = consumer.run()

    thread = threading.Thread(target=target, name="consumer.testing.running", daemon=True)
    thread.start()
    try:
        yield run
    finally:
        consumer.stop()
        thread.join(stop_timeout)
        if thread.is_alive():
            raise WaitTimeoutError(f"consumer did not stop within {stop_timeout:g} s of stop()")


def poll_until(condition: Callable[[], Any], timeout: float, *, interval: float = 0.1) -> bool:
    """Call ``condition`` every ``interval`` seconds until it is truthy or ``timeout`` seconds have passed.

    Returns whether it held. It is called at least once, and once more at the deadline, so a
    condition that becomes true during the last sleep is not reported as a timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_until(
    condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition", *, interval: float = 0.1
) -> None:
    """Wait until ``condition()`` is truthy; raise :class:`WaitTimeoutError` naming ``what`` if not within ``timeout`` s."""
    if not poll_until(condition, timeout, interval=interval):
        raise WaitTimeoutError(f"not within {timeout:g} s: {what}")


class QueueDepth(NamedTuple):
    """A queue's approximate depth: messages ``visible`` (ready to receive) and ``in_flight`` (received, not deleted)."""

    visible: int
    in_flight: int

    @property
    def total(self) -> int:
        """Visible and in flight together: what is still in the queue (delayed messages not counted)."""
        return self.visible + self.in_flight


def depth(sqs: Any, queue_url: str) -> QueueDepth:
    """The queue's approximate depth as SQS reports it (``GetQueueAttributes``); compares equal to a tuple."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=_DEPTH_ATTRIBUTES)["Attributes"]
    return QueueDepth(int(attributes[_DEPTH_ATTRIBUTES[0]]), int(attributes[_DEPTH_ATTRIBUTES[1]]))


def receive_visible(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """One ReceiveMessage without waiting: up to 10 messages with every attribute, left in flight (not deleted)."""
    return _receive(sqs, queue_url, WaitTimeSeconds=0)


def drain(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Receive and delete every message in the queue, in the order received; returns them with every attribute.

    Stops at the first empty receive, so messages in flight or delayed stay where they are. A
    delete that fails for an entry raises: a message the test believes gone must be gone.
    """
    messages: list[dict[str, Any]] = []
    while batch := _receive(sqs, queue_url):
        messages.extend(batch)
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
        failed = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
        if failed:
            raise AssertionError(f"drain of {queue_url}: delete_message_batch failed for {failed}")
    return messages


def _receive(sqs: Any, queue_url: str, **options: int) -> list[dict[str, Any]]:
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=SQS_MAX_BATCH,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
        **options,
    )
    messages: list[dict[str, Any]] = response.get("Messages", [])
    return messages


def send_samples(
    sqs: Any, queue_url: str, handler: Callable[..., Any], *, poison: bool | None = None
) -> dict[str, Sample]:
    """Send the samples ``handler`` declared (``@worker(samples=...)``) to ``queue_url``, each once, each with a new
    ``idempotency-key`` (through :func:`consumer.producer.send`); returns idempotency key -> :class:`Sample`.

    ``poison``: None sends every sample, True only those marked ``poison=True``, False only the others. Raises
    ``AssertionError`` when there is nothing to send (a test that sends nothing would pass for nothing) or when SQS
    refused a message after the producer's retries.

    Example (a test of a handler's samples, with ``dlq_url`` its DLQ)::

        sent = send_samples(sqs, url, handle)
        ... run the consumer until depth(sqs, url).total == 0 ...
        dead = {m["MessageAttributes"]["idempotency-key"]["StringValue"] for m in drain(sqs, dlq_url)}
        assert dead == {key for key, sample in sent.items() if sample.poison}
    """
    from consumer.producer import Outgoing, send  # botocore's exceptions: imported when used, not with this module

    chosen = [s for s in samples_of(handler) if poison is None or s.poison is poison]
    if not chosen:
        which = "samples" if poison is None else "poison samples" if poison else "samples that are not poison"
        name = getattr(handler, "__qualname__", repr(handler))
        raise AssertionError(f"{name} declares no {which} (@worker(samples=...))")
    run = uuid.uuid4().hex[:8]
    keyed = {f"sample-{run}-{index:03d}": sample for index, sample in enumerate(chosen)}
    result = send(sqs, queue_url, [Outgoing(body=s.body, idempotency_key=key) for key, s in keyed.items()])
    if result.failed:
        failures = [f"{f.message.idempotency_key}: {f.code} {f.error}" for f in result.failed]
        raise AssertionError(f"send_samples to {queue_url}: SQS refused {', '.join(failures)}")
    return keyed


def sns_envelope(
    message: str,
    *,
    topic_arn: str,
    attributes: Mapping[str, Any] | None = None,
    subject: str | None = None,
    message_id: str | None = None,
    timestamp: str | None = None,
) -> str:
    """The body SQS receives when ``topic_arn``'s subscription (raw message delivery off) delivers ``message``.

    SNS's JSON envelope, as https://docs.aws.amazon.com/sns/latest/dg/sns-sqs-as-subscriber.html shows it: SNS puts
    the published attributes inside it, so the SQS message itself carries none (send the body alone).
    ``attributes`` are what the publisher gave ``Publish``: ``{"DataType": ..., "StringValue"/"BinaryValue": ...}``
    (a plain ``str`` is a String, ``bytes`` a Binary, an ``int`` or ``float`` a Number). ``message_id``: SNS's id of
    the publish (a fresh one by default; the same one again is a redelivery of the same publish). The signature
    fields are placeholders: nothing verifies them (consumer/sources.py).

    Example::

        body = sns_envelope('{"order": 1}', topic_arn=topic, attributes={"tenant": "acme"})
        sqs.send_message(QueueUrl=url, MessageBody=body)  # the handler sees '{"order": 1}' and tenant
    """
    message_id = message_id or str(uuid.uuid4())
    envelope: dict[str, Any] = {
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": topic_arn,
        "Message": message,
        "Timestamp": timestamp or _now_iso(milliseconds=True),
        "SignatureVersion": "1",
        "Signature": base64.b64encode(b"not a signature: consumer.testing built this envelope").decode(),
        "SigningCertURL": "https://sns.example.invalid/SimpleNotificationService-testing.pem",
        "UnsubscribeURL": f"https://sns.example.invalid/?Action=Unsubscribe&SubscriptionArn={topic_arn}:testing",
    }
    if subject is not None:
        envelope["Subject"] = subject
    if attributes:
        envelope["MessageAttributes"] = {name: _envelope_attribute(value) for name, value in attributes.items()}
    return json.dumps(envelope, indent=2)


def _envelope_attribute(value: Any) -> dict[str, str]:
    """A Publish attribute as the envelope writes it: ``{"Type": ..., "Value": ...}``, Binary base64-encoded."""
    if isinstance(value, bytes):
        value = {"DataType": "Binary", "BinaryValue": value}
    elif isinstance(value, str):
        value = {"DataType": "String", "StringValue": value}
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"DataType": "Number", "StringValue": str(value)}
    if "BinaryValue" in value:
        return {"Type": value["DataType"], "Value": base64.b64encode(value["BinaryValue"]).decode()}
    return {"Type": value["DataType"], "Value": value["StringValue"]}


def eventbridge_event(
    detail: Any,
    *,
    source: str,
    detail_type: str,
    resources: Sequence[str] = (),
    account: str = "123456789012",
    region: str = "eu-west-1",
    event_id: str | None = None,
    at: str | None = None,
) -> str:
    """The body SQS receives when an EventBridge rule's SQS target delivers an event: the whole event as JSON.

    The fields of https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html, ``detail`` as
    given (any JSON value, usually a dict). ``event_id``: the event's ``id`` (fresh by default; the same one again is
    a redelivery of the same event). ``at``: its ``time`` (ISO 8601, now by default).

    Example::

        body = eventbridge_event({"order": 1}, source="shop.orders", detail_type="OrderPlaced")
        sqs.send_message(QueueUrl=url, MessageBody=body)  # message.event.detail == {"order": 1}
    """
    return json.dumps(
        {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": account,
            "time": at or _now_iso(milliseconds=False),
            "region": region,
            "resources": list(resources),
            "detail": detail,
        }
    )


def _now_iso(*, milliseconds: bool) -> str:
    now = datetime.now(UTC)
    text = now.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{now.microsecond // 1000:03d}Z" if milliseconds else f"{text}Z"


def delivered(
    body: str,
    *,
    sources: Sources,
    message_attributes: Mapping[str, Any] | None = None,
    message_id: str | None = None,
) -> Message:
    """The :class:`~consumer.message.Message` a consumer with ``sources`` makes of ``body`` as SQS delivers it, for
    a handler's unit test (no queue): an envelope of a declared topic unwrapped, an event read.

    Example::

        sources = Sources(sns_envelope_topics=frozenset({topic}))
        handle(delivered(sns_envelope('{"order": 1}', topic_arn=topic), sources=sources))
    """
    raw = {
        "MessageId": message_id or str(uuid.uuid4()),
        "ReceiptHandle": "consumer.testing",
        "Body": body,
        "Attributes": {"ApproximateReceiveCount": "1"},
        "MessageAttributes": dict(message_attributes or {}),
    }
    return Message.from_sqs(raw, sources=sources)


@dataclass(frozen=True)
class InMemoryTracing:
    """What :func:`in_memory_tracing` returns: ``tracer`` for ``Consumer(collaborators=Collaborators(tracer=...))``;
    ``provider`` for the spans a test's handler starts itself; ``exporter`` holds every span ended (:meth:`spans`)."""

    tracer: AttemptTracer
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The spans ended so far, in the order they ended; only those named ``name`` if given."""
        return [span for span in self.exporter.get_finished_spans() if name is None or span.name == name]


def in_memory_tracing() -> InMemoryTracing:
    """A consumer's attempt spans kept in memory (the OpenTelemetry SDK's exporter), for a test of what they say.

    Needs opentelemetry-sdk and opentelemetry-propagator-aws-xray (the image carries both). Example::

        tracing = in_memory_tracing()
        with running(Consumer(sqs, ..., collaborators=Collaborators(tracer=tracing.tracer))):
            wait_until(lambda: tracing.spans(f"process {queue_name}"))
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consumer.runtime.tracing_spans import attempt_tracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return InMemoryTracing(attempt_tracer(provider), provider, exporter)
