"""The audit trail (workers/audit.py), a batch handler: event checks, one transaction per batch, idempotent inserts,
per-message outcomes, and the handler run through the real runtime on moto, as a team tests its own handler
(docs/testing.md, "Testing a handler")."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from consumer import BatchResult, ConfigurationError, Message, PoisonMessage
from consumer.declaration import contract_of, setup_of
from consumer.runtime.consumer import Consumer
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, drain, running, send_samples, wait_until
from workers import audit
from workers.audit import database_path, handle, parse

EVENT: dict[str, Any] = {
    "event_id": "aud-2026-11-28-0001",
    "type": "audit.recorded",
    "actor": "user:ada",
    "action": "invoice.approved",
    "resource": "invoice:inv-0001",
    "occurred_at": "2026-11-28T10:00:00+01:00",
    "details": {"amount": "120.00"},
}


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The handler's database file, in a directory of the test's own."""
    path = tmp_path / "audit.sqlite3"
    monkeypatch.setenv(audit.DATABASE_PATH_ENV, str(path))
    return path


def rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT * FROM audit_events ORDER BY event_id").fetchall()


def event(event_id: str, **overrides: Any) -> str:
    return json.dumps({**EVENT, "event_id": event_id, **overrides})


def messages(*bodies: str) -> list[Message]:
    return [Message(body=body, message_id=f"m-{i}", receipt_handle=f"rh-{i}") for i, body in enumerate(bodies)]


def outcomes(result: BatchResult, batch: list[Message]) -> list[str | None]:
    """Each message's outcome: "succeeded", the failure's reason (or type), or None when it is not reported."""
    shown = []
    for message in batch:
        reported, error = result.outcome(message)
        shown.append(None if not reported else "succeeded" if error is None else getattr(error, "reason", repr(error)))
    return shown


def test_audit_is_declared_as_an_idempotent_batch_handler() -> None:
    """Up to 100 events per call, collected for at most 2 s, two calls at once; idempotent, so no guard and no
    DynamoDB table; the lease covers the window."""
    contract = contract_of(handle)
    assert (contract.max_batch, contract.batch_window_seconds, contract.concurrency) == (100, 2, 2)
    assert contract.idempotent and not contract.asynchronous
    assert contract.visibility_timeout_seconds >= contract.max_duration_seconds + contract.batch_window_seconds
    assert setup_of(handle) is database_path


def test_a_batch_is_stored_in_one_call_each_message_reported(database: Path) -> None:
    """Every valid event of the batch is a row (the instant in UTC, details as JSON); each message reported
    succeeded, none left unreported."""
    batch = messages(event("aud-0000000001"), event("aud-0000000002", details=None), event("aud-0000000003"))
    result = handle(batch)
    assert outcomes(result, batch) == ["succeeded"] * 3
    assert rows(database)[0] == (
        "aud-0000000001",
        "user:ada",
        "invoice.approved",
        "invoice:inv-0001",
        "2026-11-28T09:00:00+00:00",
        '{"amount": "120.00"}',
    )
    assert [row[0] for row in rows(database)] == ["aud-0000000001", "aud-0000000002", "aud-0000000003"]


def test_an_invalid_event_is_poison_on_its_own_and_the_rest_is_stored(database: Path) -> None:
    """A body that is not an event is reported poison with its reason; the valid ones beside it are stored and
    reported succeeded: one bad event never holds back its batch."""
    batch = messages(event("aud-0000000001"), "not json", event("aud-0000000002", actor=""))
    result = handle(batch)
    assert outcomes(result, batch) == [
        "succeeded",
        "body is not JSON: Expecting value: line 1 column 1 (char 0)",
        '"actor" must be a string of 1 to 256 characters',
    ]
    assert [row[0] for row in rows(database)] == ["aud-0000000001"]


