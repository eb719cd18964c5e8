"""infra/alarms/metric_math.py against the CloudWatch user guide's metric math page: every example of its tables and
its IF section is a case here, with the rules it shows (the section's anchor is in each test's name or comment).

https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html
(source as last published: https://github.com/awsdocs/amazon-cloudwatch-user-guide/blob/b355497/doc_source/using-metric-math.md)
"""

from __future__ import annotations

import re

import pytest

from infra.alarms.definitions import MetricStat, Query, Unsupported, metric_key
from infra.alarms.metric_math import check_expression, evaluate_queries, referenced_ids

N = None  # a period without a datapoint
PERIOD = 60
STAT = MetricStat(metric_key("AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": "q"}), "Maximum", PERIOD)
#: The DLQ alarm's expression in infra/metrics.py (dlq: the DLQ's ApproximateNumberOfMessagesVisible, Maximum).
STACK_EXPRESSION = "IF(DIFF(dlq) > 0 AND (dlq - DIFF(dlq)) > 0, DIFF(dlq), 0)"


def run(expression: str, **series: list[float | None]) -> list[float | None]:
    """``expression`` as the alarm's returned query, over metric queries named and valued by ``series``."""
    queries = [Query(name, metric=STAT, return_data=False) for name in series] + [Query("e1", expression=expression)]
    count = len(next(iter(series.values())))
    return evaluate_queries(queries, series, [PERIOD * i for i in range(count)], PERIOD)


# ---- #metric-math-syntax-operators: the guide's table, metric1 = [30, 20, 0, 0], metric2 = [20, -, 20, -] ----------

OPERATORS = {"metric1": [30.0, 20.0, 0.0, 0.0], "metric2": [20.0, N, 20.0, N]}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(metric1 < metric2)", [0, 0, 1, 0]),
        ("(metric1 >= 30)", [1, 0, 0, 0]),
        ("(metric1 > 15 AND metric2 > 15)", [1, 0, 0, 0]),
        ("(metric1 > 15 && metric2 > 15)", [1, 0, 0, 0]),
    ],
)
def test_the_guides_comparison_table(expression: str, expected: list[float]) -> None:
    assert run(expression, **OPERATORS) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("metric1 > 25 OR metric2 > 15", [1, 0, 1, 0]),
        ("metric1 > 25 || metric2 > 15", [1, 0, 1, 0]),
        ("metric1 == 0", [0, 0, 1, 1]),
        ("metric1 != 20", [1, 0, 1, 1]),
        ("metric1 <= 20", [0, 1, 1, 1]),
        ("metric1 > metric2", [1, 1, 0, 0]),
    ],
)
def test_every_comparison_and_logical_operator_returns_1_or_0(expression: str, expected: list[float]) -> None:
    assert run(expression, **OPERATORS) == expected


def test_the_guide_documents_no_not_operator() -> None:
    with pytest.raises(Unsupported, match="operator NOT is not implemented"):
        check_expression("NOT (m1 > 0)")


# ---- #using-IF-expressions: metric1 = [1, 1, 0, 0, -], metric2 = [30, -, 0, 0, 30], metric3 = [0, 0, 20, -, 20] --------

IF_TABLE = {
    "metric1": [1.0, 1.0, 0.0, 0.0, N],
    "metric2": [30.0, N, 0.0, 0.0, 30.0],
    "metric3": [0.0, 0.0, 20.0, N, 20.0],
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("IF(metric1, metric2, metric3)", [30, 0, 20, N, N]),
        ("IF(metric1, 5, metric3)", [5, 5, 20, N, N]),  # IF(metric1, scalar2, metric3), scalar2 = 5
        ("IF(metric1, metric2, 5)", [30, 0, 5, 5, N]),  # IF(metric1, metric2, scalar3), scalar3 = 5
        ("IF(metric1, metric2)", [30, 0, N, N, N]),  # falseValue omitted: false points dropped
        ("IF(metric1, 5, 7)", [5, 5, 7, 7, N]),  # IF(TS, S, S)
    ],
)
def test_the_guides_if_tables(expression: str, expected: list[float | None]) -> None:
    assert run(expression, **IF_TABLE) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("IF(1, metric2, metric3)", [30, N, 0, 0, 30]),  # IF(scalar1, metric2, metric3): scalar1 true
        ("IF(-3, metric2, metric3)", [30, N, 0, 0, 30]),  # any non-zero value is true, positive or negative
        ("IF(0, metric2, metric3)", [0, 0, 20, N, 20]),
        ("IF(0, metric2)", [N, N, N, N, N]),  # metric3 omitted: an empty time series
    ],
)
def test_if_with_a_scalar_condition_picks_a_whole_series(expression: str, expected: list[float | None]) -> None:
    assert run(expression, **IF_TABLE) == expected


