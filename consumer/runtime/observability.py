"""Structured JSON logs, CloudWatch Embedded Metric Format metrics, and trace context for the consumer.

Everything here writes single-line JSON to stdout, which the ECS ``awslogs``
driver ships to CloudWatch Logs one line per log event; CloudWatch extracts
metrics from the lines that are EMF documents.

A small standard-library implementation rather than a library, because
``aws-embedded-metrics`` is asyncio- and agent-oriented and
``aws-lambda-powertools`` is Lambda-shaped and heavy, while a container only
needs JSON lines on stdout.

Metric names the runtime emits (namespace ``SqsWorker``, dimension ``Queue``):

- ``processed`` (Count): messages the handler finished and that were deleted.
- ``failed`` (Count): handler raised; the message is left for SQS to redeliver.
- ``poisoned`` (Count): handler raised ``PoisonMessage`` (or a type it declared ``non_retryable``); the message went to the DLQ.
- ``timed_out`` (Count): handler overran its declared ``max_duration_seconds``.
- ``duplicates_skipped`` (Count): redelivered messages recognised and not processed again.
- ``visibility_extensions`` (Count): ``ChangeMessageVisibility`` calls made to keep a message in flight.
- ``sqs_requests`` (Count): SQS API calls (receive, delete, change visibility, send).
- ``received`` (Count): messages received; ``deleted`` (Count): deletes SQS confirmed.
- ``deferred`` (Count): messages handed back because another holder's idempotency lease is live.
- ``requeued`` (Count): messages handed back as a fresh copy carrying their spent receives (standard queues).
- ``dead_lettered`` (Count): messages the consumer moved to the DLQ (every reason), counted once SQS confirmed the
  move; DlqDepth reads it, so a move pages before the DLQ's own metrics wake up.
- ``circuit_opens`` (Count): the downstream circuit opened; DownstreamUnavailable reads it.
- ``duration`` (Milliseconds): handler wall time, one value per message, so CloudWatch can compute percentiles.

Usage::

    configure_logging()
    log = logging.getLogger("consumer")
    metrics = Metrics(dimensions={"Queue": queue_name})
    log.info("message_deleted", extra={"message_id": msg.message_id, **trace_context(...)})
    metrics.count("processed")
    metrics.timing("duration", 123.4)
    metrics.flush()  # the runtime calls this periodically and at shutdown
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import IO, Any

from consumer.contract import METRICS_NAMESPACE
from consumer.errors import ConfigurationError

__all__ = ["LOG_LEVELS", "JsonFormatter", "Metrics", "configure_logging", "log_level", "trace_context"]

# --------------------------------------------------------------------------- logging

#: The consumer's loggers' common parent: the runtime logs as "consumer", its modules as "consumer.runtime.<module>".
RUNTIME_LOGGER = "consumer"

# Attributes every LogRecord carries (plus the two a Formatter adds); anything else came from ``extra``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_FIXED_KEYS = frozenset({"timestamp", "level", "logger", "event", "exception", "stack"})


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object on one line.

    Keys: ``timestamp`` (ISO-8601 UTC, milliseconds, ``Z``), ``level``,
    ``logger``, ``event`` (the message: a stable snake_case event name), every
    field passed with ``extra=``, and ``exception`` / ``stack`` when present.
    The fixed keys win over an ``extra`` field of the same name. Values JSON
    cannot encode are written as ``str(value)``.
    """

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in _FIXED_KEYS:
                payload[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            payload["exception"] = record.exc_text
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        try:
            return _dumps(payload)
        except (TypeError, ValueError):  # e.g. non-string dict keys or NaN deep inside an extra
            return _dumps({key: _jsonable(value) for key, value in payload.items()})


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, allow_nan=False, separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    try:
        _dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


class _JsonHandler(logging.StreamHandler[IO[str]]):
    """The handler :func:`configure_logging` installs; its type is how a second call finds it."""


#: The level names a setting may give, in any case (logging's aliases WARN and FATAL are not offered).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(name: str, parameter: str = "level") -> int:
    """The logging level called ``name`` (any case); a :class:`ConfigurationError` naming ``parameter`` otherwise.

    >>> log_level("warning")
    30
    """
    if name.upper() not in LOG_LEVELS:
        raise ConfigurationError(parameter, f"must be one of {', '.join(LOG_LEVELS)} (any case)", name)
    return logging.getLevelNamesMapping()[name.upper()]


def configure_logging(stream: IO[str] | None = None, level: str | int = "INFO", *, exclusive: bool = False) -> None:
    """Send the root logger's records to ``stream`` (stdout by default) as JSON lines.

    Idempotent: a second call reuses the handler the first one installed,
    pointing it at the new stream and level. Other handlers are left alone, unless ``exclusive``: then they are
    removed (the Lambda Python runtime installs its own on the root logger, which would print every line twice).
    A level name outside :data:`LOG_LEVELS` raises :class:`ConfigurationError`.

    ``level`` is the consumer's own loggers' (``consumer`` and below); the libraries' (botocore, urllib3) stay at
    INFO when it is DEBUG: DEBUG is for the consumer's per-message lines, and botocore's own DEBUG output (every
    request, header and body) would drown them and cost far more than they do.
    """
    threshold = log_level(level) if isinstance(level, str) else level
    root = logging.getLogger()
    root.setLevel(max(threshold, logging.INFO))
    logging.getLogger(RUNTIME_LOGGER).setLevel(threshold)
    # What a record would gather that no line of ours prints (the logging HOWTO's "Optimization"): the caller's
    # file and line (a stack walk per record), the thread, the process and its multiprocessing name.
    logging._srcfile = None  # noqa: SLF001 (the switch the HOWTO names)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    target = sys.stdout if stream is None else stream
    handler = next((h for h in root.handlers if isinstance(h, _JsonHandler)), None)
    if handler is None:
        handler = _JsonHandler(target)
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    elif handler.stream is not target:
        handler.setStream(target)
    if exclusive:
        for other in [h for h in root.handlers if h is not handler]:
            root.removeHandler(other)


# --------------------------------------------------------------------------- metrics

_MAX_METRICS_PER_DOCUMENT = 100  # EMF: MetricDirective.Metrics holds at most 100 definitions
_MAX_VALUES_PER_METRIC = 100  # EMF: a target member array holds at most 100 values
_MAX_DIMENSIONS = 30  # EMF: a DimensionSet holds at most 30 keys
_MAX_NAME_LENGTH = 1024  # CloudWatch: metric names, dimension names and values
_NAMESPACE = re.compile(r"[a-zA-Z0-9._#:/-]{1,256}")


class Metrics:
    """Thread-safe aggregator that writes CloudWatch EMF documents, one JSON line each, on :meth:`flush`.

    Counts (unit ``Count``) are summed into one number per flush; timings
    (unit ``Milliseconds``) keep every value, as an array, so CloudWatch can
    compute percentiles. EMF limits (100 metrics per document, 100 values per
    metric array) are met by writing as many documents as needed.
    """

    def __init__(
        self,
        namespace: str = METRICS_NAMESPACE,
        dimensions: Mapping[str, str] | None = None,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"namespace must be 1-256 characters of [a-zA-Z0-9._#:/-], got {namespace!r}")
        dimensions = dict(dimensions or {})
        if len(dimensions) > _MAX_DIMENSIONS:
            raise ValueError(f"at most {_MAX_DIMENSIONS} dimensions, got {len(dimensions)}")
        for key, value in dimensions.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"dimension names and values must be strings, got {key!r}: {value!r}")
            if not 0 < len(key) <= _MAX_NAME_LENGTH or not 0 < len(value) <= _MAX_NAME_LENGTH or key == "_aws":
                raise ValueError(f"invalid dimension {key!r}: {value!r}")
        self.namespace = namespace
        self.dimensions: Mapping[str, str] = dimensions
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()  # guards the recorded values
        self._write_lock = threading.Lock()  # keeps concurrent flushes' lines whole and in order
        self._units: dict[str, str] = {}  # name -> unit, for the process lifetime: a name keeps one unit
        self._counts: dict[str, float] = {}
        self._timings: dict[str, list[float]] = {}

    def count(self, name: str, value: float = 1) -> None:
        """Add ``value`` to counter ``name`` (unit ``Count``)."""
        # The runtime counts several times a message: a name already bound to Count and a whole number (always
        # finite; a bool is not an int here) skip the checks.
        if type(value) is not int or self._units.get(name) != "Count":
            value = self._check(name, value)
        with self._lock:
            self._claim(name, "Count")
            self._counts[name] = self._counts.get(name, 0) + value

    def timing(self, name: str, milliseconds: float) -> None:
        """Record one duration for ``name`` (unit ``Milliseconds``); every value is kept until flush."""
        if self._units.get(name) != "Milliseconds" or type(milliseconds) is not float:
            milliseconds = self._check(name, milliseconds)
        elif not math.isfinite(milliseconds):
            raise ValueError(f"metric {name!r} needs a finite number, got {milliseconds!r}")
        with self._lock:
            self._claim(name, "Milliseconds")
            self._timings.setdefault(name, []).append(milliseconds)

    def flush(self) -> int:
        """Write what was recorded since the last flush as EMF lines, reset, and return how many documents."""
        with self._lock:
            counts, self._counts = self._counts, {}
            timings, self._timings = self._timings, {}
        if not counts and not timings:
            return 0
        timestamp = int(self._clock() * 1000)
        # Round r carries the r-th slice of 100 values of every timing (and, in round 0, every count);
        # each round is then cut into documents of at most 100 metrics. A name appears once per document.
        rounds: list[list[tuple[str, float | list[float]]]] = []
        longest = max((len(values) for values in timings.values()), default=0)
        for r in range(max(1, math.ceil(longest / _MAX_VALUES_PER_METRIC))):
            start, end = r * _MAX_VALUES_PER_METRIC, (r + 1) * _MAX_VALUES_PER_METRIC
            members: list[tuple[str, float | list[float]]] = list(counts.items()) if r == 0 else []
            members += [(name, values[start:end]) for name, values in timings.items() if len(values) > start]
            rounds.append(members)
        lines = [
            self._document(timestamp, members[i : i + _MAX_METRICS_PER_DOCUMENT])
            for members in rounds
            for i in range(0, len(members), _MAX_METRICS_PER_DOCUMENT)
        ]
        stream = sys.stdout if self._stream is None else self._stream
        with self._write_lock:
            for line in lines:
                stream.write(line + "\n")
            stream.flush()
        return len(lines)

    def _document(self, timestamp: int, members: list[tuple[str, float | list[float]]]) -> str:
        directive = {
            "Namespace": self.namespace,
            "Dimensions": [list(self.dimensions)],
            "Metrics": [{"Name": name, "Unit": self._units[name]} for name, _ in members],
        }
        return _dumps(
            {"_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [directive]}, **self.dimensions, **dict(members)}
        )

    def _check(self, name: str, value: float) -> float:
        if not isinstance(name, str) or not 0 < len(name) <= _MAX_NAME_LENGTH:
            raise ValueError(f"metric name must be a string of 1-{_MAX_NAME_LENGTH} characters, got {name!r}")
        if name == "_aws" or name in self.dimensions:
            raise ValueError(f"metric name {name!r} collides with a dimension or the _aws member")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"metric {name!r} needs a finite number, got {value!r}")
        return value

    def _claim(self, name: str, unit: str) -> None:
        """Bind ``name`` to ``unit`` for the process lifetime (call with the lock held)."""
        if self._units.setdefault(name, unit) != unit:
            raise ValueError(f"metric {name!r} is recorded with unit {self._units[name]}, not {unit}")


