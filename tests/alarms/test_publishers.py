"""Container Insights' and the consumer's EMF datapoints, one test per rule, and the EMF model checked against the
runtime's own :class:`~consumer.runtime.observability.Metrics` writing real EMF lines."""

from __future__ import annotations

import ast
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from consumer.contract import METRICS_NAMESPACE
from consumer.runtime.observability import Metrics
from infra.alarms.definitions import Series, metric_key
from infra.alarms.publishers import PUBLISHER_RULES, container_insights_series, emf_series
from infra.alarms.sqs_model import RULES_BY_ID

ROOT = Path(__file__).resolve().parents[2]
CLUSTER, SERVICE, QUEUE = "jobs-cluster", "jobs-service", "work"
COVERED = {"ci-per-minute", "ci-zero-tasks", "ci-late", "emf-flush-time", "emf-sum-per-flush"}


def insights(series: Series, metric: str) -> dict[float, float]:
    key = metric_key("ECS/ContainerInsights", metric, {"ClusterName": CLUSTER, "ServiceName": SERVICE})
    return dict(series.get(key))


def emf(series: Series, metric: str) -> dict[float, float]:
    return dict(series.get(metric_key(METRICS_NAMESPACE, metric, {"Queue": QUEUE})))


def ci(changes: Sequence[tuple[float, int, int]], **options: object) -> tuple[Series, set[str]]:
    applied: set[str] = set()
    series = container_insights_series(
        changes,
        cluster=CLUSTER,
        service=SERVICE,
        start=0,
        end=300,
        applied=applied,
        **options,  # type: ignore[arg-type]
    )
    return series, applied


def test_ci_per_minute_running_and_desired_with_cluster_and_service() -> None:
    series, applied = ci([(130, 2, 3), (10, 1, 1)])  # unsorted on purpose
    assert insights(series, "RunningTaskCount") == {0.0: 1, 60.0: 1, 120.0: 2, 180.0: 2, 240.0: 2}
    assert insights(series, "DesiredTaskCount") == {0.0: 1, 60.0: 1, 120.0: 3, 180.0: 3, 240.0: 3}
    assert {key[2] for key in series.points} == {(("ClusterName", CLUSTER), ("ServiceName", SERVICE))}
    assert "ci-per-minute" in applied
    late, _ = ci([(70, 1, 1)])  # before the first change the state is unknown: no datapoint
    assert list(insights(late, "RunningTaskCount")) == [60.0, 120.0, 180.0, 240.0]


def test_ci_zero_tasks_reading_no_datapoint_or_zero() -> None:
    assert RULES_BY_ID["ci-zero-tasks"].reading
    changes = [(0, 1, 1), (100, 0, 1), (200, 1, 1)]
    series, applied = ci(changes)
    assert insights(series, "RunningTaskCount") == {0.0: 1, 180.0: 1, 240.0: 1}
    assert insights(series, "DesiredTaskCount") == {0.0: 1, 180.0: 1, 240.0: 1}
    assert "ci-zero-tasks" in applied
    zero, _ = ci(changes, zero_running="zero")
    assert insights(zero, "RunningTaskCount") == {0.0: 1, 60.0: 0, 120.0: 0, 180.0: 1, 240.0: 1}
    with pytest.raises(ValueError, match="zero_running"):
        ci(changes, zero_running="0")


def test_ci_late_a_minute_arrives_after_its_end_or_never() -> None:
    """Minute 60's datapoints arrive 90 s after the minute ends (both metrics: one performance log event), minute
    180's never; the others by their minute's end (no entry in ``received``)."""
    assert RULES_BY_ID["ci-late"].reading
    series, applied = ci([(0, 3, 3)], late={60.0: 90.0, 180.0: math.inf})
    assert insights(series, "RunningTaskCount") == {0.0: 3, 60.0: 3, 120.0: 3, 240.0: 3}
    assert insights(series, "DesiredTaskCount") == {0.0: 3, 60.0: 3, 120.0: 3, 240.0: 3}
    assert list(series.received.values()) == [{60.0: 210.0}, {60.0: 210.0}]
    assert "ci-late" in applied
    _, on_time = ci([(0, 3, 3)])
    assert "ci-late" not in on_time
    with pytest.raises(ValueError, match="late: seconds after the minute's end must be > 0"):
        ci([(0, 3, 3)], late={60.0: 0.0})


