"""The statistic an alarm reads, computed per period from the raw datapoints a SERIES file holds.

CloudWatch turns the raw values published in a period into one datapoint per period with the alarm's statistic;
a period in which nothing was published has no datapoint at all (missing data, even for SampleCount), which is
what the alarm's TreatMissingData then decides about.
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Statistics-definitions.html

Only the statistics whose value on raw points is stated plainly are implemented; the others (trimmed mean, IQM,
winsorized mean, percentile rank, trimmed count and sum) depend on CloudWatch's interpolation and are refused
rather than guessed.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from decimal import Decimal

from infra.alarms.definitions import Unsupported

#: The statistics computed on raw values, spelled as CloudWatch spells them, plus percentiles ``pNN`` / ``pNN.NN``.
SUPPORTED_STATS = ("SampleCount", "Sum", "Average", "Minimum", "Maximum", "pNN.NN")

#: ``p`` then 0 to 100 with up to two decimals: an alarm's ExtendedStatistic is "a value between p0.0 and p100",
#: and EC2's guide lists ``pNN.NN``, "any percentile, using up to two decimal places (for example, p95.45)".
#: https://docs.aws.amazon.com/sdk-for-kotlin/api/latest/cloudwatch/aws.sdk.kotlin.services.cloudwatch.model/-put-metric-alarm-request/extended-statistic.html
#: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring_get_statistics.html
_PERCENTILE = re.compile(r"p(\d{1,3}(?:\.\d{1,2})?)")

#: Regular (not high-resolution) alarms read periods of whole minutes: "a regular alarm with a period of any
#: multiple of 60 seconds". High-resolution alarms (periods of 10, 20 or 30 s) are evaluated every 10 s, which this
#: evaluator does not model.
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html#high-resolution-alarms
MINUTE = 60


def _percentile(stat: str) -> Decimal | None:
    """The percentile ``stat`` names (``p99.9`` -> 99.9), None when it is not a percentile."""
    match = _PERCENTILE.fullmatch(stat)
    if match is None:
        return None
    value = Decimal(match.group(1))
    return value if value <= 100 else None


def check_stat(stat: str) -> None:
    """Refuse a statistic that is not computed here, naming it, so an alarm on it is never evaluated wrongly."""
    if stat in SUPPORTED_STATS[:-1] or _percentile(stat) is not None:
        return
    raise Unsupported(f"statistic {stat} is not implemented")


def check_period(period: int) -> None:
    """Refuse a period this evaluator cannot evaluate as CloudWatch does: not positive (ValueError), or not a
    multiple of a minute (Unsupported: high-resolution alarms, of 10, 20 or 30 s, are evaluated every 10 s)."""
    if period <= 0:
        raise ValueError(f"period must be a positive number of seconds, got {period}")
    if period % MINUTE:
        raise Unsupported(f"period {period} s is not implemented (only multiples of {MINUTE} s)")


def aggregate(values: Sequence[float], stat: str) -> float:
    """``stat`` over the raw values of one period (at least one: an empty period has no datapoint).

    Percentiles use the nearest-rank method: the smallest value with at least NN percent of the values at or
    below it, i.e. the ``ceil(NN/100 * n)``-th smallest (p0 is the minimum, p100 the maximum). That is the reading
    of the statistics page: "p95 ... means that 95 percent of the data within the period is lower than this
    value", and "p99 is the maximum value of the remaining 99%" once the highest 1% is set aside. CloudWatch
    itself may interpolate or approximate on large samples; the nearest rank is always one of the raw values.
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Statistics-definitions.html
    """
    check_stat(stat)
    if not values:
        raise ValueError(f"{stat} of no values: a period without datapoints is missing data, not a value")
    if stat == "SampleCount":
        return float(len(values))
    if stat == "Sum":
        return float(math.fsum(values))
    if stat == "Average":
        return float(math.fsum(values) / len(values))
    if stat == "Minimum":
        return float(min(values))
    if stat == "Maximum":
        return float(max(values))
    percentile = _percentile(stat)
    assert percentile is not None  # check_stat accepted it
    ordered = sorted(values)
    # Decimal keeps the rank exact (0.95 * 20 is 19, not 18.999...).
    rank = math.ceil(percentile * len(ordered) / 100)
    return float(ordered[max(rank, 1) - 1])


def period_values(
    points: Sequence[tuple[float, float]], stat: str, starts: Sequence[float], period: int
) -> list[float | None]:
    """One datapoint per window ``[start, start + period)``: ``stat`` over the raw points whose t is in it, or
    None when none is (CloudWatch has no datapoint for a period nothing was published in)."""
    check_stat(stat)
    check_period(period)
    ordered = sorted(points, key=lambda point: point[0])
    times = [t for t, _ in ordered]
    result: list[float | None] = []
    for start in starts:
        low = bisect.bisect_left(times, start)
        high = bisect.bisect_left(times, start + period)
        window = [value for _, value in ordered[low:high]]
        result.append(aggregate(window, stat) if window else None)
    return result
