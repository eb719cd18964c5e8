"""The user guide's two example tables of alarm evaluation with missing data, every cell asserted on next_state.

Copied from "How alarm state is evaluated when data is missing":
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html#alarms-evaluating-missing-data
as the guide's source last published it on GitHub (2023-05-17; markdown escapes and code quotes removed):
https://github.com/awsdocs/amazon-cloudwatch-user-guide/blob/b35549706cab03cdcd0a8df9956a2381c0315642/doc_source/AlarmThatSendsEmail.md

The guide's legend: the data points are the evaluation range, "the most recent data point on the right"; "0 is a
non-breaching data point, X is a breaching data point, and - is a missing data point". Both tables have an
evaluation range of 5 and EvaluationPeriods 3; DatapointsToAlarm is 3 in the first and 2 in the second. The second
column is the number of data points filled in with TreatMissingData's result (the second table heads it
"# of missing data points" but counts the same thing: 1 for ``0 - X - -``, which has 3 missing).
"""

from __future__ import annotations

import pytest

from infra.alarms.definitions import BREACHING, IGNORE, MISSING, NOT_BREACHING, STATES
from infra.alarms.metric_alarm import evaluation_range, next_state, points_to_fill

SOURCE = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html"

# "In the first table, Datapoints to Alarm and Evaluation Periods are both 3."
TABLE_3_OF_3 = """
| Data points | # of data points that must be filled | MISSING | IGNORE | BREACHING | NOT BREACHING |
| --- | --- | --- | --- | --- | --- |
| 0 - X - X | 0 | OK | OK | OK | OK |
| 0 - - - - | 2 | OK | OK | OK | OK |
| - - - - - | 3 | INSUFFICIENT_DATA | Retain current state | ALARM | OK |
| 0 X X - X | 0 | ALARM | ALARM | ALARM | ALARM |
| - - X - - | 2 | ALARM | Retain current state | ALARM | OK |
"""

# "In the next table, the Period is again set to 5 minutes, and Datapoints to Alarm is only 2 while Evaluation
# Periods is 3. This is a 2 out of 3, M out of N alarm."
TABLE_2_OF_3 = """
| Data points | # of missing data points | MISSING | IGNORE | BREACHING | NOT BREACHING |
| --- | --- | --- | --- | --- | --- |
| 0 - X - X | 0 | ALARM | ALARM | ALARM | ALARM |
| 0 0 X 0 X | 0 | ALARM | ALARM | ALARM | ALARM |
| 0 - X - - | 1 | OK | OK | ALARM | OK |
| - - - - 0 | 2 | OK | OK | ALARM | OK |
| - - - X - | 2 | ALARM | Retain current state | ALARM | OK |
"""

EVALUATION_PERIODS = 3
TABLES = {"3 of 3": (TABLE_3_OF_3, 3), "2 of 3": (TABLE_2_OF_3, 2)}
#: The columns' TreatMissingData, in the tables' order.
COLUMNS = (MISSING, IGNORE, BREACHING, NOT_BREACHING)
HEADER = ["MISSING", "IGNORE", "BREACHING", "NOT BREACHING"]
RETAIN = "Retain current state"

THRESHOLD = 10.0
COMPARISON = "GreaterThanThreshold"
#: "0 is a non-breaching data point, X is a breaching data point, and - is a missing data point".
VALUES: dict[str, float | None] = {"0": THRESHOLD - 5, "X": THRESHOLD + 5, "-": None}


def parse(table: str) -> list[list[str]]:
    """The table's rows as cells, header first, separator dropped."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]
    return [row for row in rows if any(cell != "---" for cell in row)]


def points(cell: str) -> list[float | None]:
    return [VALUES[symbol] for symbol in cell.split()]


def state_cases() -> list[object]:
    cases: list[object] = []
    for name, (table, datapoints_to_alarm) in TABLES.items():
        for row_index, row in enumerate(parse(table)[1:], start=1):
            for column, treat_missing in enumerate(COLUMNS, start=2):
                documented = row[column]
                for current in STATES if documented == RETAIN else (None,):
                    expected = current if documented == RETAIN else documented
                    case_id = f"{name} row {row_index} [{row[0]}] {treat_missing}" + (
                        f" from {current}" if current else ""
                    )
                    cases.append(
                        pytest.param(row[0], datapoints_to_alarm, treat_missing, current, expected, id=case_id)
                    )
    return cases


def fill_cases() -> list[object]:
    return [
        pytest.param(row[0], int(row[1]), id=f"{name} row {row_index} [{row[0]}]")
        for name, (table, _) in TABLES.items()
        for row_index, row in enumerate(parse(table)[1:], start=1)
    ]


@pytest.mark.parametrize("name", TABLES)
def test_tables_are_parsed_whole(name: str) -> None:
    """Five rows of six cells under the documented header, each row an evaluation range of 5 symbols: a table the
    parser dropped rows or columns from would pass the cell tests below vacuously."""
    rows = parse(TABLES[name][0])
    assert rows[0][0] == "Data points"
    assert rows[0][2:] == HEADER
    assert len(rows) == 6
    for row in rows[1:]:
        assert len(row) == 6
        assert len(row[0].split()) == evaluation_range(EVALUATION_PERIODS) == 5
        assert all(cell in {"OK", "ALARM", "INSUFFICIENT_DATA", RETAIN} for cell in row[2:])


def test_every_cell_is_a_case() -> None:
    """40 state cells (3 of them "Retain current state", asserted from each of the 3 states) and 10 fill counts."""
    assert len(state_cases()) == 40 - 3 + 3 * 3
    assert len(fill_cases()) == 10


@pytest.mark.parametrize(("data_points", "datapoints_to_alarm", "treat_missing", "current", "expected"), state_cases())
def test_documented_state(
    data_points: str, datapoints_to_alarm: int, treat_missing: str, current: str | None, expected: str
) -> None:
    """Each state cell; a documented state other than "Retain current state" must not depend on the current state,
    so those cells are evaluated from every state and must all give it."""
    for before in (current,) if current else STATES:
        assert (
            next_state(
                points(data_points),
                evaluation_periods=EVALUATION_PERIODS,
                datapoints_to_alarm=datapoints_to_alarm,
                threshold=THRESHOLD,
                comparison=COMPARISON,
                treat_missing=treat_missing,
                current=before,
            )
            == expected
        ), f"{data_points} {treat_missing} from {before}: {SOURCE}"


@pytest.mark.parametrize(("data_points", "filled"), fill_cases())
def test_documented_fill_count(data_points: str, filled: int) -> None:
    """Each second-column cell: how many data points are filled with TreatMissingData's result."""
    assert points_to_fill(points(data_points), EVALUATION_PERIODS) == filled
