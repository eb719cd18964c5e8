"""``python -m consumer dlq ...``: operator tooling for the dead-letter queue.

Commands: ``stats``, ``peek``, ``redrive``, ``purge``, ``export`` and ``import``.
Each finds the queues from, in order: ``--queue-url`` / ``--dlq-url``; the
``QUEUE_URL`` / ``DLQ_URL`` environment; ``--stack NAME`` (the stack's
``QueueUrl`` and ``DeadLetterQueueUrl`` outputs). boto3 reads the region,
credentials and ``AWS_ENDPOINT_URL`` as usual.

Nothing here loses a message. A pass keeps every message it received hidden
until the pass ends (so it never sees one twice) and then releases whatever it
did not delete, also on Ctrl-C or an error; anything it did not release comes
back by itself when its visibility timeout ends. A message is deleted from the
DLQ only after SQS confirmed its copy (redrive) or its line is on disk
(``export --delete``). The worst an interruption leaves is one message in both
queues, which the consumer's idempotency guard absorbs.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from consumer.dead_letter import (
    ORIGINAL_ATTRIBUTES,
    REASON_ATTRIBUTE,
    SQS_MAX_MESSAGE_ATTRIBUTES,
    attributes_from_json,
    attributes_to_json,
)
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Inspect and repair the dead-letter queue: stats, peek, redrive, purge, export, import.",
)

EXIT_AWS = 1
EXIT_USAGE = 2
SQS_BATCH = 10
#: Long poll of every receive: any wait > 0 asks every SQS server, so an empty answer means "nothing left".
RECEIVE_WAIT_SECONDS = 1
#: Receives in a row that bring back only messages already seen before a pass gives up.
MAX_STALE_RECEIVES = 3
#: SQS's SendMessageBatch payload limit is larger today; 256 KiB is safe everywhere.
MAX_BATCH_BYTES = 262_144
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


def make_client(service: str) -> Any:
    """A boto3 client for ``service`` that fails fast; region, credentials and endpoint from the environment.

    Tests replace this factory to wrap or hook the clients a command creates.
    """
    import boto3
    from botocore.config import Config

    return boto3.client(service, config=Config(connect_timeout=2, retries={"mode": "standard", "max_attempts": 2}))


class AwsFailure(Exception):
    """An AWS call failed; the message names the operation and the queue (or stack)."""


def _one_line(text: str, limit: int = 300) -> str:
    text = re.sub(r"<[^>]+>", " ", text)  # an HTML error page (a proxy, or moto's 500)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _explain(error: Exception) -> str:
    if isinstance(error, ClientError):
        code = _error_code(error)
        if "NonExistentQueue" in code or "QueueDoesNotExist" in code:
            return "the queue does not exist (check the URL, the account and the region)"
        message = _one_line(str(error.response.get("Error", {}).get("Message", "")))
        return f"{code}: {message}" if message else code or _one_line(str(error))
    return _one_line(str(error))


def aws(client: Any, operation: str, target: str, **kwargs: Any) -> Any:
    """Call ``operation`` (e.g. ``"ReceiveMessage"``); an AWS error becomes :class:`AwsFailure` naming it."""
    from botocore import xform_name

    try:
        return getattr(client, xform_name(operation))(**kwargs)
    except (ClientError, BotoCoreError) as error:
        raise AwsFailure(f"{operation} on {target} failed: {_explain(error)}") from None


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"consumer dlq: {message}", err=True)
    return typer.Exit(code)


def _command(function: Callable[..., T]) -> Callable[..., T]:
    """AWS errors end a command with one line on stderr and exit 1, never a traceback."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return function(*args, **kwargs)
        except AwsFailure as failure:
            raise _fail(str(failure), EXIT_AWS) from None
        except (ClientError, BotoCoreError) as error:  # a call not wrapped by aws(): still one line
            raise _fail(f"AWS call failed: {_explain(error)}", EXIT_AWS) from None

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
        raise _fail(f"cannot tell which {' and '.join(missing)} to use{where}: {_HOW_TO_NAME_QUEUES}", EXIT_USAGE)
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