@pytest.mark.parametrize(
    ("expression", "series", "expected"),
    [
        # "To display only the low values of a metric"
        ("IF(metric1<400, metric1)", {"metric1": [100.0, 500.0, N]}, [100, N, N]),
        # "To change each data point in a metric to one of two values"
        ("IF(metric1<400, 10, 2)", {"metric1": [100.0, 500.0, N]}, [10, 2, N]),
        # "To display a 1 for each timestamp where latency is over the threshold"
        ("IF(latency>threshold, 1, 0)", {"latency": [5.0, 15.0, N], "threshold": [10.0, 10.0, 10.0]}, [0, 1, 0]),
    ],
)
def test_the_guides_if_use_cases(expression: str, series: dict[str, list[float | None]], expected: list) -> None:
    assert run(expression, **series) == expected


# ---- #metric-math-syntax-arithmetic: missing values are 0, a division by zero drops the point -------------------------


@pytest.mark.parametrize(
    ("expression", "series", "expected"),
    [
        ("5 * m1", {"m1": [1.0, N, 3.0]}, [5, N, 15]),
        ("m1 - m2", {"m1": [10.0, N, N], "m2": [4.0, 3.0, N]}, [6, -3, N]),
        ("m1 + m2", {"m1": [10.0, N, N], "m2": [4.0, 3.0, N]}, [14, 3, N]),
        ("m1 / m2", {"m1": [10.0, 10.0, N], "m2": [2.0, 0.0, 5.0]}, [5, N, 0]),
        ("SUM(100/[m1, m2])", {"m1": [50.0, 0.0], "m2": [25.0, 4.0]}, [6, 25]),
        ("AVG(METRICS())", {"m1": [10.0, N, N], "m2": [20.0, 30.0, N]}, [15, 15, N]),
        ("SUM(METRICS()*100)", {"m1": [1.0, N], "m2": [2.0, N]}, [300, N]),  # METRICS()*100: an array
        ("-5*m1", {"m1": [1.0, N, -2.0]}, [-5, N, 10]),
        ("-m1", {"m1": [1.0, N, -2.0]}, [-1, N, 2]),
        ("SUM(-[m1, m2])", {"m1": [1.0, N], "m2": [2.0, N]}, [-3, N]),
        ("m1 * PERIOD(m1)/60", {"m1": [2.0, N]}, [2, N]),  # PERIOD(m1)/60 is a scalar: used in a series here
        ("m1 ^ 2", {"m1": [3.0, N]}, [9, N]),
        ("m1 ^ 0.5", {"m1": [-4.0, 4.0]}, [N, 2]),  # not a real number: dropped (the guide is silent)
        ("0 ^ (m1 - 1)", {"m1": [0.0, 2.0]}, [N, 0]),  # 0 to a negative power divides by zero
        ("m1 * 1e308", {"m1": [10.0, 1.0]}, [N, 1e308]),  # an overflow: dropped (the guide is silent)
    ],
)
def test_arithmetic(expression: str, series: dict[str, list[float | None]], expected: list) -> None:
    assert run(expression, **series) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("m1 + 2 * 3", [7]),
        ("(m1 + 2) * 3", [9]),
        ("m1 - 1 - 1", [-1]),
        ("m1 * 2 ^ 3 ^ 2", [512]),  # ^ binds tighter than *, right to left
        ("-2 ^ 2 + m1", [-3]),  # ^ binds tighter than unary minus
        ("2 ^ -1 * m1", [0.5]),
        ("m1 + 1 > 1 AND m1 < 2 OR m1 > 5", [1]),  # comparisons bind tighter than AND, AND than OR
        ("m1 > 0 OR m1 > 5 AND m1 < 0", [1]),  # not (m1 > 0 OR m1 > 5) AND m1 < 0
        ("12 / 4 / 3 * m1", [1]),
        ("1e1 * m1 + .5", [10.5]),
    ],
)
def test_precedence_and_associativity(expression: str, expected: list[float]) -> None:
    assert run(expression, m1=[1.0]) == expected


