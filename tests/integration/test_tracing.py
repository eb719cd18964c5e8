"""OpenTelemetry spans through the real runtime, on moto in-process and the simulated clock (docs/tracing.md): one
CONSUMER span per attempt, its parent from the ``traceparent`` attribute or the ``AWSTraceHeader`` system attribute,
the outcome of every path, current in the handler's thread and task, one span per batch call, the context carried on
by hand-back copies and DLQ records; and nothing imported with tracing off (a fresh interpreter, on the wall
clock)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from consumer import BatchResult, DownstreamUnavailable, Message, PoisonMessage, worker
from consumer.declaration import contract_of
from consumer.exit_codes import ExitCode
from consumer.runtime.tracing_spans import creation_contexts
from consumer.testing import InMemoryTracing, depth, drain, in_memory_tracing
from tests.integration.conftest import QueuePair, create_pair
from tests.integration.support import MOTO_SENDER_ID, fast_contract
from tests.integration.virtual import Virtual

TRACE_ID = "ab" * 16
PARENT_ID = "cd" * 8
TRACEPARENT = {"traceparent": {"DataType": "String", "StringValue": f"00-{TRACE_ID}-{PARENT_ID}-01"}}
# X-Ray's header: its Root is the W3C trace id (1-<8 hex>-<24 hex>), its Parent a span id.
XRAY_ROOT = "1-5759e988-bd862e3fe1be46a994272793"
XRAY_PARENT = "53995c3f42cd8ad8"
XRAY_TRACE_ID = "5759e988bd862e3fe1be46a994272793"
AWS_TRACE_HEADER = {
    "AWSTraceHeader": {"DataType": "String", "StringValue": f"Root={XRAY_ROOT};Parent={XRAY_PARENT};Sampled=1"}
}


def attempts(tracing: InMemoryTracing, pair: QueuePair) -> list[ReadableSpan]:
    """The attempt spans ended so far, in the order they ended."""
    return tracing.spans(f"process {pair.queue_url.rsplit('/', 1)[-1]}")


def run_until(
    virtual: Virtual,
    pair: QueuePair,
    handler: Callable[..., Any],
    tracing: InMemoryTracing,
    done: Callable[[], object],
    contract: Any = None,
    **options: Any,
) -> None:
    """A consumer of ``pair`` tracing into ``tracing``, run until ``done()`` (30 virtual s at most); it exits OK."""
    consumer = virtual.consumer_of(pair, contract or fast_contract(), handler, tracer=tracing.tracer, **options)
    with virtual.running(consumer) as exit_code:
        virtual.wait_until(done, timeout=30, what="the spans expected")
    assert exit_code == [ExitCode.OK]


def send_with_both_headers(sqs: Any, pair: QueuePair, body: str) -> None:
    """One message carrying the producer's W3C traceparent and an X-Ray AWSTraceHeader of another trace."""
    sqs.send_message(
        QueueUrl=pair.queue_url,
        MessageBody=body,
        MessageAttributes=TRACEPARENT,
        MessageSystemAttributes=AWS_TRACE_HEADER,
    )


def attrs(recorded: Any) -> dict[str, Any]:
    """A span's, event's or link's attributes (typed optional by the SDK)."""
    return dict(recorded.attributes or {})


