"""A metric alarm's next state from the datapoints of its evaluation range, as the CloudWatch user guide documents it.

The rules are the guide's, one per branch of :func:`next_state`, each quoted with its link, except rule 7 (a
breaching point too recent for a premature alarm), where the guide is silent and the reading is said. The guide's
two example tables (3 of 3 and 2 of 3, every TreatMissingData setting) are tests/alarms/test_documented_tables.py,
cell by cell.

- Alarm evaluation (Period, EvaluationPeriods, DatapointsToAlarm, M out of N):
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html
- Configuring how CloudWatch alarms treat missing data, and "How alarm state is evaluated when data is missing":
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html
  (the guide's source as last published on GitHub, 2023-05-17, with the same sections in one page:
  https://github.com/awsdocs/amazon-cloudwatch-user-guide/blob/b35549706cab03cdcd0a8df9956a2381c0315642/doc_source/AlarmThatSendsEmail.md)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from infra.alarms.definitions import (
    ALARM,
    BREACHING,
    COMPARISONS,
    IGNORE,
    INSUFFICIENT_DATA,
    MISSING,
    NOT_BREACHING,
    OK,
    STATES,
    TREAT_MISSING,
    Unsupported,
)

MISSING_DATA_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html"
EVALUATION_URL = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html"

#: "If this parameter is omitted, the default behavior of missing is used." (PutMetricAlarm TreatMissingData)
#: https://docs.aws.amazon.com/sdk-for-kotlin/api/latest/cloudwatch/aws.sdk.kotlin.services.cloudwatch.model/-put-metric-alarm-request/treat-missing-data.html
DEFAULT_TREAT_MISSING = MISSING

#: "Alarms that evaluate metrics in the AWS/DynamoDB namespace always ignore missing data even if you choose a
#: different option for TreatMissingData." (same page, and MISSING_DATA_URL's "Important" note)
ALWAYS_IGNORE_NAMESPACES = frozenset({"AWS/DynamoDB"})

#: How many periods more than EvaluationPeriods the evaluation range holds. The guide states the number only by
#: example: EvaluationPeriods 3, "CloudWatch retrieves the 5 most recent data points ... 5 is the evaluation range
#: for the alarm" (the exact number "depends on the length of the alarm period and whether it is based on a
#: metric with standard resolution or high resolution", which it does not give). MISSING_DATA_URL, section
#: "How alarm state is evaluated when data is missing".
EXTRA_PERIODS = 2


def evaluation_range(evaluation_periods: int) -> int:
    """How many of the most recent periods CloudWatch retrieves to evaluate an alarm: ``evaluation_periods + 2``,
    the documented example (3 evaluation periods, a range of 5) taken as a rule for every alarm.

    The extra periods are why an alarm "might repeatedly re-evaluate the last set of data points for a period of
    time after the metric has stopped flowing": real points stay in the range until they fall out of it.
    """
    if evaluation_periods < 1:
        raise ValueError(f"EvaluationPeriods must be at least 1, got {evaluation_periods}")
    return evaluation_periods + EXTRA_PERIODS


def effective_treat_missing(treat_missing: str | None, namespace: str) -> str:
    """The TreatMissingData CloudWatch applies: ``missing`` when the alarm does not set it, ``ignore`` for a
    namespace that always ignores missing data (AWS/DynamoDB), else the alarm's own setting."""
    if namespace in ALWAYS_IGNORE_NAMESPACES:
        return IGNORE
    if treat_missing is None:
        return DEFAULT_TREAT_MISSING
    _check_treat_missing(treat_missing)
    return treat_missing


def points_to_fill(points: Sequence[float | None], evaluation_periods: int) -> int:
    """How many missing datapoints the evaluation fills with TreatMissingData's result: none when the range holds
    at least EvaluationPeriods real points, else as many as real points are short of it ("CloudWatch uses missing
    data points only as few times as possible"). The guide's tables show this number in their second column."""
    real = sum(1 for point in points if point is not None)
    return max(0, evaluation_periods - real)


