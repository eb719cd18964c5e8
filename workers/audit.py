"""The audit trail: audit events written to a database in bulk, one transaction per batch.

A batch handler (``@worker(max_batch=...)``): the consumer collects up to 100 events (from several receives, for
at most 2 s after the first) and calls :func:`handle` once with the list, so a burst costs one transaction per
hundred events rather than one per event. The handler returns a :class:`~consumer.BatchResult` saying what
became of each message:

* an event that is not one (not JSON, a field missing or malformed) is reported ``poison`` on its own, with a
  reason naming the field and the rule, never a value (an actor is a person): the DLQ at its first receive, and
  the rest of the batch is stored;
* the valid ones are inserted in one transaction (``executemany``) and reported ``succeeded`` once it commits;
* a database error (locked past the busy timeout, disk full, unreadable file) raises: the transaction is rolled
  back and the whole batch is retried after a backoff, as a one-message handler's error is.

An ``audit.recorded`` event::

    {"event_id": "aud-2026-11-28-0001", "type": "audit.recorded", "actor": "user:ada",
     "action": "invoice.approved", "resource": "invoice:inv-0001", "occurred_at": "2026-11-28T09:00:00Z",
     "details": {"amount": "120.00"}}

Idempotent by construction: the event id is the table's primary key and rows go in with ``INSERT OR IGNORE``, so a
redelivered event (SQS delivers at least once, and a retried batch repeats its stored events) inserts nothing
more. The handler declares ``idempotent=True``: no idempotency guard, no DynamoDB table, no claim per message.

The database is SQLite at ``AUDIT_DATABASE_PATH``, which must be in a writable directory: in the task that is
``/tmp``, its only writable volume (the root file system is read-only). A task's ``/tmp`` lives as long as the task,
so this shows the shape (bulk insert, one transaction, per-message outcomes), not where a team keeps an audit
trail: point the same code at a database service. Without the variable the handler refuses to start.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

from consumer import BatchResult, ConfigurationError, Message, PoisonMessage, Sample, worker

log = logging.getLogger(__name__)

DATABASE_PATH_ENV = "AUDIT_DATABASE_PATH"
#: How long a transaction waits for the other thread's (or process's) write lock before the batch fails and is
#: retried; well within the 60 s ``max_duration``.
BUSY_TIMEOUT_SECONDS = 10.0
EVENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{7,127}$")
REQUIRED = ("event_id", "type", "actor", "action", "resource", "occurred_at")
#: The longest actor, action or resource kept.
MAX_FIELD_CHARS = 256

SCHEMA = """CREATE TABLE IF NOT EXISTS audit_events (
    event_id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    resource TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    details TEXT
)"""
INSERT = (
    "INSERT OR IGNORE INTO audit_events (event_id, actor, action, resource, occurred_at, details)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
#: One event as a row of ``audit_events``, in :data:`INSERT`'s order.
Row = tuple[str, str, str, str, str, str | None]


def _event(event_id: str, actor: str, action: str, resource: str, **details: str) -> str:
    event: dict[str, Any] = {
        "event_id": event_id,
        "type": "audit.recorded",
        "actor": actor,
        "action": action,
        "resource": resource,
        "occurred_at": "2026-11-28T09:00:00Z",
    }
    return json.dumps(event | ({"details": details} if details else {}))


#: What ``python -m consumer local send --worker audit`` and the local demo send: three events, then two the
#: handler refuses at the first receive, each on its own within its batch: one without an actor, and a body that
#: is not JSON.
SAMPLES = (
    Sample(_event("aud-sample-0001", "user:ada", "invoice.approved", "invoice:inv-0001", amount="120.00")),
    Sample(_event("aud-sample-0002", "user:grace", "role.granted", "user:alan", role="billing-admin")),
    Sample(_event("aud-sample-0003", "service:reports", "report.exported", "report:sales-2026-11")),
    Sample(
        json.dumps(
            {
                "event_id": "aud-sample-0004",
                "type": "audit.recorded",
                "action": "invoice.approved",
                "resource": "invoice:inv-0004",
                "occurred_at": "2026-11-28T09:00:00Z",
            }
        ),
        poison=True,
    ),
    Sample("event_id=aud-sample-0005&type=audit.recorded", poison=True),
)


def database_path(environ: Mapping[str, str]) -> str:
    """The database file's path: absolute, in an existing writable directory; :class:`ConfigurationError` naming
    ``AUDIT_DATABASE_PATH`` otherwise. The start-up check and :func:`handle` both apply it."""
    path = environ.get(DATABASE_PATH_ENV)
    if not path or not os.path.isabs(path):
        raise ConfigurationError(
            DATABASE_PATH_ENV, "must be the absolute path of the SQLite file, under /tmp in the task", path
        )
    directory = os.path.dirname(path)
    if not (os.path.isdir(directory) and os.access(directory, os.W_OK)):
        raise ConfigurationError(
            DATABASE_PATH_ENV,
            f"must be in a directory that exists and this user can write ({directory} is not): in the task the"
            " root file system is read-only, /tmp is its writable volume",
            path,
        )
    return path


def parse(body: str) -> Row:
    """The row for the event in ``body``; :class:`PoisonMessage` if it is not one (it never will be on a retry).

    The reasons name the field and the rule, never a value of the event.
    """
    try:
        event = json.loads(body)
    except json.JSONDecodeError as error:
        raise PoisonMessage(f"body is not JSON: {error}") from error  # the decoder's message: a position, no content
    except RecursionError as error:
        raise PoisonMessage("body is not JSON: RecursionError") from error
    if not isinstance(event, dict):
        raise PoisonMessage(f"body must be a JSON object, got {type(event).__name__}")
    missing = [name for name in REQUIRED if name not in event]
    if missing:
        raise PoisonMessage(f"audit event lacks {', '.join(missing)}")
    if event["type"] != "audit.recorded":
        raise PoisonMessage('"type" must be "audit.recorded"')
    if not isinstance(event["event_id"], str) or not EVENT_ID.match(event["event_id"]):
        raise PoisonMessage(f'"event_id" must match {EVENT_ID.pattern}')
    for name in ("actor", "action", "resource"):
        if not isinstance(event[name], str) or not 0 < len(event[name]) <= MAX_FIELD_CHARS:
            raise PoisonMessage(f'"{name}" must be a string of 1 to {MAX_FIELD_CHARS} characters')
    details = event.get("details")
    if details is not None and not isinstance(details, dict):
        raise PoisonMessage('"details" must be a JSON object')
    return (
        event["event_id"],
        event["actor"],
        event["action"],
        event["resource"],
        _utc(event["occurred_at"]),
        None if details is None else json.dumps(details, sort_keys=True),
    )


def _utc(value: object) -> str:
    """``value`` as an ISO 8601 instant in UTC; :class:`PoisonMessage` unless it is one with its offset."""
    rule = '"occurred_at" must be an ISO 8601 date and time with its offset (2026-11-28T09:00:00Z)'
    try:
        when = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise PoisonMessage(rule)
    return when.astimezone(UTC).isoformat()


def store(path: str, rows: Sequence[Row]) -> int:
    """Insert ``rows`` in one transaction (all or none); returns how many were new (the rest were stored before).
    A database error raises, the transaction rolled back."""
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)) as connection:
        with connection:  # commits at the end of the block, rolls back if it raises
            connection.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first insert
            connection.execute(SCHEMA)
            before = connection.total_changes
            connection.executemany(INSERT, rows)
            return connection.total_changes - before


@worker(
    max_duration=timedelta(seconds=60),
    concurrency=2,
    max_batch=100,
    batch_window=timedelta(seconds=2),
    idempotent=True,  # INSERT OR IGNORE keyed by event id: a second run of an event inserts nothing more
    acceptable_latency=timedelta(seconds=60),
    average_duration=timedelta(seconds=1),
    setup=database_path,  # consumer run refuses to start without a database path it can write
    samples=SAMPLES,
)
def handle(messages: list[Message]) -> BatchResult:
    """Store a batch of audit events in one transaction: each invalid one reported poison, the rest succeeded once
    the transaction commits; a database error raises, so the whole batch is retried."""
    path = database_path(os.environ)  # raises rather than report events stored that are not
    result, rows, valid = BatchResult(), [], []
    for message in messages:
        try:
            rows.append(parse(message.body))
        except PoisonMessage as poison:
            result.poison(message, poison.reason)
        else:
            valid.append(message)
    if rows:
        inserted = store(path, rows)
        log.info("audit_events_stored", extra={"events": len(rows), "inserted": inserted})
    return result.succeeded(*valid)