def hex_id(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def test_tracing_one_consumer_span_per_attempt_a_retried_message_has_two(virtual: Virtual) -> None:
    """A message failing once then succeeding: two CONSUMER spans named and attributed per semconv, receive counts 1
    and 2, outcomes backoff then deleted, the first with error status and the exception recorded. On the virtual
    clock."""
    tracing = in_memory_tracing()
    calls: list[int] = []

    def handle(message: Message) -> None:
        calls.append(message.receive_count)
        if len(calls) == 1:
            raise ValueError("first time fails")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="flaky")
        run_until(virtual, pair, handle, tracing, lambda: len(attempts(tracing, pair)) == 2)
        first, second = attempts(tracing, pair)
        queue = pair.queue_url.rsplit("/", 1)[-1]
        for span in (first, second):
            assert span.kind is SpanKind.CONSUMER
            assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "consumer"
            assert {k: attrs(span)[k] for k in ("messaging.system", "messaging.operation.type")} == {
                "messaging.system": "aws_sqs",
                "messaging.operation.type": "process",
            }
            assert attrs(span)["messaging.operation.name"] == "process"
            assert attrs(span)["messaging.destination.name"] == queue
            assert attrs(span)["consumer.worker"] == queue
            assert span.parent is None  # no producer context: a root
            assert "aws.span.kind" not in attrs(
                span
            )  # the X-Ray marks are the otlp mode's (test_tracing_otlp_spans...)
        assert attrs(first)["messaging.message.id"] == attrs(second)["messaging.message.id"]
        assert (attrs(first)["consumer.receive_count"], attrs(second)["consumer.receive_count"]) == (1, 2)
        assert (attrs(first)["consumer.outcome"], attrs(second)["consumer.outcome"]) == ("backoff", "deleted")
        assert first.status.status_code is StatusCode.ERROR and "first time fails" in (first.status.description or "")
        assert [attrs(e)["exception.type"] for e in first.events if e.name == "exception"] == ["ValueError"]
        assert attrs(first)["error.type"] == "ValueError"
        assert second.status.status_code is StatusCode.UNSET

    virtual.run(body)


def test_tracing_otlp_spans_are_xray_local_roots_of_the_workers_service(virtual: Virtual) -> None:
    """As CONSUMER_TRACING=otlp makes them (the X-Ray sidecar's mode): each span, parented on its producer, is marked
    a local root of the service OTEL_SERVICE_NAME names, so X-Ray's exporter makes the worker a segment of its own
    rather than a subsegment of the producer's. On the virtual clock."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consumer.runtime.tracing_spans import attempt_tracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = InMemoryTracing(attempt_tracer(provider, xray_service="SqsWorker-prod"), provider, exporter)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="m", MessageAttributes=TRACEPARENT)
        run_until(virtual, pair, lambda m: None, tracing, lambda: attempts(tracing, pair))
        (span,) = attempts(tracing, pair)
        assert span.parent is not None and hex_id(span.parent.span_id, 16) == PARENT_ID
        assert {k: attrs(span).get(k) for k in ("aws.span.kind", "aws.local.service")} == {
            "aws.span.kind": "LOCAL_ROOT",
            "aws.local.service": "SqsWorker-prod",
        }

    virtual.run(body)


def test_tracing_parent_is_the_producers_traceparent(virtual: Virtual) -> None:
    """The ``traceparent`` message attribute (what consumer.producer writes) is the span's parent, and a link. On the
    virtual clock."""
    tracing = in_memory_tracing()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="m", MessageAttributes=TRACEPARENT)
        run_until(virtual, pair, lambda m: None, tracing, lambda: attempts(tracing, pair))
        (span,) = attempts(tracing, pair)
        assert span.parent is not None and span.parent.is_remote
        assert (hex_id(span.context.trace_id, 32), hex_id(span.parent.span_id, 16)) == (TRACE_ID, PARENT_ID)
        assert [(hex_id(link.context.trace_id, 32), hex_id(link.context.span_id, 16)) for link in span.links] == [
            (TRACE_ID, PARENT_ID)
        ]

    virtual.run(body)


def test_tracing_parent_from_the_aws_trace_header_system_attribute(virtual: Virtual) -> None:
    """SQS's ``AWSTraceHeader`` (sent as a message system attribute; moto keeps it) is the parent when no
    traceparent is there: X-Ray's Root and Parent become the trace and parent span ids. On the virtual clock."""
    tracing = in_memory_tracing()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="m", MessageSystemAttributes=AWS_TRACE_HEADER)
        run_until(virtual, pair, lambda m: None, tracing, lambda: attempts(tracing, pair))
        (span,) = attempts(tracing, pair)
        assert span.parent is not None
        assert (hex_id(span.context.trace_id, 32), hex_id(span.parent.span_id, 16)) == (XRAY_TRACE_ID, XRAY_PARENT)

    virtual.run(body)


