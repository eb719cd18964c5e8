"""The chaos suite's reports: the closing summary in the terminal, and docs/CHAOS.md from its template.

docs/CHAOS.md is ``bench/CHAOS.template.md`` with its ``{{name}}`` placeholders filled from one
run's results, as docs/BENCHMARKS.md is made by :mod:`bench.report`; ``python -m bench.chaos
--docs-from docs/bench/chaos.json`` rewrites it from the stored run without running anything.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.chaos_accounting import KINDS, ChaosResult
from bench.proxy import FAULT_KINDS
from bench.report import fill
from consumer.local.harness import demo_contract

TEMPLATE = Path(__file__).with_name("CHAOS.template.md")


def _joined(counts: dict[str, Any], separator: str = ", ") -> str:
    return separator.join(f"{k} {v}" for k, v in counts.items())


def render(result: ChaosResult, console: Console) -> None:
    """The closing summary: final places, repeats, corpus, FIFO, faults and consumer exits."""
    a = result.accounting
    summary = Table(title="Chaos suite: where every message ended", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    rows = [
        ("produced (plan)", _joined(result.produced)),
        ("applied once at the downstream", str(a["applied_once"])),
        ("events in the DLQ with a reason (copies)", f"{a['dead_lettered_events']} ({a['dlq_copies']})"),
        ("good events in the DLQ with a reason (faults exhausted retries)", str(a["good_in_dlq_with_reason"])),
        ("lost", str(len(a["lost"]))),
        ("in a wrong place / in two places", f"{len(a['misplaced'])} / {len(a['in_two_places'])}"),
        ("in the DLQ without a reason (SQS silent redrive)", str(len(a["dlq_without_reason"]))),
        ("left in the source", str(a["left_in_source"])),
        ("raw repeat deliveries (by SIGKILL / by the endpoint / neither)", _repeats(result)),
        (
            "in two places by the endpoint / by SIGKILLs / only in the DLQ, redriven by SIGKILLs / double hand-outs",
            _endpoint(result),
        ),
        ("SIGKILLs", str(result.kills)),
        ("endpoint restarts", ", ".join(f"{o['seconds']} s down" for o in result.outages) or "none"),
        (
            "corpus (standard) in the DLQ at receive 1",
            f"{sum(c['ok'] for c in result.corpus)} / {len(result.corpus)}",
        ),
        ("FIFO checks passed", f"{sum(c['ok'] for c in result.fifo['checks'])} / {len(result.fifo['checks'])}"),
        ("consumer log events", _joined(result.events)),
        ("elapsed", f"{result.elapsed_seconds} s"),
    ]
    for label, value in rows:
        summary.add_row(label, value)
    console.print(summary)
    faults = Table(title="Injected faults (by kind and operation)")
    faults.add_column("kind")
    faults.add_column("operations")
    faults.add_column("total", justify="right")
    for kind in FAULT_KINDS:
        counts = result.faults.get(kind, {})
        faults.add_row(kind, _joined(counts), str(sum(counts.values())))
    console.print(faults)
    if result.failures:
        for failure in result.failures:
            console.print(f"[red]FAIL[/red] {failure}")
    else:
        console.print("[green]OK[/green]: nothing lost, nothing misplaced, every corpus message dead-lettered at once")


def _repeats(result: ChaosResult) -> str:
    r = result.repeats
    return (
        f"{r['raw_repeat_deliveries']} ({r['explained_by_sigkill']} / {r.get('caused_by_endpoint', 0)}"
        f" / {len(r['unexplained'])})"
    )


def _endpoint(result: ChaosResult) -> str:
    a = result.accounting
    by_endpoint, by_sigkill = a.get("in_two_places_by_endpoint", {}), a.get("in_two_places_by_sigkill", {})
    redriven = a.get("dlq_without_reason_by_sigkill", {})
    return f"{len(by_endpoint)} / {len(by_sigkill)} / {len(redriven)} / {len(result.double_hand_outs)}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _figures(result: ChaosResult) -> list[tuple[str, Any]]:
    """The "Figures of the full run" table's rows: (figure, value)."""
    a = result.accounting
    exits = Counter(f"{c['fleet']} {c['ended_by']} -> exit {c['exit_code']}" for c in result.consumers)
    outages = ", ".join(f"{x['seconds']} s" for x in result.outages)
    phases = ", ".join(f"{k} at {v} s" for k, v in result.phases.items())
    return [
        (
            "events produced (sends SQS confirmed; copies from lost answers come on top)",
            f"{sum(v for k, v in result.produced.items() if k in KINDS)} ({result.produced['sends_confirmed']})",
        ),
        ("applied exactly once at the downstream", a["applied_once"]),
        ("events in the DLQ with a reason (DLQ copies)", f"{a['dead_lettered_events']} ({a['dlq_copies']})"),
        ("good events in the DLQ with a reason (faults exhausted their retries)", a["good_in_dlq_with_reason"]),
        ("**lost**", f"**{len(a['lost'])}**"),
        (
            "in a wrong place / in two places / in the DLQ without a reason",
            f"{len(a['misplaced'])} / {len(a['in_two_places'])} / {len(a['dlq_without_reason'])}",
        ),
        ("left in the source queue", a["left_in_source"]),
        ("raw repeat deliveries at the downstream", result.repeats["raw_repeat_deliveries"]),
        (
            "of which after a SIGKILL of the earlier sender / caused by the endpoint / neither (the consumer's)",
            f"{result.repeats['explained_by_sigkill']} / {result.repeats.get('caused_by_endpoint', 0)}"
            f" / {len(result.repeats['unexplained'])}",
        ),
        (
            "events in two places by the endpoint / by SIGKILLs / events only in the DLQ with a copy SQS's redrive"
            " moved after SIGKILLs / messages the endpoint handed to two receives at once",
            _endpoint(result),
        ),
        ("SIGKILLs / endpoint restarts", f"{result.kills} / {len(result.outages)} ({outages})"),
        ("consumers and how they ended", "; ".join(f"{k}: {v}" for k, v in sorted(exits.items()))),
        ("consumer log events", _joined(result.events)),
        ("DLQ reasons (grouped)", "; ".join(f"{k}: {v}" for k, v in a["dlq_reasons"].items())),
        ("elapsed", f"{result.elapsed_seconds} s (phases: {phases})"),
        ("verdict", "OK" if result.ok else "FAILED: " + "; ".join(result.failures)),
    ]


