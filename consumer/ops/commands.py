"""``python -m consumer dlq ...``: operator tooling for the dead-letter queue.

Commands: ``stats``, ``peek``, ``redrive``, ``purge``, ``export`` and ``import``.
Each finds the queues from, in order: ``--queue-url`` / ``--dlq-url``; the
``QUEUE_URL`` / ``DLQ_URL`` environment; ``--stack NAME`` (the stack's
``QueueUrl`` and ``DeadLetterQueueUrl`` outputs; with ``--worker NAME``, that
worker's). boto3 reads the region, credentials and ``AWS_ENDPOINT_URL`` as usual.

Nothing here loses a message. A pass keeps every message it received hidden
until the pass ends (so it never sees one twice) and then releases whatever it
did not delete, also on Ctrl-C, SIGTERM or an error; anything it did not release
comes back by itself when its visibility timeout ends. A message is deleted from
the DLQ only after SQS confirmed its copy (redrive) or its line is on disk
(``export --delete``), and that send (or write) and its delete are one step that
SIGINT and SIGTERM wait for. Only an error between the two (an endpoint gone
mid-step) can leave a message in both places, which the consumer's idempotency
guard absorbs.

This module is the presentation only (typer and rich, with ``progress.py``): each command parses its
options, builds its clients, calls the logic and renders what it returns. The logic is in ``queues.py`` (the queues, their
clients, stats and peek), ``redrive.py``, ``files.py`` (export and import), on the parts in ``passes.py``
(the lease, interrupts, the run's start); the record format and its checks are in ``records.py``.
"""

from __future__ import annotations

import enum
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from botocore.exceptions import BotoCoreError, ClientError
from rich.table import Table
from rich.text import Text

from consumer.exit_codes import ExitCode
from consumer.limits import SQS_MAX_VISIBILITY_SECONDS
from consumer.ops import files
from consumer.ops.files import ExportResult, ImportResult
from consumer.ops.passes import AwsFailure, Interrupted, UsageError, explain, interrupts
from consumer.ops.progress import duration, message_table, output_console, preview, progress_on, reason_preview
from consumer.ops.queues import (
    NO_REASON_KIND,
    Tools,
    by_fingerprint,
    depth_of,
    dlq_stats,
    fingerprint,
    is_fifo,
    resolve_queues,
)
from consumer.ops.queues import (
    peek as peek_records,
)
from consumer.ops.queues import (
    purge as purge_queue,
)
from consumer.ops.redrive import (
    FIFO_DEDUP_WINDOW_SECONDS,
    RedriveOptions,
    RedriveSummary,
    cancel_move_task,
    copy_redrive,
    matcher,
    prepare_redrive,
)
from consumer.runtime.dead_letter import read_reason_safely

__all__ = ["app"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Inspect and repair the dead-letter queue: stats, peek, redrive, purge, export, import.",
)

T = TypeVar("T")


# --- errors, clients, previews: what every command shares ---------------------------------------


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"consumer dlq: {message}", err=True)
    return typer.Exit(code)