def test_tracing_both_headers_differ_traceparent_is_the_parent_the_xray_context_a_link(virtual: Virtual) -> None:
    """Both headers, different traces: the W3C traceparent is the parent; both contexts are links. On the virtual
    clock."""
    tracing = in_memory_tracing()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        send_with_both_headers(sqs, pair, "m")
        run_until(virtual, pair, lambda m: None, tracing, lambda: attempts(tracing, pair))
        (span,) = attempts(tracing, pair)
        assert span.parent is not None and hex_id(span.parent.span_id, 16) == PARENT_ID
        assert hex_id(span.context.trace_id, 32) == TRACE_ID
        assert [hex_id(link.context.trace_id, 32) for link in span.links] == [TRACE_ID, XRAY_TRACE_ID]

    virtual.run(body)


def test_tracing_span_is_current_in_the_handlers_thread(virtual: Virtual) -> None:
    """A span the handler starts (its own instrumented call) is a child of the attempt's span. On the virtual
    clock."""
    tracing = in_memory_tracing()
    own = tracing.provider.get_tracer("handler")

    def handle(message: Message) -> None:
        with own.start_as_current_span("downstream call"):
            pass

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="m", MessageAttributes=TRACEPARENT)
        run_until(virtual, pair, handle, tracing, lambda: attempts(tracing, pair))
        (child,) = tracing.spans("downstream call")
        (span,) = attempts(tracing, pair)
        assert child.parent is not None and child.parent.span_id == span.context.span_id
        assert child.context.trace_id == span.context.trace_id

    virtual.run(body)


def test_tracing_async_handler_span_is_current_in_its_task(virtual: Virtual) -> None:
    """An async handler: its own span, after an await, is a child of its attempt's span; each message its own. On
    the virtual clock (the handler's event loop is the simulation's)."""
    contract = fast_contract(asynchronous=True, concurrency=4)
    tracing = in_memory_tracing()
    own = tracing.provider.get_tracer("handler")

    async def handle(message: Message) -> None:
        await asyncio.sleep(0.2)  # the three run at once: each task keeps its own current span
        with own.start_as_current_span(f"call {message.body}"):
            await asyncio.sleep(0)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for text in ("a", "b", "c"):
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=text)
        run_until(virtual, pair, handle, tracing, lambda: len(attempts(tracing, pair)) == 3, contract=contract)
        spans = {s.context.span_id: s for s in attempts(tracing, pair)}
        for text in ("a", "b", "c"):
            (child,) = tracing.spans(f"call {text}")
            assert child.parent is not None and child.parent.span_id in spans
            assert attrs(spans[child.parent.span_id])["consumer.outcome"] == "deleted"
        assert len({s.parent.span_id for s in tracing.spans() if s.name.startswith("call ") and s.parent}) == 3

    virtual.run(body)


@worker(max_duration=3, concurrency=1, max_receive_count=3, non_retryable=(KeyError,), error_text="omit")
def secretive(message: Message) -> None:
    """Each body says how it fails; @worker(error_text="omit"): no exception text anywhere."""
    if message.body == "poison":
        raise PoisonMessage("unparseable order")
    raise KeyError("card 4111 1111 1111 1111")


@pytest.mark.parametrize(
    ("body", "kind"),
    [("poison", "poison"), ("non_retryable", "non_retryable")],
)
def test_tracing_outcome_dlq_with_its_kind_and_no_error_text_when_omitted(
    virtual: Virtual, body: str, kind: str
) -> None:
    """PoisonMessage and a declared non_retryable type: outcome dlq with the kind; under error_text="omit" the span
    has error status and error.type but no exception event and no exception text. On the virtual clock."""
    contract = contract_of(secretive)
    tracing = in_memory_tracing()

    def scenario() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody=body)
        run_until(virtual, pair, secretive, tracing, lambda: attempts(tracing, pair), contract=contract)
        (span,) = attempts(tracing, pair)
        assert (attrs(span)["consumer.outcome"], attrs(span)["consumer.dlq.kind"]) == ("dlq", kind)
        assert span.status.status_code is StatusCode.ERROR
        assert [e.name for e in span.events] == []
        assert "4111 1111" not in json.dumps(
            span.to_json()
        )  # the exception text (a bare "4111" may be in an id or time)
        assert attrs(span)["error.type"] == ("PoisonMessage" if body == "poison" else "KeyError")

    virtual.run(scenario)


