"""The demo's lane for a worker it has no mix of its own for: any handler a team adds, accounted without knowing it.

The producer sends the samples the handler declares (``@worker(samples=...)``, :class:`consumer.Sample`), at
least one of each, cycling through them up to ``--samples`` messages; a handler that declares none gets bodies
built from each event id (:func:`consumer.local.samples.built_body`). Each message carries its event id as its
``idempotency-key`` and a W3C ``traceparent`` whose trace id is derived from that event id, so every line the
consumers log about it (``message_processed``, ``message_moved_to_dlq``), whichever copy of it they held (a
hand-back is a fresh copy with a new message id, same attributes), names it.

There is no downstream to count deliveries at, so the accounting reads what the run can see without one:

* processed: the consumers' ``message_processed`` lines per event (a second one for an event is a duplicate),
  and deleted: nothing left in the source at the end;
* dead-lettered: the DLQ's messages by their ``idempotency-key``, each with its reason record;
* expected places: a declared sample delivered once (processed), a ``poison=True`` sample in the DLQ with a reason,
  a built body in exactly one of the two (the handler's call: the demo does not know what it accepts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from consumer.local.demo_lane import DEAD_LETTERED, DELIVERED, EITHER, Kind, Lane, Mix
from consumer.local.harness import Planned
from consumer.local.samples import BUILT, DECLARE_HINT, POISON, SAMPLE, declared_samples, plan_samples

#: What each kind of planned message is, and where it must end.
SAMPLE_KINDS: dict[str, tuple[str, str]] = {
    SAMPLE: (DELIVERED, "declared sample: the handler processes it"),
    POISON: (DEAD_LETTERED, "declared sample, poison=True: the handler refuses it"),
    BUILT: (EITHER, 'no samples declared: {"id": <event id>}, the handler\'s call'),
}
#: Where a delivery is counted, as the report names it.
COUNTED_AT = "the handler, per the consumers' logs"


def trace_id_for(event_id: str) -> str:
    """The W3C trace id (32 hex digits) the demo sends ``event_id`` under: derived from it, so the consumers' log
    lines about any copy of the message name the event."""
    return hashlib.sha256(event_id.encode()).hexdigest()[:32]


def traceparent_for(event_id: str) -> str:
    """A valid W3C ``traceparent`` (version 00, sampled) for ``event_id``; https://www.w3.org/TR/trace-context/"""
    digest = hashlib.sha256(event_id.encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-01"


def plan_for(worker: str, environment: Mapping[str, str], count: int) -> tuple[list[Planned], str | None]:
    """``count`` messages (at least one of each declared sample) for the handler ``environment`` names, each with its
    trace header; and a note when the bodies were built because the handler declares no samples (None otherwise)."""
    handler, declared = declared_samples(environment)
    plan = [
        Planned(p.event_id, p.kind, p.body, traceparent=traceparent_for(p.event_id))
        for p in plan_samples(declared, count, prefix=f"{worker}-demo", poison=None, handler=handler)
    ]
    note = None if declared else f"{worker}: {handler} declares no samples, so the demo built each body: {DECLARE_HINT}"
    return plan, note


def samples_mix(plan: list[Planned], note: str | None = None) -> Mix:
    """The kinds the plan holds, each with its share, place and description, in the report's order (``note``: what
    the report says under the lane's tables)."""
    kinds = {
        name: Kind(sum(p.kind == name for p in plan) / len(plan), place, what)
        for name, (place, what) in SAMPLE_KINDS.items()
        if any(p.kind == name for p in plan)
    }
    return Mix(kinds, url_env=None, downstream=COUNTED_AT, note=note or "")


class SamplesLane(Lane):
    """A worker's lane without a downstream: deliveries are what its consumers logged as processed, per event."""

    def __init__(
        self,
        worker: str,
        plan: list[Planned],
        task_environment: Mapping[str, str],
        sqs: Any,
        log_dir: Path,
        note: str | None = None,
    ) -> None:
        super().__init__(worker, samples_mix(plan, note), plan, None, task_environment, sqs, log_dir)
        self._events = {trace_id_for(p.event_id): p.event_id for p in plan}

    def successes(self) -> dict[str, int]:
        """Handler runs per event id (of this lane's plan), from the consumers' logs: its ``message_processed`` lines
        less its ``duplicate_skipped`` ones. A copy the idempotency guard recognised as done (a requeued copy of a
        message delivered twice) is settled, and logged, as processed without reaching the handler: no side effect."""
        ran = {
            self._events[trace]: logged["message_processed"] - logged["duplicate_skipped"]
            for trace, logged in self.fleet.traces.items()
            if trace in self._events
        }
        return {event_id: runs for event_id, runs in ran.items() if runs > 0}

    def delivered(self) -> set[str]:
        return set(self.successes())

    def settled(self) -> bool:
        """Every event in one final place as far as the run can see: the producer done, the source empty (so each
        processed one deleted), each processed or in the DLQ, the declared samples processed and the DLQ holding at
        least the poison ones."""
        delivered = self.delivered()
        return (
            not self.producing()
            and self.depths[:2] == (0, 0)
            and len(delivered) + self.depths[2] >= len(self.plan)
            and self.ids(DELIVERED) <= delivered
            and self.depths[2] >= self.expected_dlq
        )
