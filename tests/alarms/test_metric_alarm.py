"""next_state's rules one by one (infra/alarms/metric_alarm.py numbers them), beyond the guide's two tables
(tests/alarms/test_documented_tables.py): each test names the rule it would catch being dropped."""

from __future__ import annotations

import pytest

from infra.alarms.definitions import (
    ALARM,
    BREACHING,
    IGNORE,
    INSUFFICIENT_DATA,
    MISSING,
    NOT_BREACHING,
    OK,
    STATES,
    TREAT_MISSING,
    Unsupported,
)
from infra.alarms.metric_alarm import (
    DEFAULT_TREAT_MISSING,
    effective_treat_missing,
    evaluation_range,
    next_state,
    points_to_fill,
)

THRESHOLD = 10.0
#: Non-breaching, breaching and missing (the guide's 0, X and -), for GreaterThanThreshold at THRESHOLD.
o, x, __ = 1.0, 20.0, None


def state(
    points: list[float | None],
    n: int = 3,
    m: int | None = None,
    treat: str = MISSING,
    current: str = OK,
    comparison: str = "GreaterThanThreshold",
    threshold: float = THRESHOLD,
) -> str:
    return next_state(
        points,
        evaluation_periods=n,
        datapoints_to_alarm=n if m is None else m,
        threshold=threshold,
        comparison=comparison,
        treat_missing=treat,
        current=current,
    )


# -- the evaluation range --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "expected"), [(1, 3), (3, 5), (5, 7), (60, 62)])
def test_evaluation_range_is_evaluation_periods_plus_two(n: int, expected: int) -> None:
    """The documented example (3 evaluation periods, a range of 5) as the rule for every alarm."""
    assert evaluation_range(n) == expected


def test_evaluation_range_refuses_no_periods() -> None:
    with pytest.raises(ValueError, match="EvaluationPeriods must be at least 1, got 0"):
        evaluation_range(0)


# -- rule 1: M out of N -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "expected"), [(1, ALARM), (2, ALARM), (3, OK)])
def test_alarm_when_at_least_m_of_n_breach(m: int, expected: str) -> None:
    """Two breaching of three: enough for M of 1 or 2, not for 3; they need not be consecutive."""
    assert state([o, o, x, o, x], m=m) == expected


@pytest.mark.parametrize("treat", TREAT_MISSING)
def test_back_to_ok_as_soon_as_fewer_than_m_breach(treat: str) -> None:
    """No hysteresis: an ALARM goes back to OK once one of the N evaluated points is within the threshold (the
    guide's figure, period six), whatever TreatMissingData."""
    assert state([x, x, x, x, o], current=ALARM, treat=treat) == OK
    assert state([x, x, x, x, x], current=OK, treat=treat) == ALARM


@pytest.mark.parametrize(
    ("comparison", "breaching", "not_breaching"),
    [
        ("GreaterThanOrEqualToThreshold", THRESHOLD, THRESHOLD - 1),
        ("GreaterThanThreshold", THRESHOLD + 1, THRESHOLD),
        ("LessThanThreshold", THRESHOLD - 1, THRESHOLD),
        ("LessThanOrEqualToThreshold", THRESHOLD, THRESHOLD + 1),
    ],
)
def test_comparison_operator_decides_breaching(comparison: str, breaching: float, not_breaching: float) -> None:
    assert state([breaching] * 5, comparison=comparison, n=1) == ALARM
    assert state([not_breaching] * 5, comparison=comparison, n=1) == OK


# -- rule 2: at least N real points: the newest N, TreatMissingData not used ------------------------------------


def test_no_missing_evaluates_only_the_newest_n() -> None:
    """The older points of the range are not evaluated when nothing is missing: breaching ones there do not count."""
    assert state([x, x, o, o, o], m=1) == OK
    assert state([o, o, o, o, x], m=1) == ALARM


