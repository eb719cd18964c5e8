"""The example handler against a real HTTP webhook on 127.0.0.1: poison vs retry vs success."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from consumer import ConfigurationError, DownstreamUnavailable, Message, PoisonMessage
from consumer.declaration import setup_of
from consumer.examples import demo, notifications
from consumer.examples.notifications import WebhookUnavailable, delivery_target, handle, parse

EVENT = {
    "event_id": "evt-0001-abcdef",
    "type": "notification.requested",
    "channel": "email",
    "recipient": "someone@example.com",
    "template": "welcome",
    "data": {"name": "Ada"},
}


class Webhook(BaseHTTPRequestHandler):
    status = 200
    retry_after: str | None = None
    received: list[tuple[dict, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Webhook.received.append((json.loads(body), self.headers.get("Idempotency-Key")))
        self.send_response(Webhook.status)
        if Webhook.retry_after is not None:
            self.send_header("Retry-After", Webhook.retry_after)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Webhook]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Webhook.status, Webhook.retry_after, Webhook.received = 200, None, []
    monkeypatch.setenv(notifications.WEBHOOK_URL_ENV, f"http://127.0.0.1:{server.server_port}/notify")
    yield Webhook
    server.shutdown()
    server.server_close()


def message(body: str) -> Message:
    return Message(body=body, message_id="m-1", receipt_handle="rh-1")


def test_handler_delivers_with_idempotency_key(webhook: type[Webhook]) -> None:
    """A valid event is POSTed once, keyed by its event id (stable across redrives)."""
    handle(message(json.dumps(EVENT)))
    assert webhook.received == [(EVENT, "evt-0001-abcdef")]


@pytest.mark.parametrize("status", [400, 404, 422])
def test_handler_permanent_rejection_is_poison(webhook: type[Webhook], status: int) -> None:
    """A 4xx from the webhook means the event can never succeed."""
    webhook.status = status
    with pytest.raises(PoisonMessage, match=f"HTTP {status}"):
        handle(message(json.dumps(EVENT)))


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_handler_transient_failure_is_retried(webhook: type[Webhook], status: int) -> None:
    """Timeouts, throttling and 5xx raise an ordinary exception: retry later."""
    webhook.status = status
    with pytest.raises(WebhookUnavailable, match=f"HTTP {status}"):
        handle(message(json.dumps(EVENT)))


@pytest.mark.parametrize(
    ("retry_after", "seconds"), [("7", 7.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("soon", None)]
)
def test_handler_503_with_retry_after_opens_the_circuit(
    webhook: type[Webhook], retry_after: str, seconds: float | None
) -> None:
    """HTTP 503 with Retry-After is the webhook saying it is down: DownstreamUnavailable with its pause in
    seconds (a date in the past is 0; an unreadable value leaves the pause to the consumer)."""
    webhook.status, webhook.retry_after = 503, retry_after
    with pytest.raises(DownstreamUnavailable, match=f"HTTP 503, Retry-After {retry_after}") as raised:
        handle(message(json.dumps(EVENT)))
    assert raised.value.retry_after_seconds == seconds


def test_handler_unreachable_webhook_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection is transient."""
    monkeypatch.setenv(notifications.WEBHOOK_URL_ENV, "http://127.0.0.1:9/notify")
    with pytest.raises(WebhookUnavailable, match="unreachable"):
        handle(message(json.dumps(EVENT)))


