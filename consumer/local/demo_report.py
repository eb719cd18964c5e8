"""The demo's closing report (``python -m consumer demo``): where every message of each worker ended, with rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from consumer.local.bill import (
    GUARD_WRITES_PER_MESSAGE,
    INSIGHTS_EVENT_BYTES,
    SQS_CALL_BYTES,
    SQS_MESSAGE_ENVELOPE_BYTES,
    Bill,
)
from consumer.local.demo_lane import DemoResult, LaneResult, Mix
from consumer.local.lambda_bill import IDLE_POLLERS, NotOnLambda
from consumer.local.prices import HOURS_PER_MONTH
from consumer.local.targets import compare


def render_report(result: DemoResult, console: Console, bill: Bill | str | None = None) -> None:
    """The closing report, a section per worker, what each costs (``bill``; a string: why there is no estimate),
    then the verdict: balanced only if every worker balances."""
    for worker in result.workers:
        render_worker(worker, worker.mix, console)
    if isinstance(bill, Bill):
        render_bill(bill, console)
    elif bill:
        console.print(f"What it costs (estimate): not estimated: {bill}", markup=False)
    if result.timed_out_phase:
        console.print(f"[red]timed out[/red] {result.timed_out_phase}")
    for worker in result.workers:
        a = worker.accounting
        dead = sum(a.dead_lettered.values())
        verdict = "[green]balanced[/green]" if worker.ok else "[red]does NOT balance[/red]"
        console.print(
            f"{worker.worker}: {verdict}: {a.delivered} delivered + {dead} in the DLQ = {a.delivered + dead}"
            f" of {sum(a.produced.values())} produced"
        )
    logs = result.workers[0].consumers[0]["log"].rsplit("/", 2)[0] if result.workers[0].consumers else "-"
    verdict = "[green]balanced[/green]" if result.ok else "[red]does NOT balance[/red]"
    console.print(
        f"accounting {verdict} for {len(result.workers)} worker(s), {result.elapsed_seconds} s elapsed; logs in {logs}"
    )


def render_worker(result: LaneResult, mix: Mix, console: Console) -> None:
    """One worker's tables: final places, DLQ reasons, retries, redrive, duplicates, losses, cost and shutdowns."""
    a = result.accounting
    name = f"{result.worker} ({result.handler})"
    table = Table(title=f"{name}: where every message ended", show_lines=False)
    table.add_column("kind")
    table.add_column("produced", justify="right")
    table.add_column("expected place")
    table.add_column("in the DLQ", justify="right")
    for kind_name, kind in mix.kinds.items():
        table.add_row(
            f"{kind_name} ({kind.downstream})",
            str(a.produced.get(kind_name, 0)),
            kind.place,
            str(a.dead_lettered.get(kind_name, 0)),
        )
    console.print(table)

    reasons = Table(title=f"{result.worker}: DLQ reasons (grouped)")
    reasons.add_column("reason")
    reasons.add_column("messages", justify="right")
    for reason, count in sorted(a.dlq_reasons.items(), key=lambda item: -item[1]):
        reasons.add_row(reason, str(count))
    console.print(reasons)
    if result.tenants:
        render_tenants(result, console)

    per_message = result.requests_per_message
    summary = Table(title=f"{name}: report", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    rows = [
        ("produced", str(sum(a.produced.values()))),
        (f"processed (delivered exactly once at {mix.downstream})", f"{a.delivered}"),
        ("retried (backoffs after a failure)", f"{result.retried}; downstream refusals {result.downstream_refusals}"),
        ("heartbeat visibility extensions", str(result.heartbeat_extensions)),
        ("handed back as copies keeping their spent receives", str(result.requeued)),
        ("sent to the DLQ with a reason (still there)", str(sum(a.dead_lettered.values()))),
    ]
    if result.duplicates_skipped:
        rows.append(
            (
                "duplicate copies skipped (the idempotency store had the event done; the handler did not run)",
                str(result.duplicates_skipped),
            )
        )
    if result.circuit.get("opens"):
        c = result.circuit
        rows.append(
            (
                "circuit open (downstream down: receiving paused, events handed back unspent)",
                f"{c['open_seconds']} s in all, longest {c['longest_open_seconds']} s; {c['opens']} opens,"
                f" {c['closes']} closes (from the consumers' circuit logs)",
            )
        )
    if result.redrive:
        rows.append(
            (
                "redriven (late arrivals only: the operator's command)",
                f"{result.redrive.get('moved', 0)} via `{result.redrive.get('command', 'not run')}`",
            )
        )
    if result.unsent:
        rows.append(("NOT SENT (consumer.producer gave up after its retries)", "; ".join(result.unsent[:5])))
    rows += [
        (f"duplicates (extra deliveries at {mix.downstream})", str(a.duplicates)),
        ("lost", str(len(a.lost)) + (f" {a.lost[:5]}" if a.lost else "")),
        (
            "misplaced / in two places / unknown in DLQ",
            f"{len(a.misplaced)} / {len(a.in_two_places)} / {len(a.unknown_in_dlq)}",
        ),
        (
            "in the DLQ twice (a copy per event expected)",
            str(len(a.dead_lettered_twice)) + (f" {a.dead_lettered_twice[:5]}" if a.dead_lettered_twice else ""),
        ),
        ("left in the source queue", str(a.left_in_source)),
        (
            "SQS requests per processed message",
            f"{per_message:.2f} ({result.sqs_requests} requests / {result.processed} processed, from the consumers'"
            " sqs_requests metric" + ("; see below)" if mix.cost_note else ")")
            if per_message is not None
            else "n/a (nothing processed)",
        ),
        (
            "consumer shutdowns (SIGTERM)",
            ", ".join(
                f"#{c['number']}: exit {c['exit_code']} in {c['stopped_in_seconds']} s" for c in result.consumers
            ),
        ),
    ]
    rows.append(("liveness (python -m consumer health, each consumer's own file)", _liveness(result)))
    for label, value in rows:
        summary.add_row(label, value)
    console.print(summary)
    if per_message is not None and mix.cost_note:
        # Outside the table: in a cell this sentence made every row of a log as wide as itself.
        console.print(mix.cost_note)
    if mix.note:
        console.print(mix.note, markup=False)


def render_bill(bill: Bill, console: Console) -> None:
    """ "What it costs (estimate)": per environment and worker, then each environment's fixed costs, then where the
    prices come from (:mod:`consumer.local.bill` says what is counted and what is left out)."""
    table = Table(title="What it costs (estimate), US dollars: per environment and worker")
    for column in (
        "environment",
        "worker",
        "tasks at min_tasks",
        "per month at min_tasks",
        "per million messages",
        "of which SQS / Fargate / DynamoDB",
        "network: per month; per million",
        "SQS requests per message; message size",
    ):
        table.add_column(column, justify="left" if column in ("environment", "worker") else "right")
    for cost in bill.workers:
        plan, usage = cost.plan, cost.usage
        spot = f": {cost.on_demand} on-demand + {cost.spot} Spot" if plan.capacity is not None else ""
        chunks = f", {cost.chunks} chunks a request" if cost.chunks > 1 else ""
        table.add_row(
            cost.environment,
            plan.worker,
            f"{plan.min_tasks}{spot} ({plan.cpu / 1024:g} vCPU, {plan.memory_mib / 1024:g} GB, {plan.architecture})",
            f"${cost.month:,.2f}",
            f"${cost.per_million:,.2f}",
            f"${cost.sqs_per_million:,.2f} / ${cost.fargate_per_million:,.2f} / ${cost.dynamodb_per_million:,.2f}",
            f"{cost.network}: ${cost.network_month:,.2f}; ${cost.network_per_million:,.2f}"
            if cost.network
            else "not known (an existing VPC)",
            f"{usage.requests_per_message:.2f} ({usage.requests_source}); {usage.message_bytes:,.0f} B"
            f" ({usage.size_source}){chunks}",
        )
    console.print(table)
    fixed = Table(title="What it costs (estimate), US dollars: per environment, whatever the traffic")
    fixed.add_column("environment")
    fixed.add_column("what the stack runs")
    fixed.add_column("per month", justify="right")
    for environment in bill.fixed:
        lines = "; ".join(
            f"{line.what} {line.quantity:,.2f} {line.unit}: ${line.cost:,.2f}"
            if line.unit
            else f"{line.what} x{line.quantity:g}: ${line.cost:,.2f}"
            for line in environment.lines
        )
        fixed.add_row(environment.environment, lines, f"${environment.month:,.2f}")
    console.print(fixed)
    for environment in bill.fixed:
        change = environment.without_nat
        if change is not None:
            console.print(
                f'{environment.environment} without NAT (nat_gateways: 0, docs/deploy.md "No NAT"): saves'
                f" ${change.gateways:,.2f} of NAT gateways and their addresses and ${change.idle_data:,.2f} of idle"
                f" polls' NAT data, adds ${change.task_addresses:,.2f} for the public IPv4 addresses of its"
                f" {change.tasks} task(s) at min_tasks: ${change.saving:,.2f} a month less; per million messages each"
                " worker's NAT data goes and its task-hours take an address each.",
                markup=False,
            )
    render_targets(bill, console)
    prices = bill.prices
    console.print(
        f"An estimate, not a quote: {prices.region} list prices entered by hand on {prices.entered}, Lambda's read on"
        f" {prices.lambda_read} (check each on its"
        f" page before use: {', '.join(prices.sources.values())}). Per month: {HOURS_PER_MONTH} h of the min_tasks"
        " tasks (Spot at"
        " a typical discount) and their long polls of an empty queue. Per million messages: SQS requests (the"
        " consumers' measured per message, or the run's mean for a handler that did not run here, plus the"
        " producer's batch of 10, per 64 KiB chunk), Fargate at the contract's declared throughput per task, and"
        f" {GUARD_WRITES_PER_MESSAGE} DynamoDB writes unless idempotent. Network: NAT data at {SQS_CALL_BYTES} B a call"
        f" and {SQS_MESSAGE_ENVELOPE_BYTES} B a message besides its body (assumed), or each task's public IPv4 address."
        f" Container Insights: its metrics at min_tasks and {INSIGHTS_EVENT_BYTES} B a performance event (assumed)."
        " Left out: free tiers, the workers' logs, their own metrics, the handlers' own traffic, retries (docs/deploy.md,"
        ' "What it costs (estimate)").',
        markup=False,
    )


def render_targets(bill: Bill, console: Console) -> None:
    """Each worker on ECS and on Lambda side by side, and the rate at which the other target becomes cheaper
    (:mod:`consumer.local.targets`); a worker Lambda cannot run says why, below the table."""
    table = Table(title="What it costs (estimate), US dollars: each worker on ECS or on Lambda (no target is chosen)")
    for column in (
        "environment",
        "worker",
        "ECS: per month at min_tasks; per million",
        "Lambda: per month at rest; per million, full batches / 1 message an invocation",
        "Lambda, full batches: requests / GB-seconds / SQS / DynamoDB / event pollers",
        "cheaper, full batches; 1 message an invocation",
    ):
        table.add_column(column, justify="left" if column in ("environment", "worker") else "right")
    refused = []
    for comparison in compare(bill):
        ecs, on_lambda = comparison.ecs, comparison.on_lambda
        cells = [ecs.environment, ecs.plan.worker, f"${ecs.month:,.2f}; ${ecs.per_million:,.2f}"]
        if isinstance(on_lambda, NotOnLambda):
            refused.append(f"{ecs.environment} {ecs.plan.worker} cannot run on Lambda: {on_lambda.reason}")
            table.add_row(*cells, "not on Lambda (below)", "", "")
            continue
        full = on_lambda.full
        table.add_row(
            *cells,
            f"${on_lambda.month:,.2f}; ${full.per_million:,.2f} ({full.messages}) / ${on_lambda.single.per_million:,.2f}",
            f"${full.requests_per_million:,.2f} / ${full.duration_per_million:,.2f} / ${full.sqs_per_million:,.2f} /"
            f" ${full.dynamodb_per_million:,.2f} / ${full.pollers_per_million:,.2f}",
            f"{comparison.full}; {comparison.single}",
        )
    console.print(table)
    for line in refused:
        console.print(line, markup=False)
    console.print(
        "On Lambda: the function its contract derives (consumer/lambda_target.py), outside the VPC, so no NAT data,"
        " address or Fargate. At rest, the mapping's idle long polls (one every 20 s by each of"
        f" {IDLE_POLLERS} pollers, or the minimum provisioned ones, and their event poller units); per million"
        " messages, one request per invocation, GB-seconds of the worker's memory_mib for the declared"
        " average_duration of each round of an invocation, the mapping's receive and delete per 10 messages, the"
        " producer's send and the guard's writes, for a full batch (BatchSize, an upper bound) and for one message"
        " per invocation. Cheaper: where the two bills as a month at a steady rate cross, up to max_tasks' throughput"
        " (docs/targets.md). The environment lines stay on both, but NAT gateways and Container Insights serve ECS only.",
        markup=False,
    )


def render_tenants(result: LaneResult, console: Console) -> None:
    """Per tenant (the MessageGroupId the producer set): produced, delivered, and what the consumers logged for it."""
    table = Table(title=f"{result.worker}: per tenant (MessageGroupId; processed and DLQ from the consumers' logs)")
    for column in ("tenant", "produced", "delivered", "processed (logged)", "moved to the DLQ (logged)"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for tenant, counts in result.tenants.items():
        table.add_row(
            tenant,
            *(str(counts.get(key, 0)) for key in ("produced", "delivered", "processed", "moved_to_dlq")),
        )
    console.print(table)


def _liveness(result: LaneResult) -> str:
    """Each consumer's health checks, ``#1: healthy x2``; any unhealthy answer is spelled out (it fails the run)."""
    checked = [
        f"#{c['number']}: healthy x{len(c['health'])}" for c in result.consumers if c.get("health") and not _sick(c)
    ]
    return "; ".join(checked + [f"UNHEALTHY {line}" for line in result.unhealthy]) or "no running consumer checked"


def _sick(consumer: dict[str, Any]) -> bool:
    return any(not check["healthy"] for check in consumer.get("health", []))