def _rows(rows: list[list[Any]]) -> str:
    return "\n".join("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)


def sections(result: ChaosResult) -> dict[str, str]:
    """The template's placeholders, filled from one run (the set-up's timings from the demo contract)."""
    o, contract = result.options, demo_contract()
    return {
        "command": o["command"] or "python -m bench.chaos",
        "lease": str(contract.visibility_timeout_seconds),
        "max_receives": str(contract.max_receive_count),
        "redrive_backstop": str(contract.redrive_max_receive_count),
        "backoff": f"{contract.retry_backoff_base_seconds}-{contract.retry_backoff_max_seconds}",
        **{name: str(o[name]) for name in ("consumers", "throttle", "error_before", "error_after")},
        **{name: str(o[name]) for name in ("outage_seconds", "kill_every_seconds", "rate_per_second", "max_depth")},
        **{kind: str(result.produced.get(kind, 0)) for kind in ("good", "flaky", "malformed", "rejected")},
        "figures": _rows([[figure, value] for figure, value in _figures(result)]),
        "faults": _rows(
            [
                [kind, sum(result.faults.get(kind, {}).values()), _joined(result.faults.get(kind, {}))]
                for kind in FAULT_KINDS
            ]
        ),
        "canaries": _yes(not any("canaries" in f for f in result.failures)),
        "corpus": _rows(
            [[f"`{c['name']}`", c["what"], c["place"], c["receive_count"], _yes(c["ok"])] for c in result.corpus]
        ),
        "fifo_queue": result.fifo["queue"],
        "groups_in_order": _yes(result.fifo["groups_in_order"]),
        "fifo_order": "; ".join(
            f"{g}: {', '.join(k.rsplit('-', 1)[1] for k in keys)}" for g, keys in result.fifo["order"].items()
        ),
        "fifo": _rows(
            [[f"`{c['name']}`", c["what"], c["expect"], c["place"], _yes(c["ok"])] for c in result.fifo["checks"]]
        ),
    }


def write_markdown(result: ChaosResult, path: Path) -> None:
    """``docs/CHAOS.md``: what was run, the command, the figures, and what each fault demonstrates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fill(TEMPLATE, sections(result)))
