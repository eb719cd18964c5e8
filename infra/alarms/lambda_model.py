"""What AWS/Lambda publishes for a function an SQS event source mapping invokes, and what the mapping does to the
queue, as raw datapoints and rules (the SQS side stays :mod:`infra.alarms.sqs_model`'s, driven by the mapping's calls).

A scenario writes each invocation (:class:`Invocation`: when it started, how long it ran, whether it ended in a
function error) and each throttled invocation request (its time); :func:`lambda_series` turns them into the
``AWS/Lambda`` metrics of one function (dimension ``FunctionName``) the alarms of infra/function_alarms.py read:
``Invocations``, ``Errors``, ``Throttles`` (Sum per minute), ``ConcurrentExecutions`` (the minute's most) and
``Duration`` (one datapoint per invocation, milliseconds). A lambda worker's EMF counts are written at the end of the
invocation that recorded them (:func:`invocation_emf_series`). Each rule has an id, a line and its page, as
:mod:`infra.alarms.publishers`'s; ``reading=True`` where the documentation is silent and the text says the reading.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from consumer.contract import METRICS_NAMESPACE
from infra.alarms.definitions import Series, metric_key
from infra.alarms.publishers import Rule, minutes

LAMBDA_NAMESPACE = "AWS/Lambda"
INVOCATIONS, ERRORS, THROTTLES = "Invocations", "Errors", "Throttles"
CONCURRENT_EXECUTIONS, DURATION = "ConcurrentExecutions", "Duration"
LAMBDA_METRICS = (INVOCATIONS, ERRORS, THROTTLES, CONCURRENT_EXECUTIONS, DURATION)

METRICS_URL = "https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics.html"
METRICS_TYPES_URL = "https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html"
CONCURRENCY_URL = "https://docs.aws.amazon.com/lambda/latest/dg/monitoring-concurrency.html"
SQS_ESM_URL = "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html"
SQS_RETRIES_URL = "https://docs.aws.amazon.com/lambda/latest/operatorguide/sqs-retries.html"

LAMBDA_INVOCATION = "lambda-invocation"
LAMBDA_THROTTLES = "lambda-throttles"
LAMBDA_CONCURRENCY = "lambda-concurrency"
LAMBDA_DURATION = "lambda-duration"
LAMBDA_IDLE = "lambda-idle"
LAMBDA_MINUTE = "lambda-minute"
ESM_FAILED_BATCH = "esm-failed-batch"
ESM_THROTTLED = "esm-throttled"
EMF_PER_INVOCATION = "emf-per-invocation"

LAMBDA_RULES: tuple[Rule, ...] = (
    Rule(
        LAMBDA_INVOCATION,
        "Invocations counts every invocation of the function code, a function error included, never a throttled "
        "request; Errors the invocations that ended in a function error (an exception of the code, or of the runtime: "
        "a timeout, a configuration error). Binary per invocation, read with Sum (namespace AWS/Lambda, dimension "
        "FunctionName): an invocation without an error sends Errors 0.",
        METRICS_TYPES_URL,
    ),
    Rule(
        LAMBDA_THROTTLES,
        "Throttles counts the invocation requests Lambda refused for lack of concurrency; they record no Invocations.",
        METRICS_TYPES_URL,
    ),
    Rule(
        LAMBDA_CONCURRENCY,
        "Docs silent on which instants of a minute ConcurrentExecutions samples. It counts the active concurrent "
        "invocations, is emitted for every function, version and alias (not only a function with reserved "
        "concurrency, as older pages said), at a 1-minute granularity, read with Maximum. Reading: a minute's value "
        "is the most invocations running at once during it.",
        CONCURRENCY_URL,
        reading=True,
    ),
    Rule(
        LAMBDA_DURATION,
        "Duration: the milliseconds the function code spent on an invocation, one value per invocation.",
        METRICS_TYPES_URL,
    ),
    Rule(
        LAMBDA_IDLE,
        "Docs silent on a minute without invocations: Lambda sends an invocation's metrics when the function "
        "finishes processing the event, at 1-minute intervals. Reading: a minute with no invocation running, ending "
        "or throttled has no datapoint for any of them (not a 0).",
        METRICS_URL,
        reading=True,
    ),
    Rule(
        LAMBDA_MINUTE,
        "Docs silent on the minute an invocation's datapoint falls in, and on any delay. Reading: Invocations, Errors "
        "and Duration in the minute the invocation ends, Throttles in the minute of the request, each there by the "
        "evaluation at the minute's end.",
        METRICS_URL,
        reading=True,
    ),
    Rule(
        ESM_FAILED_BATCH,
        "The mapping deletes a batch's messages when the invocation succeeds, except the ones its batchItemFailures "
        "lists; an invocation that ends in an error returns the whole batch, visible again after the visibility "
        "timeout (a receive of each spent: the redrive policy moves a message after maxReceiveCount).",
        SQS_ESM_URL,
    ),
    Rule(
        ESM_THROTTLED,
        "A throttled invocation is retried by the mapping, backing off, until the messages' visibility timeout runs "
        "out; they are then visible again (a receive spent).",
        SQS_RETRIES_URL,
    ),
    Rule(
        EMF_PER_INVOCATION,
        "A lambda worker flushes its counts at the end of each invocation (consumer/runtime/invocation.py: no 60 s "
        "flush, the environment may never run again), so a count's datapoint is at the invocation's end.",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html",
    ),
)


@dataclass(frozen=True)
class Invocation:
    """One invocation of the function: started at ``start`` (s), ran ``seconds``; ``error``: a function error."""

    start: float
    seconds: float
    error: bool = False

    @property
    def end(self) -> float:
        return self.start + self.seconds


def lambda_series(
    invocations: Iterable[Invocation],
    throttles: Iterable[float] = (),
    *,
    function: str,
    start: float,
    end: float,
    applied: set[str] | None = None,
) -> Series:
    """The AWS/Lambda datapoints of ``function`` over ``[start, end)`` (rules: every ``lambda-*`` one)."""
    runs = sorted(invocations, key=lambda i: i.start)
    if any(i.seconds < 0 for i in runs):
        raise ValueError(f"invocations: seconds must be >= 0, got {min(i.seconds for i in runs)}")
    sums: dict[str, defaultdict[float, float]] = {name: defaultdict(float) for name in (INVOCATIONS, ERRORS, THROTTLES)}
    durations: list[tuple[float, float]] = []
    for run in runs:
        if start <= run.end < end:
            minute = 60 * math.floor(run.end / 60)
            sums[INVOCATIONS][minute] += 1
            sums[ERRORS][minute] += 1 if run.error else 0
            durations.append((run.end, run.seconds * 1000))
    for t in throttles:
        if start <= t < end:
            sums[THROTTLES][60 * math.floor(t / 60)] += 1
    concurrency = _concurrency(runs, start, end)
    if applied is not None and (runs or sums[THROTTLES]):
        applied.update({LAMBDA_INVOCATION, LAMBDA_DURATION, LAMBDA_CONCURRENCY, LAMBDA_IDLE, LAMBDA_MINUTE})
        if sums[THROTTLES]:
            applied.add(LAMBDA_THROTTLES)
    dimensions = {"FunctionName": function}
    series = Series({metric_key(LAMBDA_NAMESPACE, name, dimensions): sorted(v.items()) for name, v in sums.items()})
    series.add(metric_key(LAMBDA_NAMESPACE, CONCURRENT_EXECUTIONS, dimensions), concurrency)
    series.add(metric_key(LAMBDA_NAMESPACE, DURATION, dimensions), durations)
    return series


def _concurrency(runs: Sequence[Invocation], start: float, end: float) -> list[tuple[float, float]]:
    """Each minute's most invocations running at once; no datapoint for a minute with none running."""
    changes = sorted([(r.start, 1) for r in runs] + [(r.end, -1) for r in runs])  # an end before a start at one t
    points, running, index = [], 0, 0
    while index < len(changes) and changes[index][0] < start:
        running += changes[index][1]
        index += 1
    for minute in minutes(start, end):
        peak = running
        while index < len(changes) and changes[index][0] < minute + 60:
            running += changes[index][1]
            peak = max(peak, running)
            index += 1
        if peak > 0:
            points.append((float(minute), float(peak)))
    return points


def invocation_emf_series(counts: Iterable[tuple[float, str, float]], *, queue: str) -> Series:
    """A lambda worker's counts ``(invocation end, name, value)`` as datapoints at that time (``emf-per-invocation``;
    the counts of one invocation share its end, so each is one flush's value)."""
    sums: defaultdict[str, defaultdict[float, float]] = defaultdict(lambda: defaultdict(float))
    for t, name, value in counts:
        sums[name][t] += value
    dimensions = {"Queue": queue}
    return Series(
        {metric_key(METRICS_NAMESPACE, name, dimensions): sorted(points.items()) for name, points in sums.items()}
    )
