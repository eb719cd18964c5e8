"""What the evaluator reads: alarms as plain data (from a template, see :mod:`infra.alarms.template`) and series.

No CDK and no AWS client here: the evaluator runs on any CloudFormation template and a JSON file of datapoints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

OK, ALARM, INSUFFICIENT_DATA = "OK", "ALARM", "INSUFFICIENT_DATA"
STATES = (OK, ALARM, INSUFFICIENT_DATA)

#: TreatMissingData values (AWS::CloudWatch::Alarm); ``missing`` is CloudWatch's default.
BREACHING, NOT_BREACHING, IGNORE, MISSING = "breaching", "notBreaching", "ignore", "missing"
TREAT_MISSING = (BREACHING, NOT_BREACHING, IGNORE, MISSING)

#: ComparisonOperator values a metric alarm with a static threshold may use (anomaly detection ones are refused).
COMPARISONS = {
    "GreaterThanOrEqualToThreshold": lambda value, threshold: value >= threshold,
    "GreaterThanThreshold": lambda value, threshold: value > threshold,
    "LessThanThreshold": lambda value, threshold: value < threshold,
    "LessThanOrEqualToThreshold": lambda value, threshold: value <= threshold,
}


class Unsupported(ValueError):
    """Something the evaluator does not implement (a function, an intrinsic, a statistic, a period): refused, never
    guessed. The message is one line naming it."""


#: A metric's identity: namespace, metric name and its dimensions (sorted name/value pairs).
MetricKey = tuple[str, str, tuple[tuple[str, str], ...]]


def metric_key(namespace: str, metric: str, dimensions: Mapping[str, str]) -> MetricKey:
    return (namespace, metric, tuple(sorted(dimensions.items())))


@dataclass(frozen=True)
class MetricStat:
    """One metric with the statistic and period an alarm reads it with (``Stat`` as CloudWatch spells it:
    ``Sum``, ``Average``, ``Minimum``, ``Maximum``, ``SampleCount`` or ``pNN``)."""

    key: MetricKey
    stat: str
    period: int


@dataclass(frozen=True)
class Query:
    """One entry of an alarm's ``Metrics`` (a MetricDataQuery): a metric or an expression over other ids."""

    id: str
    metric: MetricStat | None = None
    expression: str | None = None
    period: int | None = None
    return_data: bool = True


@dataclass(frozen=True)
class MetricAlarm:
    """An ``AWS::CloudWatch::Alarm`` with its names resolved. A single-metric alarm has one query (id ``m1``)."""

    logical_id: str
    name: str
    period: int
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    comparison: str
    treat_missing: str
    queries: tuple[Query, ...]
    #: Notified topics (logical ids, or the ARN as written when not a resource of the template) per new state.
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def returned(self) -> Query:
        """The query whose values are compared with the threshold (the one with ReturnData true)."""
        returned = [q for q in self.queries if q.return_data]
        if len(returned) != 1:
            raise Unsupported(f"alarm {self.name}: {len(returned)} queries return data; CloudWatch needs exactly one")
        return returned[0]

    def metric_keys(self) -> set[MetricKey]:
        return {q.metric.key for q in self.queries if q.metric is not None}