# ---- #metric-math-syntax-functions-list: the table's examples ----------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "series", "expected"),
    [
        ("ABS(m1-m2)", {"m1": [1.0, 5.0, N], "m2": [4.0, N, N]}, [3, 5, N]),
        ("MIN(ABS([m1, m2]))", {"m1": [-1.0, 5.0], "m2": [4.0, -2.0]}, [1, 2]),
        ("SUM(ABS(METRICS()))", {"m1": [-1.0, N], "m2": [4.0, N]}, [5, N]),
        ("SUM([m1,m2])/AVG(m2)", {"m1": [1.0, 2.0], "m2": [3.0, 5.0]}, [1, 1.75]),
        ("CEIL(m1)", {"m1": [1.2, -1.2, N]}, [2, -1, N]),
        ("FLOOR(m1)", {"m1": [1.2, -1.2, N]}, [1, -2, N]),
        ("SUM(CEIL(METRICS()))", {"m1": [1.2, N], "m2": [0.1, N]}, [3, N]),
        ("MAX(FLOOR(METRICS()))", {"m1": [1.2, N], "m2": [3.9, N]}, [3, N]),
        ("MAX(m1)/m1", {"m1": [1.0, N, 4.0]}, [4, N, 1]),
        ("MAX(METRICS())", {"m1": [1.0, N, -1.0], "m2": [3.0, N, N]}, [3, N, 0]),  # missing is 0 in an array
        ("m1-MIN(m1)", {"m1": [3.0, N, 5.0]}, [0, N, 2]),
        ("MIN(METRICS())", {"m1": [1.0, N, 2.0], "m2": [3.0, N, N]}, [1, N, 0]),
        ("SUM(METRICS())/SUM(m1)", {"m1": [1.0, 3.0], "m2": [4.0, N]}, [1.25, 0.75]),
        ("SUM([m1,m2])", {"m1": [1.0, N, N], "m2": [2.0, 5.0, N]}, [3, 5, N]),
        ("m1 - AVG(m1)", {"m1": [1.0, N, 5.0]}, [-2, N, 2]),  # AVG of one series: over its data points
        ("TIME_SERIES(MAX(m1))", {"m1": [1.0, N, 5.0]}, [5, 5, 5]),
        ("TIME_SERIES(5*AVG(m1))", {"m1": [1.0, N, 5.0]}, [15, 15, 15]),
        ("TIME_SERIES(10)", {"m1": [N, N]}, [10, 10]),
        ("TIME_SERIES(AVG(m1))", {"m1": [N, N]}, [N, N]),  # an average of no data is no value
        ("m1/PERIOD(m1)", {"m1": [120.0, N]}, [2, N]),
    ],
)
def test_the_guides_function_examples(expression: str, series: dict[str, list[float | None]], expected: list) -> None:
    assert run(expression, **series) == expected


def test_metrics_filters_ids_and_leaves_expressions_out() -> None:
    """#metric-math-syntax-metrics-function: METRICS("errors") are the metrics whose id contains "errors"; METRICS()
    holds no expression."""
    values = {"errors4xx": [1.0, 2.0], "errors5xx": [3.0, N], "requests": [8.0, 4.0], "other": [100.0, 100.0]}
    queries = [Query(name, metric=STAT, return_data=False) for name in values]
    queries += [
        Query("errorsdoubled", expression='2 * SUM(METRICS("errors"))', return_data=False),
        Query("e1", expression='SUM(METRICS("errors"))/SUM(METRICS("requests"))*100'),
    ]
    assert evaluate_queries(queries, values, [0, 60], 60) == [50, 50]
    queries[-1] = Query("e1", expression="SUM(METRICS())")  # not errorsdoubled
    assert evaluate_queries(queries, values, [0, 60], 60) == [112, 106]
    queries[-1] = Query("e1", expression='SUM([METRICS("4xx"), METRICS("5xx")])')
    assert evaluate_queries(queries, values, [0, 60], 60) == [4, 2]
    queries[-1] = Query("e1", expression='SUM(METRICS("nothing"))')
    assert evaluate_queries(queries, values, [0, 60], 60) == [N, N]


