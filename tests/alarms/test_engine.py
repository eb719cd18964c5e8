"""The clock (infra/alarms/engine.py) on small series: TreatMissingData as CloudWatch applies it, and the values a
plot draws."""

from __future__ import annotations

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
