"""The async example handler (consumer/examples/webhooks.py) against a real HTTP endpoint on 127.0.0.1: what each
answer means for the event, the dry run and the start-up check, and the handler through the real runtime on moto,
in-process: its samples where they belong, and deliveries waiting on the endpoint side by side."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from consumer import ConfigurationError, DownstreamUnavailable, Message, PoisonMessage
from consumer.declaration import contract_of, setup_of
from consumer.examples import webhooks
from consumer.examples.notifications import WebhookUnavailable
from consumer.examples.webhooks import client, delivery_target, handle
from consumer.runtime.dead_letter import read_reason
from consumer.testing import drain, running, send_samples, wait_until
from tests.integration.conftest import create_pair
from tests.integration.support import consumer_of, holds_nothing

EVENT: dict[str, Any] = {
    "event_id": "whk-2026-11-28-0001",
    "type": "webhook.requested",
    "topic": "order.shipped",
    "payload": {"order_id": "ord-1001", "carrier": "dhl"},
}


class Endpoint(BaseHTTPRequestHandler):
    """A subscriber's endpoint on 127.0.0.1: records each POST (its Idempotency-Key, topic and body) and answers
    ``status``; with ``hold`` set, holds every request until ``hold`` of them are open at once (or ``hold_seconds``
    pass)."""

    status = 200
    retry_after: str | None = None
    received: list[tuple[str | None, str | None, dict[str, Any]]] = []
    hold = 0
    hold_seconds = 10.0
    open_now = most_open = 0
    lock = threading.Condition()

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Endpoint.lock:
            Endpoint.open_now += 1
            Endpoint.most_open = max(Endpoint.most_open, Endpoint.open_now)
            Endpoint.lock.notify_all()
            Endpoint.lock.wait_for(lambda: Endpoint.most_open >= Endpoint.hold, timeout=Endpoint.hold_seconds)
            Endpoint.received.append((self.headers.get("Idempotency-Key"), self.headers.get("X-Webhook-Topic"), body))
        self.send_response(Endpoint.status)
        if Endpoint.retry_after is not None:
            self.send_header("Retry-After", Endpoint.retry_after)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with Endpoint.lock:
            Endpoint.open_now -= 1

    def log_message(self, *args: object) -> None:
        return


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 would keep most of the side-by-side connections waiting to be accepted


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Endpoint]]:
    server = Server(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Endpoint.status, Endpoint.retry_after, Endpoint.received = 200, None, []
    Endpoint.hold, Endpoint.hold_seconds, Endpoint.open_now, Endpoint.most_open = 0, 10.0, 0, 0
    monkeypatch.setenv(webhooks.ENDPOINT_URL_ENV, f"http://127.0.0.1:{server.server_port}/hooks")
    yield Endpoint
    server.shutdown()
    server.server_close()


def deliver(body: str) -> None:
    """Run the handler on one message, on an event loop of its own, as a test calls an async handler."""
    asyncio.run(handle(Message(body=body, message_id="m-1", receipt_handle="rh-1")))


def test_webhooks_is_declared_as_an_async_handler_of_256_coroutines() -> None:
    """An async def: 256 coroutines on one event loop per process, the start-up check its delivery rule."""
    contract = contract_of(handle)
    assert (contract.asynchronous, contract.concurrency, contract.max_duration_seconds) == (True, 256, 30)
    assert setup_of(handle) is delivery_target


def test_handler_posts_the_payload_keyed_by_the_event_id(endpoint: type[Endpoint]) -> None:
    """The payload is the body; the event id is the Idempotency-Key (stable across redeliveries), the topic a header."""
    deliver(json.dumps(EVENT))
    assert endpoint.received == [("whk-2026-11-28-0001", "order.shipped", EVENT["payload"])]


@pytest.mark.parametrize(
    ("status", "retry_after", "raised", "text"),
    [
        (400, None, PoisonMessage, "webhook rejected the event with HTTP 400"),
        (410, None, PoisonMessage, "webhook rejected the event with HTTP 410"),
        (408, None, WebhookUnavailable, "webhook answered HTTP 408"),
        (429, "5", WebhookUnavailable, "webhook answered HTTP 429"),
        (500, None, WebhookUnavailable, "webhook answered HTTP 500"),
        (503, None, WebhookUnavailable, "webhook answered HTTP 503"),
        (503, "7", DownstreamUnavailable, "webhook answered HTTP 503, Retry-After 7"),
        (301, None, WebhookUnavailable, "webhook answered HTTP 301"),
    ],
)
def test_each_answer_means_what_it_says_for_the_event(
    endpoint: type[Endpoint], status: int, retry_after: str | None, raised: type[Exception], text: str
) -> None:
    """A 4xx but 408 and 429 is poison; a 503 with Retry-After opens the circuit; anything else is retried, a
    redirect included (it is not followed: a moved endpoint is a setting to fix, not an address to trust)."""
    endpoint.status, endpoint.retry_after = status, retry_after
    with pytest.raises(raised) as error:
        deliver(json.dumps(EVENT))
    assert str(error.value) == text
    if raised is DownstreamUnavailable:
        assert error.value.retry_after_seconds == 7.0  # type: ignore[attr-defined]


def test_an_unreachable_endpoint_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection is transient."""
    monkeypatch.setenv(webhooks.ENDPOINT_URL_ENV, "http://127.0.0.1:9/hooks")
    with pytest.raises(WebhookUnavailable, match="^webhook unreachable: ConnectError"):
        deliver(json.dumps(EVENT))