def _command(function: Callable[..., T]) -> Callable[..., T]:
    """AWS errors end a command with one line on stderr and exit 1, never a traceback; a usage error (no queue
    named, a bad input file) with one line and exit 2; SIGINT and SIGTERM end it (after the step under way,
    see ``passes.Interrupts``) with 128 + the signal's number."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            with interrupts:
                return function(*args, **kwargs)
        except Interrupted as stop:
            raise typer.Exit(128 + stop.signum) from None
        except UsageError as error:
            raise _fail(str(error), ExitCode.CONFIG) from None
        except AwsFailure as failure:
            raise _fail(str(failure), ExitCode.FAILED) from None
        except (ClientError, BotoCoreError) as error:  # a call not wrapped by aws(): still one line
            raise _fail(f"AWS call failed: {explain(error)}", ExitCode.FAILED) from None

    return wrapper


def _tools(ctx: typer.Context) -> Tools:
    """The command's clients and clock: the machine's (:class:`queues.Tools`' defaults), or what a caller passed as
    the context's ``obj`` (``CliRunner().invoke(app, args, obj=...)``: how tests hook every client and run on a
    simulated clock), a :class:`Tools` or a client factory alone."""
    if isinstance(ctx.obj, Tools):
        return ctx.obj
    return Tools(clients=ctx.obj) if callable(ctx.obj) else Tools()


def _named(ctx: typer.Context, queue_url: str | None, dlq_url: str | None) -> tuple[str | None, str | None]:
    """The queue URLs to resolve with: with ``--stack``, those QUEUE_URL/DLQ_URL gave are dropped, so the stack's
    outputs (its ``--worker``'s) win over the environment, which in an ECS task names that task's own queues; a
    ``--queue-url``/``--dlq-url`` flag still wins over both."""
    if not ctx.params.get("stack"):
        return queue_url, dlq_url

    def from_environment(name: str) -> bool:
        # By name: typer carries its own copy of click, whose ParameterSource is not click's.
        return getattr(ctx.get_parameter_source(name), "name", None) == "ENVIRONMENT"

    return (None if from_environment("queue_url") else queue_url, None if from_environment("dlq_url") else dlq_url)


# --- the options every command shares -------------------------------------------------------------

QueueUrlOption = Annotated[
    str | None,
    typer.Option("--queue-url", envvar="QUEUE_URL", show_envvar=True, help="Source queue URL."),
]
DlqUrlOption = Annotated[
    str | None,
    typer.Option("--dlq-url", envvar="DLQ_URL", show_envvar=True, help="Dead-letter queue URL."),
]
StackOption = Annotated[
    str | None,
    typer.Option("--stack", help="Read the queue URLs from this CloudFormation stack's outputs."),
]
WorkerOption = Annotated[
    str | None,
    typer.Option(
        "--worker",
        help="With --stack: this worker's queues (the stack's WorkerNames output lists them; default the first).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


# --- stats ----------------------------------------------------------------------


@app.command()
@_command
def stats(
    ctx: typer.Context,
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    worker: WorkerOption = None,
    json_output: JsonOption = False,
) -> None:
    """DLQ depth, messages in flight, the oldest message's age and roughly when it expires.

    Age and expiry are approximate: they come from the SentTimestamp of up to 10
    peeked messages (released at once), not from every message, and the expiry
    is the DLQ's MessageRetentionPeriod counted from that SentTimestamp. A
    message SQS moved after maxReceiveCount may expire earlier (a standard
    queue counts from its original enqueue time); one the consumer moved carries
    its own failed_at in the reason.
    """
    clients, clock = _tools(ctx)
    dlq = resolve_queues(*_named(ctx, queue_url, dlq_url), stack, worker=worker, clients=clients, need_source=False).dlq
    report = dlq_stats(clients("sqs", dlq), dlq, clock)
    if json_output:
        typer.echo(json.dumps(report.as_json()))
        return
    console = output_console()
    console.print(Text(f"DLQ {dlq}"))
    table = Table(show_header=False)
    table.add_row("visible (waiting)", str(report.visible))
    table.add_row("in flight (received, not deleted)", str(report.in_flight))
    table.add_row("delayed", str(report.delayed))
    table.add_row("retention", duration(report.retention_seconds))
    table.add_row(f"oldest age (~, {report.sampled_messages} sampled)", duration(report.oldest_age_seconds))
    table.add_row("oldest expires in (~)", duration(report.oldest_expires_in_seconds))
    console.print(table)


# --- peek -----------------------------------------------------------------------


@app.command()
@_command
def peek(
    ctx: typer.Context,
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    worker: WorkerOption = None,
    max_messages: Annotated[int, typer.Option("--max", min=1, help="Messages to look at.")] = 10,
    visibility: Annotated[
        int,
        typer.Option(
            "--visibility",
            min=1,
            max=SQS_MAX_VISIBILITY_SECONDS,
            help="Seconds the peeked messages stay hidden at most.",
        ),
    ] = 30,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON line per message on stdout.")] = False,
) -> None:
    """Show up to --max messages and their failure reasons, grouped by fingerprint; every message stays.

    The messages are hidden while they are read and released (visibility 0)
    right after, so the consumer or the next command sees them at once. The
    fingerprint is the reason's kind and text with numbers, hex ids and uuids
    replaced by placeholders.
    """
    clients, clock = _tools(ctx)
    dlq = resolve_queues(*_named(ctx, queue_url, dlq_url), stack, worker=worker, clients=clients, need_source=False).dlq
    records = peek_records(clients("sqs", dlq), dlq, max_messages=max_messages, visibility=visibility, clock=clock)
    if json_output:
        for record in records:
            kind, pattern = fingerprint(record["reason"])
            typer.echo(json.dumps({**record, "fingerprint": {"kind": kind, "reason": pattern}}))
        return
    console = output_console()
    if not records:
        console.print(Text(f"no visible messages in {dlq}"))
        return
    listing = message_table(f"{len(records)} message(s) from {dlq} (left in place)")
    for record in records:
        reason = record["reason"]
        listing.add_row(
            Text(record["message_id"]),
            Text(str(reason.get("kind", "")) if reason else NO_REASON_KIND),
            reason_preview(reason),
            Text(preview(record["body"])),
        )
    console.print(listing)
    summary = Table(title="By failure fingerprint")
    summary.add_column("count", justify="right")
    summary.add_column("kind")
    summary.add_column("reason", overflow="fold")
    summary.add_column("sample body", overflow="fold")
    for (kind, pattern), members in by_fingerprint(records):
        summary.add_row(str(len(members)), Text(kind), Text(pattern), Text(preview(members[0]["body"])))
    console.print(summary)


# --- redrive --------------------------------------------------------------------


@app.command()
@_command
def redrive(
    ctx: typer.Context,
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    worker: WorkerOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would move; move nothing.")] = False,
    filter_text: Annotated[
        str | None,
        typer.Option("--filter", help="Move only messages whose body or reason contains TEXT (or matches re:REGEX)."),
    ] = None,
    max_messages: Annotated[int | None, typer.Option("--max", min=1, help="Move at most N messages.")] = None,
    rate: Annotated[
        int | None,
        typer.Option("--rate", min=1, max=500, help="Messages per second (native move task only)."),
    ] = None,
    keep_reason: Annotated[
        bool, typer.Option("--keep-reason", help="Keep the x-dlq-reason attribute on moved messages.")
    ] = False,
    client_side: Annotated[
        bool, typer.Option("--client-side", help="Skip the native move task; copy and delete from here.")
    ] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Cancel the running native move task and exit.")] = False,
    visibility: Annotated[
        int,
        typer.Option(
            "--visibility", min=10, max=SQS_MAX_VISIBILITY_SECONDS, help="Seconds a message being moved stays hidden."
        ),
    ] = 60,
) -> None:
    """Move DLQ messages back to the source queue.

    Without --filter, --max, --dry-run or --client-side this starts SQS's native
    message move task (server-side; it moves messages verbatim, so x-dlq-reason
    stays and folded attributes stay folded) and follows its progress; Ctrl-C
    leaves it running, --cancel stops it. Where the endpoint has no move tasks
    (moto, other emulators) it falls back to the client-side move, which sends
    each message to the source with its body, attributes (x-dlq-reason dropped
    unless --keep-reason, x-original-attributes unfolded) and FIFO group and
    deduplication ids, checks every send, and only then deletes exactly those
    from the DLQ. Failed sends, messages the filter skips and messages whose
    x-original-attributes is malformed stay in the DLQ.

    Like the native task, the client-side move takes only the messages the DLQ
    held when it started: one that enters the DLQ during the run (a message
    failing again at once) is left for the next run and counted. Ctrl-C or
    SIGTERM waits for the batch being sent to be deleted from the DLQ, then
    stops and releases the rest: every message is in exactly one queue.

    FIFO: a message that entered the DLQ less than 5 min ago is left in the DLQ,
    because the source may still remember its deduplication id and would accept
    and silently drop it; run redrive again after that.
    """
    clients, clock = _tools(ctx)
    queues = resolve_queues(
        *_named(ctx, queue_url, dlq_url), stack, worker=worker, clients=clients, need_source=not cancel
    )
    sqs, progress = clients("sqs", queues.dlq), progress_on(clock)
    if cancel:
        typer.echo(cancel_move_task(sqs, queues.dlq))
        return
    try:
        match = matcher(filter_text)  # a bad regex fails before any AWS call
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--filter") from None
    options = RedriveOptions(
        match=match,
        dry_run=dry_run,
        filtered=bool(filter_text),
        limit=max_messages,
        rate=rate,
        keep_reason=keep_reason,
        client_side=client_side,
        visibility=visibility,
    )
    summary = RedriveSummary(dry_run=dry_run)
    start = prepare_redrive(sqs, queues.dlq, queues.source, options, summary, progress=progress, clock=clock)
    if start is None:
        typer.echo(summary.native)
        return
    try:
        copy_redrive(sqs, queues.dlq, queues.source, summary, start=start, options=options, progress=progress)
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted after moving {summary.moved} message(s); every other message is still in the DLQ."
            " Run redrive again to finish.",
            err=True,
        )
        raise
    except BaseException:
        typer.echo(
            f"stopped after moving {summary.moved} message(s); every other message is still in the DLQ"
            " (a batch being sent when the error came may be in both queues). Run redrive again to finish.",
            err=True,
        )
        raise
    _print_redrive_summary(summary, limit=max_messages)
    if summary.failed or summary.malformed:
        raise typer.Exit(ExitCode.FAILED)


def _print_redrive_summary(summary: RedriveSummary, *, limit: int | None) -> None:
    if summary.dry_run:
        table = message_table(f"dry run: {len(summary.would_move)} message(s) would move (nothing moved)")
        for message in summary.would_move:
            reason = read_reason_safely(message)
            kind, _pattern = fingerprint(reason)
            table.add_row(
                Text(message["MessageId"]), Text(kind), reason_preview(reason), Text(preview(message.get("Body", "")))
            )
        output_console().print(table)
    moved = f"would move {len(summary.would_move)}" if summary.dry_run else f"moved {summary.moved}"
    optional = [
        ("malformed", len(summary.malformed)),
        ("held (FIFO dedup window)", len(summary.held_dedup)),
        ("arrived during the run", summary.arrived),
    ]
    typer.echo(
        f"redrive ({summary.mode}): {moved}, skipped by filter {summary.skipped}, failed {len(summary.failed)}"
        + "".join(f", {name} {count}" for name, count in optional if count)
    )
    for message_id, why in summary.failed:
        typer.echo(f"  failed {message_id}: {why} (left in the DLQ)")
    for message_id, why in summary.malformed:
        typer.echo(f"  malformed {message_id}: {why} (left in the DLQ)")
    if summary.held_dedup:
        ready = time.strftime("%H:%M:%S UTC", time.gmtime(summary.dedup_ready_at()))
        typer.echo(
            f"  {len(summary.held_dedup)} FIFO message(s) entered the DLQ less than"
            f" {FIFO_DEDUP_WINDOW_SECONDS // 60} min ago: the source could still drop them as duplicates,"
            f" so they stay in the DLQ; run redrive again after {ready}"
        )
    if summary.arrived:
        typer.echo(f"  {summary.arrived} message(s) arrived in the DLQ during the run; left for the next run")
    if summary.left_in_both:
        typer.echo(
            f"  {len(summary.left_in_both)} message(s) were copied but could not be deleted from the DLQ"
            " (they are in both queues): " + ", ".join(summary.left_in_both)
        )
    if limit is None and summary.handled() < summary.at_start:
        typer.echo(
            f"  note: the DLQ showed about {summary.at_start} message(s) at the start and this run handled"
            f" {summary.handled()}; run redrive again for the rest"
        )


# --- purge ----------------------------------------------------------------------


@app.command()
@_command
def purge(
    ctx: typer.Context,
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    worker: WorkerOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every message in the DLQ (PurgeQueue); asks first unless --yes. Export first to keep a copy."""
    clients = _tools(ctx).clients
    dlq = resolve_queues(*_named(ctx, queue_url, dlq_url), stack, worker=worker, clients=clients, need_source=False).dlq
    sqs = clients("sqs", dlq)
    approximate = sum(depth_of(sqs, dlq))
    if not yes and not typer.confirm(
        f"Purge about {approximate} message(s) from {dlq}? They cannot be recovered", default=False
    ):
        raise _fail("purge cancelled: nothing was deleted", ExitCode.FAILED)
    purge_queue(sqs, dlq)
    typer.echo(f"purged about {approximate} message(s) from {dlq} (SQS takes up to 60 s to finish)")


# --- export / import ------------------------------------------------------------


@app.command()
@_command
def export(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", dir_okay=False, help="JSON-lines file to write.")],
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    worker: WorkerOption = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete each message once its line is written and fsynced.")
    ] = False,
    append: Annotated[bool, typer.Option("--append", help="Append to an existing file instead of refusing.")] = False,
    visibility: Annotated[
        int,
        typer.Option(
            "--visibility",
            min=10,
            max=SQS_MAX_VISIBILITY_SECONDS,
            help="Seconds exported messages stay hidden at most.",
        ),
    ] = 60,
) -> None:
    """Write every DLQ message as one JSON line; the messages stay unless --delete.

    A line holds message_id, body, message_attributes (binary values base64),
    attributes (MessageGroupId, MessageDeduplicationId, SentTimestamp...) and
    the reason. A new file is created with mode 0600 (it holds message bodies);
    --append keeps an existing file's mode. Messages are hidden during the pass
    and released at its end; with --delete each batch is deleted only after its
    lines are fsynced, and Ctrl-C or SIGTERM waits for that delete, so a message
    is in the file or in the DLQ, never in both.
    FIFO: SQS hands out no more of a message group while some of it is hidden,
    so without --delete a pass sees at most 10 messages per group.
    """
    clients, clock = _tools(ctx)
    dlq = resolve_queues(*_named(ctx, queue_url, dlq_url), stack, worker=worker, clients=clients, need_source=False).dlq
    files.refuse_to_overwrite(out, append=append)
    sqs = clients("sqs", dlq)
    result = ExportResult(visible=depth_of(sqs, dlq)[0])
    progress = progress_on(clock)
    try:
        files.export(sqs, dlq, out, result, delete=delete, visibility=visibility, progress=progress, clock=clock)
    except BaseException as error:
        stopped = "interrupted" if isinstance(error, KeyboardInterrupt) else "stopped"
        typer.echo(
            f"{stopped}: {result.written} line(s) written to {out}, {result.deleted} of them deleted from the DLQ;"
            " every other message is still in the DLQ",
            err=True,
        )
        raise
    action = f"deleted {result.deleted} from the DLQ" if delete else "left every message in the DLQ"
    typer.echo(f"exported {result.written} message(s) to {out}; {action}")
    if result.kept_both:
        typer.echo(f"  {len(result.kept_both)} exported message(s) could not be deleted: {', '.join(result.kept_both)}")
    for message_id, why in result.lease_lost:
        typer.echo(f"  not exported {message_id}: {why} (left in the DLQ)")
    if result.written < result.visible:
        typer.echo(
            f"  note: the DLQ showed about {result.visible} visible message(s) at the start; run again to get the rest"
        )


