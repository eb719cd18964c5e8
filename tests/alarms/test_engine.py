"""The clock (infra/alarms/engine.py) on small series: TreatMissingData as CloudWatch applies it, late points, and the
values a plot draws."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infra.alarms.definitions import ALARM, OK, MetricAlarm, MetricStat, Query, Series, metric_key
from infra.alarms.engine import alarm_values, evaluate


def _alarm(namespace: str, treat_missing: str = "breaching", *, expression: str | None = None) -> MetricAlarm:
    stat = MetricStat(metric_key(namespace, "Errors", {"TableName": "t"}), "Sum", 60)
    queries = (
        (Query("m", metric=stat),)
        if expression is None
        else (Query("m", metric=stat, return_data=False), Query("e", expression=expression))
    )
    return MetricAlarm(
        logical_id="A",
        name="a",
        period=60,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        threshold=1,
        comparison="GreaterThanOrEqualToThreshold",
        treat_missing=treat_missing,
        queries=queries,
    )


def _states(alarm: MetricAlarm, series: Series, end: float) -> list[tuple[int, str]]:
    return [(c.t, c.to_state) for c in evaluate([alarm], [], series, end=end)]


def test_missing_data_breaches_where_the_alarm_says_so() -> None:
    """One real point below the threshold at minute 0, then nothing: breaching missing data alarms."""
    series = Series({metric_key("AWS/SQS", "Errors", {"TableName": "t"}): [(0, 0)]})
    assert _states(_alarm("AWS/SQS"), series, 600)[-1][1] == ALARM


def test_a_dynamodb_alarm_ignores_missing_data_whatever_it_says() -> None:
    """'Alarms that evaluate metrics in the AWS/DynamoDB namespace always ignore missing data': the same series and
    setting stay OK."""
    series = Series({metric_key("AWS/DynamoDB", "Errors", {"TableName": "t"}): [(0, 0)]})
    assert _states(_alarm("AWS/DynamoDB"), series, 600) == [(60, OK)]


def test_alarm_values_are_what_the_alarm_compares() -> None:
    """The newest whole period's value at each minute: the statistic, or the math's result (missing: None)."""
    key = metric_key("AWS/SQS", "Errors", {"TableName": "t"})
    series = Series({key: [(60, 2), (70, 3), (180, 1)]})
    assert alarm_values(_alarm("AWS/SQS"), series, end=300) == [
        (0, None), (60, None), (120, 5), (180, None), (240, 1), (300, None)
    ]  # fmt: skip
    doubled = alarm_values(_alarm("AWS/SQS", expression="FILL(m, 0) * 2"), series, end=300)
    assert doubled == [(0, 0), (60, 0), (120, 10), (180, 0), (240, 2), (300, 0)]


def _no_task() -> MetricAlarm:
    """1 of 1: FILL(tasks, 0) < 1, as the wake-up reads no task (a math result has a value every period, so a
    missing minute is not skipped for an older real point)."""
    return replace(
        _alarm("ECS/ContainerInsights", "notBreaching", expression="FILL(m, 0)"), comparison="LessThanThreshold"
    )


def test_a_late_point_is_missing_until_it_arrives_then_read() -> None:
    """Five tasks every minute, minute 2's point received 60 s after its minute ends: the evaluation at 180 s reads
    minute 2 as missing (no task), the one at 240 s has it and minute 3, and the alarm is OK again; on time, it never
    leaves OK."""
    key = metric_key("ECS/ContainerInsights", "Errors", {"TableName": "t"})
    points = [(60.0 * m, 5.0) for m in range(6)]
    on_time = Series({key: points})
    late = Series({key: points}, {key: {120.0: 240.0}})
    states = [(c.t, c.to_state) for c in evaluate([_no_task()], [], on_time, end=360, created=60)]
    assert states == [(60, OK)]
    states = [(c.t, c.to_state) for c in evaluate([_no_task()], [], late, end=360, created=60)]
    assert states == [(60, OK), (180, ALARM), (240, OK)]


def test_series_json_keeps_when_a_late_point_arrived() -> None:
    """A SERIES point ``[t, value, received]`` round-trips; a point received before its time is refused."""
    key = metric_key("ECS/ContainerInsights", "RunningTaskCount", {"ServiceName": "s"})
    series = Series({key: [(0.0, 1.0), (60.0, 1.0)]}, {key: {60.0: 200.0}})
    document = series.to_json()
    assert document["metrics"] == [
        {
            "namespace": "ECS/ContainerInsights",
            "metric": "RunningTaskCount",
            "dimensions": {"ServiceName": "s"},
            "points": [[0.0, 1.0], [60.0, 1.0, 200.0]],
        }
    ]
    parsed, _ = Series.from_json(document)
    assert (parsed.points, parsed.received) == (series.points, series.received)
    bad = {"metrics": [{"namespace": "N", "metric": "M", "points": [[60, 1, 30]]}]}
    with pytest.raises(ValueError) as refused:
        Series.from_json(bad)
    assert str(refused.value) == (
        "SERIES metrics[0].points[0]: received must be >= t (a point arrives after its time), got 30"
    )


def _marked_on_time(series: Series) -> Series:
    """The same points, each listed as received when its period ends: the same values for every evaluation, but
    read again every minute (the engine never skips a metric with listed arrivals)."""
    return Series(series.points, {key: {t: t for t, _ in values} for key, values in series.points.items()})


@pytest.mark.parametrize(
    ("period", "evaluation_periods", "datapoints_to_alarm", "stat", "treat_missing"),
    [
        (60, 1, 1, "Sum", "notBreaching"),
        (300, 3, 2, "Maximum", "missing"),
        (300, 5, 5, "Sum", "breaching"),
        (900, 2, 1, "Average", "ignore"),
    ],
)
def test_steady_stretches_give_the_changes_a_minute_by_minute_reading_gives(
    period: int, evaluation_periods: int, datapoints_to_alarm: int, stat: str, treat_missing: str
) -> None:
    """Hours of a steady metric with a few changes and a gap: the evaluations the engine skips while every period of
    an alarm's range keeps its value change nothing; the same changes as reading every minute, each at its minute."""
    key = metric_key("AWS/SQS", "Errors", {"TableName": "t"})
    changes = {720: 3.0, 780: 0.0, 5040: 2.0, 9000: None, 12000: 0.0, 20040: 4.0, 20640: 0.0}
    points: list[tuple[float, float]] = []
    value: float | None = 0.0
    for t in range(0, 43200, 60):
        value = changes.get(t, value)
        if value is not None:
            points.append((float(t + 7), value))
    series = Series({key: points})
    stat_query = MetricStat(key, stat, period)
    alarm = replace(
        _alarm("AWS/SQS", treat_missing),
        period=period,
        evaluation_periods=evaluation_periods,
        datapoints_to_alarm=datapoints_to_alarm,
        threshold=2,
        queries=(Query("m", metric=stat_query),),
    )
    skipped = _states(alarm, series, 43200)
    assert skipped == _states(alarm, _marked_on_time(series), 43200)
    assert len(skipped) >= 3
