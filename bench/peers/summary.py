"""Pure arithmetic over the peers benchmark's rows (no I/O): medians over rounds, ratios, ideals, who is ahead.

Used by the harness for its progress lines and by :mod:`bench.report` for the tables, so both say the same thing.
A row is one measurement (one subject, one cell, one round): the :meth:`bench.rig.Cell.as_dict` figures plus
``cell``, ``kind``, ``concurrency``, ``round``, ``subject``, ``shape`` and ``processes``; or ``skipped`` (a reason)
or ``error`` (what went wrong) instead of figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HEADLINE_CELL = "noop_c16"
#: Seconds one handler of each kind takes (bench/peers/work.py); 0: the no-op has no ideal rate.
HANDLER_SECONDS = {"noop": 0.0, "io50": 0.05, "io200": 0.2, "cpu5": 0.005}
#: A subject that found the queue nearly empty (fewer than 10 visible) at more than this share of the feeder's looks
#: partly measured the feeder; the report says so beside it.
STARVED = 0.1
#: Compared between ours and a peer, with the direction that is better.
METRICS = {"messages_per_second": "higher", "cpu_ms_per_message": "lower"}


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ideal(kind: str, concurrency: int, processes: int = 1) -> float | None:
    """The rate the handlers alone allow: slots / duration for a sleep; one core per process for a spin."""
    seconds = HANDLER_SECONDS.get(kind, 0.0)
    if not seconds:
        return None
    if kind == "cpu5":  # pure Python holds the interpreter: one process uses one core at most
        return processes / seconds
    return concurrency / seconds


def measured(row: Mapping[str, Any]) -> bool:
    return "skipped" not in row and "error" not in row and bool(row.get("deleted"))


def describe(row: Mapping[str, Any]) -> str:
    """One progress line's figures."""
    if "skipped" in row:
        return f"- ({row['skipped']})"
    if "error" in row:
        return f"ERROR {row['error']}"
    cpu = row.get("cpu_ms_per_message")
    sqs = row.get("sqs_requests_per_message")
    ddb = row.get("dynamodb_requests_per_message") or 0
    text = (
        f"{row['messages_per_second']:7.0f} msg/s  {_num(cpu, 3)} ms CPU/msg  {_num(sqs, 3)} SQS req/msg"
        f"  load {row['load']:.2f}"
    )
    if row.get("machine_busy") is not None:
        text += f" (busy {100 * row['machine_busy']:.0f} %)"
    if ddb:
        text += f"  {ddb:.3f} DynamoDB req/msg"
    if row.get("tree_processes"):
        text += f"  [{row['tree_processes']} proc., {row['tree_threads']} threads, {row['tree_pss_mib']:.0f} MiB]"
    if (row.get("feed_starved") or 0) > STARVED:
        text += f"  (the queue was nearly empty at {100 * row['feed_starved']:.0f} % of the feeder's looks)"
    if row.get("pool_warnings"):
        text += f"  ({row['pool_warnings']} 'connection pool is full' warnings)"
    return text


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def round_ratio(
    rows: Sequence[Mapping[str, Any]], cell: str, round_number: int, subject: str, baseline: str
) -> float | None:
    """``subject``'s CPU per message over ``baseline``'s in one round of ``cell`` (None if either is missing)."""
    found = {
        r["subject"]: r["cpu_ms_per_message"]
        for r in rows
        if r["cell"] == cell and r["round"] == round_number and measured(r) and r.get("processes", 1) == 1
    }
    if not found.get(subject) or not found.get(baseline):
        return None
    return float(found[subject] / found[baseline])


def round_ratios(rows: Sequence[Mapping[str, Any]], cell: str, subject: str, baseline: str) -> list[float]:
    """The per-round ratios of :func:`round_ratio`, in round order (rounds missing either are left out)."""
    rounds = sorted({r["round"] for r in rows if r["cell"] == cell})
    ratios = [round_ratio(rows, cell, n, subject, baseline) for n in rounds]
    return [r for r in ratios if r is not None]


@dataclass
class Summary:
    """One subject in one cell (one process count): medians over its rounds, and every round's load."""

    cell: str
    subject: str
    processes: int
    kind: str
    concurrency: int
    shape: str = ""
    rounds: int = 0
    messages_per_second: float | None = None
    cpu_ms_per_message: float | None = None
    sqs_requests_per_message: float | None = None
    dynamodb_requests_per_message: float | None = None
    #: Proportional set size of the whole process tree, MiB (shared pages split between the processes sharing them).
    memory_mib: float | None = None
    loads: list[float] = field(default_factory=list)
    #: Each round's share of the machine's CPU busy over the window (None for rows measured without it).
    busy: list[float | None] = field(default_factory=list)
    pool_warnings: int = 0
    #: The largest share of the feeder's looks that found the queue nearly empty, over the rounds.
    starved: float = 0.0
    #: What the subject ran as at the end of its last window: processes and threads in its process tree.
    tree_processes: int | None = None
    tree_threads: int | None = None
    skipped: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def ideal(self) -> float | None:
        return ideal(self.kind, self.concurrency, self.processes)


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int], Summary]:
    """(cell, subject, processes) -> :class:`Summary`, over every round of that cell."""
    grouped: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["cell"], row["subject"], row.get("processes", 1)), []).append(row)
    out = {}
    for key, group in grouped.items():
        first = group[0]
        good = [r for r in group if measured(r)]
        out[key] = Summary(
            cell=key[0],
            subject=key[1],
            processes=key[2],
            kind=first["kind"],
            concurrency=first["concurrency"],
            shape=first.get("shape", ""),
            rounds=len(good),
            messages_per_second=median(r["messages_per_second"] for r in good),
            cpu_ms_per_message=median(r["cpu_ms_per_message"] for r in good),
            sqs_requests_per_message=median(r["sqs_requests_per_message"] for r in good),
            dynamodb_requests_per_message=median(r.get("dynamodb_requests_per_message") or 0.0 for r in good),
            memory_mib=median(r.get("tree_pss_mib") for r in good),
            loads=[r["load"] for r in good],
            busy=[r.get("machine_busy") for r in good],
            pool_warnings=sum(r.get("pool_warnings", 0) for r in good),
            starved=max((float(r.get("feed_starved") or 0.0) for r in good), default=0.0),
            tree_processes=good[-1].get("tree_processes") if good else None,
            tree_threads=good[-1].get("tree_threads") if good else None,
            skipped=next((r["skipped"] for r in group if "skipped" in r), None),
            errors=[r["error"] for r in group if "error" in r],
        )
    return out


def behind(ours: Summary | None, peer: Summary | None) -> list[str]:
    """The metrics (of :data:`METRICS`) on which ``peer`` is ahead of ``ours`` in their cell (medians)."""
    if ours is None or peer is None:
        return []
    found = []
    for metric, better in METRICS.items():
        mine, theirs = getattr(ours, metric), getattr(peer, metric)
        if mine is None or theirs is None:
            continue
        if (theirs > mine) if better == "higher" else (theirs < mine):
            found.append(metric)
    return found
