"""The "Async handlers" section of docs/evidence/BENCHMARKS.md, from ``async.json`` (``python -m bench async``).

Pure arithmetic and rendering, no I/O: medians over rounds, each round's ratio to the threaded cell of the same round
and guard, and the tables (:func:`section`, the ``{{async}}`` placeholder's text). The harness prints its progress
lines with :func:`describe` and :func:`round_ratio`, so both say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.markdown import measured as _meta
from bench.markdown import missing as _missing
from bench.markdown import table as _table
from bench.peers import summary

COMMAND = "python -m bench async"
#: The cell every other is compared with: the def handler at its most threads.
BASELINE = "thread_c256"
#: The guard a cell runs under -> how the tables name it.
GUARDS = {"idempotent": "no guard (`idempotent=True`)", "dynamodb": "the DynamoDB idempotency guard (as deployed)"}
LABELS = {
    "thread_c256": "`def`, 256 threads",
    "async_c256": "`async def`, 256 coroutines",
    "async_c1024": "`async def`, 1,024 coroutines",
}

#: Received over deleted in a window above this: the subject was still taking messages into its slots (warm-up).
FILLING = 1.1

Row = Mapping[str, Any]


def cores(row: Row) -> float:
    """The process's CPU over the window's wall time: 1.0 is one core kept busy (an interpreter's most, for Python)."""
    return float(row["cpu_seconds"] / row["seconds"])


def describe(row: Row) -> str:
    """One progress line's figures: the peers' (:func:`bench.peers.summary.describe`), the ideal's share, the cores,
    the most threads seen and the peak resident set."""
    text = summary.describe(row)
    if summary.measured(row):
        text += (
            f"  {100 * row['messages_per_second'] / row['ideal']:.0f} % of ideal, {cores(row):.2f} cores,"
            f" max {row['tree_threads_max']} threads, peak RSS {row['tree_peak_rss_mib']:.0f} MiB"
        )
    return text


def _found(rows: Sequence[Row], shape: str, guard: str, round_number: int | None = None) -> list[Row]:
    return [
        r
        for r in rows
        if r["cell"] == shape
        and r["guard"] == guard
        and (round_number is None or r["round"] == round_number)
        and summary.measured(r)
    ]


def _value(row: Row, key: str) -> float:
    return cores(row) if key == "cores" else float(row[key])


def round_ratio(rows: Sequence[Row], round_number: int, shape: str, guard: str, key: str) -> float | None:
    """``shape``'s ``key`` over the threaded cell's, in one round under one guard (None if either is missing)."""
    mine, theirs = _found(rows, shape, guard, round_number), _found(rows, BASELINE, guard, round_number)
    if not mine or not theirs or not _value(theirs[0], key):
        return None
    return _value(mine[0], key) / _value(theirs[0], key)


def round_ratios(rows: Sequence[Row], shape: str, guard: str, key: str) -> list[float]:
    """:func:`round_ratio` of every round, in round order (rounds missing either cell left out)."""
    rounds = sorted({r["round"] for r in rows})
    ratios = [round_ratio(rows, n, shape, guard, key) for n in rounds]
    return [r for r in ratios if r is not None]


def medians(rows: Sequence[Row], shape: str, guard: str) -> dict[str, Any] | None:
    """The cell's medians over its rounds (None if no round measured it), and its ratios to the threaded cell."""
    found = _found(rows, shape, guard)
    if not found:
        return None
    keys = (
        "messages_per_second",
        "cpu_ms_per_message",
        "tree_peak_rss_mib",
        "tree_pss_mib",
        "tree_threads_max",
        "sqs_requests_per_message",
        "dynamodb_requests_per_message",
        "machine_busy",
        "held_at_end",
    )
    figures: dict[str, Any] = {key: summary.median(r.get(key) for r in found) for key in keys}
    figures["cores"] = summary.median(cores(r) for r in found)
    figures["ideal"] = found[0]["ideal"]
    figures["of_ideal"] = summary.median(r["messages_per_second"] / r["ideal"] for r in found)
    for key in ("messages_per_second", "cpu_ms_per_message", "cores"):
        figures[f"{key}_ratio"] = summary.median(round_ratios(rows, shape, guard, key))
    figures["rounds"] = len(found)
    figures["received_per_deleted"] = summary.median(r["received"] / r["deleted"] for r in found)
    figures["starved"] = max(float(r.get("feed_starved") or 0.0) for r in found)
    figures["pool_warnings"] = sum(r.get("pool_warnings", 0) for r in found)
    return figures


def _fig(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _each(rows: Sequence[Row], shape: str, guard: str, key: str, digits: int) -> str:
    """Each round's figure after the median, in parentheses (when there was more than one round)."""
    values = [_value(r, key) for r in _found(rows, shape, guard)]
    return "" if len(values) < 2 else " (" + " / ".join(f"{v:,.{digits}f}" for v in values) + ")"


def _ratio(figures: Mapping[str, Any], key: str, shape: str) -> str:
    return "1" if shape == BASELINE else _fig(figures[f"{key}_ratio"], 2)


def _guard_table(rows: Sequence[Row], shapes: Sequence[str], guard: str) -> str:
    """Throughput under one guard: msg/s against the ideal and the threaded cell, CPU per message, cores used."""
    table, notes = [], []
    for shape in shapes:
        figures = medians(rows, shape, guard)
        errors = [r["error"] for r in rows if r["cell"] == shape and r["guard"] == guard and "error" in r]
        if errors:
            notes.append(f"{LABELS[shape]}: {len(errors)} measurement(s) failed: {'; '.join(errors)}")
        if figures is None:
            continue
        each = [(r["messages_per_second"] / r["ideal"]) for r in _found(rows, shape, guard)]
        table.append(
            [
                LABELS[shape],
                _fig(figures["ideal"]),
                _fig(figures["messages_per_second"]) + _each(rows, shape, guard, "messages_per_second", 0),
                f"{100 * figures['of_ideal']:.0f} %"
                + ("" if len(each) < 2 else " (" + " / ".join(f"{100 * v:.0f}" for v in each) + ")"),
                _ratio(figures, "messages_per_second", shape)
                + ("" if shape == BASELINE else _ratios(rows, shape, guard, "messages_per_second")),
                _fig(figures["cpu_ms_per_message"], 2) + _each(rows, shape, guard, "cpu_ms_per_message", 2),
                _ratio(figures, "cpu_ms_per_message", shape),
                _fig(figures["cores"], 2) + _each(rows, shape, guard, "cores", 2),
            ]
        )
        notes += _notes(shape, figures)
    header = [
        "handler",
        "ideal msg/s",
        "msg/s",
        "of ideal",
        "msg/s / threads'",
        "CPU ms/msg",
        "CPU / threads'",
        "cores used",
    ]
    text = f"**With {GUARDS[guard]}:**\n\n" + _table(header, table)
    return text + "".join(f"\n\n_{note}._" for note in notes)


def _notes(shape: str, figures: Mapping[str, Any]) -> list[str]:
    """What the reader should know about a cell's figures: a starved queue, slots still filling, pool warnings."""
    notes = []
    if figures["starved"] > summary.STARVED:
        notes.append(
            f"{LABELS[shape]}: the queue was nearly empty at up to {100 * figures['starved']:.0f} % of the feeder's"
            " looks, so its msg/s is partly the feeder's"
        )
    if (figures["received_per_deleted"] or 0) > FILLING:
        notes.append(
            f"{LABELS[shape]}: it received {figures['received_per_deleted']:.2f} messages per message deleted in"
            " the window (median): its slots were still filling, so its requests per message are not yet the"
            " steady state's"
        )
    if figures["pool_warnings"]:
        notes.append(f"{LABELS[shape]}: {figures['pool_warnings']} urllib3 'Connection pool is full' warnings")
    return notes


def _resources_table(rows: Sequence[Row], shapes: Sequence[str], guards: Sequence[str]) -> str:
    """What each cell held and cost besides CPU: threads, memory, messages in the process, requests per message."""
    table = []
    for guard in guards:
        for shape in shapes:
            figures = medians(rows, shape, guard)
            if figures is None:
                continue
            held = figures["held_at_end"]
            rate = figures["messages_per_second"]
            table.append(
                [
                    LABELS[shape],
                    "DynamoDB" if guard == "dynamodb" else "none",
                    _fig(figures["tree_threads_max"]),
                    _fig(figures["tree_peak_rss_mib"]),
                    _fig(held),
                    _fig(held / rate, 2) if held is not None and rate else "-",
                    _fig(figures["sqs_requests_per_message"], 3),
                    _fig(figures["dynamodb_requests_per_message"], 3),
                    _fig(100 * figures["machine_busy"]) + " %" if figures["machine_busy"] is not None else "-",
                ]
            )
    header = [
        "handler",
        "guard",
        "threads (most)",
        "peak RSS MiB",
        "messages held",
        "s held per message",
        "SQS req/msg",
        "DynamoDB req/msg",
        "machine busy",
    ]
    return "**What each process held, and its requests (medians):**\n\n" + _table(header, table)


def _ratios(rows: Sequence[Row], shape: str, guard: str, key: str) -> str:
    values = round_ratios(rows, shape, guard, key)
    return "" if len(values) < 2 else " (" + " / ".join(f"{v:.2f}" for v in values) + ")"


def section(result: Mapping[str, Any] | None) -> str:
    """The ``{{async}}`` placeholder's text: per guard, every cell's medians (each round in parentheses)."""
    if result is None or not result.get("rows"):
        return _missing(COMMAND)
    settings, rows = result["settings"], result["rows"]
    shapes = [s for s in settings["shapes"] if s in LABELS]
    parts = [
        _meta(result)
        + f" _`{COMMAND}`: {settings['rounds']} interleaved round(s), {settings['warmup_seconds']:g} s"
        + (
            f" warm-up then up to {settings['steady_seconds']:g} s more until steady,"
            if settings.get("steady_seconds")
            else " warm-up and"
        )
        + f" {settings['window_seconds']:g} s counted per measurement; the medians, each round in"
        " parentheses; ratios are each round's against the threaded cell of the same round and guard._"
    ]
    guards = [guard for guard in settings["guards"] if guard in GUARDS]
    parts += [_guard_table(rows, shapes, guard) for guard in guards]
    parts.append(_resources_table(rows, shapes, guards))
    return "\n\n".join(parts)