def test_handler_declared_dry_run_logs_instead_of_delivering(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without NOTIFY_WEBHOOK_URL but with NOTIFY_DRY_RUN=true, a valid event succeeds with a log line, no call."""
    monkeypatch.delenv(notifications.WEBHOOK_URL_ENV, raising=False)
    monkeypatch.setenv(notifications.DRY_RUN_ENV, "true")
    with caplog.at_level("INFO", logger=notifications.__name__):
        assert handle(message(json.dumps(EVENT))) is None
    assert [r.getMessage() for r in caplog.records] == ["notification_dry_run"]


def test_handler_without_webhook_or_declared_dry_run_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Called directly with neither set, handle() raises: it never returns as if the event were delivered."""
    monkeypatch.delenv(notifications.WEBHOOK_URL_ENV, raising=False)
    monkeypatch.delenv(notifications.DRY_RUN_ENV, raising=False)
    with pytest.raises(ConfigurationError, match='^"NOTIFY_WEBHOOK_URL" must be set'):
        handle(message(json.dumps(EVENT)))


REFUSAL = (
    '"NOTIFY_WEBHOOK_URL" must be set to the webhook\'s http(s):// URL, or NOTIFY_DRY_RUN=true declared to only log'
    " events (without either every event would be deleted undelivered)"
)


@pytest.mark.parametrize(
    ("environ", "target"),
    [
        ({"NOTIFY_WEBHOOK_URL": "https://hooks.example.com/n"}, "https://hooks.example.com/n"),
        ({"NOTIFY_WEBHOOK_URL": "http://127.0.0.1:8080/n", "NOTIFY_DRY_RUN": "true"}, "http://127.0.0.1:8080/n"),
        ({"NOTIFY_DRY_RUN": "true"}, None),
        ({"NOTIFY_WEBHOOK_URL": "", "NOTIFY_DRY_RUN": "true"}, None),
    ],
    ids=["url", "url-wins-over-dry-run", "dry-run", "empty-url-dry-run"],
)
def test_delivery_target_url_delivers_declared_dry_run_logs(environ: dict[str, str], target: str | None) -> None:
    """URL set: deliver there; else NOTIFY_DRY_RUN=true: None, a dry run."""
    assert delivery_target(environ) == target


@pytest.mark.parametrize(
    ("environ", "error"),
    [
        ({}, f"{REFUSAL}: not set"),
        ({"NOTIFY_WEBHOOK_URL": ""}, f"{REFUSAL}: ''"),
        ({"NOTIFY_DRY_RUN": "false"}, f"{REFUSAL}: not set"),
        ({"NOTIFY_DRY_RUN": "yes"}, '"NOTIFY_DRY_RUN" must be "true" or "false": \'yes\''),
        (
            {"NOTIFY_WEBHOOK_URL": "ftp://hooks.example.com/T0KEN"},
            '"NOTIFY_WEBHOOK_URL" must be an http:// or https:// URL with a host (shown up to its scheme: a webhook'
            " URL may carry a token): 'ftp://…'",
        ),
        (
            {"NOTIFY_WEBHOOK_URL": "hooks.example.com/T0KEN"},
            '"NOTIFY_WEBHOOK_URL" must be an http:// or https:// URL with a host (shown up to its scheme: a webhook'
            " URL may carry a token): '…'",
        ),
        (
            {"NOTIFY_WEBHOOK_URL": "https:///T0KEN"},
            '"NOTIFY_WEBHOOK_URL" must be an http:// or https:// URL with a host (shown up to its scheme: a webhook'
            " URL may carry a token): 'https://…'",
        ),
    ],
    ids=["neither", "empty-url", "dry-run-false", "dry-run-not-a-bool", "not-http", "no-scheme", "no-host"],
)
def test_delivery_target_refuses_anything_else(environ: dict[str, str], error: str) -> None:
    """Neither a URL nor a declared dry run, or a malformed one: ConfigurationError, the URL's token never shown."""
    with pytest.raises(ConfigurationError) as raised:
        delivery_target(environ)
    assert str(raised.value) == error


def test_example_handlers_declare_the_delivery_check_as_their_start_up_check() -> None:
    """consumer run refuses to start the example (and its demo-sized twin) by the same rule handle() keeps."""
    assert setup_of(notifications.handle) is delivery_target
    assert setup_of(demo.handle) is delivery_target


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "body is not JSON: Expecting value: line 1 column 1 (char 0)"),
        ("", "body is not JSON: Expecting value: line 1 column 1 (char 0)"),
        ("[]", 'schema check failed at (root): type "object"'),
        (
            json.dumps({**EVENT, "channel": "fax"}),
            'schema check failed at properties/channel: enum ["email", "sms", "push"]',
        ),
        (
            json.dumps({k: v for k, v in EVENT.items() if k != "recipient"}),
            'schema check failed at (root): required ["recipient"]',
        ),
        (json.dumps({**EVENT, "extra": 1}), "schema check failed at (root): additionalProperties false"),
        (json.dumps({**EVENT, "event_id": "e1"}), "schema check failed at properties/event_id: minLength 8"),
        (json.dumps({**EVENT, "type": "x"}), 'schema check failed at properties/type: const "notification.requested"'),
        (
            json.dumps({**EVENT, "template": "A!"}),
            'schema check failed at properties/template: pattern "^[a-z0-9_.-]{1,64}$"',
        ),
    ],
)
def test_parse_rejects_bad_bodies_as_poison(body: str, reason: str) -> None:
    """Undecodable or schema-breaking bodies are poison, with a reason that says where and which rule."""
    with pytest.raises(PoisonMessage) as raised:
        parse(body)
    assert raised.value.reason == reason


