"""Section 10 of docs/evidence/BENCHMARKS.md, the peers tables, from ``peers.json`` (``python -m bench peers``).

:func:`section` is the ``{{peers}}`` placeholder's text (:func:`bench.report.sections`). The figures are medians over
rounds (:mod:`bench.peers.summary`); :data:`PEERS_WHY` holds the reasons shown beside a cell where a peer is ahead
of ours, and only there. Pure rendering: no I/O (the Markdown helpers are :mod:`bench.markdown`'s, shared with
bench/report.py, which imports this module).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.markdown import measured as _meta
from bench.markdown import missing as _missing
from bench.markdown import table as _table
from bench.peers import summary

#: The command that reproduces the peers tables.
PEERS_COMMAND = "make peers"
#: Why ours is not ahead of a subject in a cell, keyed by (subject, cell), or (subject, "*") for every cell. Shown
#: only beside a cell where the measured medians put that subject ahead of a variant of ours (``summary.behind``); a
#: subject ahead of ours with no entry is flagged as such, so a new result never hides a loss. A key may also name a
#: variant of ours, ("ours", "*"): what that variant pays that the other does not, the reason looked up first when a
#: subject is ahead of that variant.
PEERS_WHY: dict[tuple[str, str], str] = {
    ("ours", "*"): (
        "ours as deployed runs the idempotency guard: a conditional PutItem claims each message before its handler"
        " runs (and a BatchWriteItem per batch of completions: the DynamoDB column), a botocore call's CPU per message"
        " in the process and about as much again in the endpoint, on the same 2 cores. No peer guards against a"
        " duplicate delivery: the idempotent-handler row is the like-for-like comparison"
    ),
    ("sqs-workers", "*"): (
        "N single-threaded processes (the MiB column): its CPU is spread over both cores with no interpreter lock"
        " between them, and each process is a bare loop, one receive and one DeleteMessageBatch per 10 and nothing"
        " else. The price is in the correctness cells: a process runs its 10 in turn, so a handler outliving its lease"
        " runs again, and so does a message left waiting in a process's batch past its visibility (the kill cell's"
        " duplicates)"
    ),
    ("minimal", "*"): (
        "the minimal loop only receives, runs and deletes: no heartbeat (a handler outliving its lease runs again:"
        " correctness cells), no deadline, no drain or hand-back on SIGTERM, no metrics; ours' extra CPU per message"
        " is that bookkeeping"
    ),
    ("dramatiq", "*"): (
        "N / 8 worker processes share both cores with no interpreter lock between them; it pays a DeleteMessage per"
        " message, and holds what it received for 12 hours if it dies (correctness cells)"
    ),
    ("sqs-consumer", "*"): (
        "Node: one event loop with no interpreter lock, and the JavaScript SDK's per-call CPU below botocore's; it"
        " pays a DeleteMessage per message and has no heartbeat unless configured (correctness cells)"
    ),
}
#: The variants of ours every other subject is compared with (the bare loop excepted: it has no handler).
_OURS = ("ours-idempotent", "ours")
#: ours-memory is a reference, not a deployed configuration: shown, never compared.
_NOT_COMPARED = frozenset({*_OURS, "ours-memory", "bare"})
_METRIC_WORDS = {"messages_per_second": "msg/s", "cpu_ms_per_message": "CPU per message"}
_NO_REASON = "**no reason recorded (PEERS_WHY in bench/peers/report.py)**"
#: How the notes name the variants of ours.
_VARIANTS = {"ours-idempotent": "ours (idempotent handler)", "ours": "ours (DynamoDB guard)"}


def _peer_labels(result: Mapping[str, Any]) -> dict[str, str]:
    return {s["name"]: s["label"] for s in result.get("subjects", [])}


def _fig(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _loads(entry: summary.Summary) -> str:
    """Each round's one-minute load average, with the machine's busy share over the window where measured."""
    busy = entry.busy if len(entry.busy) == len(entry.loads) else [None] * len(entry.loads)
    shown = [
        f"{load:.1f}" + ("" if b is None else f" ({100 * b:.0f} %)") for load, b in zip(entry.loads, busy, strict=True)
    ]
    return " / ".join(shown) or "-"


def _rounds(rows: list[Mapping[str, Any]], cell: str, subject: str, key: str, digits: int) -> str:
    """A median with each round's figure, when there was more than one round."""
    values = [r[key] for r in rows if r["cell"] == cell and r["subject"] == subject and summary.measured(r)]
    if len(values) < 2:
        return ""
    return " (" + " / ".join(f"{v:,.{digits}f}" for v in values) + ")"