def test_a_declared_dry_run_logs_instead_of_delivering(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without an endpoint but with SUBSCRIBER_DRY_RUN=true, a valid event succeeds with a log line, no call."""
    monkeypatch.delenv(webhooks.ENDPOINT_URL_ENV, raising=False)
    monkeypatch.setenv(webhooks.DRY_RUN_ENV, "true")
    with caplog.at_level("INFO", logger=webhooks.__name__):
        deliver(json.dumps(EVENT))
    assert [r.getMessage() for r in caplog.records] == ["webhook_dry_run"]


def test_neither_an_endpoint_nor_a_dry_run_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up check refuses, naming the variable; called anyway, the handler raises rather than return as if
    the event were delivered."""
    monkeypatch.delenv(webhooks.ENDPOINT_URL_ENV, raising=False)
    monkeypatch.delenv(webhooks.DRY_RUN_ENV, raising=False)
    with pytest.raises(ConfigurationError) as refused:
        delivery_target({})
    assert str(refused.value) == (
        '"SUBSCRIBER_ENDPOINT_URL" must be set to the subscriber endpoint\'s http(s):// URL, or SUBSCRIBER_DRY_RUN=true'
        " declared to only log events (without either every event would be deleted undelivered): not set"
    )
    with pytest.raises(ConfigurationError, match='^"SUBSCRIBER_ENDPOINT_URL" must be set'):
        deliver(json.dumps(EVENT))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "body is not JSON: Expecting value: line 1 column 1 (char 0)"),
        (
            json.dumps({**EVENT, "topic": "Order Shipped!"}),
            'schema check failed at properties/topic: pattern "^[a-z][a-z0-9_.-]{0,63}$"',
        ),
        (json.dumps({**EVENT, "payload": ["x"]}), 'schema check failed at properties/payload: type "object"'),
        (
            json.dumps({**EVENT, "type": "webhook.sent"}),
            'schema check failed at properties/type: const "webhook.requested"',
        ),
        (
            json.dumps({k: v for k, v in EVENT.items() if k != "topic"}),
            'schema check failed at (root): required ["topic"]',
        ),
    ],
)
def test_an_event_that_is_not_one_is_poison_before_any_call(endpoint: type[Endpoint], body: str, reason: str) -> None:
    """Checked against the schema first: poison with a reason naming the rule, and the endpoint never called."""
    with pytest.raises(PoisonMessage) as raised:
        deliver(body)
    assert raised.value.reason == reason and endpoint.received == []


def test_each_event_loop_has_its_own_client_shared_by_its_coroutines() -> None:
    """One client (one connection pool) per loop: the coroutines of a loop share it, and a new loop (a test's next
    asyncio.run) gets its own, never one whose connections belong to a closed loop."""

    async def two() -> tuple[Any, Any]:
        return client(), client()

    first, again = asyncio.run(two())
    second, _ = asyncio.run(two())
    assert first is again and second is not first


def test_declared_samples_end_where_declared(sqs: Any, endpoint: type[Endpoint]) -> None:
    """Through the real runtime on moto: each valid sample delivered once and deleted, the two marked poison=True in
    the DLQ at their first receive with their reasons, the endpoint never called for them."""
    contract = contract_of(handle)
    pair = create_pair(sqs, contract)
    sent = send_samples(sqs, pair.queue_url, handle)
    with running(consumer_of(sqs, pair, contract, handle)) as run:
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20, what="every sample settled")
    dead = {m["MessageAttributes"]["idempotency-key"]["StringValue"]: m for m in drain(sqs, pair.dlq_url)}
    assert run.exit_code == 0
    assert set(dead) == {key for key, sample in sent.items() if sample.poison} and len(dead) == 2
    assert {
        (r["kind"], r["receive_count"]) for r in (read_reason(m["MessageAttributes"]) for m in dead.values()) if r
    } == {("poison", 1)}
    assert sorted(key for key, _topic, _body in endpoint.received) == [
        "whk-sample-0001",
        "whk-sample-0002",
        "whk-sample-0003",
    ]


def test_deliveries_wait_on_the_endpoint_side_by_side(
    sqs: Any, endpoint: type[Endpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 events and an endpoint that answers none until 30 requests are open at once: the coroutines of one consumer
    process wait on it together (a thread handler of concurrency 8 never could), and each event is delivered once."""
    endpoint.hold, endpoint.hold_seconds = 30, 60.0
    # Time enough for a loaded machine to receive and start all 30: the request's own limit and the attempt's
    # (max_duration) well past the endpoint's hold; the concurrency is the declaration's.
    monkeypatch.setattr(webhooks, "REQUEST_TIMEOUT_SECONDS", 90.0)
    contract = dataclasses.replace(contract_of(handle), max_duration_seconds=120)
    pair = create_pair(sqs, contract)
    for start in range(0, 30, 10):
        entries = [
            {"Id": str(i), "MessageBody": json.dumps({**EVENT, "event_id": f"whk-concurrent-{i:04d}"})}
            for i in range(start, start + 10)
        ]
        sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
    with running(consumer_of(sqs, pair, contract, handle)) as run:
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=90, what="every event delivered")
    assert run.exit_code == 0
    assert endpoint.most_open == 30
    assert sorted(key or "" for key, _topic, _body in endpoint.received) == [
        f"whk-concurrent-{i:04d}" for i in range(30)
    ]