# --------------------------------------------------------------------------- trace context

# W3C Trace Context, version 00: lowercase hex only; all-zero ids are invalid.
_TRACEPARENT = re.compile(r"00-(?P<trace_id>[0-9a-f]{32})-(?P<parent_id>[0-9a-f]{16})-[0-9a-f]{2}")
# X-Ray trace id: version 1, 8 hex digits of epoch seconds, 24 hex digits of random.
_XRAY_ROOT = re.compile(r"1-[0-9a-fA-F]{8}-[0-9a-fA-F]{24}")


def trace_context(message_attributes: Mapping[str, Any], system_attributes: Mapping[str, Any]) -> dict[str, str]:
    """Trace ids carried by one SQS message, as log ``extra`` fields; ``{}`` when there are none.

    - ``traceparent`` and ``trace_id``: from a valid W3C ``traceparent``
      message attribute (boto3 shape ``{"DataType": "String", "StringValue": ...}``).
    - ``xray_trace_header`` and ``xray_trace_id`` (the ``Root=`` value): from
      the ``AWSTraceHeader`` system attribute. SQS returns it only when
      ``receive_message`` asks for it (``MessageSystemAttributeNames``).

    Missing or malformed values are skipped, never raised: tracing must not fail a message.
    """
    context: dict[str, str] = {}
    attribute = message_attributes.get("traceparent") if isinstance(message_attributes, Mapping) else None
    traceparent = attribute.get("StringValue") if isinstance(attribute, Mapping) else attribute
    if isinstance(traceparent, str):
        traceparent = traceparent.strip()
        match = _TRACEPARENT.fullmatch(traceparent)
        if match and set(match["trace_id"]) != {"0"} and set(match["parent_id"]) != {"0"}:
            context["traceparent"] = traceparent
            context["trace_id"] = match["trace_id"]
    header = system_attributes.get("AWSTraceHeader") if isinstance(system_attributes, Mapping) else None
    if isinstance(header, str):
        fields = dict(part.strip().partition("=")[::2] for part in header.split(";") if part.strip())
        root = fields.get("Root", "").strip()
        if _XRAY_ROOT.fullmatch(root):
            context["xray_trace_header"] = header.strip()
            context["xray_trace_id"] = root
    return context
