"""The main job: synthesize every environment (cdk-nag included) and show what the contract derived.

``python -m infra.report`` writes the cloud assembly to ``cdk.out`` and prints,
per worker of every environment, the values both halves share. ``--markdown``
prints the README's configuration table instead (the README test keeps them equal).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import typer
from rich.console import Console
from rich.table import Table

from consumer.contract import WorkerContract
from consumer.declaration import contract_of, load_handler
from consumer.errors import ContractError
from consumer.limits import DERIVED_FORMULAS
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.settings import PAGING_ENDPOINT_PARAMETER, EnvironmentSettings
from infra.source_settings import TopicSource
from infra.toolchain import use_pinned_node
from infra.worker_settings import LAMBDA, WorkerSettings, beyond_one_process, lambda_target_of

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTDIR = ROOT / "cdk.out"
EXAMPLE_HANDLER = "consumer.examples.notifications:handle"

#: Rows of the per-environment table: (label, attribute on the contract).
ROWS = (
    ("declared max duration", "max_duration_seconds"),
    ("concurrency per task", "concurrency"),
    ("queue visibility timeout", "visibility_timeout_seconds"),
    ("attempt timeout (longest hold)", "attempt_timeout_seconds"),
    ("heartbeat interval", "heartbeat_interval_seconds"),
    ("heartbeat extends at", "heartbeat_threshold_seconds"),
    ("per-message timeout", "message_timeout_seconds"),
    ("ECS stop timeout", "stop_timeout_seconds"),
    ("drain on shutdown", "drain_timeout_seconds"),
    ("max receive count (consumer moves)", "max_receive_count"),
    ("redrive maxReceiveCount (backstop)", "redrive_max_receive_count"),
    ("retry horizon", "retry_horizon_seconds"),
    ("source retention", "source_retention_seconds"),
    ("DLQ retention", "dlq_retention_seconds"),
    ("DLQ age alarm", "dlq_age_alarm_seconds"),
    ("backlog age alarm", "backlog_age_alarm_seconds"),
    ("scaling target (backlog/task)", "scaling_target_backlog_per_task"),
)


def human(name: str, value: object) -> str:
    """``100 s``, ``345600 s (4 d)``: seconds with a readable unit once they get large."""
    if not name.endswith("_seconds") or not isinstance(value, int):
        return str(value)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if value >= size and value % size == 0:
            return f"{value} s ({value // size} {unit})"
        if value >= 10 * size:
            return f"{value} s ({value / size:.1f} {unit})"
    return f"{value} s"


def formula_table(contract: WorkerContract) -> str:
    """Markdown: every derived value, its formula and its value for ``contract``."""
    lines = ["| derived value | formula | example handler |", "|---|---|---|"]
    for name, formula in DERIVED_FORMULAS.items():
        lines.append(f"| `{name}` | `{formula}` | {human(name, getattr(contract, name))} |")
    return "\n".join(lines)


class Column(NamedTuple):
    """One worker of one environment, as the report shows it."""

    header: str
    settings: EnvironmentSettings
    worker: WorkerSettings
    contract: WorkerContract


class EnvironmentContracts(NamedTuple):
    """An environment's settings and each of its workers' contract, by worker name."""

    settings: EnvironmentSettings
    contracts: dict[str, WorkerContract]


def columns(stacks: Iterable[EnvironmentContracts]) -> list[Column]:
    """A column per worker: the environment's name where it has one worker, else the environment over the
    worker's name on two lines (``demo`` / ``reports``), so a five-worker app still fits 120 columns."""
    found = []
    for stack in stacks:
        many = len(stack.settings.workers) > 1
        for worker in stack.settings.workers:
            header = f"{stack.settings.name}\n{worker.name}" if many else stack.settings.name
            found.append(Column(header, stack.settings, worker, stack.contracts[worker.name]))
    return found


