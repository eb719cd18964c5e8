"""Example handler: deliver a "notification requested" event to a downstream webhook.

It shows the shape real handlers take: parse and schema-check the body (a
failure is a :class:`~consumer.PoisonMessage`, never a retry), then make one
downstream call that is safe to repeat (the event id is sent as an
``Idempotency-Key`` header, because SQS delivers at least once). A webhook that
says it is down (HTTP 503 with ``Retry-After``) raises :class:`~consumer.DownstreamUnavailable`:
the consumer pauses instead of spending the event's retries; any other 5xx is an ordinary retry.

Set ``NOTIFY_WEBHOOK_URL`` to deliver. Without it, ``NOTIFY_DRY_RUN=true``
declares a dry run (events are logged, not delivered: the dev and demo
environments); with neither the handler refuses to start, and ``handle`` raises,
because returning would have every event deleted undelivered.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, ValidationError

from consumer import ConfigurationError, DownstreamUnavailable, Message, PoisonMessage, Sample, worker

log = logging.getLogger(__name__)

WEBHOOK_URL_ENV = "NOTIFY_WEBHOOK_URL"
DRY_RUN_ENV = "NOTIFY_DRY_RUN"
DOWNSTREAM_TIMEOUT_SECONDS = 30
#: A schema value longer than this (a long enum, say) is cut in a reason.
MAX_RULE_CHARS = 200

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["event_id", "type", "channel", "recipient", "template"],
    "additionalProperties": False,
    "properties": {
        "event_id": {"type": "string", "minLength": 8, "maxLength": 128},
        "type": {"const": "notification.requested"},
        "channel": {"enum": ["email", "sms", "push"]},
        "recipient": {"type": "string", "minLength": 1, "maxLength": 320},
        "template": {"type": "string", "pattern": "^[a-z0-9_.-]{1,64}$"},
        "data": {"type": "object"},
        "occurred_at": {"type": "string"},
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA)


def _event(event_id: str, channel: str, recipient: str, template: str) -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "type": "notification.requested",
            "channel": channel,
            "recipient": recipient,
            "template": template,
            "data": {"name": "Ada"},
            "occurred_at": "2026-11-22T10:00:00Z",
        }
    )


#: What ``python -m consumer local send`` (and the local demo, for a worker it has no mix for) sends this handler:
#: events of the schema, and two it must refuse as poison (the first: a channel outside the enum, whose reason
#: names the rule, ``schema check failed at properties/channel: enum [...]``).
SAMPLES = (
    Sample(_event("evt-sample-email-0001", "email", "ada@example.com", "welcome")),
    Sample(_event("evt-sample-sms-0002", "sms", "+447700900123", "password_reset")),
    Sample(_event("evt-sample-push-0003", "push", "device-7f3a", "invoice.ready")),
    Sample(_event("evt-sample-pigeon-0004", "pigeon", "ada@example.com", "welcome"), poison=True),
    Sample('{"event_id": "evt-sample-truncated-0005", "type": "notification.requested"', poison=True),
)


class WebhookUnavailable(Exception):
    """The webhook could not take this event now (timeout, 5xx, 429): retry it later, as an ordinary failure."""


def parse(body: str, validator: Draft202012Validator | None = None) -> dict[str, Any]:
    """The event in ``body``; :class:`PoisonMessage` if it is not JSON or breaks the schema (``validator``'s, this
    module's :data:`SCHEMA` by default: the webhooks example checks its own events with it).

    The reason (kept in the DLQ and logged) carries where and which rule, never a value of the event.
    """
    validator = validator or _VALIDATOR
    # Nesting deeper than the interpreter's recursion limit raises RecursionError, in the decoder or the
    # check: the body can never succeed, so it is poison now rather than a retry until the DLQ.
    try:
        event = json.loads(body)
    except json.JSONDecodeError as error:
        raise PoisonMessage(f"body is not JSON: {error}") from error  # the message and a position, no content
    except RecursionError as error:
        raise PoisonMessage("body is not JSON this handler can parse: nested too deeply (RecursionError)") from error
    try:
        errors = sorted(validator.iter_errors(event), key=lambda e: list(e.absolute_path))
    except RecursionError as error:
        raise PoisonMessage("schema check failed: the event nests too deeply to check (RecursionError)") from error
    if errors:
        raise PoisonMessage(f"schema check failed at {_schema_rule(errors[0])}")
    return event


def _schema_rule(error: ValidationError) -> str:
    """``<schema path>: <keyword> <the schema's own value>``, e.g. ``properties/channel: enum ["email", ...]``.

    Built from the schema alone, because jsonschema's ``error.message`` quotes the offending value
    (a recipient's address, say): personal data in a DLQ reason and in logs kept for a year.
    """
    where = "/".join(str(part) for part in list(error.absolute_schema_path)[:-1]) or "(root)"
    rule = error.validator_value
    if error.validator == "required" and isinstance(error.instance, dict):
        rule = [name for name in error.validator_value if name not in error.instance]  # names the schema lists
    shown = json.dumps(rule)
    if len(shown) > MAX_RULE_CHARS:
        shown = shown[: MAX_RULE_CHARS - 1] + "…"
    return f"{where}: {error.validator} {shown}"


def delivery_target(environ: Mapping[str, str]) -> str | None:
    """Where events go: the webhook URL, or None for a declared dry run; :class:`ConfigurationError` otherwise.

    URL set -> deliver; else ``NOTIFY_DRY_RUN=true`` -> log only; else refuse. The handler's
    start-up check and :func:`handle` both apply it.
    """
    return url_or_dry_run(environ, WEBHOOK_URL_ENV, DRY_RUN_ENV, "the webhook's")


def url_or_dry_run(environ: Mapping[str, str], url_env: str, dry_run_env: str, whose: str) -> str | None:
    """The http(s) URL in ``url_env``, else None when ``dry_run_env`` is ``true``; :class:`ConfigurationError`
    naming the variable otherwise (``whose`` URL it is, in the message). :func:`delivery_target` and the webhooks
    example's check apply it, each with its own variables."""
    url, dry_run = environ.get(url_env), environ.get(dry_run_env, "")
    if dry_run not in ("", "true", "false"):
        raise ConfigurationError(dry_run_env, 'must be "true" or "false"', dry_run)
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                url_env,
                "must be an http:// or https:// URL with a host (shown up to its scheme: a webhook URL may carry a token)",
                f"{parts.scheme}://…" if parts.scheme else "…",
            )
        return url
    if dry_run == "true":
        return None
    raise ConfigurationError(
        url_env,
        f"must be set to {whose} http(s):// URL, or {dry_run_env}=true declared to only log events"
        " (without either every event would be deleted undelivered)",
        url,
    )


def deliver(event: dict[str, Any], url: str | None) -> None:
    """POST the event to ``url`` (None: a declared dry run, logged only); 4xx (but 408/429) is permanent, anything else transient."""
    if not url:
        log.info("notification_dry_run", extra={"event_id": event["event_id"], "channel": event["channel"]})
        return
    request = urllib.request.Request(
        url,
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": event["event_id"]},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=DOWNSTREAM_TIMEOUT_SECONDS):
            return
    except urllib.error.HTTPError as error:
        raise refusal(error.code, error.headers.get("Retry-After") if error.headers else None) from error
    except (urllib.error.URLError, TimeoutError) as error:
        raise WebhookUnavailable(f"webhook unreachable: {error}") from error


def refusal(status: int, retry_after: str | None) -> Exception:
    """What a webhook's answer other than 2xx means for the event (``retry_after``: its ``Retry-After`` header, if
    any): a 4xx but 408 and 429 is :class:`PoisonMessage` (it will never be taken); a 503 with ``Retry-After``
    :class:`DownstreamUnavailable` (the consumer's pause); anything else :class:`WebhookUnavailable` (a retry)."""
    if 400 <= status < 500 and status not in (408, 429):
        return PoisonMessage(f"webhook rejected the event with HTTP {status}")
    if status == 503 and retry_after is not None:
        # The webhook says it is down and for how long: a pause for the whole consumer, not a retry
        # of this one event (which would spend its receives and, in a long outage, end in the DLQ).
        return DownstreamUnavailable(
            f"webhook answered HTTP 503, Retry-After {retry_after}", retry_after=retry_after_seconds(retry_after)
        )
    return WebhookUnavailable(f"webhook answered HTTP {status}")


def retry_after_seconds(value: str) -> float | None:
    """An HTTP ``Retry-After`` (seconds, or an HTTP date) as seconds from now; None if unreadable (the consumer
    then chooses the pause). https://www.rfc-editor.org/rfc/rfc9110#field.retry-after"""
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is not one, but read it as UTC
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@worker(
    max_duration=timedelta(seconds=90),
    concurrency=8,
    acceptable_latency=timedelta(seconds=60),
    average_duration=timedelta(seconds=2),
    setup=delivery_target,  # consumer run refuses to start with neither a URL nor a declared dry run
    samples=SAMPLES,
)
def handle(message: Message) -> None:
    """Validate one notification event and hand it to the webhook (or log it, in a declared dry run)."""
    url = delivery_target(os.environ)  # raises rather than return as if delivered
    deliver(parse(message.body), url)
