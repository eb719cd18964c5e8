"""``python -m consumer dlq ...``: operator tooling for the dead-letter queue.

Commands: ``stats``, ``peek``, ``redrive``, ``purge``, ``export`` and ``import``.
Each finds the queues from, in order: ``--queue-url`` / ``--dlq-url``; the
``QUEUE_URL`` / ``DLQ_URL`` environment; ``--stack NAME`` (the stack's
``QueueUrl`` and ``DeadLetterQueueUrl`` outputs). boto3 reads the region,
credentials and ``AWS_ENDPOINT_URL`` as usual.

Nothing here loses a message. A pass keeps every message it received hidden
until the pass ends (so it never sees one twice) and then releases whatever it
did not delete, also on Ctrl-C, SIGTERM or an error; anything it did not release
comes back by itself when its visibility timeout ends. A message is deleted from
the DLQ only after SQS confirmed its copy (redrive) or its line is on disk
(``export --delete``), and that send (or write) and its delete are one step that
SIGINT and SIGTERM wait for. Only an error between the two (an endpoint gone
mid-step) can leave a message in both places, which the consumer's idempotency
guard absorbs. The parts every command runs on are in ``consumer/ops/passes.py``;
the record format and its checks in ``consumer/ops/records.py``.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any, TypeVar

import typer
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from consumer.contract import SQS_MAX_BATCH, SQS_MAX_VISIBILITY_SECONDS
from consumer.exit_codes import ExitCode
from consumer.ops.passes import (
    CONNECT_TIMEOUT_SECONDS,
    MAX_ATTEMPTS,
    MAX_STALE_RECEIVES,
    READ_TIMEOUT_SECONDS,
    AwsFailure,
    Interrupted,
    Lease,
    Progress,
    RunStart,
    aws,
    entry_failure,
    explain,
    interrupts,
    start_on_sqs_clock,
)
from consumer.ops.records import (
    RecordError,
    check_line,
    entry_bytes,
    message_record,
    original_dedup_id,
    parse_json,
    size_batches,
    source_attributes,
)
from consumer.runtime.aws_errors import error_code
from consumer.runtime.dead_letter import attributes_from_json, read_reason_safely, send_entry

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Inspect and repair the dead-letter queue: stats, peek, redrive, purge, export, import.",
)

#: A FIFO queue drops (while reporting success) a send whose MessageDeduplicationId it saw this recently.
FIFO_DEDUP_WINDOW_SECONDS = 300
MOVE_TASK_POLL_SECONDS = 2.0
BODY_PREVIEW_CHARS = 80

_STACK_OUTPUT = {"queue": "QueueUrl", "dlq": "DeadLetterQueueUrl"}
_HOW_TO_NAME_QUEUES = (
    "pass --queue-url/--dlq-url, set QUEUE_URL/DLQ_URL, or pass --stack NAME"
    " (reads the stack's QueueUrl/DeadLetterQueueUrl outputs)"
)

T = TypeVar("T")


# --- clients and errors -------------------------------------------------------


def make_client(service: str, queue_url: str | None = None) -> Any:
    """A boto3 client for ``service`` that fails fast; credentials and endpoint from the environment.

    The region is the one ``consumer run`` would use (:func:`consumer.runtime.config.resolve_region`):
    ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the config file, else the one ``queue_url`` names; none
    of them ends the command with one line naming the variable. Tests replace this factory to wrap
    or hook the clients a command creates.
    """
    import boto3
    from botocore.config import Config

    from consumer.contract import ConfigurationError
    from consumer.runtime.config import resolve_region

    try:
        region, _ = resolve_region(os.environ, queue_url or "", configured=boto3.Session().region_name)
    except ConfigurationError as error:
        raise _fail(str(error), ExitCode.CONFIG) from None
    return boto3.client(
        service,
        region_name=region,
        config=Config(
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        ),
    )


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"consumer dlq: {message}", err=True)
    return typer.Exit(code)


def _command(function: Callable[..., T]) -> Callable[..., T]:
    """AWS errors end a command with one line on stderr and exit 1, never a traceback; SIGINT and SIGTERM
    end it (after the step under way, see ``dlq_pass.Interrupts``) with 128 + the signal's number."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            with interrupts:
                return function(*args, **kwargs)
        except Interrupted as stop:
            raise typer.Exit(128 + stop.signum) from None
        except AwsFailure as failure:
            raise _fail(str(failure), ExitCode.FAILED) from None
        except (ClientError, BotoCoreError) as error:  # a call not wrapped by aws(): still one line
            raise _fail(f"AWS call failed: {explain(error)}", ExitCode.FAILED) from None

    return wrapper


