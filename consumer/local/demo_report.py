"""The demo's closing report (``python -m consumer demo``): where every message ended, rendered with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from consumer.local.demo import KINDS, DemoResult


def render_report(result: DemoResult, console: Console) -> None:
    """The closing report: final places, retries, redrive, duplicates, losses, cost and shutdowns."""
    a = result.accounting
    total = sum(a.produced.values())
    table = Table(title="Where every message ended", show_lines=False)
    table.add_column("kind")
    table.add_column("produced", justify="right")
    table.add_column("expected place")
    table.add_column("in the DLQ", justify="right")
    for name, kind in KINDS.items():
        table.add_row(
            f"{name} ({kind.downstream})", str(a.produced.get(name, 0)), kind.place, str(a.dead_lettered.get(name, 0))
        )
    console.print(table)

    reasons = Table(title="DLQ reasons (grouped)")
    reasons.add_column("reason")
    reasons.add_column("messages", justify="right")
    for reason, count in sorted(a.dlq_reasons.items(), key=lambda item: -item[1]):
        reasons.add_row(reason, str(count))
    console.print(reasons)

    per_message = result.requests_per_message
    summary = Table(title="Report", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    rows = [
        ("produced", str(total)),
        ("processed (delivered exactly once at the webhook)", f"{a.delivered}"),
        ("retried (backoffs after a failure)", f"{result.retried}; downstream refusals {result.downstream_refusals}"),
        ("heartbeat visibility extensions", str(result.heartbeat_extensions)),
        ("handed back as copies keeping their spent receives", str(result.requeued)),
        ("sent to the DLQ with a reason (still there)", str(sum(a.dead_lettered.values()))),
        (
            "redriven (outage over, then the operator's command)",
            f"{result.redrive.get('moved', 0)} via `{result.redrive.get('command', 'not run')}`",
        ),
        ("duplicates (extra deliveries at the webhook)", str(a.duplicates)),
        ("lost", str(len(a.lost)) + (f" {a.lost[:5]}" if a.lost else "")),
        (
            "misplaced / in two places / unknown in DLQ",
            f"{len(a.misplaced)} / {len(a.in_two_places)} / {len(a.unknown_in_dlq)}",
        ),
        ("left in the source queue", str(a.left_in_source)),
        (
            "SQS requests per processed message",
            f"{per_message:.2f} ({result.sqs_requests} requests / {result.processed} processed, from the consumers'"
            " sqs_requests metric; see below)"
            if per_message is not None
            else "n/a (nothing processed)",
        ),
        (
            "consumer shutdowns (SIGTERM)",
            ", ".join(
                f"#{c['number']}: exit {c['exit_code']} in {c['stopped_in_seconds']} s" for c in result.consumers
            ),
        ),
        ("elapsed", f"{result.elapsed_seconds} s"),
    ]
    for label, value in rows:
        summary.add_row(label, value)
    console.print(summary)
    if per_message is not None:
        # Outside the table: in a cell this sentence made every row of a log as wide as itself.
        console.print(
            "SQS requests per processed message: half of this mix fails at least once, so backoffs, DLQ moves"
            " and the trickle-fed long polls dominate; at saturation the floor is 0.2 (one receive and one"
            " batched delete per 10), a delete call per message costs about 1.1."
        )
    if result.timed_out_phase:
        console.print(f"[red]timed out[/red] {result.timed_out_phase}")
    verdict = "[green]balanced[/green]" if result.ok else "[red]does NOT balance[/red]"
    console.print(
        f"accounting {verdict}: {a.delivered} delivered + {sum(a.dead_lettered.values())} in the DLQ"
        f" = {a.delivered + sum(a.dead_lettered.values())} of {total} produced;"
        f" logs in {result.consumers[0]['log'].rsplit('/', 1)[0] if result.consumers else '-'}"
    )
