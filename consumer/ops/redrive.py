"""Moving DLQ messages back to their source: SQS's native message move task where the endpoint has one,
else a client-side copy that deletes each original only after SQS confirmed its copy.

Logic only: the client is passed in, progress goes through a :class:`~consumer.ops.passes.ProgressFactory`,
the outcome comes back in a :class:`RedriveSummary` that ``consumer/ops/commands.py`` renders. The only
output here is a warning line on stderr (``passes.warn``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.limits import SQS_MAX_BATCH
from consumer.ops.passes import (
    MAX_STALE_RECEIVES,
    AwsFailure,
    Lease,
    ProgressFactory,
    RunStart,
    UsageError,
    aws,
    entry_failure,
    explain,
    start_on_sqs_clock,
    warn,
)
from consumer.ops.queues import DEPTH_ATTRIBUTES, depth, is_fifo, queue_attributes
from consumer.ops.records import (
    RecordError,
    entry_bytes,
    original_dedup_id,
    size_batches,
    source_attributes,
)
from consumer.runtime.aws_errors import error_code
from consumer.runtime.clock import SYSTEM, Clock
from consumer.runtime.dead_letter import read_reason_safely, send_entry

#: A FIFO queue drops (while reporting success) a send whose MessageDeduplicationId it saw this recently.
FIFO_DEDUP_WINDOW_SECONDS = 300
MOVE_TASK_POLL_SECONDS = 2.0

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

Matcher = Callable[[Mapping[str, Any]], bool]


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


@dataclass(frozen=True)
class RedriveOptions:
    """What the operator asked for; see ``python -m consumer dlq redrive --help``."""

    match: Matcher
    dry_run: bool = False
    filtered: bool = False
    limit: int | None = None
    rate: int | None = None
    keep_reason: bool = False
    client_side: bool = False
    visibility: int = 60

    @property
    def native(self) -> bool:
        """Whether SQS's move task can do it: it moves everything, verbatim, with no preview."""
        return not (self.dry_run or self.filtered or self.limit or self.client_side)


@dataclass
class RedriveSummary:
    """What one redrive did; filled as it goes (so an interrupted run can say how far it got), rendered by
    the command."""

    mode: str = "client-side move"
    dry_run: bool = False
    #: The native move task's outcome line; None when the messages were copied from here.
    native: str | None = None
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

    def dedup_ready_at(self) -> float:
        """When (seconds since the epoch, SQS's clock) the last held FIFO message leaves the dedup window."""
        latest = max(int(m["Attributes"].get("SentTimestamp", "0")) for m in self.held_dedup) / 1000
        return latest + FIFO_DEDUP_WINDOW_SECONDS


def matcher(text: str | None) -> Matcher:
    """Whether a message's body or reason contains ``text`` (``re:`` then a regular expression: matches it);
    ValueError for a bad regular expression."""
    if not text:
        return lambda _message: True
    if text.startswith("re:"):
        try:
            pattern = re.compile(text[3:])
        except re.error as error:
            raise ValueError(f"not a regular expression: {error}") from None
        search: Callable[[str], bool] = lambda value: pattern.search(value) is not None  # noqa: E731
    else:
        search = lambda value: text in value  # noqa: E731

    def matches(message: Mapping[str, Any]) -> bool:
        reason = read_reason_safely(message) or {}
        return search(message.get("Body", "")) or search(str(reason.get("reason", "")))

    return matches


def prepare_redrive(
    sqs: Any,
    dlq_url: str,
    queue_url: str,
    options: RedriveOptions,
    summary: RedriveSummary,
    *,
    progress: ProgressFactory,
    clock: Clock = SYSTEM,
) -> RunStart | None:
    """Check the pair, run the native move task when ``options`` allow it; the start of the client-side move
    (:func:`copy_redrive`) that must follow, or None when the native task did it (``summary.native``).

    :class:`UsageError` when ``queue_url`` sends its failures to another DLQ. An endpoint without move
    tasks falls back to the client-side move. ``clock``: what the run reads the time from and waits on; the
    start carries it to the client-side move.
    """
    dlq_arn = queue_attributes(sqs, dlq_url, ["QueueArn"])["QueueArn"]
    source = queue_attributes(sqs, queue_url, ["QueueArn", "RedrivePolicy"])
    policy = json.loads(source.get("RedrivePolicy") or "{}")
    if policy.get("deadLetterTargetArn") not in (None, dlq_arn):
        raise UsageError(
            f"{queue_url} sends its failures to {policy['deadLetterTargetArn']}, not to {dlq_arn}:"
            " pass the source queue that belongs to this DLQ"
        )
    if options.native:
        summary.native = _native_redrive(sqs, dlq_url, dlq_arn, source["QueueArn"], options.rate, progress, clock)
        if summary.native is not None:
            return None
        summary.mode = "client-side move; this endpoint has no message move tasks"
        if options.rate:
            warn("note: --rate applies to the native move task only")
    start, answer = start_on_sqs_clock(
        lambda: aws(sqs, "GetQueueAttributes", dlq_url, QueueUrl=dlq_url, AttributeNames=list(DEPTH_ATTRIBUTES)),
        clock,
    )
    if not start.from_sqs:
        warn("note: the endpoint sends no Date header; the run starts on this machine's clock")
    summary.at_start = depth(answer["Attributes"])[0]
    return start


