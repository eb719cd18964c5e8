"""The spans: one CONSUMER span per attempt, per OpenTelemetry's messaging semantic conventions (docs/tracing.md).

Imported only when tracing is on (:func:`.tracing.tracer_from_env`): opentelemetry is imported here at the top.

* Name ``process <queue>``; kind CONSUMER; ``messaging.system`` ``aws_sqs``, ``messaging.operation.type`` and
  ``.name`` ``process``, ``messaging.destination.name`` the queue's name, ``messaging.message.id``; ours:
  ``consumer.outcome`` (deleted, backoff, dlq, handed_back, given_up), ``consumer.dlq.kind``,
  ``consumer.handed_back.why``, ``consumer.receive_count`` and ``consumer.worker`` (the queue).
* The producer's context, from the ``traceparent`` message attribute (W3C) or else SQS's ``AWSTraceHeader``
  (X-Ray), is the parent of a one-message span; every distinct creation context is also a link (semconv: a link is
  required, the parent optional for one message). A batch handler's call is one span with a link to each message's
  context (no parent: its messages come from many traces) and an event per message with its outcome.
* The outcome is written by :class:`TracedSettlement`, the settlement a traced consumer uses: a consumer without a
  tracer uses :class:`.Settlement` itself, so tracing off costs the settlement nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.aws import AwsXRayPropagator
from opentelemetry.propagators.aws.aws_xray_propagator import TRACE_HEADER_KEY
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from consumer.message import Message
from consumer.runtime.inflight import InFlight
from consumer.runtime.settlement import Outcome, Settlement

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

#: The semantic conventions these spans follow (the messaging ones are marked Development there).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
INSTRUMENTATION_NAME = "consumer"

OUTCOME = "consumer.outcome"
DLQ_KIND = "consumer.dlq.kind"
HANDED_BACK_WHY = "consumer.handed_back.why"
RECEIVE_COUNT = "consumer.receive_count"
WORKER = "consumer.worker"
MESSAGE_ID = "messaging.message.id"
#: The attributes the collector's awsxray exporter reads to make a span the segment of a service of its own
#: (opentelemetry-collector-contrib exporter/awsxrayexporter/internal/translator/segment.go, isLocalRoot): without
#: them a CONSUMER span parented on the producer is only a subsegment of the producer's segment in X-Ray.
AWS_SPAN_KIND = "aws.span.kind"
LOCAL_ROOT = "LOCAL_ROOT"
AWS_LOCAL_SERVICE = "aws.local.service"
#: The event a batch span carries for each of its messages, once settled.
MESSAGE_SETTLED = "message_settled"


class _MessageAttributes(Getter[Mapping[str, Any]]):
    """Reads a propagation header from SQS MessageAttributes (``{"traceparent": {"StringValue": ...}}``)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, Mapping):  # SQS's shape; an SNS envelope's attributes say "Value"
            value = value.get("StringValue", value.get("Value"))
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


_W3C = TraceContextTextMapPropagator()
_XRAY = AwsXRayPropagator()
_GETTER = _MessageAttributes()


def creation_contexts(message: Message) -> list[SpanContext]:
    """The producer's contexts the message carries, distinct, the W3C ``traceparent``'s first, then the X-Ray one's."""
    found = []
    attributes = message.message_attributes if isinstance(message.message_attributes, Mapping) else {}
    w3c = trace.get_current_span(_W3C.extract(attributes, getter=_GETTER)).get_span_context()
    if w3c.is_valid:
        found.append(w3c)
    header = message.attributes.get("AWSTraceHeader")
    if isinstance(header, str):
        xray = trace.get_current_span(_XRAY.extract({TRACE_HEADER_KEY: header})).get_span_context()
        if xray.is_valid and all((c.trace_id, c.span_id) != (xray.trace_id, xray.span_id) for c in found):
            found.append(xray)
    return found


@dataclass(eq=False)
class _Call:
    """One span: an attempt at one message, or one call of a batch handler."""

    span: Span
    batch: bool
    ended: bool = False
    errors: set[int] = field(default_factory=set)  # the exceptions recorded (a batch's failure, once)


@dataclass(eq=False)
class _Open:
    """One message's part in an open span: what became of it, once known."""

    call: _Call
    outcome: str | None = None
    detail: dict[str, str] = field(default_factory=dict)
    error_type: str | None = None