def settings_rows(settings: EnvironmentSettings, worker: WorkerSettings | None = None) -> dict[str, str]:
    """The report's rows for alarm routing and guards: the environment's, with ``worker``'s own secrets (every
    worker's when None): label -> value."""
    paging = str(len(settings.paging_emails) + len(settings.paging_https))
    return {
        "paging subscriptions": f"{PAGING_ENDPOINT_PARAMETER} (deploy parameter)"
        if settings.paging_from_parameter
        else paging,
        "ticket subscriptions": str(len(settings.ticket_emails) + len(settings.ticket_https)),
        "pages go to": "tickets" if settings.pages_to_tickets else "paging",
        "secrets (ECS secrets)": ", ".join(worker.secrets if worker else settings.secrets) or "none",
        "who may send": who_may_send(settings, worker),
        "traces (X-Ray)": f"sampled {settings.tracing.sample_ratio:g}" if settings.tracing else "off",
    }


#: What a lambda worker's Lambda target replaces in the report: the contract's attribute -> the target's.
LAMBDA_CELLS = {
    "visibility_timeout_seconds": "queue_visibility_seconds",
    "retry_horizon_seconds": "retry_horizon_seconds",
}
#: What a lambda worker has none of: ECS stops tasks, Lambda ends invocations at the function's timeout.
ECS_ONLY_CELLS = frozenset({"stop_timeout_seconds", "drain_timeout_seconds", "scaling_target_backlog_per_task"})


def contract_cell(worker: WorkerSettings, contract: WorkerContract, attribute: str) -> str:
    """``contract``'s ``attribute`` as the report shows it; the backlog age alarm at the threshold it compares, which
    for a worker at ``min_tasks: 0`` allows the wake-up too (infra/queue_alarms.py); a lambda worker's queue
    visibility and retry horizon its Lambda target's, and no ECS stop, drain or scaling target."""
    if worker.target == LAMBDA:
        if attribute in ECS_ONLY_CELLS:
            return "- (Lambda)"
        if attribute in LAMBDA_CELLS:
            target = lambda_target_of(worker, contract)
            return human(attribute, getattr(target, LAMBDA_CELLS[attribute])) + " (Lambda)"
    value = getattr(contract, attribute)
    if attribute == "backlog_age_alarm_seconds" and worker.min_tasks == 0:
        return f"{human(attribute, value + WAKE_UP_SECONDS)} ({value} s + {WAKE_UP_SECONDS} s wake-up)"
    return human(attribute, value)


def tasks_cell(worker: WorkerSettings) -> str:
    """``min..max``; at zero, with the longest a wake-up may take; a lambda worker's ``max_tasks``, which its
    mapping's MaximumConcurrency follows, or its provisioned pollers."""
    if worker.target == LAMBDA:
        pollers = worker.provisioned_pollers
        if pollers is not None:
            return f"Lambda, {pollers[0]}..{pollers[1]} pollers"
        return f"Lambda, as {worker.max_tasks} tasks"
    wakes = f" (wakes in <= {WAKE_UP_SECONDS} s)" if worker.min_tasks == 0 else ""
    return f"{worker.min_tasks}..{worker.max_tasks}{wakes}"


def runs_on(worker: WorkerSettings) -> str:
    """The architecture, and the capacity: on-demand, or Spot beyond an on-demand base; a function's memory."""
    if worker.target == LAMBDA:
        return f"{worker.architecture}, Lambda {worker.memory_mib} MiB"
    if worker.spot is None:
        return f"{worker.architecture}, on-demand"
    spot = worker.spot
    return (
        f"{worker.architecture}, Spot beyond {spot.on_demand_base} on-demand"
        f" (weights {spot.on_demand_weight}:{spot.spot_weight})"
    )


def who_may_send(settings: EnvironmentSettings, worker: WorkerSettings | None = None) -> str:
    """The producers' count and ``worker``'s sources (every worker's when None), or "IAM decides" with none of them."""
    sources = [s for w in ([worker] if worker else settings.workers) for s in w.sources]
    topics = sum(isinstance(s, TopicSource) for s in sources)
    parts = [f"{len(settings.producers)} producers + consumer"] if settings.producers else []
    parts += [
        f"{count} {kind}{'s' if count > 1 else ''}"
        for count, kind in ((topics, "topic"), (len(sources) - topics, "rule"))
        if count
    ]
    if not parts:
        return "IAM decides"
    return ", ".join(parts) + ("" if settings.producers else " (IAM decides for principals)")


