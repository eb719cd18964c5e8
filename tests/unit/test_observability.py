"""Unit tests for consumer.runtime.observability: JSON log lines, EMF documents, trace context.

Rule for this folder: no network, no CDK, no boto3 calls.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from consumer.errors import ConfigurationError
from consumer.runtime.observability import JsonFormatter, Metrics, configure_logging, log_level, trace_context

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
XRAY_ROOT = "1-5759e988-bd862e3fe1be46a994272793"
XRAY_HEADER = f"Root={XRAY_ROOT};Parent=53995c3f42cd8ad8;Sampled=1"
FROZEN_MS = 1_700_000_000_123


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, restored to its handlers and level after the test (and the consumer's loggers' level)."""
    root, runtime = logging.getLogger(), logging.getLogger("consumer")
    handlers, level, runtime_level = root.handlers[:], root.level, runtime.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)
    runtime.setLevel(runtime_level)


def log_line(message: str = "message_deleted", *, exc: bool = False, **extra: object) -> dict:
    """Format one record with JsonFormatter through a private logger and parse the line."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.observability")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception(message, extra=extra)
    else:
        logger.info(message, extra=extra)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def make_metrics(out: io.StringIO) -> Metrics:
    return Metrics(namespace="SqsWorker", dimensions={"Queue": "orders"}, stream=out, clock=lambda: FROZEN_MS / 1000)


def documents(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def attr(value: str) -> dict[str, str]:
    """A message attribute as boto3 returns it."""
    return {"DataType": "String", "StringValue": value}


# --------------------------------------------------------------------------- JsonFormatter


def test_json_formatter_writes_core_fields() -> None:
    """A record becomes timestamp (UTC, ms, Z), level, logger and event."""
    line = log_line("message_deleted")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["timestamp"])
    assert (line["level"], line["logger"], line["event"]) == ("INFO", "test.observability", "message_deleted")


def test_json_formatter_omits_standard_record_attributes() -> None:
    """Only the core keys appear when no extra is given (no lineno, args, threadName...)."""
    assert set(log_line()) == {"timestamp", "level", "logger", "event"}


def test_json_formatter_includes_extras() -> None:
    """Fields passed with extra= become top-level keys with their JSON types."""
    line = log_line(message_id="m-1", receive_count=3, ok=True)
    assert (line["message_id"], line["receive_count"], line["ok"]) == ("m-1", 3, True)


def test_json_formatter_stringifies_unserialisable_extras() -> None:
    """An extra JSON cannot encode is written as str(value)."""

    class Handle:
        def __str__(self) -> str:
            return "handle-1"

    line = log_line(handle=Handle(), tags=frozenset({"a"}))
    assert (line["handle"], line["tags"]) == ("handle-1", "frozenset({'a'})")


def test_json_formatter_core_keys_win_over_extras() -> None:
    """An extra named like a core key cannot overwrite it."""
    assert log_line("message_deleted", event="spoofed", level="nope")["event"] == "message_deleted"


def test_json_formatter_includes_exception() -> None:
    """exc_info adds the formatted traceback under `exception`."""
    line = log_line("handler_failed", exc=True)
    assert line["level"] == "ERROR"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: boom" in line["exception"]


def test_json_formatter_writes_one_line_per_record() -> None:
    """A multi-line message and traceback still produce a single JSON line."""
    assert log_line("line one\nline two", exc=True)["event"] == "line one\nline two"


# --------------------------------------------------------------------------- configure_logging


def test_configure_logging_writes_json_to_stream(root_logger: logging.Logger) -> None:
    """After configure_logging, a root-propagated record is a JSON line on the stream."""
    out = io.StringIO()
    configure_logging(stream=out)
    logging.getLogger("consumer.runtime.consumer").info("worker_started", extra={"queue": "orders"})
    line = json.loads(out.getvalue().splitlines()[-1])
    assert (line["event"], line["queue"], line["logger"]) == ("worker_started", "orders", "consumer.runtime.consumer")


def test_configure_logging_is_idempotent(root_logger: logging.Logger) -> None:
    """A second call adds no second handler, so a record is written once."""
    out = io.StringIO()
    configure_logging(stream=out)
    count = len(root_logger.handlers)
    configure_logging(stream=out)
    logging.getLogger("consumer").info("once")
    assert len(root_logger.handlers) == count
    assert out.getvalue().count('"event":"once"') == 1


def test_configure_logging_exclusive_removes_the_handlers_it_did_not_install(root_logger: logging.Logger) -> None:
    """exclusive=True (the Lambda entry's): a handler already on the root logger (the Lambda runtime's) is removed, so
    a record is written once, as JSON."""
    theirs = io.StringIO()
    root_logger.addHandler(logging.StreamHandler(theirs))
    ours = io.StringIO()
    configure_logging(stream=ours, exclusive=True)
    logging.getLogger("consumer").info("once")
    assert (theirs.getvalue(), ours.getvalue().count('"event":"once"')) == ("", 1)


def test_configure_logging_sets_level(root_logger: logging.Logger) -> None:
    """The level applies to the root logger, so records below it are dropped."""
    out = io.StringIO()
    configure_logging(stream=out, level="warning")
    logging.getLogger("consumer").info("dropped")
    assert root_logger.level == logging.WARNING
    assert out.getvalue() == ""


def test_configure_logging_at_debug_leaves_the_libraries_at_info(root_logger: logging.Logger) -> None:
    """DEBUG is the consumer's (its per-message lines): botocore's and urllib3's own DEBUG output stays out."""
    out = io.StringIO()
    configure_logging(stream=out, level="DEBUG")
    logging.getLogger("consumer.runtime.acknowledger").debug("kept")
    logging.getLogger("botocore.endpoint").debug("dropped")
    logging.getLogger("botocore.credentials").info("library info kept")
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["kept", "library info kept"]