def test_tracing_outcome_dlq_exhausted_on_the_last_receive(virtual: Virtual) -> None:
    """Failing every receive: backoff, backoff, then dlq exhausted on the third (max_receive_count 3). On the virtual
    clock."""
    tracing = in_memory_tracing()

    def handle(message: Message) -> None:
        raise RuntimeError("down")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="always fails")
        run_until(virtual, pair, handle, tracing, lambda: len(attempts(tracing, pair)) == 3)
        outcomes = [(attrs(s)["consumer.outcome"], attrs(s).get("consumer.dlq.kind")) for s in attempts(tracing, pair)]
        assert outcomes == [("backoff", None), ("backoff", None), ("dlq", "exhausted")]

    virtual.run(body)


def test_tracing_dlq_record_carries_the_producers_context(virtual: Virtual) -> None:
    """The DLQ record keeps traceparent and AWSTraceHeader: what reads it next lands in the producer's trace. On the
    virtual clock."""
    contract = contract_of(secretive)
    tracing = in_memory_tracing()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send_with_both_headers(sqs, pair, "poison")
        run_until(virtual, pair, secretive, tracing, lambda: depth(sqs, pair.dlq_url).visible == 1, contract=contract)
        (record,) = drain(sqs, pair.dlq_url)
        carried = creation_contexts(Message.from_sqs(record))
        assert [(hex_id(c.trace_id, 32), hex_id(c.span_id, 16)) for c in carried] == [
            (TRACE_ID, PARENT_ID),
            (XRAY_TRACE_ID, XRAY_PARENT),
        ]

    virtual.run(body)


def test_tracing_circuit_hand_back_and_the_copys_attempt_in_the_same_trace(virtual: Virtual) -> None:
    """DownstreamUnavailable: outcome handed_back (circuit_open); the requeued copy's next attempt is deleted, in
    the same trace as the first (the copy carries the traceparent and the AWSTraceHeader on). On the virtual clock."""
    tracing = in_memory_tracing()
    calls: list[str] = []

    def handle(message: Message) -> None:
        calls.append(message.message_id)
        if len(calls) == 1:
            raise DownstreamUnavailable("HTTP 503", retry_after=1)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, fast_contract())
        send_with_both_headers(sqs, pair, "m")
        run_until(
            virtual, pair, handle, tracing, lambda: len(attempts(tracing, pair)) == 2, task_role_id=MOTO_SENDER_ID
        )
        first, second = attempts(tracing, pair)
        assert (attrs(first)["consumer.outcome"], attrs(first)["consumer.handed_back.why"]) == (
            "handed_back",
            "circuit_open",
        )
        assert attrs(second)["consumer.outcome"] == "deleted"
        assert calls[0] != calls[1]  # a copy, a new message id
        assert {hex_id(s.context.trace_id, 32) for s in (first, second)} == {TRACE_ID}
        assert [hex_id(link.context.trace_id, 32) for link in second.links] == [TRACE_ID, XRAY_TRACE_ID]

    virtual.run(body)


def test_tracing_shutdown_hand_back_of_a_handler_running_at_the_drain_end(virtual: Virtual) -> None:
    """A handler still running when the drain ends: its span is ended at shutdown, handed_back (drain_timeout). On
    the virtual clock."""
    contract = fast_contract(stop_timeout_seconds=6)  # drains for 1 s
    tracing = in_memory_tracing()
    started, release = virtual.sim.event(), virtual.sim.event()

    def slow(message: Message) -> None:
        started.set()
        release.wait(30)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="slow")
        consumer = virtual.consumer_of(pair, contract, slow, tracer=tracing.tracer, task_role_id=MOTO_SENDER_ID)
        try:
            with virtual.running(consumer):
                assert started.wait(20)
        finally:
            release.set()
        (span,) = attempts(tracing, pair)
        assert (attrs(span)["consumer.outcome"], attrs(span)["consumer.handed_back.why"]) == (
            "handed_back",
            "drain_timeout",
        )

    virtual.run(body)