# --- the native move task -------------------------------------------------------------------


def _native_redrive(
    sqs: Any, dlq_url: str, dlq_arn: str, source_arn: str, rate: int | None, progress: ProgressFactory, clock: Clock
) -> str | None:
    """Run (or follow the already running) native move task; None when the endpoint has none."""
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get("Results", [])
        running = next((task for task in tasks if task.get("Status") == "RUNNING"), None)
        if running is not None:
            handle = running["TaskHandle"]
            warn(f"a move task is already running on this DLQ; following it ({handle})")
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
        task = _follow_move_task(sqs, dlq_url, dlq_arn, handle, progress, clock)
    except KeyboardInterrupt:
        warn("stopped watching; the move task keeps running on SQS (redrive --cancel stops it)")
        raise
    status = task.get("Status")
    moved = task.get("ApproximateNumberOfMessagesMoved", 0)
    if status == "FAILED":
        raise AwsFailure(f"message move task on {dlq_url} failed after ~{moved} messages: {task.get('FailureReason')}")
    return f"redrive (native move task): {status.lower() if status else 'done'}, moved ~{moved} message(s)"


def _follow_move_task(
    sqs: Any, dlq_url: str, dlq_arn: str, handle: str, progress: ProgressFactory, clock: Clock
) -> dict[str, Any]:
    with progress("redrive (native move task)", None, unit="message(s) moved (approximate)") as shown:
        while True:
            tasks = aws(sqs, "ListMessageMoveTasks", dlq_url, SourceArn=dlq_arn, MaxResults=10).get("Results", [])
            task = next((t for t in tasks if t.get("TaskHandle") == handle), tasks[0] if tasks else {})
            shown.update(task.get("ApproximateNumberOfMessagesMoved", 0), task.get("ApproximateNumberOfMessagesToMove"))
            if task.get("Status") not in ("RUNNING", "CANCELLING"):
                return task
            clock.sleep(MOVE_TASK_POLL_SECONDS)


def cancel_move_task(sqs: Any, dlq_url: str) -> str:
    """Cancel the move task running on the DLQ; returns what happened, as one line."""
    dlq_arn = queue_attributes(sqs, dlq_url, ["QueueArn"])["QueueArn"]
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get("Results", [])
    except (ClientError, BotoCoreError) as error:
        if move_tasks_unsupported(error):
            raise AwsFailure(
                f"ListMessageMoveTasks on {dlq_url}: this endpoint has no message move tasks, nothing to cancel"
            ) from None
        raise AwsFailure(f"ListMessageMoveTasks on {dlq_url} failed: {explain(error)}") from None
    running = next((task for task in tasks if task.get("Status") == "RUNNING"), None)
    if running is None:
        return f"no move task is running on {dlq_url}"
    moved = aws(sqs, "CancelMessageMoveTask", dlq_url, TaskHandle=running["TaskHandle"]).get(
        "ApproximateNumberOfMessagesMoved", 0
    )
    return f"cancelled the move task on {dlq_url} after ~{moved} message(s)"


# --- the client-side move --------------------------------------------------------------------


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


def copy_redrive(
    sqs: Any,
    dlq_url: str,
    source_url: str,
    summary: RedriveSummary,
    *,
    start: RunStart,
    options: RedriveOptions,
    progress: ProgressFactory,
) -> None:
    """Receive, send to the source, confirm, delete those confirmed; everything else stays in the DLQ.

    Each batch's send and the delete of what it copied are one step (``Lease.step``): a signal waits
    for the delete. The run ends when the DLQ has nothing more it may move: an empty receive, or
    MAX_STALE_RECEIVES receives in a row that bring only messages that arrived after the start. The
    leases are timed on the start's clock, the one the run reads.
    """
    fifo = is_fifo(source_url)
    limit = options.limit
    copies: set[str] = set()  # MessageIds of the copies this run sent
    total = min(summary.at_start, limit) if limit else summary.at_start
    shown = progress("redrive", total, unit="message(s) handled", detail=summary.progress)
    with Lease(sqs, dlq_url, visibility=options.visibility, clock=start.clock) as lease, shown as bar:
        only_arrivals = 0
        while (limit is None or summary.counted() < limit) and only_arrivals < MAX_STALE_RECEIVES:
            batch = lease.receive(SQS_MAX_BATCH if limit is None else limit - summary.counted())
            if batch is None:
                break
            handled, entries, by_id = summary.handled(), [], {}
            for i, message in enumerate(batch):
                if _arrived_during_run(message, start, copies):
                    summary.arrived += 1
                elif not options.match(message):
                    summary.skipped += 1
                elif fifo and _inside_dedup_window(message, start):
                    summary.held_dedup.append(message)
                else:
                    try:
                        entries.append(_redrive_entry(str(i), message, fifo=fifo, keep_reason=options.keep_reason))
                    except RecordError as error:
                        summary.malformed.append((message["MessageId"], str(error)))
                        continue
                    by_id[str(i)] = message
            only_arrivals = 0 if entries or summary.handled() > handled else only_arrivals + 1
            bar.advance(summary.handled() - handled)
            if summary.dry_run:
                summary.would_move.extend(by_id.values())
                bar.advance(len(by_id))
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
                bar.advance(len(kept) + len(refused))