def read_reason_safely(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The consumer's reason record; None when SQS's own redrive moved the message."""
    raw = message.get("MessageAttributes", {}).get(REASON_ATTRIBUTE, {}).get("StringValue")
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return {"kind": "unknown", "reason": raw}
    return record if isinstance(record, dict) else {"kind": "unknown", "reason": raw}


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


def source_attributes(message_attributes: Mapping[str, Any], *, keep_reason: bool) -> dict[str, Any]:
    """The attributes a message goes back to the source with: reason dropped, folded originals unfolded.

    With ``keep_reason`` the reason stays; folded originals are then unfolded
    only if they and the reason fit in SQS's 10 attributes. A carried receive
    count (on a copy SQS's own backstop redrive moved) is dropped: a redrive starts a new budget
    (SQS's native move task, which does not come through here, keeps it).
    """
    attributes = attributes_from_json(attributes_to_json(message_attributes))
    attributes.pop(PRIOR_RECEIVES_ATTRIBUTE, None)
    reason = attributes.pop(REASON_ATTRIBUTE, None)
    folded = attributes.get(ORIGINAL_ATTRIBUTES)
    if folded is not None:
        originals = attributes_from_json(json.loads(folded["StringValue"]))
        if not keep_reason or reason is None or len(originals) + 1 <= SQS_MAX_MESSAGE_ATTRIBUTES:
            del attributes[ORIGINAL_ATTRIBUTES]
            attributes = {**originals, **attributes}
    if keep_reason and reason is not None:
        attributes[REASON_ATTRIBUTE] = reason
    return attributes


def message_record(message: Mapping[str, Any]) -> dict[str, Any]:
    """One message as a JSON object: the line ``export`` writes, ``import`` reads and ``peek --json`` prints."""
    return {
        "message_id": message["MessageId"],
        "body": message.get("Body", ""),
        "message_attributes": attributes_to_json(message.get("MessageAttributes", {})),
        "attributes": dict(message.get("Attributes", {})),
        "reason": read_reason_safely(message),
    }


def send_entry(
    entry_id: str,
    *,
    body: str,
    message_attributes: Mapping[str, Any],
    attributes: Mapping[str, Any],
    fallback_dedup_id: str,
    fifo: bool,
    original_dedup_id: str | None = None,
) -> dict[str, Any]:
    """A SendMessageBatch entry keeping body, attributes, FIFO group and deduplication ids and the trace header.

    ``original_dedup_id`` (from the consumer's reason record) restores the id the message had in
    the source: the consumer moves FIFO messages to the DLQ under their delivery's MessageId.
    """
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": body}
    if message_attributes:
        entry["MessageAttributes"] = dict(message_attributes)
    if fifo:
        if "MessageGroupId" in attributes:
            entry["MessageGroupId"] = attributes["MessageGroupId"]
        entry["MessageDeduplicationId"] = original_dedup_id or attributes.get(
            "MessageDeduplicationId", fallback_dedup_id
        )
    if attributes.get("AWSTraceHeader"):
        entry["MessageSystemAttributes"] = {
            "AWSTraceHeader": {"DataType": "String", "StringValue": attributes["AWSTraceHeader"]}
        }
    return entry


def _entry_bytes(entry: Mapping[str, Any]) -> int:
    size = len(entry["MessageBody"].encode())
    for name, value in entry.get("MessageAttributes", {}).items():
        payload = value.get("StringValue") or value.get("BinaryValue") or b""
        size += len(name.encode()) + len(value["DataType"].encode()) + len(payload)
    return size


def size_batches(entries: list[T], size: Callable[[T], int]) -> Iterator[list[T]]:
    """Consecutive batches of at most 10 entries and :data:`MAX_BATCH_BYTES` (one oversized entry goes alone)."""
    batch: list[T] = []
    total = 0
    for entry in entries:
        entry_size = size(entry)
        if batch and (len(batch) == SQS_BATCH or total + entry_size > MAX_BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(entry)
        total += entry_size
    if batch:
        yield batch


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


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


# --- one pass over the DLQ ------------------------------------------------------


class Lease:
    """The messages one pass received and has not deleted; all released (visibility 0) when the pass ends.

    Keeping them hidden until the end is what stops a pass from receiving a
    message twice; a message seen again anyway (its visibility ran out) is not
    returned again, only its receipt handle is refreshed. Releasing them on the
    way out, also on Ctrl-C or an error, leaves them where they were; if even
    that fails, they reappear on their own after ``visibility`` seconds.
    """

    def __init__(self, client: Any, queue_url: str, *, visibility: int) -> None:
        self.client = client
        self.queue_url = queue_url
        self.visibility = visibility
        self.handles: dict[str, str] = {}
        self.seen: set[str] = set()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            failed = self.release(list(self.handles))
        except AwsFailure as failure:
            failed = len(self.handles)
            typer.echo(f"warning: {failure}", err=True)
        if failed:
            typer.echo(
                f"warning: {failed} message(s) could not be released; they reappear within {self.visibility} s",
                err=True,
            )

    def receive(self, count: int) -> list[dict[str, Any]] | None:
        """Up to ``count`` messages new to this pass; None once the queue has nothing more for it."""
        stale = 0
        while stale < MAX_STALE_RECEIVES:
            response = aws(
                self.client,
                "ReceiveMessage",
                self.queue_url,
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=max(1, min(SQS_BATCH, count)),
                VisibilityTimeout=self.visibility,
                WaitTimeSeconds=RECEIVE_WAIT_SECONDS,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            )
            messages = response.get("Messages", [])
            if not messages:
                return None
            fresh = []
            for message in messages:
                self.handles[message["MessageId"]] = message["ReceiptHandle"]
                if message["MessageId"] not in self.seen:
                    self.seen.add(message["MessageId"])
                    fresh.append(message)
            if fresh:
                return fresh
            stale += 1
        return None

    def handle(self, message: Mapping[str, Any]) -> str:
        return self.handles[message["MessageId"]]

    def delete(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Delete ``messages`` from the queue; returns those SQS did not delete (still there)."""
        not_deleted: list[dict[str, Any]] = []
        for chunk in _chunks(messages, SQS_BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": self.handle(m)} for i, m in enumerate(chunk)]
            response = aws(self.client, "DeleteMessageBatch", self.queue_url, QueueUrl=self.queue_url, Entries=entries)
            failed = {entry["Id"] for entry in response.get("Failed", [])}
            for i, message in enumerate(chunk):
                if str(i) in failed:
                    not_deleted.append(message)
                else:
                    self.handles.pop(message["MessageId"], None)
        return not_deleted

    def release(self, message_ids: list[str]) -> int:
        """Make these messages visible again now; returns how many SQS refused."""
        failed = 0
        for chunk in _chunks([i for i in message_ids if i in self.handles], SQS_BATCH):
            entries = [
                {"Id": str(n), "ReceiptHandle": self.handles[message_id], "VisibilityTimeout": 0}
                for n, message_id in enumerate(chunk)
            ]
            response = aws(
                self.client, "ChangeMessageVisibilityBatch", self.queue_url, QueueUrl=self.queue_url, Entries=entries
            )
            failed += len(response.get("Failed", []))
            for message_id in chunk:
                self.handles.pop(message_id, None)
        return failed


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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
    sqs = make_client("sqs")
    attributes = _queue_attributes(sqs, dlq_url, [*_DEPTH_ATTRIBUTES, "MessageRetentionPeriod"])
    visible, in_flight, delayed = _depth(attributes)
    retention = int(attributes.get("MessageRetentionPeriod", 0))
    sent: list[int] = []
    if visible:
        with Lease(sqs, dlq_url, visibility=30) as lease:
            sample = lease.receive(SQS_BATCH) or []
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
        int, typer.Option("--visibility", min=1, max=43_200, help="Seconds the peeked messages stay hidden at most.")
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
    sqs = make_client("sqs")
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
        code = _error_code(error)
        return not any(marker.lower() in code.lower() for marker in _REAL_ERROR_MARKERS)
    return False


@dataclass
class RedriveSummary:
    mode: str = "client-side move"
    moved: int = 0
    would_move: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    held_dedup: list[dict[str, Any]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    left_in_both: list[str] = field(default_factory=list)

    def counted(self) -> int:
        return self.moved + len(self.would_move)


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


def _inside_dedup_window(message: Mapping[str, Any], now: float) -> bool:
    sent = int(message.get("Attributes", {}).get("SentTimestamp", "0")) / 1000
    return now - sent < FIFO_DEDUP_WINDOW_SECONDS


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
        int, typer.Option("--visibility", min=10, max=43_200, help="Seconds a message being moved stays hidden.")
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
    from the DLQ. Failed sends, and messages the filter skips, stay in the DLQ.
    An interruption leaves every message in at least one queue.

    FIFO: a message that entered the DLQ less than 5 min ago is left in the DLQ,
    because the source may still remember its deduplication id and would accept
    and silently drop it; run redrive again after that.
    """
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=not cancel)
    dlq_url = _dlq(queues)
    sqs = make_client("sqs")
    err = _stderr()
    if cancel:
        _cancel_move_task(sqs, dlq_url, err)
        return
    queue_url = queues.queue_url
    assert queue_url is not None  # resolve_queues(need_source=True) exits otherwise
    match = _matcher(filter_text)  # a bad regex fails before any AWS call
    dlq_attributes = _queue_attributes(sqs, dlq_url, ["QueueArn", *_DEPTH_ATTRIBUTES])
    source_attributes_ = _queue_attributes(sqs, queue_url, ["QueueArn", "RedrivePolicy"])
    dlq_arn, source_arn = dlq_attributes["QueueArn"], source_attributes_["QueueArn"]
    policy = json.loads(source_attributes_.get("RedrivePolicy") or "{}")
    if policy.get("deadLetterTargetArn") not in (None, dlq_arn):
        raise _fail(
            f"{queue_url} sends its failures to {policy['deadLetterTargetArn']}, not to {dlq_arn}:"
            " pass the source queue that belongs to this DLQ",
            EXIT_USAGE,
        )
    summary = RedriveSummary()
    native = not (dry_run or filter_text or max_messages or client_side)
    if native:
        outcome = _native_redrive(sqs, dlq_url, dlq_arn, source_arn, rate, err)
        if outcome is not None:
            typer.echo(outcome)
            return
        summary.mode = "client-side move; this endpoint has no message move tasks"
        if rate:
            typer.echo("note: --rate applies to the native move task only", err=True)
    visible = _depth(dlq_attributes)[0]
    try:
        _copy_redrive(
            sqs,
            dlq_url,
            queue_url,
            summary,
            match=match,
            dry_run=dry_run,
            limit=max_messages,
            keep_reason=keep_reason,
            visibility=visibility,
            total=min(visible, max_messages) if max_messages else visible,
            console=err,
        )
    except BaseException:
        typer.echo(
            f"interrupted after moving {summary.moved} message(s); every other message is still in"
            " the DLQ (one being moved at that moment may be in both queues). Run redrive again to finish.",
            err=True,
        )
        raise
    _print_redrive_summary(summary, dry_run=dry_run)
    if summary.failed:
        raise typer.Exit(EXIT_AWS)


def _native_redrive(
    sqs: Any, dlq_url: str, dlq_arn: str, source_arn: str, rate: int | None, console: Console
) -> str | None:
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
            f"StartMessageMoveTask on {dlq_url} failed: {_explain(error)} (--client-side moves without it)"
        ) from None
    try:
        task = _follow_move_task(sqs, dlq_url, dlq_arn, handle, console)
    except KeyboardInterrupt:
        typer.echo("stopped watching; the move task keeps running on SQS (redrive --cancel stops it)", err=True)
        raise
    status = task.get("Status")
    moved = task.get("ApproximateNumberOfMessagesMoved", 0)
    if status == "FAILED":
        raise AwsFailure(f"message move task on {dlq_url} failed after ~{moved} messages: {task.get('FailureReason')}")
    return f"redrive (native move task): {status.lower() if status else 'done'}, moved ~{moved} message(s)"


def _follow_move_task(sqs: Any, dlq_url: str, dlq_arn: str, handle: str, console: Console) -> dict[str, Any]:
    with _progress(console) as progress:
        bar = progress.add_task("moving (native move task)", total=None)
        while True:
            tasks = aws(sqs, "ListMessageMoveTasks", dlq_url, SourceArn=dlq_arn, MaxResults=10).get("Results", [])
            task = next((t for t in tasks if t.get("TaskHandle") == handle), tasks[0] if tasks else {})
            progress.update(
                bar,
                completed=task.get("ApproximateNumberOfMessagesMoved", 0),
                total=task.get("ApproximateNumberOfMessagesToMove"),
            )
            if task.get("Status") not in ("RUNNING", "CANCELLING"):
                return task
            time.sleep(MOVE_TASK_POLL_SECONDS)


def _cancel_move_task(sqs: Any, dlq_url: str, console: Console) -> None:
    dlq_arn = _queue_attributes(sqs, dlq_url, ["QueueArn"])["QueueArn"]
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get("Results", [])
    except (ClientError, BotoCoreError) as error:
        if move_tasks_unsupported(error):
            raise _fail(
                f"ListMessageMoveTasks on {dlq_url}: this endpoint has no message move tasks, nothing to cancel",
                EXIT_AWS,
            ) from None
        raise AwsFailure(f"ListMessageMoveTasks on {dlq_url} failed: {_explain(error)}") from None
    running = next((task for task in tasks if task.get("Status") == "RUNNING"), None)
    if running is None:
        typer.echo(f"no move task is running on {dlq_url}")
        return
    moved = aws(sqs, "CancelMessageMoveTask", dlq_url, TaskHandle=running["TaskHandle"]).get(
        "ApproximateNumberOfMessagesMoved", 0
    )
    typer.echo(f"cancelled the move task on {dlq_url} after ~{moved} message(s)")


def _copy_redrive(
    sqs: Any,
    dlq_url: str,
    source_url: str,
    summary: RedriveSummary,
    *,
    match: Callable[[Mapping[str, Any]], bool],
    dry_run: bool,
    limit: int | None,
    keep_reason: bool,
    visibility: int,
    total: int,
    console: Console,
) -> None:
    """Receive, send to the source, confirm, delete those confirmed; everything else stays in the DLQ."""
    fifo = _is_fifo(source_url)
    with Lease(sqs, dlq_url, visibility=visibility) as lease, _progress(console) as progress:
        bar = progress.add_task("dry run" if dry_run else "moving", total=total or None)
        while limit is None or summary.counted() < limit:
            batch = lease.receive(SQS_BATCH if limit is None else limit - summary.counted())
            if batch is None:
                break
            now = time.time()
            chosen = []
            for message in batch:
                if not match(message):
                    summary.skipped += 1
                elif fifo and _inside_dedup_window(message, now):
                    summary.held_dedup.append(message)
                else:
                    chosen.append(message)
            progress.advance(bar, len(batch) - len(chosen))
            if dry_run:
                summary.would_move.extend(chosen)
                progress.advance(bar, len(chosen))
                continue
            entries = {
                str(i): send_entry(
                    str(i),
                    body=m.get("Body", ""),
                    message_attributes=source_attributes(m.get("MessageAttributes", {}), keep_reason=keep_reason),
                    attributes=m.get("Attributes", {}),
                    fallback_dedup_id=m["MessageId"],
                    fifo=fifo,
                    original_dedup_id=(read_reason_safely(m) or {}).get("original_deduplication_id"),
                )
                for i, m in enumerate(chosen)
            }
            by_id = {str(i): m for i, m in enumerate(chosen)}
            for part in size_batches(list(entries.values()), _entry_bytes):
                response = aws(sqs, "SendMessageBatch", source_url, QueueUrl=source_url, Entries=part)
                sent = [by_id[e["Id"]] for e in response.get("Successful", [])]
                for failure in response.get("Failed", []):
                    message_id = by_id[failure["Id"]]["MessageId"]
                    summary.failed.append((message_id, f"{failure.get('Code')}: {failure.get('Message', '')}"))
                # Only now, with SQS's word that each copy is in the source, do the originals go.
                not_deleted = lease.delete(sent)
                summary.left_in_both.extend(m["MessageId"] for m in not_deleted)
                summary.moved += len(sent)
                progress.advance(bar, len(part))


def _print_redrive_summary(summary: RedriveSummary, *, dry_run: bool) -> None:
    console = Console(highlight=False)
    if dry_run:
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
    moved = f"would move {len(summary.would_move)}" if dry_run else f"moved {summary.moved}"
    held = f", held (FIFO dedup window) {len(summary.held_dedup)}" if summary.held_dedup else ""
    typer.echo(
        f"redrive ({summary.mode}): {moved}, skipped by filter {summary.skipped}, failed {len(summary.failed)}{held}"
    )
    for message_id, why in summary.failed:
        typer.echo(f"  failed {message_id}: {why} (left in the DLQ)")
    if summary.held_dedup:
        latest = max(int(m["Attributes"].get("SentTimestamp", "0")) for m in summary.held_dedup) / 1000
        ready = time.strftime("%H:%M:%S UTC", time.gmtime(latest + FIFO_DEDUP_WINDOW_SECONDS))
        typer.echo(
            f"  {len(summary.held_dedup)} FIFO message(s) entered the DLQ less than"
            f" {FIFO_DEDUP_WINDOW_SECONDS // 60} min ago: the source could still drop them as duplicates,"
            f" so they stay in the DLQ; run redrive again after {ready}"
        )
    if summary.left_in_both:
        typer.echo(
            f"  {len(summary.left_in_both)} message(s) were copied but could not be deleted from the DLQ"
            " (they are in both queues): " + ", ".join(summary.left_in_both)
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
    sqs = make_client("sqs")
    approximate = sum(_depth(_queue_attributes(sqs, dlq_url, _DEPTH_ATTRIBUTES)))
    if not yes and not typer.confirm(
        f"Purge about {approximate} message(s) from {dlq_url}? They cannot be recovered", default=False
    ):
        raise _fail("purge cancelled: nothing was deleted", EXIT_AWS)
    aws(sqs, "PurgeQueue", dlq_url, QueueUrl=dlq_url)
    typer.echo(f"purged about {approximate} message(s) from {dlq_url} (SQS takes up to 60 s to finish)")


# --- export / import ------------------------------------------------------------


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
        int, typer.Option("--visibility", min=10, max=43_200, help="Seconds exported messages stay hidden at most.")
    ] = 60,
) -> None:
    """Write every DLQ message as one JSON line; the messages stay unless --delete.

    A line holds message_id, body, message_attributes (binary values base64),
    attributes (MessageGroupId, MessageDeduplicationId, SentTimestamp...) and
    the reason. Messages are hidden during the pass and released at its end;
    with --delete each batch is deleted only after its lines are fsynced.
    FIFO: SQS hands out no more of a message group while some of it is hidden,
    so without --delete a pass sees at most 10 messages per group.
    """
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=False)
    dlq_url = _dlq(queues)
    if out.exists() and out.stat().st_size and not append:
        raise _fail(f"{out} already exists: pass --append to add to it, or choose another file", EXIT_USAGE)
    sqs = make_client("sqs")
    err = _stderr()
    visible = _depth(_queue_attributes(sqs, dlq_url, _DEPTH_ATTRIBUTES))[0]
    written = deleted = 0
    kept_both: list[str] = []
    try:
        with (
            out.open("a", encoding="utf-8") as stream,
            Lease(sqs, dlq_url, visibility=visibility) as lease,
            _progress(err) as progress,
        ):
            bar = progress.add_task("exporting", total=visible or None)
            while (batch := lease.receive(SQS_BATCH)) is not None:
                for message in batch:
                    stream.write(json.dumps(message_record(message)) + "\n")
                stream.flush()
                os.fsync(stream.fileno())
                written += len(batch)
                if delete:
                    not_deleted = lease.delete(batch)
                    kept_both.extend(m["MessageId"] for m in not_deleted)
                    deleted += len(batch) - len(not_deleted)
                progress.advance(bar, len(batch))
    except BaseException:
        typer.echo(
            f"interrupted: {written} line(s) written to {out}, {deleted} of them deleted from the DLQ;"
            " every other message is still in the DLQ",
            err=True,
        )
        raise
    action = f"deleted {deleted} from the DLQ" if delete else "left every message in the DLQ"
    typer.echo(f"exported {written} message(s) to {out}; {action}")
    if kept_both:
        typer.echo(f"  {len(kept_both)} exported message(s) could not be deleted: {', '.join(kept_both)}")
    if written < visible:
        typer.echo(f"  note: the DLQ showed about {visible} visible message(s) at the start; run again to get the rest")


class Target(enum.StrEnum):
    source = "source"
    dlq = "dlq"


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
) -> None:
    """Send every line of an export back, in batches: to the DLQ (default) or to the source.

    Each message keeps its body, message attributes, FIFO group and
    deduplication ids and trace header. To the source the reason is dropped
    (unless --keep-reason) and folded attributes are unfolded, as redrive does.
    Every line is checked before anything is sent. Running it twice sends twice.
    FIFO: a queue drops, while reporting success, a message whose
    deduplication id it saw in the last 5 min.
    """
    queues = resolve_queues(queue_url, dlq_url, stack, need_source=to is Target.source, need_dlq=to is Target.dlq)
    records = []
    with in_file.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("body"), str):
                    raise ValueError("not an object with a string body")
            except ValueError as error:
                raise _fail(f"{in_file}:{number}: not an export line ({_one_line(str(error))})", EXIT_USAGE) from None
            records.append((number, record))
    target = queues.queue_url if to is Target.source else queues.dlq_url
    assert target is not None
    fifo = _is_fifo(target)
    entries = []
    for number, record in records:
        attributes = attributes_from_json(record.get("message_attributes") or {})
        if to is Target.source:
            attributes = source_attributes(attributes, keep_reason=keep_reason)
        entries.append(
            send_entry(
                str(number),
                body=record["body"],
                message_attributes=attributes,
                attributes=record.get("attributes") or {},
                fallback_dedup_id=str(record.get("message_id") or number),
                fifo=fifo,
                original_dedup_id=(
                    (record.get("reason") or {}).get("original_deduplication_id") if to is Target.source else None
                ),
            )
        )
    sqs = make_client("sqs")
    err = _stderr()
    sent = 0
    failed: list[str] = []
    try:
        with _progress(err) as progress:
            bar = progress.add_task(f"importing to {to.value}", total=len(entries) or None)
            for part in size_batches(entries, _entry_bytes):
                response = aws(sqs, "SendMessageBatch", target, QueueUrl=target, Entries=part)
                sent += len(response.get("Successful", []))
                failed.extend(
                    f"line {f['Id']}: {f.get('Code')}: {f.get('Message', '')}" for f in response.get("Failed", [])
                )
                progress.advance(bar, len(part))
    except BaseException:
        typer.echo(f"interrupted after sending {sent} of {len(entries)} line(s) from {in_file}", err=True)
        raise
    typer.echo(f"imported {sent} of {len(entries)} message(s) from {in_file} into {target}")
    for line in failed:
        typer.echo(f"  failed {line}")
    if failed:
        raise typer.Exit(EXIT_AWS)