def test_tracing_given_up_at_the_deadline(virtual: Virtual) -> None:
    """A handler past max_duration: given up on (its lease brings the message back); its span says given_up. On the
    virtual clock."""
    contract = fast_contract(max_duration_seconds=1, concurrency=2)  # one slot stuck, not every one
    tracing = in_memory_tracing()
    release = virtual.sim.event()

    def stuck(message: Message) -> None:
        release.wait(4)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="stuck")
        try:
            run_until(virtual, pair, stuck, tracing, lambda: attempts(tracing, pair), contract=contract)
        finally:
            release.set()
        assert attrs(attempts(tracing, pair)[0])["consumer.outcome"] == "given_up"

    virtual.run(body)


@worker(
    max_duration=3,
    concurrency=1,
    max_batch=10,
    batch_window=1,
    max_receive_count=3,
    retry_backoff_base=1,
    retry_backoff_max=1,
)
def mixed(messages: list[Message]) -> BatchResult:
    """Each body says what the handler reports for it."""
    result = BatchResult()
    for message in messages:
        if message.body == "ok":
            result.succeeded(message)
        elif message.body == "poison":
            result.failed(message, PoisonMessage("bad"))
        else:
            result.failed(message, RuntimeError("retry"))
    return result


def test_tracing_batch_call_is_one_span_linking_each_message_with_its_outcome(virtual: Virtual) -> None:
    """A batch handler's call: one span, messaging.batch.message_count, a link to each message's producer context,
    no parent, and a message_settled event per message with its outcome; error status (a message failed). On the
    virtual clock."""
    contract = contract_of(mixed)
    tracing = in_memory_tracing()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        entries = [
            {"Id": str(i), "MessageBody": text, "MessageAttributes": TRACEPARENT}
            for i, text in enumerate(("ok", "poison", "retry"))
        ]
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
        run_until(virtual, pair, mixed, tracing, lambda: attempts(tracing, pair), contract=contract)
        span = attempts(tracing, pair)[0]
        if attrs(span)["messaging.batch.message_count"] != 3:  # in-process moto may split the three over receives
            pytest.skip("the three messages were not in one call")
        assert span.parent is None
        assert [hex_id(link.context.trace_id, 32) for link in span.links] == [TRACE_ID] * 3
        settled = {
            attrs(e)["messaging.message.id"]: (attrs(e)["consumer.outcome"], attrs(e).get("consumer.dlq.kind"))
            for e in span.events
            if e.name == "message_settled"
        }
        ids = {attrs(link)["messaging.message.id"] for link in span.links}
        assert set(settled) == ids
        assert sorted(settled.values(), key=str) == sorted(
            [("deleted", None), ("dlq", "poison"), ("backoff", None)], key=str
        )
        assert span.status.status_code is StatusCode.ERROR

    virtual.run(body)


@pytest.mark.real
def test_tracing_off_imports_no_opentelemetry(tmp_path: Any) -> None:
    """CONSUMER_TRACING off, then unset: a consumer runs a message to its delete and never imports opentelemetry
    (one fresh process for both, the tracing settings read per consumer). The stop sends the delete at once (the
    shutdown's flush) rather than after the acknowledger's batching second. Real: a fresh interpreter, the only place
    where what a run imports can be seen (this one has imported opentelemetry)."""
    code = """
import sys, threading, boto3
from moto import mock_aws
from consumer.runtime.tracing import tracer_from_env
from consumer.testing import depth, running, wait_until
from tests.integration.conftest import QueuePair
from tests.integration.support import consumer_of, fast_contract
with mock_aws():
    sqs = boto3.client("sqs", region_name="eu-west-1")
    for mode in sys.argv[1:]:
        url = sqs.create_queue(QueueName=f"off{len(mode)}")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="m")
        tracer = tracer_from_env({"CONSUMER_TRACING": mode})
        pair = QueuePair(queue_url=url, dlq_url="")
        handled = threading.Event()
        with running(consumer_of(sqs, pair, fast_contract(), lambda m: handled.set(), tracer=tracer)):
            wait_until(handled.is_set, timeout=20)
        assert depth(sqs, url).total == 0, "the message was not deleted"
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")[:1])
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    out = subprocess.run(
        [sys.executable, "-c", code, "off", ""], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert [line for line in out.stdout.splitlines() if line.startswith("[")] == ["[]", "[]"]  # not the metrics
