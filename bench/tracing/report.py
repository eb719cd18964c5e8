"""The "Tracing" section of docs/evidence/BENCHMARKS.md, from ``tracing.json`` (``python -m bench tracing``).

Pure arithmetic and rendering: per cell the medians over rounds, and each round's ratio to that round's baseline
cell, ``before`` (the runtime before tracing existed): the ``{{tracing}}`` placeholder's text.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.markdown import measured, missing, table

COMMAND = "python -m bench tracing"
LABELS = {
    "before": "before tracing (commit `{before_commit}`): the baseline",
    "off": "off (`CONSUMER_TRACING` unset)",
    "absent": "off, opentelemetry unimportable",
    "sdk": "on: SDK, batch processor, spans dropped",
    "otlp": "on: `otlp`, every span posted over OTLP/HTTP",
}

Row = Mapping[str, Any]


def _ratios(rows: Sequence[Row], cell: str, key: str, baseline: str) -> list[float]:
    """Each round's ``key`` of ``cell`` over the same round's ``baseline`` cell."""
    base = {row["round"]: row[key] for row in rows if row["cell"] == baseline and row[key]}
    return [row[key] / base[row["round"]] for row in rows if row["cell"] == cell and row["round"] in base and row[key]]


def _median(values: Sequence[float], fmt: str) -> str:
    if not values:
        return "-"
    rounds = ", ".join(format(v, fmt) for v in values)
    return f"{statistics.median(values):{fmt}}" + (f" ({rounds})" if len(values) > 1 else "")


def _span(counts: Sequence[int]) -> str:
    """``counts`` as one number when every round agrees, else as ``least-most``; "-" when none was counted."""
    if not counts:
        return "-"
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def section(result: Mapping[str, Any] | None) -> str:
    """The ``{{tracing}}`` placeholder's text."""
    if result is None or not result.get("rows"):
        return missing(COMMAND)
    settings, rows = result["settings"], result["rows"]
    baseline = settings["baseline"]
    header = [
        "tracing",
        "msg/s",
        "CPU ms / msg",
        f"msg/s vs {baseline}",
        f"CPU / msg vs {baseline}",
        "SQS req / msg",
        "opentelemetry modules imported",
    ]
    lines = []
    for cell in settings["cells"]:
        mine = sorted((row for row in rows if row["cell"] == cell), key=lambda row: row["round"])
        modules = [row["opentelemetry_modules"] for row in mine if row.get("opentelemetry_modules") is not None]
        lines.append(
            [
                LABELS.get(cell, cell).format(**settings),
                _median([row["messages_per_second"] for row in mine], ".0f"),
                _median([row["cpu_ms_per_message"] for row in mine if row["cpu_ms_per_message"]], ".3f"),
                _median(_ratios(rows, cell, "messages_per_second", baseline), ".2f"),
                _median(_ratios(rows, cell, "cpu_ms_per_message", baseline), ".2f"),
                _median([row["requests_per_message"] for row in mine if row["requests_per_message"]], ".3f"),
                _span(modules),
            ]
        )
    intro = (
        measured(result)
        + f" _`{COMMAND}`: the no-op handler at concurrency {settings['concurrency']}, saturated;"
        + f" {settings['rounds']} round(s) of every cell, each round starting one cell further along;"
        + f" {settings['warmup_seconds']:g} s warm-up and {settings['window_seconds']:g} s counted each; the medians,"
        + f" each round in parentheses (in round order); ratios are each round's against the {baseline} cell of the"
        + " same round._"
    )
    return intro + "\n\n" + table(header, lines)
