"""The example handler against a real HTTP webhook on 127.0.0.1: poison vs retry vs success."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from consumer import Message, PoisonMessage
from consumer.examples import notifications
from consumer.examples.notifications import DownstreamUnavailable, handle, parse

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
    received: list[tuple[dict, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Webhook.received.append((json.loads(body), self.headers.get("Idempotency-Key")))
        self.send_response(Webhook.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Webhook]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Webhook.status, Webhook.received = 200, []
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
    with pytest.raises(DownstreamUnavailable, match=f"HTTP {status}"):
        handle(message(json.dumps(EVENT)))


def test_handler_unreachable_webhook_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection is transient."""
    monkeypatch.setenv(notifications.WEBHOOK_URL_ENV, "http://127.0.0.1:9/notify")
    with pytest.raises(DownstreamUnavailable, match="unreachable"):
        handle(message(json.dumps(EVENT)))


def test_handler_without_webhook_is_a_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Locally, without NOTIFY_WEBHOOK_URL, a valid event succeeds without a call."""
    monkeypatch.delenv(notifications.WEBHOOK_URL_ENV, raising=False)
    assert handle(message(json.dumps(EVENT))) is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "body is not JSON"),
        ("", "body is not JSON"),
        ("[]", "schema check failed at (root): [] is not of type 'object'"),
        (json.dumps({**EVENT, "channel": "fax"}), "schema check failed at channel"),
        (json.dumps({k: v for k, v in EVENT.items() if k != "recipient"}), "'recipient' is a required property"),
        (json.dumps({**EVENT, "extra": 1}), "Additional properties are not allowed"),
    ],
)
def test_parse_rejects_bad_bodies_as_poison(body: str, reason: str) -> None:
    """Undecodable or schema-breaking bodies are poison, with a reason that says why."""
    with pytest.raises(PoisonMessage) as raised:
        parse(body)
    assert reason in raised.value.reason


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