def test_diff_is_each_value_less_the_preceding_data_point() -> None:
    """DIFF: "the difference between each value in the time series and the preceding value"; the first point of the
    range has none (missing) and a gap is crossed to the previous data point."""
    assert run("DIFF(m1)", m1=[N, 5.0, 7.0, N, 10.0, 4.0]) == [N, N, 2, N, 3, -6]


def test_diff_time_and_rate_are_per_second_over_the_seconds_between_points() -> None:
    """DIFF_TIME: seconds since the preceding value's timestamp; RATE: the difference over those seconds."""
    series = [N, 60.0, 120.0, N, 300.0]
    assert run("DIFF_TIME(m1)", m1=series) == [N, N, 60, N, 120]
    assert run("RATE(m1)", m1=series) == [N, N, 1, N, 1.5]
    assert run("SUM(RATE(METRICS()))", m1=series, m2=[0.0, 0.0, 60.0, N, N]) == [N, 0, 2, N, 1.5]
    assert run("MAX(DIFF_TIME(METRICS()))", m1=series, m2=[0.0, N, N, N, 0.0]) == [N, N, 60, N, 240]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("FILL(m1,10)", [10, 10, 2, 10, 4, 10]),
        ("FILL(m1, MIN(m1))", [2, 2, 2, 2, 4, 2]),
        ("FILL(m1, REPEAT)", [N, N, 2, 2, 4, 4]),  # nothing before the first point to repeat
        ("FILL(m1, LINEAR)", [N, N, 2, 3, 4, N]),  # no end after the last point to interpolate to
        ("SUM(FILL(METRICS(), 0))", [0, 0, 2, 0, 4, 0]),
        ("SUM(FILL(METRICS(), LINEAR))", [N, N, 2, 3, 4, N]),
    ],
)
def test_fill(expression: str, expected: list[float | None]) -> None:
    """FILL(TS, S | REPEAT | LINEAR), FILL(TS[], ...): the table's examples on m1 = [-, -, 2, -, 4, -]."""
    assert run(expression, m1=[N, N, 2.0, N, 4.0, N]) == expected


def test_linear_fills_in_proportion_to_time() -> None:
    """LINEAR: on the straight line from the value before the gap to the value after it."""
    assert run("FILL(m1, LINEAR)", m1=[2.0, N, N, 5.0, N, 3.0]) == [2, 3, 4, 5, 4, 3]


def test_fill_an_array_with_a_series() -> None:
    """FILL(METRICS(), m1): each metric's missing points take m1's value there (m1 itself filled by itself)."""
    assert run("SUM(FILL(METRICS(), m1))", m1=[1.0, N, 3.0], m2=[N, 5.0, N]) == [2, 5, 6]


def test_expressions_read_other_expressions_in_dependency_order() -> None:
    """The console's example ids: m1+m2, e1-MIN(e1); queries may come in any order."""
    queries = [
        Query("e2", expression="e1 - MIN(e1)"),
        Query("e1", expression="m1 + m2", return_data=False),
        Query("m1", metric=STAT, return_data=False),
        Query("m2", metric=STAT, return_data=False),
    ]
    assert evaluate_queries(queries, {"m1": [1.0, 4.0, N], "m2": [2.0, N, 3.0]}, [0, 60, 120], 60) == [0, 1, 0]


# ---- the stack's expression (infra/metrics.py): new arrivals in a DLQ that already held messages ----------------------


def test_the_stacks_dlq_expression_with_missing_points() -> None:
    dlq = [N, 3.0, 3.0, 5.0, N, 5.0, 0.0, N, 2.0, 4.0]
    # DIFF:                      [N, N, 0, 2, N, 0, -5, N, 2, 2]  (the first point has no predecessor)
    # DIFF > 0:                  [N, N, 0, 1, N, 0, 0, N, 1, 1]
    # (dlq - DIFF) > 0:          [N, 1, 1, 1, N, 1, 1, N, 0, 1]   (dlq - missing = dlq - 0)
    # AND (missing one side: 0): [N, 0, 0, 1, N, 0, 0, N, 0, 1]
    # IF (no condition: dropped) [N, 0, 0, 2, N, 0, 0, N, 0, 2]
    assert run(STACK_EXPRESSION, dlq=dlq) == [N, 0, 0, 2, N, 0, 0, N, 0, 2]
    assert referenced_ids(STACK_EXPRESSION) == {"dlq"}


