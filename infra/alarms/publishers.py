"""What Container Insights and the consumer's EMF lines put in CloudWatch, as raw datapoints (the SQS model is in
:mod:`infra.alarms.sqs_model`, which holds the table of every rule, these included).

Each rule is a :class:`Rule`: an id a scenario can name, one line, and the page it comes from. Where the
documentation is silent the rule says the reading chosen (``reading=True``), so a scenario that depends on it says
so too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from consumer.contract import METRICS_NAMESPACE
from infra.alarms.definitions import Series, metric_key

#: Container Insights' namespace and the service-level metrics the alarms read.
CONTAINER_INSIGHTS_NAMESPACE = "ECS/ContainerInsights"
RUNNING_TASK_COUNT, DESIRED_TASK_COUNT = "RunningTaskCount", "DesiredTaskCount"
#: The runtime's flush interval (consumer/runtime/heartbeat.py METRICS_FLUSH_SECONDS, infra/metrics.py holds the
#: same number; a test keeps all three equal: infra.alarms imports neither the runtime nor the CDK).
METRICS_FLUSH_SECONDS = 60
#: ``zero_running`` readings of a minute with no running task: no datapoint, or 0 for both metrics.
MISSING, ZERO = "missing", "zero"

CI_METRICS_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-ECS.html"
CI_OVERVIEW_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/ContainerInsights.html"
CI_EVENTS_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-reference-performance-logs-ECS.html"
EMF_SPEC_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html"


@dataclass(frozen=True)
class Rule:
    """One documented publishing rule (``reading``: the docs are silent and ``text`` says the reading chosen)."""

    id: str
    text: str
    url: str
    reading: bool = False


CI_PER_MINUTE = "ci-per-minute"
CI_ZERO_TASKS = "ci-zero-tasks"
CI_LATE = "ci-late"
EMF_FLUSH_TIME = "emf-flush-time"
EMF_SUM_PER_FLUSH = "emf-sum-per-flush"

PUBLISHER_RULES: tuple[Rule, ...] = (
    Rule(
        CI_PER_MINUTE,
        "Container Insights publishes RunningTaskCount and DesiredTaskCount (ECS/ContainerInsights, dimensions "
        "ClusterName + ServiceName) once a minute per service while it is on; the value is the count at the minute's "
        "end (reading: the docs do not say which instant of the minute).",
        CI_METRICS_URL,
    ),
    Rule(
        CI_ZERO_TASKS,
        "Docs silent on a service with no running task. Reading: no datapoint for either metric (Container Insights "
        "builds its metrics from performance log events, which are not written without a task; AWS partner "
        "support note: https://dev.classmethod.jp/articles/tsnote-container-insights-metrics-missing/); "
        "zero_running='zero' gives the other reading, 0.",
        CI_EVENTS_URL,
        reading=True,
    ),
    Rule(
        CI_LATE,
        "Docs silent on when a minute's datapoint reaches CloudWatch: Container Insights collects performance log "
        "events in embedded metric format and CloudWatch creates the metrics from them, and 'metrics are not visible "
        "until the container tasks have been running for some time'. Reading: by the evaluation at the minute's end, "
        "unless a scenario makes it late (late={minute: seconds after that end}: an alarm evaluated before it arrives "
        "reads the minute as missing, later ones read it) or lost (math.inf: never published).",
        CI_OVERVIEW_URL,
        reading=True,
    ),
    Rule(
        EMF_FLUSH_TIME,
        "An EMF document's _aws.Timestamp is the timestamp of the metrics extracted from it; the runtime stamps a "
        "flush's documents with the flush time, so a count's datapoint is up to flush_seconds after its event "
        "(flushes every flush_seconds after the consumer started, and a last one when it stops).",
        EMF_SPEC_URL,
    ),
    Rule(
        EMF_SUM_PER_FLUSH,
        "The runtime sums a count's values since the last flush into one value (namespace SqsWorker, dimension "
        "Queue); a flush with nothing recorded for a name writes no value for it (consumer/runtime/observability.py "
        "Metrics.flush; a recorded 0 is written as 0).",
        EMF_SPEC_URL,
    ),
)


def minutes(start: float, end: float) -> range:
    """The minutes (their start, seconds on the series clock, multiples of 60) in ``[start, end)``."""
    return range(60 * math.ceil(start / 60), math.ceil(end), 60)


def container_insights_series(
    task_counts: Sequence[tuple[float, int, int]],
    *,
    cluster: str,
    service: str,
    start: float,
    end: float,
    zero_running: str = MISSING,
    late: Mapping[float, float] | None = None,
    applied: set[str] | None = None,
) -> Series:
    """RunningTaskCount and DesiredTaskCount of one service per minute, from its changes ``(t, running, desired)``.

    A minute before the first change has no datapoint (the state is unknown). ``late``: minutes (their start, s)
    whose datapoints reach CloudWatch that many seconds after the minute's end, or never (``math.inf``). Rules:
    ``ci-per-minute``, ``ci-zero-tasks``, ``ci-late``; their ids are added to ``applied`` when they shape the result.
    """
    if zero_running not in (MISSING, ZERO):
        raise ValueError(f"zero_running: must be {MISSING!r} or {ZERO!r}, got {zero_running!r}")
    late = late or {}
    if any(not seconds > 0 for seconds in late.values()):
        raise ValueError(f"late: seconds after the minute's end must be > 0 (math.inf: never), got {dict(late)}")
    received: dict[float, float] = {}
    changes = sorted(task_counts, key=lambda change: change[0])
    dimensions = {"ClusterName": cluster, "ServiceName": service}
    running_points: list[tuple[float, float]] = []
    desired_points: list[tuple[float, float]] = []
    index, state = 0, None
    for minute in minutes(start, end):
        while index < len(changes) and changes[index][0] < minute + 60:
            state = changes[index]
            index += 1
        if state is None:
            continue
        _, running, desired = state
        if running == 0 and zero_running == MISSING:
            _mark(applied, CI_ZERO_TASKS)
            continue
        delay = late.get(minute)
        if delay is not None:
            _mark(applied, CI_LATE)
            if math.isinf(delay):
                continue
            received[minute] = minute + 60 + delay
        running_points.append((minute, float(running)))
        desired_points.append((minute, float(desired)))
    if running_points:
        _mark(applied, CI_PER_MINUTE)
    running_key = metric_key(CONTAINER_INSIGHTS_NAMESPACE, RUNNING_TASK_COUNT, dimensions)
    desired_key = metric_key(CONTAINER_INSIGHTS_NAMESPACE, DESIRED_TASK_COUNT, dimensions)
    return Series(
        {running_key: running_points, desired_key: desired_points},
        {running_key: received, desired_key: received},
    )


def emf_series(
    counts: Sequence[tuple[float, str, float]],
    *,
    queue: str,
    flush_seconds: int = METRICS_FLUSH_SECONDS,
    started: float = 0.0,
    stopped: float | None = None,
    applied: set[str] | None = None,
) -> Series:
    """The consumer's counts ``(event time, metric name, value)`` as the datapoints its flushes write.

    The runtime flushes every ``flush_seconds`` after it ``started`` (consumer/runtime/heartbeat.py) and once more
    when it ``stopped`` (consumer/runtime/consumer.py); a count recorded at ``t`` is written by the first flush
    after it. A count outside ``[started, stopped]`` is refused: no process was there to record it. Rules:
    ``emf-flush-time``, ``emf-sum-per-flush``.
    """
    if flush_seconds <= 0:
        raise ValueError(f"flush_seconds: must be > 0, got {flush_seconds}")
    sums: defaultdict[str, defaultdict[float, float]] = defaultdict(lambda: defaultdict(float))
    for t, name, value in counts:
        if t < started or (stopped is not None and t > stopped):
            raise ValueError(f"count {name!r} at t={t}: outside the consumer's run [{started}, {stopped}]")
        flush = started + (math.floor((t - started) / flush_seconds) + 1) * flush_seconds
        if stopped is not None and flush > stopped:
            flush = stopped
        sums[name][flush] += value
    if sums:
        _mark(applied, EMF_FLUSH_TIME)
        _mark(applied, EMF_SUM_PER_FLUSH)
    dimensions = {"Queue": queue}
    return Series(
        {metric_key(METRICS_NAMESPACE, name, dimensions): sorted(points.items()) for name, points in sums.items()}
    )


def _mark(applied: set[str] | None, rule_id: str) -> None:
    if applied is not None:
        applied.add(rule_id)