@pytest.mark.parametrize("treat", TREAT_MISSING)
def test_enough_real_points_reach_back_into_the_range(treat: str) -> None:
    """Three real breaching points among five, the newest missing: the newest three real ones are evaluated (back to
    the oldest), not the newest three periods, and no missing point is filled in whatever the setting."""
    assert state([x, __, x, __, x], treat=treat) == ALARM
    assert state([x, o, x, __, x], treat=treat) == OK  # the oldest X is a fourth real point: not evaluated


@pytest.mark.parametrize("treat", [BREACHING, NOT_BREACHING])
def test_enough_real_points_ignore_treat_missing(treat: str) -> None:
    """A non-breaching real point among the newest three real keeps the alarm OK even where missing counts as
    breaching, and two breaching real points make a 2-of-3 ALARM even where missing counts as not breaching."""
    assert state([o, o, x, __, x], treat=treat) == OK
    assert state([o, x, __, x, __], m=2, treat=treat) == ALARM


# -- rule 3: fewer than N real points: fill as few as possible, all real points included -------------------------


def test_breaching_fills_only_the_points_short_of_n() -> None:
    """One real non-breaching point and four missing, 3 of 3: only two are filled as breaching, so OK (the guide's
    ``0 - - - -``); filling all four would make ALARM."""
    assert state([o, __, __, __, __], treat=BREACHING) == OK
    assert state([__, __, __, __, __], treat=BREACHING) == ALARM


def test_real_points_count_wherever_they_are_in_the_range() -> None:
    """Real points older than the newest N periods are included: two breaching ones, with not-breaching fills, make a
    2-of-3 ALARM although the newest three periods hold only one of them."""
    assert state([x, __, __, __, x], m=2, treat=NOT_BREACHING) == ALARM


@pytest.mark.parametrize(("treat", "expected"), [(BREACHING, ALARM), (NOT_BREACHING, OK)])
def test_fills_take_treat_missings_result(treat: str, expected: str) -> None:
    """One real non-breaching point, 2 of 3: two fills make ALARM when missing breaches, OK when it does not."""
    assert state([__, __, __, __, o], m=2, treat=treat) == expected


@pytest.mark.parametrize("current", STATES)
@pytest.mark.parametrize(("treat", "expected"), [(BREACHING, ALARM), (NOT_BREACHING, OK)])
def test_all_missing_filled(treat: str, expected: str, current: str) -> None:
    assert state([__] * 5, treat=treat, current=current) == expected


# -- rule 4: all missing with missing / ignore -------------------------------------------------------------------


@pytest.mark.parametrize("current", STATES)
def test_all_missing_is_insufficient_data_with_missing(current: str) -> None:
    assert state([__] * 5, treat=MISSING, current=current) == INSUFFICIENT_DATA


@pytest.mark.parametrize("current", STATES)
def test_all_missing_keeps_the_state_with_ignore(current: str) -> None:
    assert state([__] * 5, treat=IGNORE, current=current) == current


# -- rule 5: some real points with missing / ignore: only real points counted ------------------------------------


@pytest.mark.parametrize("treat", [MISSING, IGNORE])
@pytest.mark.parametrize("current", STATES)
def test_m_real_breaching_points_alarm_without_n(treat: str, current: str) -> None:
    """2 of 4 with three real points, two of them breaching and one not: ALARM, the non-breaching one
    notwithstanding (missing points are not counted against the alarm)."""
    assert state([x, __, x, __, o, __], n=4, m=2, treat=treat, current=current) == ALARM


@pytest.mark.parametrize("treat", [MISSING, IGNORE])
@pytest.mark.parametrize("current", STATES)
def test_a_real_point_within_the_threshold_is_ok(treat: str, current: str) -> None:
    """Fewer than M breaching and one real point within the threshold: OK from any state, even with the breaching
    point old enough for a premature alarm (the guide's ``0 - X - -``, 2 of 3)."""
    assert state([o, __, x, __, __], m=2, treat=treat, current=current) == OK
    assert state([__, __, __, o, __], treat=treat, current=current) == OK


