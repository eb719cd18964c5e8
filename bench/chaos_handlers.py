"""The chaos suite's batch and async handlers: the example's work (a schema check, then one idempotent call per event
to the downstream) in the two other handler shapes, so the suite's accounting applies to each shape unchanged.

Each event of the stream meets the same downstream as the thread fleet's (``bench.chaos.IdempotentDownstream``,
``NOTIFY_WEBHOOK_URL`` set per consumer by the supervisor) and is settled as the issue asks of every shape:

* a body that is not JSON or breaks the schema (``malformed``): a :class:`~consumer.PoisonMessage` with the
  example's reason (:func:`consumer.examples.notifications.parse`), to the DLQ at its first receive;
* a downstream 4xx but 408 and 429 (``rejected``: 422): :class:`DownstreamRejected`, a type both handlers declare
  ``non_retryable``, so the DLQ at once with kind ``non_retryable`` and the status as reason;
* a downstream 5xx, 408, 429 or no answer (``flaky``: 503 without ``Retry-After`` on its first call):
  :class:`DownstreamFailed`, an ordinary failure, retried after a backoff;
* a 2xx: applied (the downstream applies an ``Idempotency-Key`` once, whatever the number of calls).

:func:`batch_handle` (``max_batch``) checks each event of its batch, delivers the valid ones in one bulk call (the
downstream answers each event's status, as it would answer a call of its own) and reports each one's outcome in its
:class:`~consumer.BatchResult`; :func:`async_handle` (``async def``) awaits the call on an ``httpx.AsyncClient``
(the async example's pin, consumer/examples/requirements.txt, whose lock every venv ``make`` builds installs: the
test tier runs the chaos suite's short form too). Both are declared like the demo
(a 10 s lease, three receives, 1-4 s backoffs), so one accounting and one evidence reading hold for all three fleets.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import httpx

from bench.chaos_stream import BULK
from consumer import BatchResult, ConfigurationError, Message, PoisonMessage, worker
from consumer.examples import demo
from consumer.examples.notifications import WEBHOOK_URL_ENV, parse

#: One call to the downstream may take this long (its answers take 5-50 ms; the lease is 10 s).
DOWNSTREAM_TIMEOUT_SECONDS = 5.0


class DownstreamRejected(Exception):
    """The downstream refused the event for good (a 4xx but 408 and 429): declared ``non_retryable``, so the DLQ at
    its first receive with this as reason."""


class DownstreamFailed(Exception):
    """The downstream could not take the event now (5xx, 408, 429, no answer): an ordinary failure, retried."""


def webhook_url(environ: Mapping[str, str]) -> str:
    """The downstream's URL; :class:`ConfigurationError` without one (the start-up check: ``consumer run`` refuses)."""
    url = environ.get(WEBHOOK_URL_ENV, "")
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(WEBHOOK_URL_ENV, "must be the chaos downstream's http:// URL", url or None)
    return url


def error_of(status: int) -> Exception | None:
    """What a downstream answer means for the event: None (applied) for a 2xx, else the error to settle it with."""
    if 200 <= status < 300:
        return None
    if 400 <= status < 500 and status not in (408, 429):
        return DownstreamRejected(f"downstream rejected the event with HTTP {status}")
    return DownstreamFailed(f"downstream answered HTTP {status}")


def _request(event: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    return json.dumps(event).encode(), {"Content-Type": "application/json", "Idempotency-Key": event["event_id"]}


def deliver_all(url: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Exception | None]:
    """One bulk POST of ``events`` (the downstream's ``/bulk/<sender>`` beside ``url``, blocking): event id -> None
    once applied, else the error to settle it with (every event's, when the call itself fails)."""
    head, _, sender = url.rpartition("/")
    keys = [event["event_id"] for event in events]
    body = json.dumps({"keys": keys, "events": list(events)}).encode()
    request = urllib.request.Request(
        f"{head}{BULK}{sender}", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=DOWNSTREAM_TIMEOUT_SECONDS) as answer:
            statuses = json.loads(answer.read())["statuses"]
    except urllib.error.HTTPError as error:
        return dict.fromkeys(keys, error_of(error.code))
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError, KeyError) as error:
        return dict.fromkeys(keys, DownstreamFailed(f"downstream unreachable: {error}"))
    return {key: error_of(int(statuses[key])) if key in statuses else DownstreamFailed("no status") for key in keys}


#: The demo's timings (consumer/examples/demo.py: its declaration but its concurrency, start-up check and samples), so
#: the suite's quiet time and evidence read every fleet alike; a check of the chaos downstream's URL, the rejection
#: declared non-retryable.
_DEMO_TIMINGS: dict[str, Any] = {
    **{k: v for k, v in demo.DECLARATION.items() if k not in ("concurrency", "setup", "samples")},
    "setup": webhook_url,
    "non_retryable": (DownstreamRejected,),
}


@worker(**_DEMO_TIMINGS, concurrency=2, max_batch=10, batch_window=timedelta(seconds=1))
def batch_handle(messages: list[Message]) -> BatchResult:
    """Check each event of the batch, deliver the valid ones in one bulk call, and report each message's outcome."""
    url = webhook_url(os.environ)
    result, valid = BatchResult(), []
    for message in messages:
        try:
            valid.append((message, parse(message.body)))
        except PoisonMessage as poison:
            result.poison(message, poison.reason)
    errors = deliver_all(url, [event for _, event in valid]) if valid else {}
    for message, event in valid:
        error = errors[event["event_id"]]
        if error is None:
            result.succeeded(message)
        else:
            result.failed(message, error)
    return result


#: One client per event loop (the runtime runs one): its connection pool is shared by the loop's coroutines.
_clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(timeout=DOWNSTREAM_TIMEOUT_SECONDS)
    return client


@worker(**_DEMO_TIMINGS, concurrency=16)
async def async_handle(message: Message) -> None:
    """Check the event, then await its delivery on the loop's httpx client; raise what the answer means."""
    event = parse(message.body)
    body, headers = _request(event)
    try:
        answer = await _client().post(webhook_url(os.environ), content=body, headers=headers)
    except httpx.TransportError as error:
        raise DownstreamFailed(f"downstream unreachable: {type(error).__name__}: {error}") from error
    error = error_of(answer.status_code)
    if error is not None:
        raise error