def test_a_redelivered_event_inserts_nothing_more(database: Path) -> None:
    """SQS delivers at least once: the same event twice in one batch, and again in a later one, is one row, and
    each copy is reported succeeded (INSERT OR IGNORE keyed by event id: why it may declare idempotent=True)."""
    first = messages(event("aud-0000000001"), event("aud-0000000001"))
    assert outcomes(handle(first), first) == ["succeeded"] * 2
    stored = rows(database)
    again = messages(event("aud-0000000001", actor="user:someone-else"))
    assert outcomes(handle(again), again) == ["succeeded"]
    assert rows(database) == stored and len(stored) == 1


def refuse_inserts_of(path: Path, event_id: str) -> None:
    """A trigger that makes the database refuse ``event_id``'s insert, as a failing database would."""
    with sqlite3.connect(path) as connection:
        connection.execute(audit.SCHEMA)
        connection.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON audit_events WHEN NEW.event_id = '{event_id}'"
            " BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )


def test_a_database_error_fails_the_whole_batch_and_stores_none_of_it(database: Path) -> None:
    """The batch is one transaction: an insert refused midway rolls back the ones before it, and the handler raises,
    so every message of the batch is retried; none is reported succeeded."""
    refuse_inserts_of(database, "aud-0000000002")
    batch = messages(event("aud-0000000001"), event("aud-0000000002"), event("aud-0000000003"))
    with pytest.raises(sqlite3.IntegrityError, match="disk I/O error"):
        handle(batch)
    assert rows(database) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("[1]", "body must be a JSON object, got list"),
        ("[" * 100_000, "body is not JSON: RecursionError"),
        (json.dumps({"type": "audit.recorded"}), "audit event lacks event_id, actor, action, resource, occurred_at"),
        (event("aud-0000000001", type="audit.deleted"), '"type" must be "audit.recorded"'),
        (event("x y"), f'"event_id" must match {audit.EVENT_ID.pattern}'),
        (event("aud-0000000001", resource=7), '"resource" must be a string of 1 to 256 characters'),
        (event("aud-0000000001", action="a" * 257), '"action" must be a string of 1 to 256 characters'),
        (event("aud-0000000001", details=["a"]), '"details" must be a JSON object'),
        (
            event("aud-0000000001", occurred_at="2026-11-28T09:00:00"),
            '"occurred_at" must be an ISO 8601 date and time with its offset (2026-11-28T09:00:00Z)',
        ),
        (
            event("aud-0000000001", occurred_at="yesterday"),
            '"occurred_at" must be an ISO 8601 date and time with its offset (2026-11-28T09:00:00Z)',
        ),
    ],
)
def test_parse_refuses_what_can_never_succeed_as_poison(body: str, reason: str) -> None:
    """An event that is not one goes straight to the DLQ with a reason naming the field and the rule."""
    with pytest.raises(PoisonMessage) as raised:
        parse(body)
    assert raised.value.reason == reason


@pytest.mark.parametrize("field", ["actor", "action", "resource", "occurred_at", "event_id"])
def test_a_reason_never_carries_a_value_of_the_event(field: str) -> None:
    """An actor is a person: the reason (kept in the DLQ and logged) names the field, never what it held."""
    personal = "ada.lovelace@example.org " * 20
    with pytest.raises(PoisonMessage) as raised:
        parse(json.dumps({**EVENT, field: personal}))
    assert "ada" not in raised.value.reason and field in raised.value.reason


def test_database_path_is_an_absolute_path_in_a_writable_directory(tmp_path: Path) -> None:
    """The start-up check accepts a file in a directory the user can write (the task's /tmp)."""
    path = str(tmp_path / "audit.sqlite3")
    assert database_path({audit.DATABASE_PATH_ENV: path}) == path


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (None, "must be the absolute path of the SQLite file, under /tmp in the task: not set"),
        ("audit.sqlite3", "must be the absolute path of the SQLite file, under /tmp in the task: 'audit.sqlite3'"),
        ("/no/such/dir/audit.sqlite3", "must be in a directory that exists and this user can write (/no/such/dir"),
    ],
    ids=["unset", "relative", "no-directory"],
)
def test_database_path_refuses_to_start_without_a_usable_path(value: str | None, rule: str) -> None:
    """Without a path the handler could write, consumer run refuses to start (and handle raises), naming
    AUDIT_DATABASE_PATH: returning would report events stored that are not."""
    environ = {} if value is None else {audit.DATABASE_PATH_ENV: value}
    with pytest.raises(ConfigurationError) as raised:
        database_path(environ)
    assert str(raised.value).startswith(f'"{audit.DATABASE_PATH_ENV}" {rule}')


