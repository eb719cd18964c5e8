"""The clock: every alarm evaluated once a minute over its evaluation range, composites after the alarms they read.

CloudWatch evaluates an alarm whose period is a minute or more once a minute, over the evaluation range that ends
at that moment; an alarm starts in INSUFFICIENT_DATA and is evaluated at once when created (here at t = 0).
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html

Where the documentation is silent, the reading chosen here (and said in docs/evidence/alarms.md):
- the periods of the range end at the evaluation moment (a 480 s period read at t covers [t - 480, t)), and only
  whole periods count: the period in progress is not read, as CloudWatch evaluates only data it has received;
- a period before the series start is missing data (the metric did not exist yet);
- CloudWatch's ingestion and evaluation delays (seconds to a couple of minutes on AWS) are not added: a time to
  page here is the least AWS needs, and the goals (docs/alarms.md) keep a margin for them;
- a point is there by the evaluation that ends its period, unless the series says it arrived later
  (:attr:`infra.alarms.definitions.Series.received`): evaluations before then read its period without it, later
  ones with it (an alarm evaluates the data it has).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from infra.alarms.composite import composite_state, parse_rule
from infra.alarms.definitions import INSUFFICIENT_DATA, CompositeAlarm, MetricAlarm, MetricStat, Series
from infra.alarms.metric_alarm import effective_treat_missing, evaluation_range, next_state
from infra.alarms.metric_math import check_expression, evaluate_queries
from infra.alarms.statistics import check_period, check_stat, period_values

EVALUATION_INTERVAL = 60


@dataclass(frozen=True)
class Transition:
    """One state change: what ``python -m infra.alarms evaluate`` prints, one JSON object per line."""

    t: int
    alarm: str
    from_state: str
    to_state: str
    actions: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "t": self.t,
            "alarm": self.alarm,
            "from": self.from_state,
            "to": self.to_state,
            "actions": list(self.actions),
        }


def check_alarms(alarms: Sequence[MetricAlarm], composites: Sequence[CompositeAlarm]) -> None:
    """Refuse, before evaluating anything, whatever the evaluator does not implement (one line naming it)."""
    for alarm in alarms:
        check_period(alarm.period)
        alarm.returned  # noqa: B018 (raises when not exactly one query returns data)
        for query in alarm.queries:
            if query.metric is not None:
                check_stat(query.metric.stat)
                check_period(query.metric.period)
            if query.expression is not None:
                check_expression(query.expression)
    names = {a.name for a in alarms} | {c.name for c in composites}
    for composite in composites:
        missing = parse_rule(composite.rule).alarm_names() - names
        if missing:
            raise ValueError(
                f"composite alarm {composite.name}: its rule names {sorted(missing)[0]}, not in the template"
            )


def _composite_order(composites: Sequence[CompositeAlarm]) -> list[CompositeAlarm]:
    """Composites that read other composites come after them (CloudWatch refuses a cycle)."""
    by_name = {c.name: c for c in composites}
    ordered: list[CompositeAlarm] = []
    visiting: set[str] = set()

    def visit(composite: CompositeAlarm) -> None:
        if composite in ordered:
            return
        if composite.name in visiting:
            raise ValueError(f"composite alarm {composite.name}: its rule refers back to itself")
        visiting.add(composite.name)
        for name in sorted(parse_rule(composite.rule).alarm_names()):
            if name in by_name:
                visit(by_name[name])
        ordered.append(composite)

    for composite in composites:
        visit(composite)
    return ordered


class _Datapoints:
    """Per-period values of each metric statistic, computed once for every window start of the minute grid (one
    sort, one pass) and read by every evaluation as slices."""

    def __init__(self, series: Series, end: float) -> None:
        self.series = series
        self.count = int(end) // EVALUATION_INTERVAL + 1
        self.grids: dict[MetricStat, list[float | None]] = {}
        #: Per grid: for each index, the last index up to which the grid holds that index's value.
        self.runs: dict[MetricStat, list[int]] = {}

    def _grid(self, metric: MetricStat) -> list[float | None]:
        grid = self.grids.get(metric)
        if grid is None:
            grid_starts = [float(i * EVALUATION_INTERVAL) for i in range(self.count)]
            grid = self.grids[metric] = period_values(
                self.series.get(metric.key), metric.stat, grid_starts, metric.period
            )
        return grid

    def _on_grid(self, starts: Sequence[float]) -> bool:
        first, last, limit = starts[0], starts[-1], self.count * EVALUATION_INTERVAL
        return first % EVALUATION_INTERVAL == 0 and last % EVALUATION_INTERVAL == 0 and 0 <= first and last < limit

    def steady_minutes(self, metric: MetricStat, starts: Sequence[float]) -> int:
        """For how many more evaluations (each ``starts`` a minute later) :meth:`values` returns what it returns now:
        each period's value holds that long on the grid. 0 off the grid, or for a metric with late points (their
        arrival changes a period's value without the grid showing it)."""
        if self.series.received.get(metric.key) or not starts or starts[0] < 0 or not self._on_grid(starts):
            return 0
        runs = self.runs.get(metric)
        if runs is None:
            grid = self._grid(metric)
            runs = [len(grid) - 1] * len(grid)
            for index in range(len(grid) - 2, -1, -1):
                runs[index] = runs[index + 1] if grid[index] == grid[index + 1] else index
            self.runs[metric] = runs
        steady = len(runs)
        for start in reversed(starts):  # the newest period first: the likeliest to change next minute
            index = int(start) // EVALUATION_INTERVAL
            steady = min(steady, runs[index] - index)
            if not steady:
                break
        return steady

    def values(self, metric: MetricStat, starts: Sequence[float], now: float = math.inf) -> list[float | None]:
        """The statistic per period of ``starts``, from the points CloudWatch had received by ``now`` (a late point
        not yet arrived leaves its period without it: :attr:`Series.received`)."""
        late = self.series.received.get(metric.key)
        if late and self.series.late_after(metric.key, now, starts[0], starts[-1] + metric.period):
            return period_values(self.series.known_at(metric.key, now), metric.stat, starts, metric.period)
        grid = self._grid(metric)
        if self._on_grid(starts):
            step = (int(starts[1] - starts[0]) // EVALUATION_INTERVAL) if len(starts) > 1 else 1
            first = int(starts[0]) // EVALUATION_INTERVAL
            return grid[first : first + step * len(starts) : step]
        return period_values(self.series.get(metric.key), metric.stat, starts, metric.period)


def evaluate(
    alarms: Sequence[MetricAlarm],
    composites: Sequence[CompositeAlarm],
    series: Series,
    *,
    end: float,
    range_periods: Callable[[int], int] = evaluation_range,
    created: int = 0,
) -> list[Transition]:
    """Every state change from ``created`` (when the alarms are created, a whole minute; 0 by default) to ``end``
    (inclusive), in time order; within a minute, metric alarms first. Data before ``created`` is history the alarms
    read, as an alarm created on a metric that already has datapoints does."""
    check_alarms(alarms, composites)
    states = {a.name: INSUFFICIENT_DATA for a in alarms} | {c.name: INSUFFICIENT_DATA for c in composites}
    ordered = _composite_order(composites)
    rules = {c.name: parse_rule(c.rule) for c in ordered}
    datapoints = _Datapoints(series, end)
    changes: list[Transition] = []
    # An alarm whose datapoints did not change since its last evaluation keeps its state: next_state depends on the
    # current state only to keep it, so the same points give the same state again. Skipping those is what makes
    # weeks of minutes fast.
    # Nor is an alarm read while every period of its range keeps its value on the minute grid (``due``): the same
    # points again, known without slicing them. A composite is evaluated again only once a state it may read changed.
    last: dict[str, tuple[tuple[float | None, ...], ...]] = {}
    due = {alarm.name: created for alarm in alarms}
    changed = True
    for t in range(created, int(end) + 1, EVALUATION_INTERVAL):
        for alarm in alarms:
            if t < due[alarm.name]:
                continue
            count = range_periods(alarm.evaluation_periods)
            starts = [t - k * alarm.period for k in range(count, 0, -1)]
            due[alarm.name] = t + EVALUATION_INTERVAL * (1 + _steady(alarm, datapoints, starts))
            inputs = _inputs(alarm, datapoints, starts, t)
            signature = tuple(tuple(values) for values in inputs.values())
            if last.get(alarm.name) == signature:
                continue
            last[alarm.name] = signature
            points = alarm_points(alarm, inputs, starts)
            new = next_state(
                points,
                evaluation_periods=alarm.evaluation_periods,
                datapoints_to_alarm=alarm.datapoints_to_alarm,
                threshold=alarm.threshold,
                comparison=alarm.comparison,
                treat_missing=treat_missing(alarm),
                current=states[alarm.name],
            )
            change = _change(t, alarm.name, states, new, alarm.actions.get(new, ()))
            changed = changed or bool(change)
            changes.extend(change)
        if changed:  # in order: a composite after those it reads, so one pass leaves them all settled
            changed = False
            for composite in ordered:
                new = composite_state(rules[composite.name], states)
                changes.extend(_change(t, composite.name, states, new, composite.actions.get(new, ())))
    return changes


def _steady(alarm: MetricAlarm, datapoints: _Datapoints, starts: Sequence[float]) -> int:
    """For how many more minutes every metric query of ``alarm`` reads the values it reads at ``starts`` (0: read it
    again next minute)."""
    metrics = [query.metric for query in alarm.queries if query.metric is not None]
    return min((datapoints.steady_minutes(metric, starts) for metric in metrics), default=0)


def treat_missing(alarm: MetricAlarm) -> str:
    """The alarm's TreatMissingData as CloudWatch applies it: an alarm on metrics in a namespace that always ignores
    missing data (AWS/DynamoDB) ignores it whatever it says. The guide does not say what a math alarm mixing such a
    metric with others does; the reading here: only an alarm whose metrics are all in that namespace ignores."""
    namespaces = {key[0] for key in alarm.metric_keys()}
    return effective_treat_missing(alarm.treat_missing, namespaces.pop() if len(namespaces) == 1 else "")


def _inputs(
    alarm: MetricAlarm, datapoints: _Datapoints, starts: Sequence[float], now: float = math.inf
) -> dict[str, list[float | None]]:
    """Each metric query's values, one per period of the range, as known at ``now`` (None: missing; before t = 0:
    the metric had none)."""
    before = sum(1 for s in starts if s < 0)
    metric_values: dict[str, list[float | None]] = {}
    for query in alarm.queries:
        if query.metric is not None:
            known = datapoints.values(query.metric, starts[before:], now) if before < len(starts) else []
            padded: list[float | None] = [None] * before
            metric_values[query.id] = padded + list(known)
    return metric_values


def alarm_points(
    alarm: MetricAlarm, metric_values: dict[str, list[float | None]], starts: Sequence[float]
) -> list[float | None]:
    """The values the alarm compares with its threshold, one per period of the range (None: missing)."""
    returned = alarm.returned
    if returned.metric is not None:
        return metric_values[returned.id]
    return evaluate_queries(alarm.queries, metric_values, list(starts), alarm.period)


def alarm_values(
    alarm: MetricAlarm, series: Series, *, end: float, step: int = EVALUATION_INTERVAL
) -> list[tuple[int, float | None]]:
    """What the alarm compares with its threshold at each ``step`` from 0 to ``end``: its newest whole period's value
    (the metric's statistic, or the math's result; None where missing), for plots. Two periods are read, enough for
    DIFF and RATE; an expression that needs more of the range is drawn from two."""
    datapoints = _Datapoints(series, end)
    values: list[tuple[int, float | None]] = []
    for t in range(0, int(end) + 1, step):
        starts = [t - 2 * alarm.period, t - alarm.period]
        values.append((t, alarm_points(alarm, _inputs(alarm, datapoints, starts), starts)[-1]))
    return values


def _change(t: int, name: str, states: dict[str, str], new: str, actions: Iterable[str]) -> list[Transition]:
    old = states[name]
    if new == old:
        return []
    states[name] = new
    return [Transition(t=t, alarm=name, from_state=old, to_state=new, actions=tuple(actions))]


def default_end(
    alarms: Sequence[MetricAlarm], series: Series, range_periods: Callable[[int], int] = evaluation_range
) -> float:
    """One evaluation range (the longest of the alarms') after the series' last point."""
    longest = max((range_periods(a.evaluation_periods) * a.period for a in alarms), default=0)
    last = series.last_t or 0.0
    return last + longest


__all__ = ["Transition", "evaluate", "default_end", "check_alarms", "alarm_values"]
