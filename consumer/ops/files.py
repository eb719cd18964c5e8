"""``export`` and ``import``: DLQ messages to a JSON-lines file and back (the line format: ``records.py``).

Logic only: the client is passed in, progress goes through a :class:`~consumer.ops.passes.ProgressFactory`,
and what a run did is kept in an :class:`ExportResult` / :class:`ImportResult` the caller passes in and
renders, also when the run is cut short. The only output here is a warning line on stderr.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from consumer.limits import SQS_MAX_BATCH
from consumer.ops.passes import Lease, ProgressFactory, UsageError, aws, entry_failure, interrupts, warn
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
from consumer.runtime.clock import SYSTEM, Clock
from consumer.runtime.dead_letter import attributes_from_json, send_entry

#: An export holds message bodies: its file is created readable and writable by its owner only.
EXPORT_FILE_MODE = 0o600

SendEntry = dict[str, Any]


# --- export ---------------------------------------------------------------------------------


@dataclass
class ExportResult:
    """What one export did, filled as it goes."""

    visible: int  #: visible messages in the DLQ at the start (approximate, as SQS counts)
    written: int = 0
    deleted: int = 0
    #: Written and not deleted (SQS refused the delete): in the file and in the DLQ.
    kept_both: list[str] = field(default_factory=list)
    #: (message id, why): neither written nor deleted, their lease could not be extended; still in the DLQ.
    lease_lost: list[tuple[str, str]] = field(default_factory=list)


def refuse_to_overwrite(out: Path, *, append: bool) -> None:
    """:class:`UsageError` when ``out`` already holds something and ``append`` was not asked for."""
    if out.exists() and out.stat().st_size and not append:
        raise UsageError(f"{out} already exists: pass --append to add to it, or choose another file")


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
        warn(f"warning: {path} can be read by others than its owner (mode {mode:04o}); it now holds message bodies")
    return os.fdopen(fd, "a", encoding="utf-8")


def _write_lines(stream: IO[str], messages: list[dict[str, Any]]) -> None:
    """One line per message, on disk (fsync) before this returns."""
    for message in messages:
        stream.write(json.dumps(message_record(message)) + "\n")
    stream.flush()
    os.fsync(stream.fileno())


def export(
    sqs: Any,
    dlq_url: str,
    out: Path,
    result: ExportResult,
    *,
    delete: bool,
    visibility: int,
    progress: ProgressFactory,
    clock: Clock = SYSTEM,
) -> None:
    """Append every DLQ message to ``out`` as a line; with ``delete``, delete each batch once its lines are
    fsynced, the two one step that SIGINT and SIGTERM wait for. ``clock`` times the leases."""
    with (
        _open_private(out) as stream,
        Lease(sqs, dlq_url, visibility=visibility, clock=clock) as lease,
        progress("export", result.visible, unit="message(s) written") as bar,
    ):
        while (batch := lease.receive(SQS_MAX_BATCH)) is not None:
            if not delete:
                _write_lines(stream, batch)
                result.written += len(batch)
            else:
                with lease.step(batch) as (kept, refused):
                    result.lease_lost.extend(refused)  # neither written nor deleted: still in the DLQ
                    _write_lines(stream, kept)
                    result.written += len(kept)
                    not_deleted = lease.delete(kept)
                    result.kept_both.extend(m["MessageId"] for m in not_deleted)
                    result.deleted += len(kept) - len(not_deleted)
            bar.advance(len(batch))


# --- import ---------------------------------------------------------------------------------


def import_entry(*, to_source: bool, fifo: bool, keep_reason: bool) -> Callable[[int, Mapping[str, Any]], SendEntry]:
    """How a checked line (and its number) becomes a send entry: to the source, the reason is dropped (unless
    ``keep_reason``), folded attributes unfolded and the source's deduplication id restored, as redrive does."""

    def entry(number: int, record: Mapping[str, Any]) -> SendEntry:
        attributes = attributes_from_json(record.get("message_attributes") or {})
        if to_source:
            attributes = source_attributes(attributes, keep_reason=keep_reason)
        return send_entry(
            str(number),
            body=record["body"],
            message_attributes=attributes,
            attributes=record.get("attributes") or {},
            fallback_dedup_id=str(record.get("message_id") or number),
            fifo=fifo,
            original_dedup_id=original_dedup_id(record.get("reason")) if to_source else None,
        )

    return entry


def read_import_lines(
    in_file: Path, *, from_line: int, entry: Callable[[int, Mapping[str, Any]], SendEntry]
) -> list[tuple[int, SendEntry]]:
    """Every line of ``in_file`` checked and made a send entry (:class:`UsageError` at the first bad one,
    before anything is sent); returns those at or after ``from_line`` as (line number, entry)."""
    entries = []
    with in_file.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise UsageError(
                    f'{in_file}:{number}: "line" must be UTF-8 ({error.reason} at byte {error.start + 1}); nothing was sent'
                ) from None
            if not line.strip():
                continue
            try:
                made = entry(number, check_line(parse_json(line, "line")))
            except RecordError as error:
                raise UsageError(f"{in_file}:{number}: {error}; nothing was sent") from None
            if number >= from_line:
                entries.append((number, made))
    return entries


@dataclass
class ImportResult:
    """One import's lines and what became of them, filled as it goes."""

    lines: list[tuple[int, SendEntry]]
    sent: set[int] = field(default_factory=set)
    failed: list[tuple[int, str]] = field(default_factory=list)  #: (line number, SQS's Code: Message)

    @property
    def numbers(self) -> list[int]:
        return [number for number, _ in self.lines]

    def resume_advice(self) -> str:
        """Where a rerun should start (``--from-line``), and what it would send again."""
        numbers = self.numbers
        unsent = [n for n in numbers if n not in self.sent]
        if not unsent:
            return "every line was sent"
        first = unsent[0]
        before = [n for n in numbers if n < first]
        again = [n for n in numbers if n > first and n in self.sent]
        if again:
            done = f"every line up to line {before[-1]} was sent" if before else "no line before it was sent"
            return (
                f"{done}; resume with --from-line {first}"
                f" (lines {_line_ranges(again)} were sent too and would be sent again)"
            )
        return f"last line sent: {before[-1] if before else 'none'}; resume with --from-line {first}"


def _line_ranges(numbers: list[int]) -> str:
    """``[4, 5, 6, 9]`` as ``"4-6, 9"``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def send_lines(sqs: Any, target: str, result: ImportResult, *, progress: ProgressFactory) -> None:
    """Send ``result.lines`` to ``target`` in batches; stop after a batch SQS refused any line of."""
    with progress("import", len(result.lines), unit="line(s) sent") as bar:
        for part in size_batches([made for _, made in result.lines], entry_bytes):
            # Held against SIGINT/SIGTERM until SQS answers, so the report knows exactly what went.
            with interrupts.step():
                response = aws(sqs, "SendMessageBatch", target, QueueUrl=target, Entries=part)
                result.sent.update(int(ok["Id"]) for ok in response.get("Successful", []))
                result.failed.extend((int(f["Id"]), entry_failure(f)) for f in response.get("Failed", []))
            bar.advance(len(part))
            if result.failed:
                break  # a refused line is likely followed by more: resume after fixing its cause