@pytest.mark.parametrize(("name", "level"), [("DEBUG", logging.DEBUG), ("warning", logging.WARNING), ("Critical", 50)])
def test_log_level_accepts_the_standard_names_in_any_case(name: str, level: int) -> None:
    """The five standard level names, in any case, are their logging levels."""
    assert log_level(name, "CONSUMER_LOG_LEVEL") == level


@pytest.mark.parametrize("name", ["LOUD", "", "WARN", "10", " info"])
def test_log_level_rejects_anything_else_naming_the_setting(name: str) -> None:
    """Anything else is a ConfigurationError naming the setting, the allowed names and the value."""
    with pytest.raises(ConfigurationError) as raised:
        log_level(name, "CONSUMER_LOG_LEVEL")
    assert str(raised.value) == (
        f'"CONSUMER_LOG_LEVEL" must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case): {name!r}'
    )


def test_configure_logging_rejects_an_unknown_level_name(root_logger: logging.Logger) -> None:
    """configure_logging checks a level name by the same rule, naming its own parameter."""
    with pytest.raises(ConfigurationError, match='^"level" must be one of DEBUG, INFO'):
        configure_logging(stream=io.StringIO(), level="LOUD")


def test_configure_logging_defaults_to_stdout(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a stream, lines go to stdout (what the awslogs driver ships)."""
    configure_logging()
    logging.getLogger("consumer").info("to_stdout")
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["event"] == "to_stdout"


# --------------------------------------------------------------------------- Metrics


def test_metrics_document_matches_emf_spec() -> None:
    """One flush writes one document: _aws metadata, dimension values and metric values at the root."""
    out = io.StringIO()
    metrics = make_metrics(out)
    metrics.count("processed")
    metrics.timing("duration", 12.5)
    assert metrics.flush() == 1
    assert documents(out) == [
        {
            "_aws": {
                "Timestamp": FROZEN_MS,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "SqsWorker",
                        "Dimensions": [["Queue"]],
                        "Metrics": [
                            {"Name": "processed", "Unit": "Count"},
                            {"Name": "duration", "Unit": "Milliseconds"},
                        ],
                    }
                ],
            },
            "Queue": "orders",
            "processed": 1,
            "duration": [12.5],
        }
    ]


def test_metrics_count_sums_into_one_number() -> None:
    """Several counts of one name become a single summed value."""
    out = io.StringIO()
    metrics = make_metrics(out)
    metrics.count("processed")
    metrics.count("processed", 2)
    metrics.count("sqs_requests", 4)
    metrics.flush()
    (doc,) = documents(out)
    assert (doc["processed"], doc["sqs_requests"]) == (3, 4)


def test_metrics_timing_keeps_every_value() -> None:
    """Timings are written as the list of recorded values, in order."""
    out = io.StringIO()
    metrics = make_metrics(out)
    for ms in (5, 1.5, 300):
        metrics.timing("duration", ms)
    metrics.flush()
    assert documents(out)[0]["duration"] == [5, 1.5, 300]


def test_metrics_timing_over_100_values_chunks_documents() -> None:
    """250 timings become three documents of at most 100 values; counts appear only in the first."""
    out = io.StringIO()
    metrics = make_metrics(out)
    metrics.count("processed", 250)
    for ms in range(250):
        metrics.timing("duration", ms)
    assert metrics.flush() == 3
    docs = documents(out)
    assert [len(d["duration"]) for d in docs] == [100, 100, 50]
    assert [v for d in docs for v in d["duration"]] == list(range(250))
    assert [d.get("processed") for d in docs] == [250, None, None]
    for doc in docs:
        names = [m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
        assert all(name in doc for name in names) and doc["Queue"] == "orders"


def test_metrics_over_100_names_chunks_documents() -> None:
    """More than 100 metric names are split so no document declares more than 100."""
    out = io.StringIO()
    metrics = make_metrics(out)
    for i in range(150):
        metrics.count(f"c{i}")
    assert metrics.flush() == 2
    declared = [[m["Name"] for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]] for d in documents(out)]
    assert [len(names) for names in declared] == [100, 50]
    assert sorted(declared[0] + declared[1]) == sorted(f"c{i}" for i in range(150))


def test_metrics_flush_with_nothing_recorded_writes_nothing() -> None:
    """An empty flush writes no line and returns 0."""
    out = io.StringIO()
    assert make_metrics(out).flush() == 0
    assert out.getvalue() == ""


def test_metrics_flush_resets() -> None:
    """Values are written once: a second flush has nothing left."""
    out = io.StringIO()
    metrics = make_metrics(out)
    metrics.count("failed")
    metrics.timing("duration", 1)
    metrics.flush()
    assert metrics.flush() == 0
    metrics.count("failed")
    metrics.flush()
    assert documents(out)[-1]["failed"] == 1 and "duration" not in documents(out)[-1]


def test_metrics_defaults_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a stream, EMF lines go to stdout."""
    metrics = Metrics(dimensions={"Queue": "orders"})
    metrics.count("poisoned")
    metrics.flush()
    assert json.loads(capsys.readouterr().out)["poisoned"] == 1


@pytest.mark.parametrize("name", ["Queue", "_aws", ""])
def test_metrics_rejects_colliding_or_empty_names(name: str) -> None:
    """A metric name equal to a dimension, `_aws`, or empty would corrupt the document."""
    with pytest.raises(ValueError):
        make_metrics(io.StringIO()).count(name)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True])