class AttemptTracer:
    """Starts, fills and ends the spans of one consumer's attempts; ``flush(seconds)`` exports at :meth:`close`.

    Example (tests; ``consumer.testing.in_memory_tracing`` does this)::

        provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))
        consumer = Consumer(..., collaborators=Collaborators(tracer=attempt_tracer(provider)))
    """

    def __init__(
        self,
        tracer: trace.Tracer,
        *,
        flush: Callable[[float], None] | None = None,
        export: Callable[[float], None] | None = None,
        xray_service: str | None = None,
    ) -> None:
        self._tracer = tracer
        self._flush = flush
        self._export = export
        # X-Ray's exporter makes a CONSUMER span with a parent a subsegment of the producer's segment, named after the
        # span; marked a local root it also makes the worker's own service segment, named aws.local.service.
        self._xray = {} if xray_service is None else {AWS_SPAN_KIND: LOCAL_ROOT, AWS_LOCAL_SERVICE: xray_service}
        self._open: dict[InFlight, _Open] = {}
        self._lock = threading.Lock()
        #: The settlement class a consumer with this tracer uses (Consumer builds it).
        self.settlement_type: Callable[..., Settlement] = partial(TracedSettlement, tracer=self)

    # --- around the handler ---------------------------------------------------
    def process(self, item: InFlight, attempt: Callable[[InFlight], Outcome], settle: Callable[..., bool]) -> bool:
        """One thread's attempt at ``item`` (``attempt`` runs the handler) and its settlement, in its span."""
        span = self._start([item])
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                return settle(item, attempt(item))
        finally:
            self.settled(item)

    async def process_async(self, item: InFlight, run: Callable[[InFlight], Awaitable[bool]]) -> bool:
        """An async handler's attempt, in its span: current in the attempt's task (contextvars)."""
        span = self._start([item])
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                return await run(item)
        finally:
            self.settled(item)

    def run_batch(self, items: list[InFlight], run: Callable[[list[InFlight]], None]) -> None:
        """A batch handler's call (and its messages' settlements) in one span."""
        span = self._start(items)
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                run(items)
        finally:
            for item in items:
                self.settled(item)

    def _start(self, items: Sequence[InFlight]) -> Span:
        first = items[0]
        queue = first.context.queue_url.rsplit("/", 1)[-1]
        attributes: dict[str, Any] = {
            "messaging.system": "aws_sqs",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            WORKER: queue,
            **self._xray,
        }
        batch = first.call is not None  # a batch handler's (BatchRunner sets it), even of one message
        links: list[Link] = []
        parent = Context()  # never the handler thread's own current span: a root unless the message names a parent
        if batch:
            attributes["messaging.batch.message_count"] = len(items)
            for item in items:
                links += [Link(c, {MESSAGE_ID: item.message.message_id}) for c in creation_contexts(item.message)]
        else:
            message = first.message
            attributes |= {MESSAGE_ID: message.message_id, RECEIVE_COUNT: message.receive_count}
            contexts = creation_contexts(message)
            links = [Link(c) for c in contexts]
            if contexts:
                parent = trace.set_span_in_context(NonRecordingSpan(contexts[0]), parent)
        span = self._tracer.start_span(
            f"process {queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes, links=links
        )
        call = _Call(span, batch)
        with self._lock:  # close() may be listing them (a handler starting as shutdown ends)
            for item in items:
                self._open[item] = _Open(call)
        return span

    # --- what the settlement tells ----------------------------------------------
    def outcome(self, item: InFlight, outcome: str, **detail: str) -> None:
        """``item``'s outcome (a later one replaces an earlier: a FIFO hand-back that ends in the DLQ)."""
        opened = self._open.get(item)
        if opened is not None:
            opened.outcome = outcome
            opened.detail = detail

    def failed(self, item: InFlight, error: BaseException, describe: Callable[[BaseException], str]) -> None:
        """The attempt raised ``error``: status ERROR; the exception recorded, unless @worker(error_text="omit")."""
        opened = self._open.get(item)
        if opened is None:
            return
        call = opened.call
        opened.error_type = type(error).__qualname__
        omit = getattr(describe, "omit", False)
        if call.batch:  # each message's error.type is on its event
            call.span.set_status(Status(StatusCode.ERROR))
        else:
            call.span.set_status(Status(StatusCode.ERROR, describe(error)))
            call.span.set_attribute("error.type", opened.error_type)
        if not omit and id(error) not in call.errors:
            call.errors.add(id(error))
            call.span.record_exception(error)

    def settled(self, item: InFlight) -> None:
        """``item`` is done with here: its outcome written (given_up if none was: its result no longer counted), and
        its span ended once nothing else of it is open."""
        with self._lock:
            opened = self._open.pop(item, None)
            if opened is None:
                return
            call = opened.call
            last = call.batch is False or not any(o.call is call for o in self._open.values())
        fields = {OUTCOME: opened.outcome or "given_up", **opened.detail}
        if call.batch:
            event: dict[str, Any] = {
                MESSAGE_ID: item.message.message_id,
                RECEIVE_COUNT: item.message.receive_count,
                **fields,
            }
            if opened.error_type is not None:
                event["error.type"] = opened.error_type
            call.span.add_event(MESSAGE_SETTLED, event)
        else:
            call.span.set_attributes(fields)
        if last:
            self._end(call)

    def _end(self, call: _Call) -> None:
        with self._lock:
            if call.ended:
                return
            call.ended = True
        call.span.end()

    def close(self, seconds: float) -> None:
        """At shutdown: end every span still open (a handler handed back at the drain's end, or given up on and never
        returned), then export what is buffered within ``seconds`` (the ``flush`` given, else :meth:`export`)."""
        self.end_open()
        (self._flush or self.export)(seconds)

    def end_open(self, items: Iterable[InFlight] | None = None) -> None:
        """End the spans still open (of ``items`` only, when given)."""
        with self._lock:
            still_open = list(self._open) if items is None else [i for i in items if i in self._open]
        for item in still_open:
            self.settled(item)

    def export(self, seconds: float) -> None:
        """Export what is buffered within ``seconds``, the tracer staying usable: at the end of a Lambda invocation,
        after which the environment may be frozen, or never run again."""
        if self._export is not None:
            self._export(seconds)