# --- finding the queues -----------------------------------------------------

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
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


@dataclass(frozen=True)
class Queues:
    dlq_url: str | None
    queue_url: str | None


def resolve_queues(
    queue_url: str | None, dlq_url: str | None, stack: str | None, *, need_source: bool, need_dlq: bool = True
) -> Queues:
    """The queues from flags, then the environment (typer reads both), then the stack's outputs; else exit 2."""
    if stack and ((need_dlq and not dlq_url) or (need_source and not queue_url)):
        outputs = _stack_outputs(stack)
        dlq_url = dlq_url or outputs.get(_STACK_OUTPUT["dlq"])
        queue_url = queue_url or outputs.get(_STACK_OUTPUT["queue"])
    wanted = [("DLQ", dlq_url, need_dlq), ("source queue", queue_url, need_source)]
    missing = [name for name, url, needed in wanted if needed and not url]
    if missing:
        where = f" (stack {stack} has no such output)" if stack else ""
        raise _fail(f"cannot tell which {' and '.join(missing)} to use{where}: {_HOW_TO_NAME_QUEUES}", ExitCode.CONFIG)
    return Queues(dlq_url=dlq_url, queue_url=queue_url)


def _dlq(queues: Queues) -> str:
    assert queues.dlq_url is not None  # resolve_queues(need_dlq=True) exits otherwise
    return queues.dlq_url


def _stack_outputs(stack: str) -> dict[str, str]:
    response = aws(make_client("cloudformation"), "DescribeStacks", f"stack {stack}", StackName=stack)
    return {
        output["OutputKey"]: output["OutputValue"]
        for found in response.get("Stacks", [])[:1]
        for output in found.get("Outputs", [])
    }


# --- messages -----------------------------------------------------------------


_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b(?:0x[0-9a-f]+|(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,})\b", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
NO_REASON_KIND = "redrive"
NO_REASON_TEXT = "(no reason: moved by SQS after maxReceiveCount receives)"


def fingerprint(reason: Mapping[str, Any] | None) -> tuple[str, str]:
    """(kind, reason with uuids, hex ids and numbers replaced by placeholders): one row per failure cause."""
    if reason is None:
        return NO_REASON_KIND, NO_REASON_TEXT
    text = str(reason.get("reason", ""))
    text = _DIGITS.sub("<n>", _HEX.sub("<hex>", _UUID.sub("<uuid>", text)))
    return str(reason.get("kind", "unknown")), text


def _is_fifo(url: str) -> bool:
    return url.endswith(".fifo")