def test_handle_without_a_database_path_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Called with no path set, the handler raises (the whole batch retried) rather than report anything."""
    monkeypatch.delenv(audit.DATABASE_PATH_ENV, raising=False)
    with pytest.raises(ConfigurationError, match=audit.DATABASE_PATH_ENV):
        handle(messages(event("aud-0000000001")))


def consumer_of(sqs: Any, url: str, dlq: str) -> Consumer:
    return Consumer(sqs, queue_url=url, dlq_url=dlq, contract=contract_of(handle), handler=handle)


def test_declared_samples_end_where_declared(database: Path) -> None:
    """The samples `local send` and the demo send (its @worker(samples=...)), through the real runtime on moto: each
    valid event stored once and deleted, the two marked poison=True in the DLQ at their first receive, each with its
    reason."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="audit")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="audit-dlq")["QueueUrl"]
        sent = send_samples(sqs, url, handle)
        with running(consumer_of(sqs, url, dlq)) as run:
            wait_until(lambda: depth(sqs, url).total == 0, timeout=20, what="every sample settled")
        dead = {m["MessageAttributes"]["idempotency-key"]["StringValue"]: m for m in drain(sqs, dlq)}
    assert run.exit_code == 0
    assert set(dead) == {key for key, sample in sent.items() if sample.poison} and len(dead) == 2
    reasons = {
        (r["kind"], r["reason"], r["receive_count"])
        for r in (read_reason(m["MessageAttributes"]) for m in dead.values())
        if r
    }
    assert reasons == {
        ("poison", "audit event lacks actor", 1),
        ("poison", "body is not JSON: Expecting value: line 1 column 1 (char 0)", 1),
    }
    assert [row[0] for row in rows(database)] == ["aud-sample-0001", "aud-sample-0002", "aud-sample-0003"]


def test_a_database_error_retries_the_whole_batch_through_the_runtime(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real runtime: while the database refuses an insert, every message of the batch holding it is
    retried after a backoff (none stored, none deleted, none in the DLQ); once it takes them, every event is stored
    once and the queue is empty. (Two threads may receive the three apart: a batch without the refused event is
    stored at once.)"""
    refuse_inserts_of(database, "aud-0000000002")
    calls: list[list[str]] = []
    failed_once = threading.Event()
    store = audit.store

    def recording(path: str, batch: Any) -> int:
        calls.append([row[0] for row in batch])
        try:
            return store(path, batch)
        except sqlite3.Error:
            failed_once.set()
            raise

    monkeypatch.setattr(audit, "store", recording)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="audit")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="audit-dlq")["QueueUrl"]
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": event(f"aud-000000000{i}")} for i in (1, 2, 3)]
        )
        with running(consumer_of(sqs, url, dlq)) as run:
            wait_until(failed_once.is_set, timeout=15, what="a batch refused by the database")
            (refused, *_) = [call for call in calls if "aud-0000000002" in call]
            assert {row[0] for row in rows(database)}.isdisjoint(refused)
            # Two reads: one misses a message whose backoff ends between its visible and in-flight counts.
            assert max(depth(sqs, url).total, depth(sqs, url).total) >= len(refused)
            with sqlite3.connect(database) as connection:
                connection.execute("DROP TRIGGER refuse")  # the database is back
            # Stored and gone: an empty count alone was once read between the failed batch's backoff and its retry.
            wait_until(
                lambda: len(rows(database)) == 3 and depth(sqs, url).total == 0,
                timeout=30,
                what="the retried batch stored and deleted",
            )
        dead = depth(sqs, dlq).total
    assert run.exit_code == 0 and dead == 0
    assert [row[0] for row in rows(database)] == ["aud-0000000001", "aud-0000000002", "aud-0000000003"]
    assert len([call for call in calls if "aud-0000000002" in call]) >= 2  # refused, then stored
