"""The chaos suite's reports: the closing summary in the terminal, and docs/evidence/CHAOS.md from its template.

docs/evidence/CHAOS.md is ``bench/CHAOS.template.md`` with its ``{{name}}`` placeholders filled from one
run's results, as docs/evidence/BENCHMARKS.md is made by :mod:`bench.report`; ``python -m bench.chaos
--docs-from docs/evidence/bench/chaos.json`` rewrites it from the stored run without running anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.chaos_accounting import KINDS, ChaosResult
from bench.chaos_lanes import CANARIES, THREADS, declaration
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
    if result.fleets:
        per_fleet = Table(title="Every handler shape: each fleet's accounting")
        per_fleet.add_column("figure", style="bold")
        for name in fleet_names(result):
            per_fleet.add_column(name)
        for figure, *values in fleet_rows(result):
            per_fleet.add_row(figure, *(str(v) for v in values))
        console.print(per_fleet)
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


#: The thread fleet's name in the per-fleet table (its figures are the result's own, above).
STANDARD = "standard"


def fleet_names(result: ChaosResult) -> list[str]:
    """The fleets the per-fleet table shows: the thread fleet, then the other shapes' in the run's order."""
    return [STANDARD, *result.fleets]


def _fleets(result: ChaosResult) -> dict[str, dict[str, Any]]:
    """Every fleet's results in one shape: the thread fleet's are the result's own fields."""
    standard = {
        "handler": "consumer.examples.demo:handle",
        "shape": THREADS.what,
        "declaration": declaration(demo_contract()),
        "consumers": result.options.get("consumers"),
        "produced": result.produced,
        "accounting": result.accounting,
        "repeats": result.repeats,
        "double_hand_outs": result.double_hand_outs,
        "corpus": result.corpus,
        "kills": result.kills,
        "canaries": f"{CANARIES}/{CANARIES}"
        if not any("canaries" in f for f in _own_failures(result, STANDARD))
        else "NO",
    }
    return {STANDARD: standard, **result.fleets}


def _own_failures(result: ChaosResult, name: str) -> list[str]:
    """The failures of fleet ``name`` (another fleet's name them; the thread fleet's, and the run's, do not)."""
    others = [f"{other} fleet: " for other in result.fleets]
    if name == STANDARD:
        return [f for f in result.failures if not f.startswith(tuple(others))]
    return [f.removeprefix(f"{name} fleet: ") for f in result.failures if f.startswith(f"{name} fleet: ")]


def _declared(fleet: Mapping[str, Any]) -> str:
    d = fleet["declaration"]
    if d.get("max_batch"):
        shape = f"{d['concurrency']} threads x batches of up to {d['max_batch']} ({d['batch_window_seconds']} s window)"
    elif d.get("asynchronous"):
        shape = f"{d['concurrency']} coroutines on one event loop"
    else:
        shape = f"{d['concurrency']} threads"
    return (
        f"`{fleet['handler']}`: {fleet['shape']}; {shape}; {d['lease_seconds']} s lease, {d['max_receive_count']}"
        f" receives, redrive backstop {d['redrive_max_receive_count']}"
    )


def fleet_rows(result: ChaosResult) -> list[list[Any]]:
    """The per-fleet table: a row per figure, a column per fleet (the thread fleet first)."""
    fleets = _fleets(result)
    names = fleet_names(result)

    def row(figure: str, value: Callable[[str, Mapping[str, Any]], Any]) -> list[Any]:
        return [figure, *(value(name, fleets[name]) for name in names)]

    def accounting(name: str) -> Mapping[str, Any]:
        return fleets[name]["accounting"]

    def produced(_: str, f: Mapping[str, Any]) -> str:
        kinds = ", ".join(f"{k} {f['produced'].get(k, 0)}" for k in KINDS)
        return f"{sum(f['produced'].get(k, 0) for k in KINDS)} ({kinds}; sends confirmed {f['produced']['sends_confirmed']})"

    def reason_kinds(name: str, _: Mapping[str, Any]) -> str:
        kinds = accounting(name).get("dlq_kinds", {})
        return "; ".join(f"{kind}: {_joined(counts)}" for kind, counts in kinds.items()) or "none"

    def places(name: str, _: Mapping[str, Any]) -> str:
        a = accounting(name)
        return f"{len(a['misplaced'])} / {len(a['in_two_places'])} / {len(a['dlq_without_reason'])}"

    def repeats(_: str, f: Mapping[str, Any]) -> str:
        r = f["repeats"]
        by = f"{r['explained_by_sigkill']} / {r.get('caused_by_endpoint', 0)} / {len(r['unexplained'])}"
        return f"{r['raw_repeat_deliveries']} ({by})"

    def causes(name: str, f: Mapping[str, Any]) -> str:
        a = accounting(name)
        counts = (a.get(k, {}) for k in ("in_two_places_by_endpoint", "in_two_places_by_sigkill"))
        two = " / ".join(str(len(c)) for c in counts)
        return f"{two} / {len(a.get('dlq_without_reason_by_sigkill', {}))} / {len(f['double_hand_outs'])}"

    def corpus(_: str, f: Mapping[str, Any]) -> str:
        return f"{sum(c['ok'] for c in f['corpus'])} / {len(f['corpus'])}; canaries applied: {f['canaries']}"

    def verdict(name: str, _: Mapping[str, Any]) -> str:
        own = _own_failures(result, name)
        return "OK" if not own else "FAILED: " + "; ".join(own)

    return [
        row("handler and declaration", lambda _, f: _declared(f)),
        row("consumer processes at a time / SIGKILLed", lambda _, f: f"{f['consumers']} / {f['kills']}"),
        row("events produced (sends SQS confirmed)", produced),
        row("applied exactly once at the downstream", lambda n, _: accounting(n)["applied_once"]),
        row(
            "events in the DLQ with a reason (DLQ copies)",
            lambda n, _: f"{accounting(n)['dead_lettered_events']} ({accounting(n)['dlq_copies']})",
        ),
        row("DLQ copies by event kind: reason kind", reason_kinds),
        row(
            "good events in the DLQ with a reason (retries exhausted)",
            lambda n, _: accounting(n)["good_in_dlq_with_reason"],
        ),
        row("**lost**", lambda n, _: f"**{len(accounting(n)['lost'])}**"),
        row("in a wrong place / in two places / in the DLQ without a reason", places),
        row("left in the source queue", lambda n, _: accounting(n)["left_in_source"]),
        row("raw repeat deliveries (after a SIGKILL of the earlier sender / by the endpoint / neither)", repeats),
        row(
            "in two places by the endpoint / by SIGKILLs / only in the DLQ, redriven after SIGKILLs / double hand-outs",
            causes,
        ),
        row("bad-input corpus in the DLQ at receive 1", corpus),
        row("verdict", verdict),
    ]


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
        **{name: str(o.get(name, 0)) for name in ("batch_consumers", "async_consumers")},
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
        "fleets": _rows([["figure", *fleet_names(result)], ["---"] * (len(result.fleets) + 2), *fleet_rows(result)]),
        "fleet_kills": _joined({name: f["kills"] for name, f in _fleets(result).items()}),
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
    """``docs/evidence/CHAOS.md``: what was run, the command, the figures, and what each fault demonstrates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fill(TEMPLATE, sections(result)))