def test_metrics_rejects_non_finite_values(value: float) -> None:
    """NaN, infinity and booleans are not valid EMF metric values."""
    with pytest.raises(ValueError):
        make_metrics(io.StringIO()).timing("duration", value)


def test_metrics_rejects_unit_change() -> None:
    """A name recorded as a count cannot later be recorded as a timing."""
    metrics = make_metrics(io.StringIO())
    metrics.count("duration")
    with pytest.raises(ValueError):
        metrics.timing("duration", 1)


# --------------------------------------------------------------------------- trace_context


def test_trace_context_valid_traceparent() -> None:
    """A valid W3C traceparent attribute yields traceparent and its trace id."""
    assert trace_context({"traceparent": attr(TRACEPARENT)}, {}) == {"traceparent": TRACEPARENT, "trace_id": TRACE_ID}


@pytest.mark.parametrize(
    "value",
    [
        "not-a-traceparent",
        f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"00-{TRACE_ID}-00f067aa0ba902b7",
        f"00-{TRACE_ID}-00f067aa0ba902b7-01-extra",
    ],
    ids=["garbage", "uppercase", "zero-trace-id", "zero-parent-id", "no-flags", "trailing-field"],
)
def test_trace_context_invalid_traceparent_ignored(value: str) -> None:
    """A malformed traceparent is skipped, not raised."""
    assert trace_context({"traceparent": attr(value)}, {}) == {}


def test_trace_context_wrong_shape_ignored() -> None:
    """A traceparent attribute without a StringValue is skipped."""
    assert trace_context({"traceparent": {"DataType": "Binary", "BinaryValue": b"x"}}, {}) == {}


def test_trace_context_xray_header() -> None:
    """AWSTraceHeader yields the header and its Root= trace id."""
    assert trace_context({}, {"AWSTraceHeader": XRAY_HEADER}) == {
        "xray_trace_header": XRAY_HEADER,
        "xray_trace_id": XRAY_ROOT,
    }


@pytest.mark.parametrize("header", ["", "Parent=53995c3f42cd8ad8;Sampled=1", "Root=1-xyz;Sampled=1", "garbage"])
def test_trace_context_invalid_xray_header_ignored(header: str) -> None:
    """An AWSTraceHeader without a valid Root is skipped, not raised."""
    assert trace_context({}, {"AWSTraceHeader": header}) == {}


def test_trace_context_both() -> None:
    """A message carrying both contexts yields all four keys."""
    context = trace_context({"traceparent": attr(TRACEPARENT)}, {"AWSTraceHeader": XRAY_HEADER})
    assert set(context) == {"traceparent", "trace_id", "xray_trace_header", "xray_trace_id"}


def test_trace_context_none() -> None:
    """No trace attributes yields an empty dict."""
    assert trace_context({"other": attr("x")}, {"ApproximateReceiveCount": "1"}) == {}