def _preview(text: str, limit: int = BODY_PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours or days else []
    parts += [f"{minutes}m", f"{secs}s"] if not days else []
    return sign + " ".join(parts)


def _queue_attributes(client: Any, url: str, names: Iterable[str]) -> dict[str, str]:
    return aws(client, "GetQueueAttributes", url, QueueUrl=url, AttributeNames=list(names))["Attributes"]


def _depth(attributes: Mapping[str, str]) -> tuple[int, int, int]:
    return (
        int(attributes.get("ApproximateNumberOfMessages", 0)),
        int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


_DEPTH_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


# --- stats ----------------------------------------------------------------------


@app.command()
@_command
def stats(
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
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
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=False)
    dlq_url = _dlq(queues)
    sqs = make_client("sqs", dlq_url)
    attributes = _queue_attributes(sqs, dlq_url, [*_DEPTH_ATTRIBUTES, "MessageRetentionPeriod"])
    visible, in_flight, delayed = _depth(attributes)
    retention = int(attributes.get("MessageRetentionPeriod", 0))
    sent: list[int] = []
    if visible:
        with Lease(sqs, dlq_url, visibility=30) as lease:
            sample = lease.receive(SQS_MAX_BATCH) or []
        sent = [int(m["Attributes"]["SentTimestamp"]) for m in sample if "SentTimestamp" in m.get("Attributes", {})]
    age = max(0, int(time.time() - min(sent) / 1000)) if sent else None
    report = {
        "dlq_url": dlq_url,
        "visible": visible,
        "in_flight": in_flight,
        "delayed": delayed,
        "retention_seconds": retention,
        "oldest_age_seconds": age,
        "oldest_expires_in_seconds": None if age is None else retention - age,
        "sampled_messages": len(sent),
    }
    if json_output:
        typer.echo(json.dumps(report))
        return
    console = Console(highlight=False)
    console.print(Text(f"DLQ {dlq_url}"))
    table = Table(show_header=False)
    table.add_row("visible (waiting)", str(visible))
    table.add_row("in flight (received, not deleted)", str(in_flight))
    table.add_row("delayed", str(delayed))
    table.add_row("retention", _duration(retention))
    table.add_row(f"oldest age (~, {len(sent)} sampled)", _duration(age))
    table.add_row("oldest expires in (~)", _duration(None if age is None else retention - age))
    console.print(table)


# --- peek -----------------------------------------------------------------------


@app.command()
@_command
def peek(
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
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
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=False)
    dlq_url = _dlq(queues)
    sqs = make_client("sqs", dlq_url)
    messages: list[dict[str, Any]] = []
    with Lease(sqs, dlq_url, visibility=visibility) as lease:
        while len(messages) < max_messages:
            batch = lease.receive(max_messages - len(messages))
            if batch is None:
                break
            messages.extend(batch)
    records = [message_record(m) for m in messages]
    if json_output:
        for record in records:
            kind, pattern = fingerprint(record["reason"])
            typer.echo(json.dumps({**record, "fingerprint": {"kind": kind, "reason": pattern}}))
        return
    console = Console(highlight=False)
    if not records:
        console.print(Text(f"no visible messages in {dlq_url}"))
        return
    listing = Table(title=f"{len(records)} message(s) from {dlq_url} (left in place)")
    for column in ("message id", "kind", "reason", "body"):
        listing.add_column(column, overflow="fold")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        reason = record["reason"]
        listing.add_row(
            Text(record["message_id"]),
            Text(str(reason.get("kind", "")) if reason else NO_REASON_KIND),
            Text(_preview(str(reason.get("reason", ""))) if reason else "-"),
            Text(_preview(record["body"])),
        )
        groups.setdefault(fingerprint(reason), []).append(record)
    console.print(listing)
    summary = Table(title="By failure fingerprint")
    summary.add_column("count", justify="right")
    summary.add_column("kind")
    summary.add_column("reason", overflow="fold")
    summary.add_column("sample body", overflow="fold")
    for (kind, pattern), members in sorted(groups.items(), key=lambda item: -len(item[1])):
        summary.add_row(str(len(members)), Text(kind), Text(pattern), Text(_preview(members[0]["body"])))
    console.print(summary)


# --- redrive --------------------------------------------------------------------

#: Error codes meaning "the request is wrong or not allowed", not "this endpoint has no move tasks".
_REAL_ERROR_MARKERS = (
    "AccessDenied",
    "Unauthorized",
    "Forbidden",
    "InvalidClientTokenId",
    "ExpiredToken",
    "SignatureDoesNotMatch",
    "RequestExpired",
    "InvalidSecurity",
    "Validation",
    "InvalidParameter",
    "MissingParameter",
    "InvalidAttribute",
    "InvalidAddress",
    "NonExistentQueue",
    "QueueDoesNotExist",
    "ResourceNotFound",
    "Throttl",
    "KmsAccess",
)


def move_tasks_unsupported(error: Exception) -> bool:
    """True when ``error`` says the endpoint cannot run message move tasks (fall back to copying).

    Any botocore error, and any ClientError that is not an access, validation,
    missing-queue or throttling problem: moto answers HTTP 500 ("not
    implemented"), other emulators an unknown-operation error.
    """
    if isinstance(error, BotoCoreError):
        return True
    if isinstance(error, ClientError):
        code = error_code(error)
        return not any(marker.lower() in code.lower() for marker in _REAL_ERROR_MARKERS)
    return False


@dataclass
class RedriveSummary:
    """What one redrive did; rendered by :func:`_print_redrive_summary`."""

    mode: str = "client-side move"
    dry_run: bool = False
    at_start: int = 0  #: visible messages in the DLQ when the run started (approximate, as SQS counts)
    moved: int = 0
    would_move: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    held_dedup: list[dict[str, Any]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    malformed: list[tuple[str, str]] = field(default_factory=list)
    arrived: int = 0  #: received, but entered the DLQ after the start: left for the next run
    left_in_both: list[str] = field(default_factory=list)

    def counted(self) -> int:
        return self.moved + len(self.would_move)

    def handled(self) -> int:
        """Messages from the start's DLQ this run dealt with, one way or another."""
        return self.counted() + self.skipped + len(self.held_dedup) + len(self.failed) + len(self.malformed)

    def progress(self) -> str:
        others = [
            ("skipped by filter", self.skipped),
            ("held", len(self.held_dedup)),
            ("failed", len(self.failed)),
            ("malformed", len(self.malformed)),
            ("arrived during the run", self.arrived),
        ]
        moved = f"would move {len(self.would_move)}" if self.dry_run else f"moved {self.moved}"
        return ", ".join([moved, *(f"{name} {count}" for name, count in others if count)])


def _matcher(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    if not text:
        return lambda _message: True
    if text.startswith("re:"):
        try:
            pattern = re.compile(text[3:])
        except re.error as error:
            raise typer.BadParameter(f"not a regular expression: {error}", param_hint="--filter") from None
        search: Callable[[str], bool] = lambda value: pattern.search(value) is not None  # noqa: E731
    else:
        search = lambda value: text in value  # noqa: E731

    def matches(message: Mapping[str, Any]) -> bool:
        reason = read_reason_safely(message) or {}
        return search(message.get("Body", "")) or search(str(reason.get("reason", "")))

    return matches


def _inside_dedup_window(message: Mapping[str, Any], start: RunStart) -> bool:
    sent = int(message.get("Attributes", {}).get("SentTimestamp", "0")) / 1000
    return start.sqs_now() - sent < FIFO_DEDUP_WINDOW_SECONDS


def _arrived_during_run(message: Mapping[str, Any], start: RunStart, copies: set[str]) -> bool:
    """Whether ``message`` entered the DLQ after this run started: it is left for the next run.

    This is what bounds a redrive to the messages the DLQ held when it started, as SQS's move task
    is bounded: without it, a message the consumer fails again at once comes straight back, is picked
    up by the same run, and the run never ends. Either rule below is enough:

    - Its SentTimestamp is at or after the start, both on SQS's clock (``start_on_sqs_clock``). The
      consumer's move to the DLQ sends a new message, stamped at the move. SQS's own backstop redrive
      keeps the SentTimestamp of a standard queue's message, which for a copy this run sent is the
      copy's send, after the start; a FIFO DLQ stamps the move. So every way back is after the start.
      https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html
    - It is one of this run's copies come back: SQS's redrive keeps the MessageId, and the consumer's
      reason names the message it moved (``original_message_id``). No clock is involved, so no copy can
      go round again even if the start is wrong (an endpoint without a Date header: this machine's clock).
    """
    reason = read_reason_safely(message) or {}
    return start.arrived_after(message) or message["MessageId"] in copies or reason.get("original_message_id") in copies


@app.command()
@_command
def redrive(
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
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
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=not cancel)
    dlq_url = _dlq(queues)
    sqs = make_client("sqs", dlq_url)
    if cancel:
        _cancel_move_task(sqs, dlq_url)
        return
    queue_url = queues.queue_url
    assert queue_url is not None  # resolve_queues(need_source=True) exits otherwise
    match = _matcher(filter_text)  # a bad regex fails before any AWS call
    dlq_arn = _queue_attributes(sqs, dlq_url, ["QueueArn"])["QueueArn"]
    source_attributes_ = _queue_attributes(sqs, queue_url, ["QueueArn", "RedrivePolicy"])
    source_arn = source_attributes_["QueueArn"]
    policy = json.loads(source_attributes_.get("RedrivePolicy") or "{}")
    if policy.get("deadLetterTargetArn") not in (None, dlq_arn):
        raise _fail(
            f"{queue_url} sends its failures to {policy['deadLetterTargetArn']}, not to {dlq_arn}:"
            " pass the source queue that belongs to this DLQ",
            ExitCode.CONFIG,
        )
    summary = RedriveSummary(dry_run=dry_run)
    native = not (dry_run or filter_text or max_messages or client_side)
    if native:
        outcome = _native_redrive(sqs, dlq_url, dlq_arn, source_arn, rate)
        if outcome is not None:
            typer.echo(outcome)
            return
        summary.mode = "client-side move; this endpoint has no message move tasks"
        if rate:
            typer.echo("note: --rate applies to the native move task only", err=True)
    start, answer = start_on_sqs_clock(
        lambda: aws(sqs, "GetQueueAttributes", dlq_url, QueueUrl=dlq_url, AttributeNames=list(_DEPTH_ATTRIBUTES))
    )
    if not start.from_sqs:
        typer.echo("note: the endpoint sends no Date header; the run starts on this machine's clock", err=True)
    summary.at_start = _depth(answer["Attributes"])[0]
    try:
        _copy_redrive(
            sqs,
            dlq_url,
            queue_url,
            summary,
            start=start,
            match=match,
            limit=max_messages,
            keep_reason=keep_reason,
            visibility=visibility,
        )
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


def _native_redrive(sqs: Any, dlq_url: str, dlq_arn: str, source_arn: str, rate: int | None) -> str | None:
    """Run (or follow the already running) native move task; None when the endpoint has none."""
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get("Results", [])
        running = next((task for task in tasks if task.get("Status") == "RUNNING"), None)
        if running is not None:
            handle = running["TaskHandle"]
            typer.echo(f"a move task is already running on this DLQ; following it ({handle})", err=True)
        else:
            arguments: dict[str, Any] = {"SourceArn": dlq_arn, "DestinationArn": source_arn}
            if rate:
                arguments["MaxNumberOfMessagesPerSecond"] = rate
            handle = sqs.start_message_move_task(**arguments)["TaskHandle"]
    except (ClientError, BotoCoreError) as error:
        if move_tasks_unsupported(error):
            return None
        raise AwsFailure(
            f"StartMessageMoveTask on {dlq_url} failed: {explain(error)} (--client-side moves without it)"
        ) from None
    try:
        task = _follow_move_task(sqs, dlq_url, dlq_arn, handle)
    except KeyboardInterrupt:
        typer.echo("stopped watching; the move task keeps running on SQS (redrive --cancel stops it)", err=True)
        raise
    status = task.get("Status")
    moved = task.get("ApproximateNumberOfMessagesMoved", 0)
    if status == "FAILED":
        raise AwsFailure(f"message move task on {dlq_url} failed after ~{moved} messages: {task.get('FailureReason')}")
    return f"redrive (native move task): {status.lower() if status else 'done'}, moved ~{moved} message(s)"


def _follow_move_task(sqs: Any, dlq_url: str, dlq_arn: str, handle: str) -> dict[str, Any]:
    with Progress("redrive (native move task)", None, unit="message(s) moved (approximate)") as progress:
        while True:
            tasks = aws(sqs, "ListMessageMoveTasks", dlq_url, SourceArn=dlq_arn, MaxResults=10).get("Results", [])
            task = next((t for t in tasks if t.get("TaskHandle") == handle), tasks[0] if tasks else {})
            progress.update(
                task.get("ApproximateNumberOfMessagesMoved", 0), task.get("ApproximateNumberOfMessagesToMove")
            )
            if task.get("Status") not in ("RUNNING", "CANCELLING"):
                return task
            time.sleep(MOVE_TASK_POLL_SECONDS)


def _cancel_move_task(sqs: Any, dlq_url: str) -> None:
    dlq_arn = _queue_attributes(sqs, dlq_url, ["QueueArn"])["QueueArn"]
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get("Results", [])
    except (ClientError, BotoCoreError) as error:
        if move_tasks_unsupported(error):
            raise _fail(
                f"ListMessageMoveTasks on {dlq_url}: this endpoint has no message move tasks, nothing to cancel",
                ExitCode.FAILED,
            ) from None
        raise AwsFailure(f"ListMessageMoveTasks on {dlq_url} failed: {explain(error)}") from None
    running = next((task for task in tasks if task.get("Status") == "RUNNING"), None)
    if running is None:
        typer.echo(f"no move task is running on {dlq_url}")
        return
    moved = aws(sqs, "CancelMessageMoveTask", dlq_url, TaskHandle=running["TaskHandle"]).get(
        "ApproximateNumberOfMessagesMoved", 0
    )
    typer.echo(f"cancelled the move task on {dlq_url} after ~{moved} message(s)")


def _redrive_entry(entry_id: str, message: Mapping[str, Any], *, fifo: bool, keep_reason: bool) -> dict[str, Any]:
    """The copy of a DLQ message that goes to the source; RecordError when its folded attributes are malformed."""
    return send_entry(
        entry_id,
        body=message.get("Body", ""),
        message_attributes=source_attributes(message.get("MessageAttributes", {}), keep_reason=keep_reason),
        attributes=message.get("Attributes", {}),
        fallback_dedup_id=message["MessageId"],
        fifo=fifo,
        original_dedup_id=original_dedup_id(read_reason_safely(message)),
    )


def _copy_redrive(
    sqs: Any,
    dlq_url: str,
    source_url: str,
    summary: RedriveSummary,
    *,
    start: RunStart,
    match: Callable[[Mapping[str, Any]], bool],
    limit: int | None,
    keep_reason: bool,
    visibility: int,
) -> None:
    """Receive, send to the source, confirm, delete those confirmed; everything else stays in the DLQ.

    Each batch's send and the delete of what it copied are one step (``Lease.step``): a signal waits
    for the delete. The run ends when the DLQ has nothing more it may move: an empty receive, or
    MAX_STALE_RECEIVES receives in a row that bring only messages that arrived after the start.
    """
    fifo = _is_fifo(source_url)
    copies: set[str] = set()  # MessageIds of the copies this run sent
    total = min(summary.at_start, limit) if limit else summary.at_start
    progress = Progress("redrive", total, unit="message(s) handled", detail=summary.progress)
    with Lease(sqs, dlq_url, visibility=visibility) as lease, progress:
        only_arrivals = 0
        while (limit is None or summary.counted() < limit) and only_arrivals < MAX_STALE_RECEIVES:
            batch = lease.receive(SQS_MAX_BATCH if limit is None else limit - summary.counted())
            if batch is None:
                break
            handled, entries, by_id = summary.handled(), [], {}
            for i, message in enumerate(batch):
                if _arrived_during_run(message, start, copies):
                    summary.arrived += 1
                elif not match(message):
                    summary.skipped += 1
                elif fifo and _inside_dedup_window(message, start):
                    summary.held_dedup.append(message)
                else:
                    try:
                        entries.append(_redrive_entry(str(i), message, fifo=fifo, keep_reason=keep_reason))
                    except RecordError as error:
                        summary.malformed.append((message["MessageId"], str(error)))
                        continue
                    by_id[str(i)] = message
            only_arrivals = 0 if entries or summary.handled() > handled else only_arrivals + 1
            progress.advance(summary.handled() - handled)
            if summary.dry_run:
                summary.would_move.extend(by_id.values())
                progress.advance(len(by_id))
                continue
            for part in size_batches(entries, entry_bytes):
                with lease.step([by_id[entry["Id"]] for entry in part]) as (kept, refused):
                    summary.failed.extend(refused)
                    kept_ids = {m["MessageId"] for m in kept}
                    part = [entry for entry in part if by_id[entry["Id"]]["MessageId"] in kept_ids]
                    response = (
                        aws(sqs, "SendMessageBatch", source_url, QueueUrl=source_url, Entries=part) if part else {}
                    )
                    sent = [by_id[ok["Id"]] for ok in response.get("Successful", [])]
                    copies.update(ok["MessageId"] for ok in response.get("Successful", []))
                    summary.failed.extend(
                        (by_id[failure["Id"]]["MessageId"], entry_failure(failure))
                        for failure in response.get("Failed", [])
                    )
                    # Only now, with SQS's word that each copy is in the source, do the originals go.
                    not_deleted = lease.delete(sent)
                    summary.left_in_both.extend(m["MessageId"] for m in not_deleted)
                    summary.moved += len(sent)
                progress.advance(len(kept) + len(refused))


def _print_redrive_summary(summary: RedriveSummary, *, limit: int | None) -> None:
    console = Console(highlight=False)
    if summary.dry_run:
        table = Table(title=f"dry run: {len(summary.would_move)} message(s) would move (nothing moved)")
        for column in ("message id", "kind", "reason", "body"):
            table.add_column(column, overflow="fold")
        for message in summary.would_move:
            reason = read_reason_safely(message)
            kind, pattern = fingerprint(reason)
            table.add_row(
                Text(message["MessageId"]),
                Text(kind),
                Text(_preview(str(reason.get("reason", ""))) if reason else "-"),
                Text(_preview(message.get("Body", ""))),
            )
        console.print(table)
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
        latest = max(int(m["Attributes"].get("SentTimestamp", "0")) for m in summary.held_dedup) / 1000
        ready = time.strftime("%H:%M:%S UTC", time.gmtime(latest + FIFO_DEDUP_WINDOW_SECONDS))
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
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every message in the DLQ (PurgeQueue); asks first unless --yes. Export first to keep a copy."""
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=False)
    dlq_url = _dlq(queues)
    sqs = make_client("sqs", dlq_url)
    approximate = sum(_depth(_queue_attributes(sqs, dlq_url, _DEPTH_ATTRIBUTES)))
    if not yes and not typer.confirm(
        f"Purge about {approximate} message(s) from {dlq_url}? They cannot be recovered", default=False
    ):
        raise _fail("purge cancelled: nothing was deleted", ExitCode.FAILED)
    aws(sqs, "PurgeQueue", dlq_url, QueueUrl=dlq_url)
    typer.echo(f"purged about {approximate} message(s) from {dlq_url} (SQS takes up to 60 s to finish)")


# --- export / import ------------------------------------------------------------

#: An export holds message bodies: its file is created readable and writable by its owner only.
EXPORT_FILE_MODE = 0o600


def _open_private(path: Path) -> IO[str]:
    """``path`` opened for appending, created with EXPORT_FILE_MODE if new.

    Created with that mode by open(2) itself, not chmod-ed after writing, so there is no moment when
    others could open it. An existing file keeps its mode (the operator chose it), with a warning
    when others than its owner can read it.
    """
    existed = path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, EXPORT_FILE_MODE)
    mode = os.fstat(fd).st_mode & 0o777
    if existed and mode & 0o044:
        typer.echo(
            f"warning: {path} can be read by others than its owner (mode {mode:04o}); it now holds message bodies",
            err=True,
        )
    return os.fdopen(fd, "a", encoding="utf-8")


def _write_lines(stream: IO[str], messages: list[dict[str, Any]]) -> None:
    """One line per message, on disk (fsync) before this returns."""
    for message in messages:
        stream.write(json.dumps(message_record(message)) + "\n")
    stream.flush()
    os.fsync(stream.fileno())


@app.command()
@_command
def export(
    out: Annotated[Path, typer.Option("--out", dir_okay=False, help="JSON-lines file to write.")],
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
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
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=False)
    dlq_url = _dlq(queues)
    if out.exists() and out.stat().st_size and not append:
        raise _fail(f"{out} already exists: pass --append to add to it, or choose another file", ExitCode.CONFIG)
    sqs = make_client("sqs", dlq_url)
    visible = _depth(_queue_attributes(sqs, dlq_url, _DEPTH_ATTRIBUTES))[0]
    written = deleted = 0
    kept_both: list[str] = []
    lease_lost: list[tuple[str, str]] = []
    try:
        with (
            _open_private(out) as stream,
            Lease(sqs, dlq_url, visibility=visibility) as lease,
            Progress("export", visible, unit="message(s) written") as progress,
        ):
            while (batch := lease.receive(SQS_MAX_BATCH)) is not None:
                if not delete:
                    _write_lines(stream, batch)
                    written += len(batch)
                else:
                    with lease.step(batch) as (kept, refused):
                        lease_lost.extend(refused)  # neither written nor deleted: still in the DLQ
                        _write_lines(stream, kept)
                        written += len(kept)
                        not_deleted = lease.delete(kept)
                        kept_both.extend(m["MessageId"] for m in not_deleted)
                        deleted += len(kept) - len(not_deleted)
                progress.advance(len(batch))
    except BaseException as error:
        stopped = "interrupted" if isinstance(error, KeyboardInterrupt) else "stopped"
        typer.echo(
            f"{stopped}: {written} line(s) written to {out}, {deleted} of them deleted from the DLQ;"
            " every other message is still in the DLQ",
            err=True,
        )
        raise
    action = f"deleted {deleted} from the DLQ" if delete else "left every message in the DLQ"
    typer.echo(f"exported {written} message(s) to {out}; {action}")
    if kept_both:
        typer.echo(f"  {len(kept_both)} exported message(s) could not be deleted: {', '.join(kept_both)}")
    for message_id, why in lease_lost:
        typer.echo(f"  not exported {message_id}: {why} (left in the DLQ)")
    if written < visible:
        typer.echo(f"  note: the DLQ showed about {visible} visible message(s) at the start; run again to get the rest")


class Target(enum.StrEnum):
    source = "source"
    dlq = "dlq"


def _line_ranges(numbers: list[int]) -> str:
    """``[4, 5, 6, 9]`` as ``"4-6, 9"``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _resume_advice(numbers: list[int], sent: set[int]) -> str:
    """Where a rerun of an import should start (``--from-line``), and what it would send again."""
    unsent = [n for n in numbers if n not in sent]
    if not unsent:
        return "every line was sent"
    first = unsent[0]
    before = [n for n in numbers if n < first]
    again = [n for n in numbers if n > first and n in sent]
    if again:
        done = f"every line up to line {before[-1]} was sent" if before else "no line before it was sent"
        return (
            f"{done}; resume with --from-line {first}"
            f" (lines {_line_ranges(again)} were sent too and would be sent again)"
        )
    return f"last line sent: {before[-1] if before else 'none'}; resume with --from-line {first}"


def _read_import_lines(
    in_file: Path, *, from_line: int, entry: Callable[[int, Mapping[str, Any]], dict[str, Any]]
) -> list[tuple[int, dict[str, Any]]]:
    """Every line of ``in_file`` checked and made a send entry (exit 2 at the first bad one, nothing sent);
    returns those at or after ``from_line`` as (line number, entry)."""
    entries = []
    with in_file.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise _fail(
                    f'{in_file}:{number}: "line" must be UTF-8 ({error.reason} at byte {error.start + 1}); nothing was sent',
                    ExitCode.CONFIG,
                ) from None
            if not line.strip():
                continue
            try:
                made = entry(number, check_line(parse_json(line, "line")))
            except RecordError as error:
                raise _fail(f"{in_file}:{number}: {error}; nothing was sent", ExitCode.CONFIG) from None
            if number >= from_line:
                entries.append((number, made))
    return entries


@app.command("import")
@_command
def import_(
    in_file: Annotated[
        Path, typer.Option("--in", exists=True, dir_okay=False, readable=True, help="JSON-lines file from export.")
    ],
    to: Annotated[Target, typer.Option("--to", help="Queue to send the messages to.")] = Target.dlq,
    queue_url: QueueUrlOption = None,
    dlq_url: DlqUrlOption = None,
    stack: StackOption = None,
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
    message whose deduplication id it saw in the last 5 min.
    """
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=to is Target.source, need_dlq=to is Target.dlq)
    target = queues.queue_url if to is Target.source else queues.dlq_url
    assert target is not None
    fifo = _is_fifo(target)

    def entry(number: int, record: Mapping[str, Any]) -> dict[str, Any]:
        attributes = attributes_from_json(record.get("message_attributes") or {})
        if to is Target.source:
            attributes = source_attributes(attributes, keep_reason=keep_reason)
        return send_entry(
            str(number),
            body=record["body"],
            message_attributes=attributes,
            attributes=record.get("attributes") or {},
            fallback_dedup_id=str(record.get("message_id") or number),
            fifo=fifo,
            original_dedup_id=original_dedup_id(record.get("reason")) if to is Target.source else None,
        )

    lines = _read_import_lines(in_file, from_line=from_line, entry=entry)
    numbers = [number for number, _ in lines]
    if not lines:
        typer.echo(f"nothing to import: {in_file} has no line at or after line {from_line}")
        return
    sqs = make_client("sqs", target)
    sent: set[int] = set()
    failed: list[tuple[int, str]] = []
    try:
        with Progress("import", len(lines), unit="line(s) sent") as progress:
            for part in size_batches([made for _, made in lines], entry_bytes):
                # Held against SIGINT/SIGTERM until SQS answers, so the report knows exactly what went.
                with interrupts.step():
                    response = aws(sqs, "SendMessageBatch", target, QueueUrl=target, Entries=part)
                    sent.update(int(ok["Id"]) for ok in response.get("Successful", []))
                    failed.extend((int(f["Id"]), entry_failure(f)) for f in response.get("Failed", []))
                progress.advance(len(part))
                if failed:
                    break  # a refused line is likely followed by more: resume after fixing its cause
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            stopped, unsure = "interrupted", ""
        else:
            stopped, unsure = "stopped", " (the batch being sent when the error came may have been sent too)"
        typer.echo(
            f"{stopped}: sent {len(sent)} of {len(lines)} line(s) from {in_file}{unsure};"
            f" {_resume_advice(numbers, sent)}",
            err=True,
        )
        raise
    typer.echo(
        f"imported {len(sent)} of {len(lines)} message(s) from {in_file} (lines {numbers[0]}-{numbers[-1]})"
        f" into {target}"
    )
    for number, why in failed:
        typer.echo(f"  line {number} failed: {why}")
    if failed:
        typer.echo(f"  stopped after that batch: {_resume_advice(numbers, sent)}")
        raise typer.Exit(ExitCode.FAILED)