def test_the_stacks_dlq_expression_sees_growth_across_a_gap() -> None:
    """4 messages, a period without a datapoint, then 6: the 2 new ones count at the period of the 6 (the first
    point: DIFF missing, AND with (dlq - 0) > 0 is 0, so IF gives its false value 0)."""
    assert run(STACK_EXPRESSION, dlq=[4.0, N, 6.0]) == [0, N, 2]
    assert run(STACK_EXPRESSION, dlq=[0.0, N, 6.0]) == [0, N, 0]  # from an empty DLQ: not this alarm's case


# ---- refusals ----------------------------------------------------------------------------------------------------------

NOT_IMPLEMENTED = [
    "ANOMALY_DETECTION_BAND(m1)",
    "DATAPOINT_COUNT(m1)",
    "FIRST(METRICS())",
    "INSIGHT_RULE_METRIC(m1, m1)",
    "LOG(m1)",
    "LOG10(m1)",
    "METRIC_COUNT(METRICS())",
    "MINUTE(m1)",
    "HOUR(m1)",
    "DAY(m1)",
    "REMOVE_EMPTY(METRICS())",
    "RUNNING_SUM(m1)",
    "SEARCH(m1)",
    "SERVICE_QUOTA(m1)",
    "SLICE(METRICS(), 0, 1)",
    "SORT(METRICS(), AVG, DESC)",
    "STDDEV(m1)",
]


@pytest.mark.parametrize("expression", NOT_IMPLEMENTED)
def test_documented_functions_not_implemented_are_refused_by_name(expression: str) -> None:
    name = expression.split("(")[0]
    with pytest.raises(Unsupported, match=rf"^metric math: function {name} is not implemented$"):
        check_expression(expression)


@pytest.mark.parametrize(
    ("expression", "error", "message"),
    [
        ("FOO(m1)", Unsupported, "function FOO is not implemented"),
        ("m1 % 2", Unsupported, "token '%'"),
        ("m1 = 2", Unsupported, "token '='"),
        ("'errors'", Unsupported, 'token "\'"'),
        ("+m1", Unsupported, "unary +"),
        ("m1 XOR m2", Unsupported, "operator XOR"),
        ("Errors + 1", Unsupported, "Errors in 'Errors + 1' is not implemented (an id starts with a lowercase letter)"),
        ("sum(m1)", ValueError, "sum in 'sum(m1)' is an id, not a function"),
        ("m1 +", ValueError, "unexpected the end"),
        ("(m1", ValueError, "expected ')'"),
        ("SUM(m1,)", ValueError, "unexpected ')'"),
        ("m1 m2", ValueError, "unexpected 'm2'"),
        ("SUM", ValueError, "expected '('"),
        ("IF(m1)", ValueError, "IF takes 2 to 3 arguments, got 1"),
        ("FILL(m1)", ValueError, "FILL takes 2 arguments, got 1"),
        ("m1 + REPEAT", ValueError, "REPEAT is FILL's second argument only"),
        ('m1 + "x"', ValueError, "a string is the argument of METRICS only"),
        ("METRICS(m1)", ValueError, "METRICS takes a string"),
        ("PERIOD(m1 + 1)", Unsupported, "PERIOD takes a metric's id"),
        ("", ValueError, "empty"),
    ],
)
def test_check_expression_refuses_in_one_line_naming_it(expression: str, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)) as raised:
        check_expression(expression)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("METRICS()", "e1 returns an array of time series"),
        ("METRICS()/100", "e1 returns an array of time series"),
        ("AVG(m1)", "e1 returns a scalar"),  # "it can't be the final expression result"
        ("PERIOD(m1)/60", "e1 returns a scalar"),
        ("FILL(m1, m1)", "FILL with a time series filler is documented for an array only"),
        ("IF(1, 2, 3)", "IF with a scalar condition takes time series values"),
        ("IF(1, m1, 3)", "IF with a scalar condition takes time series values"),
        ("SUM(IF(METRICS(), 1, 0))", "IF on an array"),
        ("SUM(METRICS() > 1)", "> on an array of time series"),
        ("SUM(METRICS() + METRICS())", "between two arrays"),
        ("ABS(-5) + m1", "ABS of a scalar"),
        ("SUM(5) + m1", "SUM of a scalar"),
        ("TIME_SERIES(m1)", "TIME_SERIES of a time series"),
        ("SUM([m1, 5])", "an array \\[...\\] of a scalar"),
        ("PERIOD(e0) * m1", "PERIOD\\(e0\\) takes a metric's id; e0 is an expression"),
        ("PERIOD(zz) * m1", "zz is no query of the alarm"),
    ],
)
def test_values_the_guide_does_not_document_are_refused(expression: str, message: str) -> None:
    queries = [Query("m1", metric=STAT, return_data=False), Query("e0", expression="m1", return_data=False)]
    with pytest.raises(Unsupported, match=message):
        evaluate_queries([*queries, Query("e1", expression=expression)], {"m1": [1.0, 2.0]}, [0, 60], 60)