def peers_notes(
    summaries: Mapping[tuple[str, str, int], summary.Summary],
    cell: str,
    subject: str,
    why: Mapping[tuple[str, str], str] = PEERS_WHY,
    reasons: list[str] | None = None,
) -> str:
    """The note beside ``subject``'s row of ``cell``: empty unless the medians put it ahead of a variant of ours, else
    per variant it is ahead of, on what and why (the variant's own reason first, then the subject's).

    With ``reasons`` (the section's list of reasons so far), a reason is named by its letter in that list (added if
    new) and written once below the tables (:func:`_why_list`); without, it is written out in the note.
    """
    entry = summaries.get((cell, subject, 1))
    notes = []
    for ours in _OURS:
        metrics = summary.behind(summaries.get((cell, ours, 1)), entry)
        if not metrics:
            continue
        keys = [(ours, cell), (ours, "*"), (subject, cell), (subject, "*")]
        if ours == _OURS[0]:  # the variant without a guard: its own reasons are the subject's
            keys = keys[2:]
        reason = next((why[k] for k in keys if k in why), _NO_REASON)
        ahead = f"ahead of {_VARIANTS[ours]} on {' and '.join(_METRIC_WORDS[m] for m in metrics)}"
        if reasons is None:
            notes.append(f"{ahead}: {reason}")
            continue
        if reason not in reasons:
            reasons.append(reason)
        notes.append(f"{ahead} ({_letter(reasons.index(reason))})")
    return "; ".join(notes)