def next_state(
    points: Sequence[float | None],
    *,
    evaluation_periods: int,
    datapoints_to_alarm: int,
    threshold: float,
    comparison: str,
    treat_missing: str,
    current: str,
) -> str:
    """The alarm's state after one evaluation of ``points``, its evaluation range oldest first (None: a period
    without a datapoint), given its ``current`` state. Each rule quotes the user guide (MISSING_DATA_URL unless
    said otherwise).

    1. M out of N: ALARM when at least DatapointsToAlarm (M) of the EvaluationPeriods (N) evaluated points breach,
       otherwise OK; there is no hysteresis: with one of three 3-of-3 points "not breaching ... the alarm state
       changes back to OK" (EVALUATION_URL, the figure's example).
    2. "If no data points in the evaluation range are missing, CloudWatch evaluates the alarm based on the most
       recent data points collected" (N of them), and if some are missing but the range still holds at least N real
       ones, "based on the most recent real data points ... In this case, the value you set for how to treat missing
       data is not needed and is ignored". Both: the newest N real points.
    3. Fewer than N real points: "CloudWatch fills in the missing data points with the result you specified for how
       to treat missing data ... However, all real data points in the evaluation range are included in the
       evaluation. CloudWatch uses missing data points only as few times as possible": the real points plus N less
       their number of fills, breaching for ``breaching`` and not breaching for ``notBreaching``.
    4. ``missing`` "If all data points in the alarm evaluation range are missing, the alarm transitions to
       INSUFFICIENT_DATA"; ``ignore`` "The current alarm state is maintained" when all are missing.
    5. ``missing`` and ``ignore`` with some real points: missing points are not counted, only real ones. A real
       non-breaching point makes OK (the tables' rows ``0 - - - -``, ``- - - - 0`` and ``0 - X - -``, OK under
       both); M real breaching points make ALARM (rule 1 applied to the real points; no table row has it).
    6. Premature alarm: all real points breach but fewer than M: "alarms are designed to always go into ALARM state
       when the oldest available breaching datapoint ... is at least as old as the value of Datapoints to Alarm,
       and all other more recent data points are breaching or missing" (its age counted in periods, the newest 1,
       within the evaluation range: "If the oldest breaching data point during the evaluation range is at least as
       old as the value of Datapoints to Alarm"). ``missing`` goes to ALARM, ``ignore`` keeps the current state
       (rows ``- - X - -`` and ``- - - X -``). MISSING_DATA_URL#CloudWatch-alarms-avoiding-premature-transition
    7. Otherwise (every real point breaching, too recent for rule 6: ``- - - - X``) the guide only says the alarm
       "does not go immediately into ALARM state"; ``missing`` gives INSUFFICIENT_DATA (the state for "not enough
       data is available for the metric to determine the alarm state", and what the guide's 2019 tables gave for
       ``- - - - X``: https://github.com/awsdocs/amazon-cloudwatch-user-guide/blob/ed877ecfe94fe082752cce27d061c6198ff3ea88/doc_source/AlarmThatSendsEmail.md),
       ``ignore`` keeps the current state. The current tables hold no such row: this is a reading, not a quote.
    """
    _check(points, evaluation_periods, datapoints_to_alarm, comparison, treat_missing, current)
    # definitions' lambdas are untyped; the comparison is a float one.
    breaches: Callable[[float, float], bool] = COMPARISONS[comparison]
    n, m = evaluation_periods, datapoints_to_alarm
    # (age in periods, newest 1; breaching) of each real point, oldest first.
    real = [(len(points) - i, breaches(value, threshold)) for i, value in enumerate(points) if value is not None]

    if len(real) >= n:  # rule 2, then rule 1
        return _m_of_n(sum(breaching for _, breaching in real[-n:]), m)

    if treat_missing in (BREACHING, NOT_BREACHING):  # rule 3, then rule 1
        filled = n - len(real) if treat_missing == BREACHING else 0
        return _m_of_n(sum(breaching for _, breaching in real) + filled, m)

    undecided = INSUFFICIENT_DATA if treat_missing == MISSING else current
    if not real:  # rule 4
        return undecided
    breaching_count = sum(breaching for _, breaching in real)
    if breaching_count >= m:  # rule 5
        return ALARM
    if breaching_count < len(real):  # rule 5: a real point within the threshold
        return OK
    oldest_age = real[0][0]
    if oldest_age >= m:  # rule 6
        return ALARM if treat_missing == MISSING else current
    return undecided  # rule 7


def _m_of_n(breaching: int, datapoints_to_alarm: int) -> str:
    return ALARM if breaching >= datapoints_to_alarm else OK


def _check_treat_missing(treat_missing: str) -> None:
    if treat_missing not in TREAT_MISSING:
        raise ValueError(f"TreatMissingData must be one of {', '.join(TREAT_MISSING)}, got {treat_missing!r}")


def _check(
    points: Sequence[float | None],
    evaluation_periods: int,
    datapoints_to_alarm: int,
    comparison: str,
    treat_missing: str,
    current: str,
) -> None:
    """Refuse what CloudWatch would refuse, or what this module does not evaluate, naming the value."""
    if evaluation_periods < 1:
        raise ValueError(f"EvaluationPeriods must be at least 1, got {evaluation_periods}")
    if not 1 <= datapoints_to_alarm <= evaluation_periods:
        raise ValueError(
            f"DatapointsToAlarm must be between 1 and EvaluationPeriods ({evaluation_periods}), got {datapoints_to_alarm}"
        )
    if len(points) < evaluation_periods:
        raise ValueError(
            f"the evaluation range holds {len(points)} periods, fewer than EvaluationPeriods ({evaluation_periods})"
        )
    if comparison not in COMPARISONS:
        raise Unsupported(f"comparison operator {comparison} is not implemented")
    _check_treat_missing(treat_missing)
    if current not in STATES:
        raise ValueError(f"current state must be one of {', '.join(STATES)}, got {current!r}")
