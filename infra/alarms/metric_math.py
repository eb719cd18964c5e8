"""CloudWatch metric math on an alarm's evaluation range, as the CloudWatch user guide documents it.

:func:`evaluate_queries` computes the values of an alarm's query with ReturnData true from its metric queries'
datapoints, one per period. Expressions are read by a tokenizer and a Pratt parser (no eval()); a function, operator
or token the guide does not document, or that is not implemented here, is refused in one line naming it.
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html (sections below: #anchors)
(its source as last published, 2023-05-17, whose FILL row elides the options' details:
https://github.com/awsdocs/amazon-cloudwatch-user-guide/blob/b355497/doc_source/using-metric-math.md)

Documented rules encoded:
- A value is a scalar (S), a time series (TS) or an array (TS[]); a final result that is only a scalar is not valid
  (#metric-math-syntax and the footnote of #metric-math-syntax-functions-list), and an alarm watches one series, so
  an array is refused too (#alarms-on-metric-math-expressions in AlarmThatSendsEmail.html). Ids start lowercase,
  functions are uppercase (#metric-math-syntax).
- ``+ - * / ^`` and unary ``-``: a missing value in a time series is 0; a point dividing by zero is dropped
  (#metric-math-syntax-arithmetic).
- ``== != <= >= < >`` return 1 or 0; the logical operators are AND/&& and OR/|| (no NOT); between two series a value
  missing in one only is 0 (#metric-math-syntax-operators).
- IF(cond, trueValue[, falseValue]): true unless 0; no condition point: dropped; true with trueValue missing: 0;
  false with falseValue missing or omitted: dropped; a scalar condition picks a whole series (#using-IF-expressions).
- DIFF: each value less the preceding value; DIFF_TIME: the seconds between their timestamps; RATE: DIFF per second
  (#metric-math-syntax-functions-list, as every rule below).
- FILL(TS, S | REPEAT | LINEAR), FILL(TS[], TS | S | REPEAT | LINEAR): S fills every missing point, REPEAT the most
  recent actual value before it, LINEAR the straight line between the values at the beginning and end of the gap.
- SUM, AVG, MIN, MAX: of a TS a scalar over its data points; of a TS[] a TS, point by point, missing values 0.
- METRICS() is every metric query (no expression), METRICS("s") those whose id contains s
  (#metric-math-syntax-metrics-function); PERIOD(m1) a metric's period in seconds; TIME_SERIES(S) S at every point;
  ABS, CEIL, FLOOR apply to each point.

Where the guide is silent (said again where it applies), the reading that lets the alarm page through its own
TreatMissingData rather than invent a value that keeps it quiet:
- a point missing in every series operand stays missing (0 is for one series missing where another has a value):
  a 0 there would hide a metric that stopped reporting from TreatMissingData;
- DIFF's and RATE's "preceding value" is the previous data point, across a gap, so growth over a gap is seen; the
  first data point of the range has none and its DIFF is missing (give an earlier period to get one);
- REPEAT before the first data point, LINEAR before the first or after the last, stay missing;
- MIN and MAX of an array count a missing value as 0 like SUM and AVG; a scalar aggregate of no data is no value;
- precedence, loosest first: OR, AND, comparisons, ``+ -``, ``* /``, unary ``-``, ``^`` (right to left);
- a non-finite result (an overflow, a negative number to a fractional power) is dropped like a division by zero.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, NoReturn

from infra.alarms.definitions import Query, Unsupported

Point = float | None
ID = re.compile(r"[a-z][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class _Scalar:
    value: float | None  # None: no value (an aggregate of a series without data, a scalar division by zero)


@dataclass(frozen=True)
class _Series:
    values: tuple[Point, ...]


@dataclass(frozen=True)
class _Array:
    series: tuple[_Series, ...]


_Value = _Scalar | _Series | _Array


# ---- syntax -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Num:
    value: float


@dataclass(frozen=True)
class _Ref:
    id: str


@dataclass(frozen=True)
class _Str:
    text: str


@dataclass(frozen=True)
class _Keyword:
    name: str  # REPEAT or LINEAR, FILL's second argument


@dataclass(frozen=True)
class _ArrayLit:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Binary:
    op: str
    left: _Node
    right: _Node


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[_Node, ...]


_Node = _Num | _Ref | _Str | _Keyword | _ArrayLit | _Binary | _Call

#: Implemented functions and how many arguments each takes (the guide's table; every other name is refused).
FUNCTIONS = dict.fromkeys(("ABS", "AVG", "CEIL", "DIFF", "DIFF_TIME", "FLOOR", "MAX", "MIN"), (1, 1))
FUNCTIONS |= dict.fromkeys(("PERIOD", "RATE", "SUM", "TIME_SERIES"), (1, 1))
FUNCTIONS |= {"FILL": (2, 2), "IF": (2, 3), "METRICS": (0, 1)}
KEYWORDS = {"REPEAT", "LINEAR"}
#: Infix operators: binding power, loosest first (the guide gives no precedence: the usual one, see above).
_INFIX = {"OR": 10, "||": 10, "AND": 20, "&&": 20, "==": 30, "!=": 30, "<": 30, "<=": 30, ">": 30, ">=": 30}
_INFIX |= {"+": 40, "-": 40, "*": 50, "/": 50, "^": 70}
_NEG_POWER = 60

_TOKEN = re.compile(
    r"""\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<id>[a-z][A-Za-z0-9_]*)|(?P<name>[A-Z][A-Za-z0-9_]*)|(?P<string>"[^"]*")
    |(?P<op>==|!=|<=|>=|&&|\|\||[-+*/^<>(),\[\]]))""",
    re.VERBOSE,
)


class _Token(NamedTuple):
    kind: str  # number, id, name, string, op, end
    text: str
    at: int


def _tokens(expression: str) -> list[_Token]:
    tokens, at = [], 0
    while expression[at:].strip():
        match = _TOKEN.match(expression, at)
        if match is None or match.lastgroup is None:
            bad = expression[at:].lstrip()[0]
            raise Unsupported(f"metric math: token {bad!r} in {expression!r} is not implemented")
        tokens.append(_Token(match.lastgroup, match.group(match.lastgroup), match.start(match.lastgroup)))
        at = match.end()
    return [*tokens, _Token("end", "", len(expression))]


class _Parser:
    """Pratt parser: :meth:`expression` reads operands (:meth:`_prefix`) and infix operators binding tighter than
    ``power``."""

    def __init__(self, expression: str) -> None:
        self.source = expression
        self.tokens = _tokens(expression)
        self.at = 0

    def parse(self) -> _Node:
        node = self.expression(0)
        if self.peek.kind != "end":
            self._unexpected()
        _check(node, self.source)
        return node

    @property
    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self, text: str | None = None) -> _Token:
        token = self.peek
        if text is not None and token.text != text:
            self._unexpected(f"expected {text!r}")
        self.at += 1
        return token

    def expression(self, power: int) -> _Node:
        left = self._prefix()
        while (self.peek.kind in ("op", "name")) and _INFIX.get(self.peek.text, 0) > power:
            op = self.take().text
            # ^ is right-associative: its right operand may hold another ^.
            right = self.expression(_INFIX[op] - 1 if op == "^" else _INFIX[op])
            left = _Binary({"&&": "AND", "||": "OR"}.get(op, op), left, right)
        if self.peek.kind == "name" and self.peek.text not in _INFIX:
            raise Unsupported(f"metric math: operator {self.peek.text} in {self.source!r} is not implemented")
        return left

    def _prefix(self) -> _Node:
        token = self.take()
        if token.kind == "number":
            return _Num(float(token.text))
        if token.kind == "string":
            return _Str(token.text[1:-1])
        if token.kind == "id":
            if self.peek.text == "(":
                raise ValueError(f"metric math: {token.text} in {self.source!r} is an id, not a function")
            return _Ref(token.text)
        if token.kind == "name":
            return self._name(token)
        if token.text == "-":  # unary subtraction is 0 - x: the same on S, TS and TS[], missing points kept
            return _Binary("-", _Num(0.0), self.expression(_NEG_POWER))
        if token.text == "+":
            raise Unsupported(f"metric math: unary + in {self.source!r} is not implemented")
        if token.text == "(":
            node = self.expression(0)
            self.take(")")
            return node
        if token.text == "[":
            return _ArrayLit(self._list("]"))
        self.at -= 1
        self._unexpected()

    def _name(self, token: _Token) -> _Node:
        if token.text in KEYWORDS:
            return _Keyword(token.text)
        if token.text in FUNCTIONS and self.peek.text == "(":
            self.take("(")
            args = self._list(")")
            low, high = FUNCTIONS[token.text]
            if not low <= len(args) <= high:
                count = str(low) if low == high else f"{low} to {high}"
                raise ValueError(f"metric math: {token.text} takes {count} arguments, got {len(args)}: {self.source!r}")
            return _Call(token.text, args)
        if token.text in FUNCTIONS:
            self._unexpected("expected '('")
        if token.text == "NOT":
            raise Unsupported("metric math: operator NOT is not implemented (the guide documents AND, &&, OR, ||)")
        if self.peek.text == "(":
            raise Unsupported(f"metric math: function {token.text} is not implemented")
        hint = "" if token.text.isupper() else " (an id starts with a lowercase letter)"
        raise Unsupported(f"metric math: {token.text} in {self.source!r} is not implemented{hint}")

    def _list(self, close: str) -> tuple[_Node, ...]:
        items: list[_Node] = []
        if self.peek.text != close:
            items.append(self.expression(0))
            while self.peek.text == ",":
                self.take(",")
                items.append(self.expression(0))
        self.take(close)
        return tuple(items)

    def _unexpected(self, what: str = "") -> NoReturn:
        token = self.peek
        shown = repr(token.text) if token.kind != "end" else "the end"
        raise ValueError(f"metric math: unexpected {shown} at {token.at} in {self.source!r}{what and '; ' + what}")


def _check(node: _Node, source: str, keyword: bool = False, string: bool = False) -> None:
    """What the grammar alone lets through: REPEAT/LINEAR only as FILL's filler, a string only in METRICS, PERIOD of
    an id only."""
    if isinstance(node, _Keyword) and not keyword:
        raise ValueError(f"metric math: {node.name} is FILL's second argument only, in {source!r}")
    if isinstance(node, _Str) and not string:
        raise ValueError(f"metric math: a string is the argument of METRICS only, in {source!r}")
    if isinstance(node, _Call) and node.name == "METRICS" and node.args and not isinstance(node.args[0], _Str):
        raise ValueError(f'metric math: METRICS takes a string ("errors") or nothing, in {source!r}')
    if isinstance(node, _Call) and node.name == "PERIOD" and not isinstance(node.args[0], _Ref):
        raise Unsupported(f"metric math: PERIOD takes a metric's id, not an expression, in {source!r}")
    fill = isinstance(node, _Call) and node.name == "FILL"
    metrics = isinstance(node, _Call) and node.name == "METRICS"
    for index, child in enumerate(_children(node)):
        _check(child, source, fill and index == 1, metrics)


@lru_cache(maxsize=512)
def _parse(expression: str) -> _Node:
    if not expression.strip():
        raise ValueError("metric math: the expression is empty")
    return _Parser(expression).parse()


def check_expression(expression: str) -> None:
    """Parse ``expression``; raise :class:`Unsupported` (or ValueError for a syntax error) in one line naming the
    function, operator or token that is not implemented."""
    _parse(expression)


def referenced_ids(expression: str) -> set[str]:
    """The ids ``expression`` names (METRICS() names none: it reads every metric query, which depend on nothing)."""
    found: set[str] = set()

    def walk(node: _Node) -> None:
        if isinstance(node, _Ref):
            found.add(node.id)
        for child in _children(node):
            walk(child)

    walk(_parse(expression))
    return found


def _children(node: _Node) -> tuple[_Node, ...]:
    if isinstance(node, _Call):
        return node.args
    if isinstance(node, _ArrayLit):
        return node.items
    if isinstance(node, _Binary):
        return (node.left, node.right)
    return ()


# ---- evaluation ----------------------------------------------------------------------------------------------------


def _dropping(op: Callable[[float, float], float]) -> Callable[[float, float], Point]:
    """A point that would divide by zero is dropped (#metric-math-syntax-arithmetic); so is a non-finite one (the
    guide is silent: an overflow, a negative number to a fractional power)."""

    def apply(a: float, b: float) -> Point:
        try:
            value = float(op(a, b))
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
        return value if math.isfinite(value) else None

    return apply


_ARITHMETIC: dict[str, Callable[[float, float], float]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_ARITHMETIC |= {"/": operator.truediv, "^": math.pow}
#: Comparisons and logical operators return 1 (true) or 0 (false) (#metric-math-syntax-operators).
_BOOLEAN: dict[str, Callable[[float, float], float]] = {"==": operator.eq, "!=": operator.ne, "<": operator.lt}
_BOOLEAN |= {"<=": operator.le, ">": operator.gt, ">=": operator.ge}
_BOOLEAN |= {"AND": lambda a, b: a != 0 and b != 0, "OR": lambda a, b: a != 0 or b != 0}
_AGGREGATES: dict[str, Callable[[list[float]], float]] = {"SUM": math.fsum, "MIN": min, "MAX": max}
_AGGREGATES["AVG"] = lambda values: math.fsum(values) / len(values)
_EACH: dict[str, Callable[[float], float]] = {"ABS": abs, "CEIL": math.ceil, "FLOOR": math.floor}


def _binary(op: str, left: _Value, right: _Value) -> _Value:
    """``left op right``, each a scalar, a series or (arithmetic only) an array with a scalar or a series."""
    if isinstance(left, _Array) or isinstance(right, _Array):
        if op not in _ARITHMETIC:
            raise Unsupported(f"metric math: {op} on an array of time series is not implemented (the guide: pairs)")
        if isinstance(left, _Array) and isinstance(right, _Array):
            raise Unsupported(f"metric math: {op} between two arrays of time series is not implemented")
        if isinstance(left, _Array) and not isinstance(right, _Array):
            return _Array(tuple(_pair(op, series, right) for series in left.series))
        assert isinstance(right, _Array) and not isinstance(left, _Array)
        return _Array(tuple(_pair(op, left, series) for series in right.series))
    if isinstance(left, _Scalar) and isinstance(right, _Scalar):
        if left.value is None or right.value is None:
            return _Scalar(None)
        return _Scalar(_dropping(_ARITHMETIC.get(op) or _BOOLEAN[op])(left.value, right.value))
    return _pair(op, left, right)


def _pair(op: str, left: _Scalar | _Series, right: _Scalar | _Series) -> _Series:
    """At each point: a value missing in one series of two is 0 (#metric-math-syntax-arithmetic, and the operators'
    table: metric1 > 15 AND metric2 > 15 is 0 where metric2 has none). A point missing in every series operand stays
    missing: the guide is silent, and a 0 there would hide a metric that stopped reporting from TreatMissingData."""
    apply = _dropping(_ARITHMETIC.get(op) or _BOOLEAN[op])
    n = max(len(operand.values) for operand in (left, right) if isinstance(operand, _Series))
    if (isinstance(left, _Scalar) and left.value is None) or (isinstance(right, _Scalar) and right.value is None):
        return _Series((None,) * n)
    a_values = left.values if isinstance(left, _Series) else (left.value,) * n
    b_values = right.values if isinstance(right, _Series) else (right.value,) * n
    series = [values for operand, values in ((left, a_values), (right, b_values)) if isinstance(operand, _Series)]
    out: list[Point] = []
    for i, (a, b) in enumerate(zip(a_values, b_values, strict=True)):
        if all(values[i] is None for values in series):
            out.append(None)
        else:
            out.append(apply(0.0 if a is None else a, 0.0 if b is None else b))
    return _Series(tuple(out))


def _map(fn: Callable[[float], float], value: Point) -> Point:
    return None if value is None else float(fn(value))


def _series_of(value: _Value, name: str) -> tuple[_Series, ...]:
    """The series a function of TS or TS[] applies to, one by one (a scalar is not documented for it)."""
    if isinstance(value, _Scalar):
        raise Unsupported(f"metric math: {name} of a scalar is not implemented (the guide: TS or TS[])")
    return (value,) if isinstance(value, _Series) else value.series


def _each_series(value: _Value, name: str, fn: Callable[[_Series], _Series]) -> _Value:
    results = tuple(fn(series) for series in _series_of(value, name))
    return results[0] if isinstance(value, _Series) else _Array(results)


class _Evaluation:
    """One alarm's queries over one range: each id's value computed once, expressions after the ids they read."""

    def __init__(
        self, queries: Sequence[Query], metric_values: Mapping[str, Sequence[Point]], timestamps: Sequence[float]
    ) -> None:
        self.timestamps = tuple(float(t) for t in timestamps)
        self.metric_values = metric_values
        self.queries: dict[str, Query] = {}
        for query in queries:
            if not ID.match(query.id):
                raise ValueError(f"metric math: id {query.id!r} must start with a lowercase letter (then a-z, 0-9, _)")
            if query.id in self.queries:
                raise ValueError(f"metric math: id {query.id} is used by two queries")
            if (query.metric is None) == (query.expression is None):
                raise ValueError(f"metric math: query {query.id} needs a metric or an expression (exactly one)")
            self.queries[query.id] = query
        self.values: dict[str, _Value] = {}
        self.visiting: list[str] = []

    def value_of(self, qid: str, reader: str) -> _Value:
        if qid in self.values:
            return self.values[qid]
        query = self.queries.get(qid)
        if query is None:
            raise ValueError(f"metric math: the expression of {reader} refers to {qid}, not an id of the alarm")
        if qid in self.visiting:
            cycle = " -> ".join([*self.visiting[self.visiting.index(qid) :], qid])
            raise ValueError(f"metric math: expressions refer to each other in a cycle: {cycle}")
        if query.expression is None:
            value: _Value = self.metric(qid)
        else:
            self.visiting.append(qid)
            value = self.eval(_parse(query.expression), qid)
            self.visiting.pop()
        self.values[qid] = value
        return value

    def metric(self, qid: str) -> _Series:
        if qid not in self.metric_values:
            raise ValueError(f"metric math: no datapoints given for metric query {qid}")
        values = self.metric_values[qid]
        if len(values) != len(self.timestamps):
            raise ValueError(f"metric math: {qid} has {len(values)} datapoints for {len(self.timestamps)} periods")
        return _Series(tuple(None if v is None else float(v) for v in values))

    def eval(self, node: _Node, qid: str) -> _Value:
        if isinstance(node, _Num):
            return _Scalar(node.value)
        if isinstance(node, _Ref):
            return self.value_of(node.id, qid)
        if isinstance(node, _Binary):
            return _binary(node.op, self.eval(node.left, qid), self.eval(node.right, qid))
        if isinstance(node, _ArrayLit):  # [m1, METRICS("5xx")]: an array of every series named, in order
            values = [self.eval(item, qid) for item in node.items]
            return _Array(tuple(s for value in values for s in _series_of(value, "an array [...]")))
        if isinstance(node, _Call):
            return self.call(node, qid)
        raise ValueError(f"metric math: {node} is not a value")  # a string or REPEAT/LINEAR: _check refused it

    def call(self, call: _Call, qid: str) -> _Value:
        name, args = call.name, call.args
        if name == "METRICS":
            pattern = args[0].text if args and isinstance(args[0], _Str) else ""
            ids = [q.id for q in self.queries.values() if q.metric is not None and pattern in q.id]
            return _Array(tuple(self.metric(i) for i in ids))
        if name == "PERIOD":
            ref = args[0]
            assert isinstance(ref, _Ref)  # _check: PERIOD of an id only
            query = self.queries.get(ref.id)
            if query is None or query.metric is None:
                what = "an expression" if query is not None else "no query of the alarm"
                raise Unsupported(f"metric math: PERIOD({ref.id}) takes a metric's id; {ref.id} is {what}")
            return _Scalar(float(query.metric.period))
        if name == "FILL" and isinstance(args[1], _Keyword):
            return self.fill(self.eval(args[0], qid), args[1].name)
        values = [self.eval(arg, qid) for arg in args]
        if name == "IF":
            return _if(values[0], values[1], values[2] if len(values) > 2 else None)
        if name == "FILL":
            return self.fill(values[0], values[1])
        if name in _AGGREGATES:
            return _aggregate(name, values[0], len(self.timestamps))
        if name == "TIME_SERIES":
            if not isinstance(values[0], _Scalar):
                raise Unsupported("metric math: TIME_SERIES of a time series is not implemented (the guide: S)")
            return _Series((values[0].value,) * len(self.timestamps))
        if name in _EACH:
            fn = _EACH[name]
            return _each_series(values[0], name, lambda s: _Series(tuple(_map(fn, v) for v in s.values)))
        return _each_series(values[0], name, lambda s: self.diff(s, name))

    def diff(self, series: _Series, name: str) -> _Series:
        """DIFF, DIFF_TIME and RATE: each data point against the preceding data point of the series, across a gap
        (the guide says "the preceding value": read as the previous data point, so growth over a gap is seen); the
        first data point of the range has none and is missing (the guide is silent)."""
        out: list[Point] = []
        previous: tuple[float, float] | None = None
        for t, v in zip(self.timestamps, series.values, strict=True):
            if v is None or previous is None:
                out.append(None)
            else:
                seconds, change = t - previous[0], v - previous[1]
                out.append({"DIFF": change, "DIFF_TIME": seconds, "RATE": change / seconds}[name])
            if v is not None:
                previous = (t, v)
        return _Series(tuple(out))

    def fill(self, target: _Value, filler: _Value | str) -> _Value:
        """FILL(TS, S | REPEAT | LINEAR), FILL(TS[], TS | S | REPEAT | LINEAR) (#metric-math-syntax-functions-list)."""
        if isinstance(filler, _Array) or (isinstance(filler, _Series) and not isinstance(target, _Array)):
            raise Unsupported("metric math: FILL with a time series filler is documented for an array only")
        return _each_series(target, "FILL", lambda s: self.fill_series(s, filler))

    def fill_series(self, series: _Series, filler: _Scalar | _Series | str) -> _Series:
        values = list(series.values)
        known = [(self.timestamps[i], v) for i, v in enumerate(values) if v is not None]
        for i, v in enumerate(values):
            if v is not None:
                continue
            t = self.timestamps[i]
            before = [p for p in known if p[0] < t]
            after = [p for p in known if p[0] > t]
            if isinstance(filler, _Scalar):
                values[i] = filler.value
            elif isinstance(filler, _Series):
                values[i] = filler.values[i]
            elif filler == "REPEAT":  # before the first data point there is nothing to repeat (the guide is silent)
                values[i] = before[-1][1] if before else None
            elif before and after:  # LINEAR; before the first or after the last point: missing (guide silent)
                (t0, v0), (t1, v1) = before[-1], after[0]
                values[i] = v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        return _Series(tuple(values))


def _if(cond: _Value, yes: _Value, no: _Value | None) -> _Series:
    """IF(condition, trueValue[, falseValue]) (#using-IF-expressions): the syntaxes the guide lists, no array."""
    if any(isinstance(v, _Array) for v in (cond, yes, no)):
        raise Unsupported("metric math: IF on an array of time series is not implemented")
    if isinstance(cond, _Scalar):
        # IF(S, TS[, TS]): the whole trueValue or falseValue series; an omitted falseValue is an empty series.
        if not isinstance(yes, _Series) or isinstance(no, _Scalar):
            raise Unsupported("metric math: IF with a scalar condition takes time series values (IF(S, TS, TS))")
        empty = _Series((None,) * len(yes.values))
        if cond.value is None:
            return empty
        return yes if cond.value != 0 else (no if isinstance(no, _Series) else empty)
    assert isinstance(cond, _Series)
    out: list[Point] = []
    for i, c in enumerate(cond.values):
        if c is None:  # no condition point: the point is dropped
            out.append(None)
        elif c != 0:  # true: trueValue, 0 where that series has no point
            out.append(_branch(yes, i, 0.0))
        else:  # false: falseValue, dropped where that series has no point or falseValue is omitted
            out.append(None if no is None else _branch(no, i, None))
    return _Series(tuple(out))


def _branch(value: _Value, i: int, missing: Point) -> Point:
    if isinstance(value, _Scalar):
        return value.value
    assert isinstance(value, _Series)
    point = value.values[i]
    return missing if point is None else point


def _aggregate(name: str, value: _Value, n: int) -> _Value:
    """SUM, AVG, MIN, MAX: of one series a scalar over its data points (no value when it has none: the guide is
    silent); of an array a series, point by point, a missing value 0 where another series has one (AVG: "Missing
    values are treated as 0"; MIN and MAX: the guide is silent, the arithmetic rule is applied)."""
    fn = _AGGREGATES[name]
    if isinstance(value, _Scalar):
        raise Unsupported(f"metric math: {name} of a scalar is not implemented (the guide: TS or TS[])")
    if isinstance(value, _Series):
        present = [v for v in value.values if v is not None]
        return _Scalar(fn(present) if present else None)
    out: list[Point] = []
    for points in zip(*(s.values for s in value.series), strict=True) if value.series else [()] * n:
        out.append(None if all(p is None for p in points) else fn([0.0 if p is None else p for p in points]))
    return _Series(tuple(out))


def evaluate_queries(
    queries: Sequence[Query],
    metric_values: Mapping[str, Sequence[float | None]],
    timestamps: Sequence[float],
    period: int,
) -> list[float | None]:
    """The values of the query with ReturnData true, one per timestamp (None: no datapoint for that period).

    ``metric_values[id]`` holds each metric query's datapoint per timestamp; ``timestamps`` are the period starts of
    the range, ascending and ``period`` apart. Every query is evaluated, expressions after the ids they read; an
    unknown id or a cycle is refused naming it. The result must be one time series: an array (METRICS() alone) is
    refused, and so is a scalar, which the guide says is not a valid final result (TIME_SERIES(S) makes one).
    """
    returned = [q for q in queries if q.return_data]
    if len(returned) != 1:
        raise Unsupported(f"metric math: {len(returned)} queries return data; an alarm needs exactly one")
    starts = [float(t) for t in timestamps]
    if any(b - a != period for a, b in zip(starts, starts[1:], strict=False)):
        raise ValueError(f"metric math: the timestamps must be ascending and {period} s apart, got {starts}")
    evaluation = _Evaluation(queries, metric_values, starts)
    for query in queries:
        evaluation.value_of(query.id, query.id)
    result = evaluation.values[returned[0].id]
    if isinstance(result, _Array):
        raise Unsupported(f"metric math: {returned[0].id} returns an array of time series; an alarm watches one")
    if isinstance(result, _Scalar):
        raise Unsupported(f"metric math: {returned[0].id} returns a scalar, not a valid result (use TIME_SERIES)")
    return list(result.values)