def test_emf_flush_time_stamps_a_count_at_the_next_flush() -> None:
    applied: set[str] = set()
    series = emf_series([(10, "processed", 1), (59.9, "failed", 1), (60, "timed_out", 1)], queue=QUEUE, applied=applied)
    assert emf(series, "processed") == {60.0: 1} and emf(series, "failed") == {60.0: 1}
    assert emf(series, "timed_out") == {120.0: 1}
    assert "emf-flush-time" in applied
    started = emf_series([(40, "processed", 1)], queue=QUEUE, started=25, flush_seconds=30)
    assert emf(started, "processed") == {55.0: 1}
    stopped = emf_series([(70, "processed", 1)], queue=QUEUE, stopped=90)
    assert emf(stopped, "processed") == {90.0: 1}  # the shutdown flush
    with pytest.raises(ValueError, match="outside"):
        emf_series([(95, "processed", 1)], queue=QUEUE, stopped=90)


def test_emf_sum_per_flush_and_no_value_for_a_name_without_counts() -> None:
    counts = [(1, "processed", 1), (2, "processed", 1), (3, "received", 5), (130, "processed", 1), (140, "deleted", 0)]
    series = emf_series(counts, queue=QUEUE)
    assert emf(series, "processed") == {60.0: 2, 180.0: 1}  # nothing in the flush at 120: no value
    assert emf(series, "received") == {60.0: 5}
    assert emf(series, "deleted") == {180.0: 0}  # a recorded 0 is written
    assert {key[0] for key in series.points} == {"SqsWorker"}


def test_emf_model_matches_the_runtime_metrics_lines() -> None:
    """The same counts through the runtime's Metrics, flushed every minute on a fake clock, give the same points."""
    counts = [(5, "processed", 1), (20, "processed", 1), (61, "failed", 1), (61, "received", 3), (200, "processed", 1)]
    clock = [0.0]
    stream = io.StringIO()
    metrics = Metrics(dimensions={"Queue": QUEUE}, stream=stream, clock=lambda: clock[0])
    pending = sorted(counts)
    for flush in (60, 120, 180, 240):
        while pending and pending[0][0] < flush:
            _, name, value = pending.pop(0)
            metrics.count(name, value)
        clock[0] = flush
        metrics.flush()
    written: dict[tuple[str, str], dict[float, float]] = {}
    for line in stream.getvalue().splitlines():
        document = json.loads(line)
        directive = document["_aws"]["CloudWatchMetrics"][0]
        for metric in directive["Metrics"]:
            name = metric["Name"]
            written.setdefault((directive["Namespace"], name), {})[document["_aws"]["Timestamp"] / 1000] = document[
                name
            ]
    modeled = emf_series(counts, queue=QUEUE)
    assert {(key[0], key[1]): dict(values) for key, values in modeled.points.items()} == written


def constant(path: str, name: str) -> object:
    tree = ast.parse((ROOT / path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in {path}")


def test_the_flush_interval_is_the_runtimes_and_the_stacks() -> None:
    import inspect

    default = inspect.signature(emf_series).parameters["flush_seconds"].default
    assert default == constant("consumer/runtime/heartbeat.py", "METRICS_FLUSH_SECONDS")
    assert default == constant("infra/metrics.py", "METRICS_FLUSH_SECONDS")


def test_every_publisher_rule_has_a_test_here() -> None:
    assert {r.id for r in PUBLISHER_RULES} == COVERED