def _letter(index: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[index] if index < 26 else str(index + 1)


def _why_list(reasons: list[str]) -> str:
    """The reasons the notes name by letter, each written once."""
    if not reasons:
        return (
            "Ours is ahead of every subject compared (all but the bare loop, which has no handler) in every cell above."
        )
    return "**Why ours is behind where a note says so:**\n\n" + "\n".join(
        f"- ({_letter(i)}) {reason}." for i, reason in enumerate(reasons)
    )


def _peers_cell(
    result: Mapping[str, Any],
    cell: str,
    summaries: Mapping[tuple[str, str, int], summary.Summary],
    reasons: list[str] | None = None,
) -> str:
    rows = result["rows"]
    labels = _peer_labels(result)
    order = [s["name"] for s in result.get("subjects", [])]
    ideal = None
    table = []
    for name in order:
        entry = summaries.get((cell, name, 1))
        if entry is None:
            continue
        ideal = ideal or entry.ideal
        label = labels.get(name, name)
        if entry.skipped:
            table.append([label, entry.shape, "-", "-", "-", "-", "-", "-", f"not run: {entry.skipped}"])
            continue
        if entry.rounds == 0:
            table.append([label, entry.shape, "-", "-", "-", "-", "-", "-", f"failed: {'; '.join(entry.errors)}"])
            continue
        notes = [] if name in _NOT_COMPARED else [peers_notes(summaries, cell, name, reasons=reasons)]
        if entry.pool_warnings:
            notes.append(f"{entry.pool_warnings} urllib3 'Connection pool is full' warnings")
        if entry.starved > summary.STARVED:
            notes.append(
                f"the queue was nearly empty at {100 * entry.starved:.0f} % of the feeder's looks: its msg/s is partly"
                " the feeder's (CPU per message holds)"
            )
        table.append(
            [
                label,
                _shape(entry),
                _fig(entry.messages_per_second) + _rounds(rows, cell, name, "messages_per_second", 0),
                _fig(entry.cpu_ms_per_message, 2) + _rounds(rows, cell, name, "cpu_ms_per_message", 2),
                _fig(entry.sqs_requests_per_message, 3),
                _fig(entry.dynamodb_requests_per_message, 3) if name in _OURS or name == "ours-memory" else "-",
                _fig(entry.memory_mib),
                _loads(entry),
                "; ".join(n for n in notes if n),
            ]
        )
    header = ["subject", "runs as", "msg/s", "CPU ms/msg", "SQS req/msg", "DynamoDB req/msg", "MiB", "load", "note"]
    kind, concurrency = cell.rsplit("_c", 1)
    title = f"**`{kind}` handler, concurrency {concurrency}**"
    if ideal:
        title += f" (ideal: {concurrency} slots / {summary.HANDLER_SECONDS[kind] * 1000:.0f} ms = {ideal:,.0f} msg/s)"
    return title + ":\n\n" + _table(header, table)


def _shape(entry: summary.Summary) -> str:
    """What the subject claims to run as, and what its process tree held at the end of the window."""
    if entry.tree_processes is None:
        return entry.shape
    return f"{entry.shape} (seen: {entry.tree_processes} proc., {entry.tree_threads} threads)"


def _peers_headline(result: Mapping[str, Any], summaries: Mapping[tuple[str, str, int], summary.Summary]) -> str:
    rows = [r for r in result["rows"] if r["cell"] == summary.HEADLINE_CELL and r.get("processes", 1) == 1]
    rounds = sorted({r["round"] for r in rows})
    by = {(r["round"], r["subject"]): r for r in rows if summary.measured(r)}
    table = []
    for n in rounds:
        bare = by.get((n, "bare"))
        cells = [str(n + 1), f"{bare['cpu_ms_per_message']:.3f} (load {bare['load']:.1f})" if bare else "-"]
        for ours in _OURS:
            mine = by.get((n, ours))
            ratio = summary.round_ratio(rows, summary.HEADLINE_CELL, n, ours, "bare")
            cells += [f"{mine['cpu_ms_per_message']:.3f} (load {mine['load']:.1f})" if mine else "-", _fig(ratio, 2)]
        table.append(cells)
    medians = ["median", _fig(summaries[(summary.HEADLINE_CELL, "bare", 1)].cpu_ms_per_message, 3)]
    for ours in _OURS:
        entry = summaries.get((summary.HEADLINE_CELL, ours, 1))
        medians += [
            _fig(entry.cpu_ms_per_message if entry else None, 3),
            f"**{_fig(summary.median(summary.round_ratios(rows, summary.HEADLINE_CELL, ours, 'bare')), 2)}**",
        ]
    table.append(medians)
    header = ["round", "bare loop", "ours, idempotent handler", "/ bare", "ours (DynamoDB)", "/ bare"]
    return (
        f"CPU milliseconds per message, handler `noop` at concurrency 16, each round's ratio to the bare loop measured"
        f" just before it in the same round:\n\n{_table(header, table)}"
    )


def _throughput(result: Mapping[str, Any]) -> str:
    summaries = summary.summarize(result["rows"])
    settings = result["settings"]
    cells = [c for c in dict.fromkeys(r["cell"] for r in result["rows"]) if c != "cpu5_c8"]
    parts = [
        _meta(result) + f" _`{PEERS_COMMAND}`: {settings['rounds']} round(s) of `{summary.HEADLINE_CELL}`,"
        f" {settings['other_rounds']} of every other cell; {settings['warmup_seconds']:g} s warm-up and"
        f" {settings['window_seconds']:g} s counted per measurement. Load: the machine's one-minute load average at"
        " the end of each measurement (2 cores)._"
    ]
    if any(r["cell"] == summary.HEADLINE_CELL for r in result["rows"]):
        parts.append(_peers_headline(result, summaries))
    reasons: list[str] = []
    parts += [_peers_cell(result, cell, summaries, reasons) for cell in cells]
    parts.append(_why_list(reasons))
    return "\n\n".join(parts)


def _cpu(result: Mapping[str, Any]) -> str:
    if not any(r["cell"] == "cpu5_c8" for r in result["rows"]):
        return _missing(PEERS_COMMAND, "python -m bench peers --cells cpu5_c8")
    summaries = summary.summarize(result["rows"])
    labels = _peer_labels(result)
    table = []
    for (cell, name, processes), entry in summaries.items():
        if cell != "cpu5_c8":
            continue
        table.append(
            [
                labels.get(name, name) + ("" if name != "bare" else " (no handler)"),
                _shape(entry),
                _fig(entry.messages_per_second)
                + _rounds(
                    [r for r in result["rows"] if r.get("processes", 1) == processes],
                    cell,
                    name,
                    "messages_per_second",
                    0,
                ),
                "-" if name == "bare" else _fig(entry.ideal),
                _fig(entry.cpu_ms_per_message, 2),
                _fig(entry.sqs_requests_per_message, 3),
                _fig(entry.dynamodb_requests_per_message, 3) if name in _OURS or name == "ours-memory" else "-",
                _loads(entry),
            ]
        )
    header = ["subject", "runs as", "msg/s (all processes)", "ideal", "CPU ms/msg", "SQS req/msg", "DynamoDB req/msg"]
    return _table([*header, "load"], table)


def _correctness(result: Mapping[str, Any]) -> str:
    checks = result.get("correctness") or {}
    if not checks:
        return _missing(PEERS_COMMAND, "python -m bench peers --cells lease --cells kill")
    labels = _peer_labels(result)
    parts = []
    if checks.get("lease"):
        parts.append(
            _check_table(
                checks["lease"],
                labels,
                "**A handler outliving its lease**",
                ":",
                ["duplicate starts", "handled", "watched s", "visibility it receives with"],
                lambda r: [
                    f"**{r['duplicate_starts']}**",
                    f"{r['keys_completed']} of {r['messages']}",
                    f"{r['watched_seconds']:.0f}",
                    _visibility(r),
                ],
            )
        )
    if checks.get("kill"):
        parts.append(
            _check_table(
                checks["kill"],
                labels,
                "**A worker killed mid-handler**",
                "; SIGKILL to the whole process group 1.5 s after the first handler started, then the same subject"
                " started again:",
                ["handlers cut off", "held (in flight) at the kill", "lost", "duplicated", "invisible until"],
                lambda r: [
                    str(r["cut_off"]),
                    str(r.get("held_at_kill", "-")),
                    f"**{r['lost']}**",
                    f"**{r['duplicated']}**",
                    r["invisible_until"],
                ],
            )
        )
    return "\n\n".join(parts)


def _check_table(
    results: list[Mapping[str, Any]],
    labels: Mapping[str, str],
    title: str,
    tail: str,
    header: list[str],
    cells: Callable[[Mapping[str, Any]], list[str]],
) -> str:
    """One correctness check's table, under a line saying how it was set up (from its first result that ran)."""
    table = []
    for r in results:
        label = labels.get(r["subject"], r["subject"])
        failed = "error" in r
        table.append([label, *(["-"] * (len(header) - 1) + [f"failed: {r['error']}"] if failed else cells(r))])
    first = next((r for r in results if "error" not in r), None)
    intro = (
        f"{title}: {first['messages']} messages, concurrency {first['concurrency']}, a {first['handler_seconds']} s"
        f" handler, the queue's visibility timeout {first['queue_visibility_seconds']} s{tail}"
        if first
        else f"{title}:"
    )
    return intro + "\n\n" + _table(["subject", *header], table)


def _visibility(row: Mapping[str, Any]) -> str:
    mine, queue = row["subject_visibility_seconds"], row["queue_visibility_seconds"]
    return f"the queue's ({queue} s)" if mine == queue else f"its own: {mine:,} s"


def section(result: Mapping[str, Any] | None) -> str:
    """The peers tables: throughput at saturation, the CPU-bound cell, the correctness cells."""
    if result is None:
        return _missing(PEERS_COMMAND)
    return "\n\n".join(
        [
            "### Throughput at saturation",
            _throughput(result),
            "### More than one core: the CPU-bound handler",
            _cpu(result),
            "### Correctness: what tells them apart",
            _correctness(result),
        ]
    )