PERSONAL = "ada.lovelace@example.org"


@pytest.mark.parametrize(
    "body",
    [
        json.dumps([{**EVENT, "recipient": PERSONAL}]),
        json.dumps({**EVENT, "channel": PERSONAL}),
        json.dumps({**EVENT, "template": PERSONAL}),
        json.dumps({**EVENT, "type": PERSONAL}),
        json.dumps({**EVENT, "recipient": 42, "data": {"email": PERSONAL}}),
        json.dumps({**EVENT, PERSONAL: PERSONAL}),
        json.dumps({**EVENT, "recipient": PERSONAL * 20}),
        json.dumps(PERSONAL),
    ],
    ids=["in-an-array", "enum", "pattern", "const", "beside-a-type-error", "unknown-key", "too-long", "a-string"],
)
def test_parse_reason_never_carries_a_field_value(body: str) -> None:
    """The reason (kept in the DLQ and logged) names the schema path and rule, never what the event held."""
    with pytest.raises(PoisonMessage) as raised:
        parse(body)
    assert raised.value.reason.startswith("schema check failed at ")
    assert "ada" not in raised.value.reason and "example.org" not in raised.value.reason


def test_parse_deeply_nested_json_is_poison_not_a_retry() -> None:
    """JSON nested past the interpreter's recursion limit is poison at once, not a RecursionError retried to the DLQ."""
    with pytest.raises(PoisonMessage) as raised:
        parse("[" * 100_000 + "]" * 100_000)
    assert raised.value.reason == "body is not JSON this handler can parse: nested too deeply (RecursionError)"


def test_parse_schema_check_recursing_too_deeply_is_poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """A RecursionError from the schema check is poison as well."""

    class Recursing:
        def iter_errors(self, instance: object) -> list:
            raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(notifications, "_VALIDATOR", Recursing())
    with pytest.raises(PoisonMessage) as raised:
        parse(json.dumps(EVENT))
    assert raised.value.reason == "schema check failed: the event nests too deeply to check (RecursionError)"


def test_message_from_sqs_reads_receive_count_and_attributes() -> None:
    """Message.from_sqs takes what boto3's receive_message returns."""
    raw = {
        "MessageId": "id-1",
        "ReceiptHandle": "rh",
        "Body": "{}",
        "Attributes": {"ApproximateReceiveCount": "3", "MessageGroupId": "g"},
        "MessageAttributes": {"traceparent": {"DataType": "String", "StringValue": "00-abc-def-01"}},
    }
    parsed = Message.from_sqs(raw)
    assert (parsed.message_id, parsed.receive_count, parsed.attributes["MessageGroupId"]) == ("id-1", 3, "g")
    assert parsed.message_attributes["traceparent"]["StringValue"] == "00-abc-def-01"