def test_unknown_ids_and_cycles_are_refused_naming_them() -> None:
    m1 = Query("m1", metric=STAT, return_data=False)
    with pytest.raises(ValueError, match="the expression of e1 refers to nope, not an id of the alarm"):
        evaluate_queries([m1, Query("e1", expression="m1 + nope")], {"m1": [1.0]}, [0], 60)
    cycle = [m1, Query("e1", expression="e2 + m1"), Query("e2", expression="e3 * 2", return_data=False)]
    cycle.append(Query("e3", expression="e1 - 1", return_data=False))
    with pytest.raises(ValueError, match="cycle: e1 -> e2 -> e3 -> e1"):
        evaluate_queries(cycle, {"m1": [1.0]}, [0], 60)
    with pytest.raises(ValueError, match="cycle: e1 -> e1"):
        evaluate_queries([m1, Query("e1", expression="e1")], {"m1": [1.0]}, [0], 60)


@pytest.mark.parametrize(
    ("queries", "values", "message"),
    [
        ([Query("m1", metric=STAT), Query("e1", expression="m1")], {"m1": [1.0]}, "2 queries return data"),
        ([Query("m1", metric=STAT, return_data=False)], {"m1": [1.0]}, "0 queries return data"),
        ([Query("M1", metric=STAT)], {"M1": [1.0]}, "id 'M1' must start with a lowercase letter"),
        ([Query("m1", metric=STAT, return_data=False), Query("m1", expression="1")], {"m1": [1.0]}, "used by two"),
        ([Query("m1")], {}, "query m1 needs a metric or an expression"),
        ([Query("m1", metric=STAT)], {}, "no datapoints given for metric query m1"),
        ([Query("m1", metric=STAT)], {"m1": [1.0, 2.0]}, "m1 has 2 datapoints for 1 periods"),
    ],
)
def test_malformed_queries_are_refused(queries: list[Query], values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate_queries(queries, values, [0], 60)


def test_timestamps_must_be_one_period_apart() -> None:
    with pytest.raises(ValueError, match="ascending and 60 s apart"):
        evaluate_queries([Query("m1", metric=STAT)], {"m1": [1.0, 2.0]}, [0, 120], 60)


def test_period_is_the_metrics_own_period() -> None:
    """PERIOD: "the period of the metric in seconds" (here 300 s, not a default minute)."""
    five_minutes = MetricStat(STAT.key, "Sum", 300)
    queries = [Query("m1", metric=five_minutes, return_data=False), Query("e1", expression="m1/PERIOD(m1)")]
    assert evaluate_queries(queries, {"m1": [600.0, N]}, [0, 300], 300) == [2, N]


def test_a_metric_query_returned_is_its_own_values() -> None:
    assert evaluate_queries([Query("m1", metric=STAT)], {"m1": [1.0, N]}, [0, 60], 60) == [1, N]


def test_referenced_ids_names_ids_only() -> None:
    assert referenced_ids('SUM([m1, METRICS("x")]) / FILL(e_2, REPEAT) + PERIOD(m3)') == {"m1", "e_2", "m3"}
