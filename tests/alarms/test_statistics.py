"""Statistics per period over raw datapoints (infra/alarms/statistics.py): what is computed, how percentiles rank,
which windows a point falls in, and what is refused."""

from __future__ import annotations

import re

import pytest

from infra.alarms.definitions import Unsupported
from infra.alarms.statistics import SUPPORTED_STATS, aggregate, check_period, check_stat, period_values

VALUES = [4.0, 1.0, 3.0, 2.0]


@pytest.mark.parametrize(
    "stat", ["Sum", "Average", "Minimum", "Maximum", "SampleCount", "p0", "p50", "p99", "p99.9", "p95.45", "p100"]
)
def test_supported_statistics_pass(stat: str) -> None:
    check_stat(stat)


def test_supported_stats_lists_cloudwatch_spellings() -> None:
    assert SUPPORTED_STATS == ("SampleCount", "Sum", "Average", "Minimum", "Maximum", "pNN.NN")


@pytest.mark.parametrize(
    "stat",
    [
        "TM(10%:90%)",
        "tm99",
        "IQM",
        "wm98",
        "WM(10%:90%)",
        "PR(:300)",
        "tc90",
        "TC(0.005:0.030)",
        "ts90",
        "TS(80%:)",
        "p101",
        "p99.999",
        "P99",
        "p",
        "sum",
        "average",
        "",
    ],
)
def test_other_statistics_are_unsupported(stat: str) -> None:
    with pytest.raises(Unsupported, match=f"^{re.escape(f'statistic {stat} is not implemented')}$"):
        check_stat(stat)


def test_unsupported_message_names_the_statistic() -> None:
    with pytest.raises(Unsupported) as raised:
        check_stat("TM(10%:90%)")
    assert str(raised.value) == "statistic TM(10%:90%) is not implemented"


@pytest.mark.parametrize("period", [60, 120, 300, 3600, 86_400])
def test_minute_multiples_pass(period: int) -> None:
    check_period(period)


@pytest.mark.parametrize("period", [10, 30, 45, 90, 61])
def test_high_resolution_and_odd_periods_are_unsupported(period: int) -> None:
    with pytest.raises(Unsupported, match=f"period {period} s is not implemented"):
        check_period(period)


@pytest.mark.parametrize("period", [0, -60])
def test_non_positive_period_is_a_value_error(period: int) -> None:
    with pytest.raises(ValueError, match=f"period must be a positive number of seconds, got {period}") as raised:
        check_period(period)
    assert not isinstance(raised.value, Unsupported)


@pytest.mark.parametrize(
    ("stat", "expected"),
    [("Sum", 10.0), ("Average", 2.5), ("Minimum", 1.0), ("Maximum", 4.0), ("SampleCount", 4.0)],
)
def test_basic_statistics(stat: str, expected: float) -> None:
    assert aggregate(VALUES, stat) == expected


def test_sum_and_average_do_not_drift() -> None:
    assert aggregate([0.1] * 10, "Sum") == 1.0
    assert aggregate([0.1] * 10, "Average") == 0.1


ONE_TO_TEN = [float(v) for v in range(10, 0, -1)]  # unsorted on purpose


@pytest.mark.parametrize(
    ("stat", "expected"),
    [
        ("p0", 1.0),  # the minimum
        ("p10", 1.0),  # ceil(1.0) = 1st
        ("p10.01", 2.0),  # ceil(1.001) = 2nd
        ("p50", 5.0),  # ceil(5.0) = 5th: nearest rank, no interpolation (that would be 5.5)
        ("p90", 9.0),
        ("p95", 10.0),  # ceil(9.5) = 10th
        ("p99", 10.0),
        ("p100", 10.0),  # the maximum
    ],
)
def test_percentiles_are_nearest_rank(stat: str, expected: float) -> None:
    assert aggregate(ONE_TO_TEN, stat) == expected


def test_percentile_rank_is_exact() -> None:
    """p7 of 1..100 is the 7th value; 0.07 * 100 in floats is 7.000000000000001, which would round up to the 8th."""
    assert aggregate([float(v) for v in range(1, 101)], "p7") == 7.0
    assert aggregate([float(v) for v in range(1, 101)], "p95.45") == 96.0


def test_percentile_of_one_value_is_that_value() -> None:
    assert aggregate([42.0], "p0") == aggregate([42.0], "p50") == aggregate([42.0], "p100") == 42.0


def test_aggregate_of_nothing_is_refused() -> None:
    """A period without datapoints has no value, not a SampleCount of 0: the caller must see it as missing."""
    with pytest.raises(ValueError, match="SampleCount of no values"):
        aggregate([], "SampleCount")


def test_aggregate_refuses_unsupported_stat() -> None:
    with pytest.raises(Unsupported, match="statistic tm90 is not implemented"):
        aggregate(VALUES, "tm90")


def test_period_values_windows_are_half_open() -> None:
    """A point at a window's start is in it; one at start + period is in the next window."""
    points = [(0.0, 1.0), (59.9, 2.0), (60.0, 5.0), (119.0, 7.0)]
    assert period_values(points, "Sum", [0.0, 60.0], 60) == [3.0, 12.0]


def test_period_values_empty_window_is_missing() -> None:
    points = [(5.0, 1.0), (125.0, 2.0)]
    assert period_values(points, "SampleCount", [0.0, 60.0, 120.0, 180.0], 60) == [1.0, None, 1.0, None]


def test_period_values_sorts_points_and_allows_any_starts() -> None:
    points = [(130.0, 9.0), (10.0, 3.0), (70.0, 4.0), (20.0, 1.0)]
    assert period_values(points, "Maximum", [0.0, 60.0, 120.0], 60) == [3.0, 4.0, 9.0]
    # Windows of 120 s started each minute overlap: each point counts in both windows it falls in.
    assert period_values(points, "Minimum", [0.0, 60.0], 120) == [1.0, 4.0]
    assert period_values([], "Average", [0.0], 60) == [None]


def test_period_values_applies_the_stat() -> None:
    points = [(float(t), float(t % 7)) for t in range(60)]
    values = [float(t % 7) for t in range(60)]
    for stat in ("Sum", "Average", "Minimum", "Maximum", "SampleCount", "p90"):
        assert period_values(points, stat, [0.0], 60) == [aggregate(values, stat)]


def test_period_values_refuses_unsupported_period_and_stat() -> None:
    with pytest.raises(Unsupported, match="period 30 s"):
        period_values([(0.0, 1.0)], "Sum", [0.0], 30)
    with pytest.raises(Unsupported, match="statistic IQM"):
        period_values([(0.0, 1.0)], "IQM", [0.0], 60)