#: Why SQS refuses an import into the DLQ where cdk.json names producers, and what to do instead.
DLQ_TAKES_THE_CONSUMER_ONLY = (
    "where cdk.json names producers, the DLQ takes messages from the consumer's task role alone"
    " (docs/security.md, Who may send): import them with --to source, as a named operator"
)


class Target(enum.StrEnum):
    source = "source"
    dlq = "dlq"


@app.command("import")
@_command
def import_(
    ctx: typer.Context,
    in_file: Annotated[
        Path, typer.Option("--in", exists=True, dir_okay=False, readable=True, help="JSON-lines file from export.")
    ],
    to: Annotated[Target, typer.Option("--to", help="Queue to send the messages to.")] = Target.dlq,
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    worker: WorkerOption = None,
    keep_reason: Annotated[
        bool, typer.Option("--keep-reason", help="With --to source: keep the x-dlq-reason attribute.")
    ] = False,
    from_line: Annotated[
        int, typer.Option("--from-line", min=1, help="Send only the lines from this line number on (to resume a run).")
    ] = 1,
) -> None:
    """Send every line of an export back, in batches: to the DLQ (default) or to the source.

    Each message keeps its body, message attributes, FIFO group and
    deduplication ids and trace header. To the source the reason is dropped
    (unless --keep-reason) and folded attributes are unfolded, as redrive does.
    Every line is checked (JSON, field types, attribute names, data types and
    values, strict base64) before anything is sent; the first bad one is
    reported with its line number and nothing is sent. A line SQS refuses stops
    the import after its batch. A stopped, failed or interrupted run says the
    last line it sent and the --from-line to resume with; running the same lines
    twice sends them twice. FIFO: a queue drops, while reporting success, a
    message whose deduplication id it saw in the last 5 min. Where cdk.json
    names producers, the DLQ takes messages from the consumer alone: import
    with --to source.
    """
    clients, clock = _tools(ctx)
    to_source = to is Target.source
    queues = resolve_queues(
        *_named(ctx, queue_url, dlq_url),
        stack,
        worker=worker,
        clients=clients,
        need_source=to_source,
        need_dlq=not to_source,
    )
    target = queues.source if to_source else queues.dlq
    entry = files.import_entry(to_source=to_source, fifo=is_fifo(target), keep_reason=keep_reason)
    result = ImportResult(files.read_import_lines(in_file, from_line=from_line, entry=entry))
    if not result.lines:
        typer.echo(f"nothing to import: {in_file} has no line at or after line {from_line}")
        return
    try:
        files.send_lines(clients("sqs", target), target, result, progress=progress_on(clock))
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            stopped, unsure = "interrupted", ""
        else:
            stopped, unsure = "stopped", " (the batch being sent when the error came may have been sent too)"
        typer.echo(
            f"{stopped}: sent {len(result.sent)} of {len(result.lines)} line(s) from {in_file}{unsure};"
            f" {result.resume_advice()}",
            err=True,
        )
        if not to_source and isinstance(error, AwsFailure) and "AccessDenied" in error.code:
            raise AwsFailure(f"{error}; {DLQ_TAKES_THE_CONSUMER_ONLY}", error.code) from None
        raise
    numbers = result.numbers
    typer.echo(
        f"imported {len(result.sent)} of {len(result.lines)} message(s) from {in_file}"
        f" (lines {numbers[0]}-{numbers[-1]}) into {target}"
    )
    for number, why in result.failed:
        typer.echo(f"  line {number} failed: {why}")
    if result.failed:
        typer.echo(f"  stopped after that batch: {result.resume_advice()}")
        raise typer.Exit(ExitCode.FAILED)
