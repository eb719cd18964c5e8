"""Example async handler: deliver webhook events to a subscriber's endpoint, hundreds at once per process.

An ``async def`` handler: the consumer runs ``concurrency`` coroutines (256 here) on one event loop it owns in each
process, so a task waits on hundreds of slow HTTP answers with one thread instead of hundreds. The handler's
shape is the notifications example's (:mod:`consumer.examples.notifications`): check the event against a schema
(a failure is a :class:`~consumer.PoisonMessage`, never a retry), then make one call that is safe to repeat (the
event id as ``Idempotency-Key``: SQS delivers at least once). Its answer decides the outcome as there: a 4xx but
408 and 429 is poison, a 503 with ``Retry-After`` opens the consumer's circuit
(:class:`~consumer.DownstreamUnavailable`), anything else is retried (:func:`notifications.refusal
<consumer.examples.notifications.refusal>`), and so is an endpoint that cannot be reached or answers too slowly.

A ``webhook.requested`` event names a topic and carries the payload the endpoint receives as its body::

    {"event_id": "whk-2026-11-28-0001", "type": "webhook.requested", "topic": "order.shipped",
     "payload": {"order_id": "ord-1001", "carrier": "dhl"}}

What is async about it:

* one ``httpx.AsyncClient`` per event loop, shared by every coroutine: one connection pool, its limit the
  handler's concurrency, so no coroutine waits for a connection and the endpoint's connections are kept alive;
* nothing blocks the loop: the body is checked in memory and the call is awaited. A blocking call here (a
  synchronous HTTP client, ``time.sleep``) would stall every coroutine of the process, and the consumer's health
  check fails once the loop has not beaten for ``EVENT_LOOP_STALL_SECONDS`` (docs/runtime.md);
* the deadline needs no code: the consumer cancels the coroutine at ``max_duration`` and at the drain's end, so
  the ``await`` raises ``CancelledError`` and the request is abandoned there. The request's own timeout
  (:data:`REQUEST_TIMEOUT_SECONDS`) only bounds one slow answer well within that.

Set ``SUBSCRIBER_ENDPOINT_URL`` to deliver (a URL that carries a token goes in the environment's ``secrets``, as
the notifications example's does in staging and prod). Without it, ``SUBSCRIBER_DRY_RUN=true`` declares a dry run
(events are checked and logged, not delivered: the demo environment); with neither the handler refuses to start,
and ``handle`` raises, because returning would have every event deleted undelivered. (Neither name says WEBHOOK:
synth refuses such a name in ``handler_environment``, where a value is plain text in the task definition.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import weakref
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from consumer import Message, Sample, worker
from consumer.examples.notifications import WebhookUnavailable, parse, refusal, url_or_dry_run

log = logging.getLogger(__name__)

ENDPOINT_URL_ENV = "SUBSCRIBER_ENDPOINT_URL"
DRY_RUN_ENV = "SUBSCRIBER_DRY_RUN"
#: Coroutines at once in one process: the declaration's concurrency and the connection pool's size.
CONCURRENCY = 256
#: One request's limit (connect 5 s of it), well within the 30 s ``max_duration`` the consumer cancels at.
REQUEST_TIMEOUT_SECONDS = 10.0

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["event_id", "type", "topic", "payload"],
    "additionalProperties": False,
    "properties": {
        "event_id": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{8,128}$"},
        "type": {"const": "webhook.requested"},
        "topic": {"type": "string", "pattern": "^[a-z][a-z0-9_.-]{0,63}$"},
        "payload": {"type": "object"},
        "occurred_at": {"type": "string"},
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA)


def _event(event_id: str, topic: str, payload: dict[str, Any]) -> str:
    return json.dumps({"event_id": event_id, "type": "webhook.requested", "topic": topic, "payload": payload})


#: What ``python -m consumer local send --worker webhooks`` and the local demo send this handler: three events of the
#: schema, and two it refuses at the first receive: a topic that is not one (the reason names the pattern, never the
#: value) and a body that is not JSON.
SAMPLES = (
    Sample(_event("whk-sample-0001", "order.shipped", {"order_id": "ord-1001", "carrier": "dhl"})),
    Sample(_event("whk-sample-0002", "invoice.paid", {"invoice_id": "inv-2002", "amount": "49.90"})),
    Sample(_event("whk-sample-0003", "customer.updated", {"customer_id": "cus-3003", "fields": ["email"]})),
    Sample(_event("whk-sample-0004", "Order Shipped!", {"order_id": "ord-1004"}), poison=True),
    Sample("topic=order.shipped&event_id=whk-sample-0005", poison=True),
)

#: Each running event loop's client (the consumer runs one loop per process; a test may run several in turn).
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def delivery_target(environ: Mapping[str, str]) -> str | None:
    """The endpoint's URL, or None for a declared dry run; :class:`~consumer.ConfigurationError` otherwise.

    URL set -> deliver; else ``SUBSCRIBER_DRY_RUN=true`` -> log only; else refuse. The handler's start-up check and
    :func:`handle` both apply it.
    """
    return url_or_dry_run(environ, ENDPOINT_URL_ENV, DRY_RUN_ENV, "the subscriber endpoint's")


def client() -> httpx.AsyncClient:
    """The running loop's shared client, made on first use: its connections belong to that loop."""
    loop = asyncio.get_running_loop()
    shared = _CLIENTS.get(loop)
    if shared is None:
        shared = httpx.AsyncClient(
            timeout=httpx.Timeout(REQUEST_TIMEOUT_SECONDS, connect=5.0),
            limits=httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY),
            follow_redirects=False,  # a redirect is a misconfigured endpoint: retried, then in the DLQ with its status
        )
        _CLIENTS[loop] = shared
    return shared


async def deliver(event: Mapping[str, Any], url: str | None) -> None:
    """POST the event's payload to ``url`` (None: a declared dry run, logged only); a 2xx returns, anything else
    raises what it means for the event (:func:`~consumer.examples.notifications.refusal`)."""
    if url is None:
        log.info("webhook_dry_run", extra={"event_id": event["event_id"], "topic": event["topic"]})
        return
    headers = {"Idempotency-Key": event["event_id"], "X-Webhook-Topic": event["topic"]}
    try:
        response = await client().post(url, json=event["payload"], headers=headers)
    except httpx.TransportError as error:  # refused, reset, timed out: the endpoint may take it later
        raise WebhookUnavailable(f"webhook unreachable: {type(error).__name__}: {error}") from error
    if not response.is_success:
        raise refusal(response.status_code, response.headers.get("Retry-After"))


@worker(
    max_duration=timedelta(seconds=30),
    concurrency=CONCURRENCY,
    acceptable_latency=timedelta(seconds=60),
    average_duration=timedelta(seconds=1),
    setup=delivery_target,  # consumer run refuses to start with neither an endpoint nor a declared dry run
    samples=SAMPLES,
)
async def handle(message: Message) -> None:
    """Check one webhook event and POST its payload to the endpoint (or log it, in a declared dry run)."""
    url = delivery_target(os.environ)  # raises rather than return as if delivered
    await deliver(parse(message.body, _VALIDATOR), url)
