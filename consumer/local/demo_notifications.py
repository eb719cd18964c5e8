"""The demo's first lane: the notifications worker's producer mix and the webhook its handler POSTs to.

The mix covers every path of the worker contract: deliveries that succeed, fail transiently, outlast
the lease (the heartbeat), are rejected or malformed (poison: the DLQ with a reason), and an outage
the webhook announces (HTTP 503 with ``Retry-After``): the consumers' circuits pause receiving and hand
the events back unspent, then probe, and the events are delivered once the outage ends, with no redrive.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.demo_lane import DEAD_LETTERED, DELIVERED, Kind, Mix, RecordingDownstream, plan_mix
from consumer.local.harness import Planned, sample_event

#: The event kinds the producer mixes, and where each must end.
KINDS: dict[str, Kind] = {
    "good": Kind(0.45, DELIVERED, "HTTP 200 after 20-200 ms"),
    "flaky": Kind(0.15, DELIVERED, "HTTP 503 once or twice, then 200"),
    "slow": Kind(0.05, DELIVERED, "HTTP 200 after longer than the queue's visibility lease"),
    "malformed": Kind(0.15, DEAD_LETTERED, "never reached: not JSON or breaks the schema"),
    "rejected": Kind(0.05, DEAD_LETTERED, "HTTP 422 (a permanent refusal)"),
    "outage": Kind(0.15, DELIVERED, "HTTP 503 with Retry-After until the outage ends, then 200 (the circuit waits)"),
}
MIX = Mix(
    KINDS,
    url_env=WEBHOOK_URL_ENV,
    downstream="the webhook",
    cost_note=(
        "SQS requests per processed message: half of this mix fails at least once, so backoffs, DLQ moves"
        " and the trickle-fed long polls dominate; at saturation the floor is 0.2 (one receive and one"
        " batched delete per 10), a delete call per message costs about 1.1."
    ),
)
#: Who sends the events (the MessageGroupId on the standard queue, through consumer.producer): one noisy tenant
#: sends most of them, three quiet ones the rest. On an SQS fair queue the quiet tenants' events are not held up
#: behind the noisy one's backlog; the report counts each tenant's events from the consumers' logs.
TENANTS: dict[str, float] = {"tenant-noisy": 0.7, "tenant-a": 0.1, "tenant-b": 0.1, "tenant-c": 0.1}
#: The redrive filter, for a late arrival only (see demo.py): the exhausted-retries reason of a flaky event names
#: the handler's ordinary transient error. Outage events never reach the DLQ: the circuit hands them back.
REDRIVE_FILTER = "WebhookUnavailable"
#: What the webhook's outage answers carry: the seconds to wait before trying again (the circuit's pause).
OUTAGE_RETRY_AFTER = "1"


def _malformed_body(event_id: str, index: int, variant: int) -> str:
    """A body the handler must refuse as poison; the variants are the usual ways producers get it wrong."""
    good = sample_event(event_id, index)
    variants: list[Callable[[], str]] = [
        lambda: json.dumps(good)[:-7],  # truncated JSON
        lambda: "event_id=" + event_id + "&type=notification.requested",  # form-encoded, not JSON
        lambda: json.dumps([good]),  # an array, not an object
        lambda: json.dumps(sample_event(event_id, index, recipient=None)),  # a required field missing
        lambda: json.dumps(sample_event(event_id, index, channel="pigeon")),  # not an allowed channel
        lambda: json.dumps(sample_event(event_id, index, template="Welcome Email!")),  # breaks the template pattern
        lambda: json.dumps(sample_event(event_id, index, type="notification.sent")),  # wrong event type
        lambda: json.dumps({**good, "priority": "high"}),  # an unknown property
        lambda: "\ufeff" + json.dumps(good, ensure_ascii=False),  # a byte-order mark before the JSON
    ]
    return variants[variant % len(variants)]()


def build_mix(count: int, seed: int = 7) -> list[Planned]:
    """``count`` events in the shares of :data:`KINDS` (at least one of each), shuffled reproducibly."""

    def body(event_id: str, index: int, kind: str, variant: int) -> str:
        if kind == "malformed":
            return _malformed_body(event_id, index, variant)
        return json.dumps(sample_event(event_id, index), ensure_ascii=False)

    return plan_mix(
        KINDS,
        count,
        "messages",
        seed,
        prefix="evt-demo",
        body=body,
        transient_failures=lambda kind, rng: rng.choice((1, 2)) if kind == "flaky" else 0,
        tenants=TENANTS,
    )


class Downstream(RecordingDownstream):
    """The webhook the example handler POSTs to, on 127.0.0.1; it records every attempt per event id."""

    def __init__(self, plan: Iterable[Planned], slow_seconds: float) -> None:
        super().__init__()
        self.plan = {p.event_id: p for p in plan}
        self.slow_seconds = slow_seconds
        self.outage = threading.Event()
        self.outage.set()
        self._rng = random.Random(11)

    def respond(self, key: str, path: str) -> int | tuple[int, Mapping[str, str]]:
        status = self.answer(key)
        planned = self.plan.get(key)
        if status == 503 and planned is not None and planned.kind == "outage":
            return status, {"Retry-After": OUTAGE_RETRY_AFTER}  # down, and says for how long: not a flaky 503
        return status

    def answer(self, event_id: str) -> int:
        planned = self.plan.get(event_id)
        attempt = self.attempt(event_id)
        with self._lock:
            pause = self._rng.uniform(0.02, 0.2)
        if planned is None:
            status = 400
        elif planned.kind == "rejected":
            status = 422
        elif planned.kind == "flaky" and attempt <= planned.transient_failures:
            status = 503
        elif planned.kind == "outage" and self.outage.is_set():
            status = 503
        else:
            status = 200
            if planned.kind == "slow":
                pause = self.slow_seconds
        time.sleep(pause)
        return self.answered(event_id, status)