class TracedSettlement(Settlement):
    """The settlement of a traced consumer: as :class:`.Settlement`, and each outcome written on the attempt's span."""

    def __init__(self, *args: Any, tracer: AttemptTracer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tracer = tracer
        self.tracer = tracer  # the handler runners read it here: one check per attempt

    def settle(self, item: InFlight, outcome: Outcome) -> bool:
        if outcome.error is not None:
            self._tracer.failed(item, outcome.error, self._describe)
        return super().settle(item, outcome)

    def hand_back(self, item: InFlight, why: str, delay: int = 0, attempted: bool = False, copy: bool = False) -> None:
        self._tracer.outcome(item, "handed_back", **{HANDED_BACK_WHY: why})
        super().hand_back(item, why, delay, attempted=attempted, copy=copy)

    def _succeed(self, item: InFlight, complete: bool) -> bool:
        self._tracer.outcome(item, "deleted")
        return super()._succeed(item, complete)

    def _back_off(self, item: InFlight, delay: int | None = None) -> None:
        self._tracer.outcome(item, "backoff")
        super()._back_off(item, delay)

    def _move_to_dlq(self, item: InFlight, reason: str, kind: str) -> bool:
        moved = super()._move_to_dlq(item, reason, kind)
        if moved:
            self._tracer.outcome(item, "dlq", **{DLQ_KIND: kind})
        return moved


def bounded(call: Callable[[], object], seconds: float) -> bool:
    """Run ``call`` on a daemon thread and wait up to ``seconds``; True if it returned in time.

    The SDK's own flush and shutdown take a timeout they do not all keep (a BatchSpanProcessor's shutdown waits up to
    30 s for an export): a stopping task must not wait on a collector that does not answer.
    """
    thread = threading.Thread(target=call, name="trace-flush", daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def attempt_tracer(
    provider: trace.TracerProvider, *, flush: Callable[[float], None] | None = None, xray_service: str | None = None
) -> AttemptTracer:
    """An attempt tracer whose spans go to ``provider`` (the consumer's instrumentation scope and schema);
    ``flush``: what shutdown calls (the otlp mode shuts its provider down); ``xray_service``: mark each span the local
    root of that service for X-Ray's exporter (the otlp mode's). Its :meth:`~AttemptTracer.export` force-flushes the
    provider, where it can."""

    def export(seconds: float) -> None:
        force_flush = getattr(provider, "force_flush", None)
        if force_flush is not None:
            bounded(lambda: force_flush(int(seconds * 1000)), seconds)

    return AttemptTracer(
        provider.get_tracer(INSTRUMENTATION_NAME, schema_url=SCHEMA_URL),
        flush=flush,
        export=export,
        xray_service=xray_service,
    )


def otlp_tracer() -> AttemptTracer:
    """CONSUMER_TRACING=otlp: an SDK provider, installed as the global one, exporting in batches over OTLP/HTTP.

    The SDK reads the OTEL_* variables itself (the sampler, the resource and service name, the endpoint).
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)  # the handler's instrumented calls export through it too

    def flush(seconds: float) -> None:
        bounded(provider.shutdown, seconds)

    service = str(provider.resource.attributes.get("service.name", "unknown_service"))  # from OTEL_SERVICE_NAME
    return attempt_tracer(provider, flush=flush, xray_service=service)


def global_tracer() -> AttemptTracer:
    """CONSUMER_TRACING=global: the provider the handler's module installed (flushed at shutdown, not shut down)."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # Spans started now stay no-ops until a provider is installed: say so once, at start-up.
        log.warning("tracing_global_without_provider", extra={"binding": "CONSUMER_TRACING", "value": "global"})

    return attempt_tracer(trace.get_tracer_provider())