# -- rule 6: premature alarm -------------------------------------------------------------------------------------


@pytest.mark.parametrize("current", STATES)
def test_premature_alarm_with_missing(current: str) -> None:
    """Only breaching real points, the oldest at least M periods old (the newest is 1), the rest missing: ALARM
    although fewer than M breach; one period younger is not enough."""
    assert state([__, __, x, __, __], m=3, current=current) == ALARM  # age 3
    assert state([x, __, __, __, __], m=3, current=current) == ALARM  # age 5: anywhere in the range
    assert state([__, __, __, x, x], m=3, current=current) == INSUFFICIENT_DATA  # oldest is 2 periods old


@pytest.mark.parametrize("current", STATES)
def test_premature_alarm_keeps_the_state_with_ignore(current: str) -> None:
    assert state([__, __, x, __, __], m=3, treat=IGNORE, current=current) == current


# -- rule 7: too recent for a premature alarm --------------------------------------------------------------------


@pytest.mark.parametrize("current", STATES)
@pytest.mark.parametrize("m", [2, 3])
def test_recent_breach_alone_is_insufficient_data_with_missing(m: int, current: str) -> None:
    """``- - - - X``: "does not go immediately into ALARM state", nor to OK on a breaching point."""
    assert state([__, __, __, __, x], m=m, current=current) == INSUFFICIENT_DATA


@pytest.mark.parametrize("current", STATES)
def test_recent_breach_alone_keeps_the_state_with_ignore(current: str) -> None:
    assert state([__, __, __, __, x], treat=IGNORE, current=current) == current


# -- points_to_fill and TreatMissingData's default -------------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "expected"), [([__] * 5, 3), ([o, __, __, __, __], 2), ([x, __, x, __, __], 1), ([o, __, x, __, x], 0)]
)
def test_points_to_fill(points: list[float | None], expected: int) -> None:
    assert points_to_fill(points, 3) == expected
    assert points_to_fill([o, o, o, o, o], 3) == 0


def test_treat_missing_defaults_to_missing() -> None:
    assert DEFAULT_TREAT_MISSING == MISSING
    assert effective_treat_missing(None, "SqsWorker") == MISSING
    assert effective_treat_missing(BREACHING, "AWS/SQS") == BREACHING


@pytest.mark.parametrize("treat", [None, *TREAT_MISSING])
def test_dynamodb_always_ignores_missing_data(treat: str | None) -> None:
    assert effective_treat_missing(treat, "AWS/DynamoDB") == IGNORE


# -- refusals ----------------------------------------------------------------------------------------------------


def test_anomaly_detection_comparison_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="comparison operator LessThanLowerOrGreaterThanUpperThreshold"):
        state([o] * 5, comparison="LessThanLowerOrGreaterThanUpperThreshold")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0, "m": 0}, "EvaluationPeriods must be at least 1, got 0"),
        ({"m": 0}, r"DatapointsToAlarm must be between 1 and EvaluationPeriods \(3\), got 0"),
        ({"m": 4}, r"DatapointsToAlarm must be between 1 and EvaluationPeriods \(3\), got 4"),
        ({"n": 6}, r"the evaluation range holds 5 periods, fewer than EvaluationPeriods \(6\)"),
        ({"treat": "Missing"}, "TreatMissingData must be one of .*, got 'Missing'"),
        ({"current": "ALARMING"}, "current state must be one of .*, got 'ALARMING'"),
    ],
)
def test_invalid_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        state([o] * 5, **kwargs)  # type: ignore[arg-type]


def test_invalid_treat_missing_is_refused_by_effective_treat_missing() -> None:
    with pytest.raises(ValueError, match="got 'Breaching'"):
        effective_treat_missing("Breaching", "AWS/SQS")