def nag_results(outdir: Path, stack_name: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(open findings, acknowledged (rule, reason) pairs) for one stack, from cdk-nag's validation report."""
    report = json.loads((outdir / "validation-report.json").read_text())
    open_findings: list[str] = []
    acknowledged: list[tuple[str, str]] = []
    for plugin in report["pluginReports"]:
        for violation in plugin.get("violations", []):
            if any(c["constructPath"].startswith(f"{stack_name}/") for c in violation["violatingConstructs"]):
                open_findings.append(violation["ruleName"])
        for violation in plugin.get("suppressedViolations", []):
            if any(c["constructPath"].startswith(f"{stack_name}/") for c in violation["violatingConstructs"]):
                acknowledged.append((violation["ruleName"], violation["reason"]))
    return sorted(open_findings), sorted(acknowledged)


#: Off a terminal (CI, `make run > log`) rich renders 80 columns and cuts or wraps; a log reader needs each
#: line whole, so the width there is wider than any line the report prints.
UNWRAPPED_WIDTH = 10_000


def output_console() -> Console:
    """A console on stdout: the terminal's width there; elsewhere lines are never cut or wrapped."""
    console = Console()
    return console if console.is_terminal else Console(width=UNWRAPPED_WIDTH)


def main(
    outdir: Path = typer.Option(DEFAULT_OUTDIR, help="Where to write the cloud assembly."),
    markdown: bool = typer.Option(False, help="Print the README's configuration table and exit."),
) -> None:
    """Synthesize every environment in cdk.json and print the derived parameters."""
    console = output_console()
    if markdown:
        print(formula_table(contract_of(load_handler(EXAMPLE_HANDLER))))
        return
    use_pinned_node()
    from infra.app import build_app  # imported late: loading the CDK takes seconds
    from infra.identities import IdentityLock
    from infra.limits import check_templates

    started = time.monotonic()
    try:
        lock = IdentityLock()
        app, stacks = build_app(outdir=str(outdir), lock=lock)
    except ContractError as error:  # a cdk.json setting or a handler declaration breaks a rule
        console.print(f"[red]invalid configuration[/red]: {error}")
        raise typer.Exit(2) from error
    try:
        assembly = app.synth()
    except Exception as error:  # jsii raises RuntimeError for ValidationFailed
        console.print(f"[red]synth failed[/red]: {error}")
        report = outdir / "validation-report.json"
        if report.exists():
            console.print(f"cdk-nag report: {report}")
        raise typer.Exit(1) from error
    try:
        check_templates(assembly)
    except ContractError as error:
        console.print(f"[red]invalid configuration[/red]: {error}")
        raise typer.Exit(2) from error
    lock.commit()
    elapsed = time.monotonic() - started

    shown = columns(EnvironmentContracts(s.settings, {n: w.contract for n, w in s.workers.items()}) for s in stacks)
    table = Table(title="Worker contract per worker (derived once, used by the stack and the consumer)")
    table.add_column("parameter", overflow="fold")  # a narrow terminal wraps a cell, never cuts it
    for column in shown:
        table.add_column(column.header, justify="right", overflow="fold")
    table.add_row("handler", *[c.worker.handler.rpartition(".")[2] for c in shown])
    table.add_row("tasks (min..max)", *[tasks_cell(c.worker) for c in shown])
    table.add_row("runs on", *[runs_on(c.worker) for c in shown])
    for label, attribute in ROWS:
        table.add_row(label, *[contract_cell(c.worker, c.contract, attribute) for c in shown])
    rows = [settings_rows(c.settings, c.worker) for c in shown]
    for label in rows[0]:
        table.add_row(label, *[r[label] for r in rows])
    console.print(table)
    for column in shown:
        beyond = beyond_one_process(column.worker.cpu)
        if beyond is not None:
            console.print(f"[yellow]note[/yellow] {column.header.replace(chr(10), ' ')}: {beyond}")
    for stack in stacks:
        open_findings, acknowledged = nag_results(outdir, stack.stack_name)
        console.print(
            f"[green]ok[/green] {stack.stack_name}: {outdir / (stack.stack_name + '.template.json')}"
            f" - cdk-nag AwsSolutions: {len(open_findings)} open findings,"
            f" {len(acknowledged)} acknowledged with reasons"
        )
    console.print(f"synthesized {len(stacks)} environments in {elapsed:.1f} s")


def run() -> None:
    typer.run(main)


if __name__ == "__main__":
    run()
