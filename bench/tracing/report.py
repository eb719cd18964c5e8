"""The "Tracing" section of docs/BENCHMARKS.md, from ``docs/bench/tracing.json`` (``python -m bench tracing``).

Pure arithmetic and rendering: per cell the medians over rounds, and each round's ratio to that round's ``off`` cell
(the ``{{tracing}}`` placeholder's text).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.markdown import measured, missing, table

COMMAND = "python -m bench tracing"
LABELS = {
    "off": "off (`CONSUMER_TRACING` unset: the baseline)",
    "sdk": "on: SDK, batch processor, spans dropped",
    "otlp": "on: `otlp`, every span posted over OTLP/HTTP",
}

Row = Mapping[str, Any]


def _ratios(rows: Sequence[Row], cell: str, key: str) -> list[float]:
    """Each round's ``key`` of ``cell`` over the same round's ``off``."""
    base = {row["round"]: row[key] for row in rows if row["cell"] == "off" and row[key]}
    return [row[key] / base[row["round"]] for row in rows if row["cell"] == cell and row["round"] in base and row[key]]


def _median(values: Sequence[float], fmt: str) -> str:
    if not values:
        return "-"
    rounds = ", ".join(format(v, fmt) for v in values)
    return f"{statistics.median(values):{fmt}}" + (f" ({rounds})" if len(values) > 1 else "")


def section(result: Mapping[str, Any] | None) -> str:
    """The ``{{tracing}}`` placeholder's text."""
    if result is None or not result.get("rows"):
        return missing(COMMAND)
    settings, rows = result["settings"], result["rows"]
    header = ["tracing", "msg/s", "CPU ms / msg", "msg/s vs off", "CPU / msg vs off", "SQS req / msg"]
    lines = []
    for cell in settings["cells"]:
        mine = [row for row in rows if row["cell"] == cell]
        lines.append(
            [
                LABELS.get(cell, cell),
                _median([row["messages_per_second"] for row in mine], ".0f"),
                _median([row["cpu_ms_per_message"] for row in mine if row["cpu_ms_per_message"]], ".3f"),
                _median(_ratios(rows, cell, "messages_per_second"), ".2f"),
                _median(_ratios(rows, cell, "cpu_ms_per_message"), ".2f"),
                _median([row["requests_per_message"] for row in mine if row["requests_per_message"]], ".3f"),
            ]
        )
    intro = (
        measured(result)
        + f" _`{COMMAND}`: the no-op handler at concurrency {settings['concurrency']}, saturated;"
        + f" {settings['rounds']} round(s) of every cell in turn, {settings['warmup_seconds']:g} s warm-up and"
        + f" {settings['window_seconds']:g} s counted each; the medians, each round in parentheses; ratios are each"
        + " round's against the off cell of the same round._"
    )
    return intro + "\n\n" + table(header, lines)