@dataclass(frozen=True)
class CompositeAlarm:
    """An ``AWS::CloudWatch::CompositeAlarm``: its rule with every alarm ARN resolved (ALARM("arn:...:alarm:Name"))."""

    logical_id: str
    name: str
    rule: str
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class Series:
    """The raw datapoints CloudWatch received, per metric: ``{key: [(t, value), ...]}`` sorted by t (seconds since
    the series start). A period without a point is missing data.

    ``received``: per metric, the points that reached CloudWatch late, ``{t: when received}``; an evaluation before
    that moment reads the point's period without it. A point not listed is there by the evaluation that ends its
    period (the engine's reading for every metric)."""

    def __init__(
        self,
        points: Mapping[MetricKey, Iterable[tuple[float, float]]] | None = None,
        received: Mapping[MetricKey, Mapping[float, float]] | None = None,
    ) -> None:
        self.points: dict[MetricKey, list[tuple[float, float]]] = {}
        self.received: dict[MetricKey, dict[float, float]] = {}
        for key, values in (points or {}).items():
            self.add(key, values, (received or {}).get(key))

    def add(
        self, key: MetricKey, values: Iterable[tuple[float, float]], received: Mapping[float, float] | None = None
    ) -> None:
        merged = self.points.setdefault(key, [])
        merged.extend((float(t), float(v)) for t, v in values)
        merged.sort(key=lambda point: point[0])
        if received:
            self.received.setdefault(key, {}).update({float(t): float(at) for t, at in received.items()})

    def merge(self, other: Series) -> None:
        """Add every point of ``other``, with when each late one arrived."""
        for key, values in other.points.items():
            self.add(key, values, other.received.get(key))

    def get(self, key: MetricKey) -> list[tuple[float, float]]:
        return self.points.get(key, [])

    def known_at(self, key: MetricKey, now: float) -> list[tuple[float, float]]:
        """The points of ``key`` CloudWatch had received by ``now`` (every point but a late one not yet arrived)."""
        late = self.received.get(key)
        if not late:
            return self.get(key)
        return [point for point in self.get(key) if late.get(point[0], -math.inf) <= now]

    def late_after(self, key: MetricKey, now: float, start: float, end: float) -> bool:
        """Whether a point of ``key`` with t in ``[start, end)`` arrives after ``now``."""
        return any(start <= t < end and at > now for t, at in self.received.get(key, {}).items())

    @property
    def last_t(self) -> float | None:
        ends = [values[-1][0] for values in self.points.values() if values]
        return max(ends) if ends else None

    def to_json(self, end: float | None = None) -> dict[str, object]:
        """The SERIES file format (``python -m infra.alarms evaluate TEMPLATE SERIES``)."""
        metrics = [
            {
                "namespace": namespace,
                "metric": metric,
                "dimensions": dict(dimensions),
                "points": self._points_json((namespace, metric, dimensions)),
            }
            for namespace, metric, dimensions in sorted(self.points)
        ]
        document: dict[str, object] = {"metrics": metrics}
        if end is not None:
            document["end"] = end
        return document

    def _points_json(self, key: MetricKey) -> list[list[float]]:
        late = self.received.get(key, {})
        return [[t, v, late[t]] if t in late else [t, v] for t, v in self.get(key)]

    @classmethod
    def from_json(cls, document: Mapping[str, object]) -> tuple[Series, float | None]:
        """Parse a SERIES document; a malformed one is refused naming the field, the rule and the value."""
        unknown = sorted(set(document) - {"metrics", "end"})
        if unknown:
            raise ValueError(f"SERIES: unknown key {unknown[0]!r} (a SERIES holds 'metrics' and optionally 'end')")
        metrics = document.get("metrics")
        if not isinstance(metrics, list):
            raise ValueError(f"SERIES: 'metrics' must be a list of metrics, got {type(metrics).__name__}")
        series = cls()
        for index, entry in enumerate(metrics):
            where = f"SERIES metrics[{index}]"
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: must be an object, got {entry!r}")
            unknown = sorted(set(entry) - {"namespace", "metric", "dimensions", "points"})
            if unknown:
                raise ValueError(
                    f"{where}: unknown key {unknown[0]!r} (a metric holds namespace, metric, dimensions, points)"
                )
            for name in ("namespace", "metric"):
                if not isinstance(entry.get(name), str) or not entry[name]:
                    raise ValueError(f"{where}.{name}: must be a non-empty string, got {entry.get(name)!r}")
            dimensions = entry.get("dimensions", {})
            if not isinstance(dimensions, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in dimensions.items()
            ):
                raise ValueError(f"{where}.dimensions: must map names to string values, got {dimensions!r}")
            points = entry.get("points")
            if not isinstance(points, list):
                raise ValueError(f"{where}.points: must be a list of [t, value], got {points!r}")
            parsed, late = [], {}
            for p_index, point in enumerate(points):
                if (
                    not isinstance(point, list | tuple)
                    or len(point) not in (2, 3)
                    or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in point)
                ):
                    raise ValueError(
                        f"{where}.points[{p_index}]: must be [t, value] or [t, value, received] numbers, got {point!r}"
                    )
                if point[0] < 0:
                    raise ValueError(f"{where}.points[{p_index}]: t must be >= 0 (seconds since start), got {point[0]}")
                if len(point) == 3:
                    if point[2] < point[0]:
                        raise ValueError(
                            f"{where}.points[{p_index}]: received must be >= t (a point arrives after its time),"
                            f" got {point[2]}"
                        )
                    late[point[0]] = point[2]
                parsed.append((point[0], point[1]))
            series.add(metric_key(entry["namespace"], entry["metric"], dimensions), parsed, late)
        end = document.get("end")
        if end is not None and (not isinstance(end, int | float) or isinstance(end, bool) or end < 0):
            raise ValueError(f"SERIES end: must be a number of seconds >= 0, got {end!r}")
        return series, (float(end) if end is not None else None)
