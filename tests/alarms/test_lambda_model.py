"""What AWS/Lambda publishes for a function an SQS event source mapping invokes (infra/alarms/lambda_model.py)."""

from __future__ import annotations

import pytest

from consumer.contract import METRICS_NAMESPACE
from infra.alarms.definitions import metric_key
from infra.alarms.lambda_model import (
    CONCURRENT_EXECUTIONS,
    DURATION,
    ERRORS,
    INVOCATIONS,
    LAMBDA_NAMESPACE,
    LAMBDA_RULES,
    THROTTLES,
    Invocation,
    invocation_emf_series,
    lambda_series,
)

FUNCTION = "orders-consumer"


def _points(metric: str, invocations: list[Invocation], throttles: tuple[float, ...] = (), end: float = 600):
    series = lambda_series(invocations, throttles, function=FUNCTION, start=0, end=end)
    return series.get(metric_key(LAMBDA_NAMESPACE, metric, {"FunctionName": FUNCTION}))


def test_lambda_series_counts_invocations_in_the_minute_they_end() -> None:
    """Invocations is a Sum per minute, each invocation in the minute it ends (lambda-minute)."""
    runs = [Invocation(10, 5), Invocation(50, 20), Invocation(130, 1)]
    assert [(0.0, 1.0), (60.0, 1.0), (120.0, 1.0)] == _points(INVOCATIONS, runs)


def test_lambda_series_errors_are_zero_for_an_invocation_without_one() -> None:
    """Errors is binary per invocation: 1 for a function error, 0 otherwise (lambda-invocation)."""
    runs = [Invocation(1, 1), Invocation(2, 1, error=True), Invocation(61, 1)]
    assert [(0.0, 1.0), (60.0, 0.0)] == _points(ERRORS, runs)


def test_lambda_series_publishes_nothing_for_a_minute_without_invocations() -> None:
    """A minute with nothing running, ending or throttled has no datapoint at all, not a 0 (lambda-idle)."""
    runs = [Invocation(1, 1), Invocation(301, 1)]
    for metric in (INVOCATIONS, ERRORS, THROTTLES, CONCURRENT_EXECUTIONS):
        assert [t for t, _ in _points(metric, runs, (302.0,))] in ([0.0, 300.0], [300.0]), metric
    assert [] == _points(INVOCATIONS, [])


def test_lambda_series_throttles_count_requests_without_invocations() -> None:
    """A throttled request counts in Throttles in its minute and records no invocation (lambda-throttles)."""
    assert [(60.0, 2.0)] == _points(THROTTLES, [], (61.0, 80.0))
    assert [] == _points(INVOCATIONS, [], (61.0, 80.0))


def test_lambda_series_concurrency_is_the_minutes_most_running_at_once() -> None:
    """ConcurrentExecutions is each minute's most invocations at once, counting one that spans the minute."""
    runs = [Invocation(10, 100), Invocation(20, 5), Invocation(30, 5), Invocation(40, 5)]
    assert [(0.0, 2.0), (60.0, 1.0)] == _points(CONCURRENT_EXECUTIONS, runs)


def test_lambda_series_concurrency_counts_an_end_before_a_start_at_the_same_instant() -> None:
    """One invocation ending as the next starts is one at a time, not two."""
    assert [(0.0, 1.0)] == _points(CONCURRENT_EXECUTIONS, [Invocation(0, 10), Invocation(10, 10)])


def test_lambda_series_duration_is_one_value_per_invocation_in_milliseconds() -> None:
    """Duration: one datapoint per invocation, at its end, in milliseconds."""
    assert [(12.5, 2500.0), (70.0, 10_000.0)] == _points(DURATION, [Invocation(10, 2.5), Invocation(60, 10)])


def test_lambda_series_refuses_a_negative_duration() -> None:
    """An invocation cannot run backwards: refused, naming the field and the value."""
    with pytest.raises(ValueError, match=r"invocations: seconds must be >= 0, got -1"):
        _points(INVOCATIONS, [Invocation(10, -1)])


def test_invocation_emf_series_writes_each_count_at_its_invocations_end() -> None:
    """A lambda worker's counts are flushed at the end of the invocation that made them (emf-per-invocation)."""
    series = invocation_emf_series([(12.0, "dead_lettered", 1), (12.0, "dead_lettered", 1)], queue="q")
    assert [(12.0, 2.0)] == series.get(metric_key(METRICS_NAMESPACE, "dead_lettered", {"Queue": "q"}))


def test_lambda_rules_cite_aws_pages_and_have_unique_ids() -> None:
    """Every rule names an AWS documentation page, and no two share an id."""
    assert len({r.id for r in LAMBDA_RULES}) == len(LAMBDA_RULES)
    assert [r.id for r in LAMBDA_RULES if not r.url.startswith("https://docs.aws.amazon.com/")] == []
