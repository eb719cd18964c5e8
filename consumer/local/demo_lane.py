"""One worker's lane in the local demo: its producer mix, downstream, consumer fleet and accounting; and the demo's
result, which the run (:mod:`consumer.local.demo`) builds and the report (:mod:`consumer.local.demo_report`) renders.

The demo runs a lane per worker of the ``demo`` stack, all at once against the one local stack. Each lane
produces its own mix (:mod:`consumer.local.demo_notifications`, :mod:`consumer.local.demo_reports`, or the
handler's declared samples for any other worker, :mod:`consumer.local.demo_samples`) into its own source queue,
runs its own ``python -m consumer run`` fleet with that worker's task environment, and is accounted for by the
same rules: every produced event in exactly one final place (delivered once, at its downstream or, for a lane
without one, per the consumers' logs; or in its DLQ with a reason), nothing lost, nothing delivered twice, every
consumer exiting 0.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from consumer.local import accounting
from consumer.local.harness import (
    Fleet,
    LoopbackWebhook,
    Planned,
    batches,
    consumer_environment,
    event_id_of,
    outgoing,
    queue_depth,
    read_dlq,
    task_volume_paths,
)
from consumer.ops.queues import fingerprint
from consumer.producer import send

#: Where an event of a kind must end: delivered once, the DLQ with a reason, or either of the two (exactly one).
DELIVERED, DEAD_LETTERED = "delivered once", "DLQ with a reason"
EITHER = "delivered once, or DLQ with a reason"
#: Each place as the accounting's rules name it.
_PLACES = {DELIVERED: accounting.DELIVERED, DEAD_LETTERED: accounting.DEAD_LETTERED, EITHER: accounting.EITHER}


class Kind(NamedTuple):
    share: float  # of the mix
    place: str  # where an event of this kind must end
    downstream: str  # what the downstream does with it


@dataclass(frozen=True)
class Mix:
    """What a lane produces and how its report names things.

    ``url_env``: the handler's variable for the downstream's URL (None: the lane has no downstream);
    ``downstream``: where a delivery is counted, in the report (``the webhook``); ``cost_note``: printed under the
    lane's report, if any; ``note``: printed under its tables, if any (what the demo had to make up for it).
    """

    kinds: Mapping[str, Kind]
    url_env: str | None
    downstream: str
    cost_note: str = ""
    note: str = ""


def kinds_in_shares(kinds: Mapping[str, Kind], count: int, parameter: str, rng: random.Random) -> list[str]:
    """``count`` kind names in the shares of ``kinds`` (at least one of each, the rest to the first), shuffled."""
    if count < len(kinds):
        raise ValueError(f'"{parameter}" must be at least {len(kinds)} (one of each kind): {count}')
    counts = {name: max(1, round(count * kind.share)) for name, kind in kinds.items()}
    counts[next(iter(kinds))] += count - sum(counts.values())
    names = [name for name, n in counts.items() for _ in range(n)]
    rng.shuffle(names)
    return names


def plan_mix(
    kinds: Mapping[str, Kind],
    count: int,
    parameter: str,
    seed: int,
    *,
    prefix: str,
    body: Callable[[str, int, str, int], str],
    transient_failures: Callable[[str, random.Random], int],
    tenants: Mapping[str, float] | None = None,
) -> list[Planned]:
    """``count`` events ``<prefix>-00000``... in the shares of ``kinds``, shuffled reproducibly from ``seed``.

    ``body(event_id, index, kind, variant)``: the event's body, ``variant`` counting the events of its kind before
    it; ``transient_failures(kind, rng)``: how many times the downstream refuses it first; ``tenants``: tenant ->
    share of the events it sends (None: no tenant), drawn from a generator of their own so the kinds and failures
    stay the mix they were without tenants.
    """
    rng, tenant_rng = random.Random(seed), random.Random(f"{seed}-tenants")
    planned: list[Planned] = []
    before: Counter[str] = Counter()
    for index, kind in enumerate(kinds_in_shares(kinds, count, parameter, rng)):
        event_id = f"{prefix}-{index:05d}"
        text = body(event_id, index, kind, before[kind])
        before[kind] += 1
        tenant = tenant_rng.choices(list(tenants), weights=list(tenants.values()))[0] if tenants else None
        planned.append(Planned(event_id, kind, text, transient_failures(kind, rng), tenant))
    return planned


# --------------------------------------------------------------------------- accounting


@dataclass
class Accounting:
    """Where every produced event ended, and whether that balances."""

    produced: dict[str, int]
    delivered: int
    dead_lettered: dict[str, int]
    dlq_reasons: dict[str, int]
    duplicates: int
    lost: list[str]
    misplaced: list[str]
    unknown_in_dlq: list[str]
    in_two_places: list[str]
    left_in_source: int
    #: Events the DLQ holds more than one copy of (a message dead-lettered again after a delete that did not land in
    #: time): each counts once above, so only this says the DLQ holds more messages than events.
    dead_lettered_twice: list[str] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        total = sum(self.produced.values())
        return (
            not self.lost
            and not self.misplaced
            and not self.unknown_in_dlq
            and not self.in_two_places
            and not self.dead_lettered_twice
            and self.left_in_source == 0
            and self.delivered + sum(self.dead_lettered.values()) == total
        )


def account(
    plan: Iterable[Planned],
    kinds: Mapping[str, Kind],
    successes: Mapping[str, int],
    dlq: Mapping[str, Mapping[str, Any] | None],
    left_in_source: int,
    dlq_copies: Mapping[str, int] | None = None,
) -> Accounting:
    """Compare each planned event's final place with the one its kind (in ``kinds``) calls for.

    ``successes``: successful deliveries per event id (at the downstream, or processed per the consumers' logs);
    ``dlq``: event id -> its reason
    record (None when it carries none), for every message in the DLQ; ``left_in_source``: messages
    still in the source queue; ``dlq_copies``: DLQ messages per event id, where one may be there twice.
    """
    planned = list(plan)
    known = {p.event_id for p in planned}
    delivered = {event_id for event_id, n in successes.items() if n > 0}
    found = accounting.places(
        ((p.event_id, _PLACES[kinds[p.kind].place]) for p in planned),
        delivered,
        {event_id: [reason] for event_id, reason in dlq.items()},
    )
    return Accounting(
        produced=dict(Counter(p.kind for p in planned)),
        delivered=len(delivered & known),
        dead_lettered=dict(Counter(p.kind for p in planned if p.event_id in dlq)),
        dlq_reasons=dict(Counter(": ".join(fingerprint(dlq[i])) for i in dlq if i in known)),
        duplicates=accounting.extra_deliveries(successes),
        lost=found.lost,
        misplaced=found.misplaced,
        unknown_in_dlq=sorted(set(dlq) - known),
        in_two_places=found.in_two_places,
        left_in_source=left_in_source,
        dead_lettered_twice=sorted(event_id for event_id, n in (dlq_copies or {}).items() if n > 1),
    )


@dataclass
class LaneResult:
    """One worker's part of the demo's result: its accounting, consumers and the cost its consumers measured."""

    worker: str
    handler: str
    accounting: Accounting
    consumers: list[dict[str, Any]]
    retried: int
    heartbeat_extensions: int
    requeued: int
    sqs_requests: int
    processed: int
    downstream_refusals: dict[str, int]
    #: What the lane produced and where each kind must end (the report's descriptions; in the JSON as ``kinds``).
    mix: Mix
    redrive: dict[str, Any] = field(default_factory=dict)
    #: From the consumers' circuit_opened / circuit_closed logs: opens, closes, seconds open in all, the longest.
    circuit: dict[str, Any] = field(default_factory=dict)
    #: What the producer could not send after consumer.producer's retries, one line per event (the run fails).
    unsent: list[str] = field(default_factory=list)
    #: Per tenant: produced (the plan), delivered (the downstream), processed, duplicates_skipped and moved_to_dlq
    #: (the consumers' logs).
    tenants: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Copies the idempotency store already had done (``duplicate_skipped``): settled as processed, the handler not
    #: run. A second copy of an event comes from its sender, or from the endpoint handing one message to two holders
    #: who each hand it back (moto's server does, rarely: docs/evidence/CHAOS.md); the downstream still sees it once.
    duplicates_skipped: int = 0
    #: Every unhealthy answer of ``python -m consumer health`` for a running consumer (the run fails).
    unhealthy: list[str] = field(default_factory=list)
    #: The UTF-8 bytes of every body the lane planned (the bill's message size: this over the events produced).
    body_bytes: int = 0

    @property
    def requests_per_message(self) -> float | None:
        return self.sqs_requests / self.processed if self.processed else None

    @property
    def ok(self) -> bool:
        return (
            self.accounting.balanced
            and self.accounting.duplicates == 0
            and all(c["exit_code"] == 0 for c in self.consumers)
            and not self.unsent
            and not self.unhealthy
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("mix")
        data["kinds"] = {name: {"place": k.place, "what": k.downstream} for name, k in self.mix.kinds.items()}
        data["accounting"]["balanced"] = self.accounting.balanced
        data["requests_per_message"] = self.requests_per_message
        data["ok"] = self.ok
        return data


@dataclass
class DemoResult:
    """Each worker's result (the stack's first worker first), and how the run as a whole went."""

    workers: list[LaneResult]
    elapsed_seconds: float
    timed_out_phase: str | None = None

    @property
    def ok(self) -> bool:
        return self.timed_out_phase is None and all(worker.ok for worker in self.workers)

    def to_json(self) -> dict[str, Any]:
        """The first worker's result at the top level (a single-worker demo's report keys), every worker's under
        ``workers`` by name; ``ok`` is the whole run's, the exit code's."""
        first = self.workers[0].to_json() if self.workers else {}
        return first | {
            "elapsed_seconds": self.elapsed_seconds,
            "timed_out_phase": self.timed_out_phase,
            "ok": self.ok,
            "workers": {worker.worker: worker.to_json() for worker in self.workers},
        }


# --------------------------------------------------------------------------- the lane


class RecordingDownstream(LoopbackWebhook):
    """A loopback downstream (the webhook, the report store) that counts each event's attempts and answers.

    A success is counted when the 2xx is sent, so ``successes[id] > 1`` is a duplicate side effect.
    """

    def __init__(self) -> None:
        super().__init__()
        self.attempts: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.refusals: Counter[int] = Counter()
        self._lock = threading.Lock()

    def attempt(self, event_id: str) -> int:
        """Count an attempt for ``event_id``; returns which one it is (1 for the first)."""
        with self._lock:
            self.attempts[event_id] += 1
            return self.attempts[event_id]

    def answered(self, event_id: str, status: int) -> int:
        """Record the answer ``status`` to ``event_id``'s attempt; returns it."""
        with self._lock:
            if 200 <= status < 300:
                self.successes[event_id] += 1
            else:
                self.refusals[status] += 1
        return status

    def delivered(self) -> set[str]:
        with self._lock:
            return {event_id for event_id, n in self.successes.items() if n}


class Lane:
    """One worker's queue pair, producer, downstream and fleet; :meth:`result` accounts for its events.

    Deliveries are counted where the lane's ``downstream`` (None: it has none) saw them; a lane without one
    overrides :meth:`successes` (:class:`consumer.local.demo_samples.SamplesLane`: the consumers' logs).
    """

    def __init__(
        self,
        worker: str,
        mix: Mix,
        plan: Sequence[Planned],
        downstream: RecordingDownstream | None,
        task_environment: Mapping[str, str],
        sqs: Any,
        log_dir: Path,
    ) -> None:
        self.worker, self.mix, self.plan, self.downstream, self.sqs = worker, mix, list(plan), downstream, sqs
        self.env = dict(task_environment)
        self.handler = self.env.get("CONSUMER_HANDLER", "?")
        self.queue_url, self.dlq_url = self.env["QUEUE_URL"], self.env["DLQ_URL"]
        self.stop_timeout = float(self.env["CONSUMER_STOP_TIMEOUT_SECONDS"])
        log_dir.mkdir(parents=True, exist_ok=True)
        extra = {mix.url_env: downstream.url} if mix.url_env and downstream is not None else {}
        self.fleet = Fleet(consumer_environment(self.env, extra), log_dir, task_volume=task_volume_paths(self.env))
        self.produced = 0
        self.depths = (0, 0, 0)  # (source visible, source in flight or delayed, DLQ), refreshed by look()
        self.producer: threading.Thread | None = None
        self.redrive: dict[str, Any] = {}
        self.unsent: list[str] = []  # what consumer.producer could not send: the run stops and fails naming them

    def start(self) -> None:
        """Start the lane's downstream, if it has one (its consumers start with :meth:`Fleet.start`)."""
        if self.downstream is not None:
            self.downstream.start()

    def stop(self) -> None:
        """Kill whatever of its fleet still runs and stop its downstream (the demo's clean-up)."""
        self.fleet.kill_all()
        if self.downstream is not None:
            self.downstream.stop()

    def successes(self) -> Mapping[str, int]:
        """Successful deliveries per event id, as the downstream counted them."""
        return self.downstream.successes if self.downstream is not None else {}

    def delivered(self) -> set[str]:
        """The event ids delivered at least once."""
        return self.downstream.delivered() if self.downstream is not None else set()

    def refusals(self) -> Mapping[int, int]:
        """The downstream's refusals by HTTP status (none without a downstream)."""
        return self.downstream.refusals if self.downstream is not None else {}

    def ids(self, place: str, *, but: Iterable[str] = ()) -> set[str]:
        """The event ids whose kind must end in ``place``, except the kinds in ``but``."""
        return {p.event_id for p in self.plan if self.mix.kinds[p.kind].place == place and p.kind not in but}

    @property
    def expected_dlq(self) -> int:
        return len(self.ids(DEAD_LETTERED))

    def producing(self) -> bool:
        return self.producer is not None and self.producer.is_alive()

    def start_producer(self, produce_seconds: float, halfway: Callable[[], None] | None = None) -> None:
        self.producer = threading.Thread(
            target=self._produce, args=(produce_seconds, halfway), name=f"producer-{self.worker}", daemon=True
        )
        self.producer.start()

    def _produce(self, produce_seconds: float, halfway: Callable[[], None] | None) -> None:
        """Send the plan through :func:`consumer.producer.send` in batches of 10, paced over ``produce_seconds``;
        ``halfway()`` once half is sent. What it could not send after its retries goes to ``unsent``, named."""
        sends = batches(self.plan)
        pause = produce_seconds / max(1, len(sends))
        for batch in sends:
            try:
                result = send(self.sqs, self.queue_url, [outgoing(p) for p in batch])
            except Exception as error:  # noqa: BLE001 (a thread's error would end only the thread: report it)
                self.unsent += [f"{p.event_id}: {type(error).__name__}: {error}" for p in batch]
                return
            self.unsent += [f"{f.message.idempotency_key}: {f.code}: {f.error}" for f in result.failed]
            self.produced += len(result.sent)
            if halfway is not None and self.produced >= len(self.plan) // 2:
                halfway, call = None, halfway
                call()
            time.sleep(pause)

    def tenants(self) -> dict[str, dict[str, int]]:
        """Per tenant: what was produced (the plan) and delivered (the downstream), and what the consumers logged
        under its message_group_id (processed, duplicates skipped, moved to the DLQ); empty when the plan has no tenants."""
        delivered = self.delivered()
        out: dict[str, dict[str, int]] = {}
        for p in self.plan:
            if p.tenant is not None:
                counts = out.setdefault(p.tenant, {"produced": 0, "delivered": 0})
                counts["produced"] += 1
                counts["delivered"] += p.event_id in delivered
        for tenant, counts in out.items():
            logged = self.fleet.tenants.get(tenant, Counter())
            counts["processed"] = logged["message_processed"]
            counts["duplicates_skipped"] = logged["duplicate_skipped"]
            counts["moved_to_dlq"] = logged["message_moved_to_dlq"]
        return dict(sorted(out.items(), key=lambda item: -item[1]["produced"]))

    def look(self) -> tuple[int, int, int]:
        """Read the queue depths into ``depths``: (source visible, in flight or delayed, DLQ visible + in flight)."""
        source, dlq = queue_depth(self.sqs, self.queue_url), queue_depth(self.sqs, self.dlq_url)
        self.depths = (source.visible, source.not_visible + source.delayed, dlq.visible + dlq.not_visible)
        return self.depths

    def busy(self) -> bool:
        """Something is still to come: the producer runs or the source holds messages."""
        return self.producing() or self.depths[:2] != (0, 0)

    def settled(self) -> bool:
        """Every event in its own place as far as the depths show: delivered, or the DLQ holding exactly the rest."""
        return (
            not self.producing()
            and self.depths == (0, 0, self.expected_dlq)
            and self.ids(DELIVERED) <= self.delivered()
        )

    def late_arrivals(self) -> int:
        """How many events to deliver are in the DLQ as late arrivals, as far as the depths show: with the producer
        done and nothing left in the source (nothing in flight either), an event to deliver that was not delivered
        can only be in the DLQ, its receives spent (by a dead consumer's long poll, say). Counted only when the DLQ
        holds exactly that many beyond its expected count; 0 otherwise, and while anything may still move."""
        missing = len(self.ids(DELIVERED) - self.delivered())
        if self.producing() or self.depths[:2] != (0, 0) or self.depths[2] - self.expected_dlq != missing:
            return 0
        return missing

    def shortfall(self) -> str:
        """What :meth:`settled` still waits for, as the depths and the downstream show it (for a wait that ended
        short): the source's depths, the DLQ's against the count expected, and the events not yet delivered."""
        visible, hidden, dead = self.depths
        missing = sorted(self.ids(DELIVERED) - self.delivered())
        named = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        return (
            f"source {visible} visible, {hidden} in flight or delayed; DLQ {dead} of {self.expected_dlq} expected;"
            f" {len(missing)} to deliver not delivered{': ' + named if missing else ''}"
        )

    def result(self) -> LaneResult:
        """Read the DLQ's final places and the source's leftovers, and account for every produced event."""
        held = [
            (event_id_of(message) or message["MessageId"], reason)
            for message, reason in read_dlq(self.sqs, self.dlq_url)
        ]
        dlq = dict(held)
        visible, in_flight, _ = self.look()
        fleet = self.fleet
        return LaneResult(
            worker=self.worker,
            handler=self.handler,
            accounting=account(
                self.plan, self.mix.kinds, self.successes(), dlq, visible + in_flight, Counter(e for e, _ in held)
            ),
            consumers=[
                {
                    "number": c.number,
                    "exit_code": c.final_exit_code,
                    "stopped_in_seconds": c.stopped_in_rounded,
                    "log": str(c.log_path),
                    "health": [asdict(check) for check in c.health],
                }
                for c in fleet.processes
            ],
            retried=fleet.events["message_backoff"],
            heartbeat_extensions=int(fleet.metrics["visibility_extensions"]),
            requeued=int(fleet.metrics["requeued"]),
            sqs_requests=int(fleet.metrics["sqs_requests"]),
            processed=int(fleet.metrics["processed"]),
            duplicates_skipped=int(fleet.metrics["duplicates_skipped"]),
            downstream_refusals={str(k): v for k, v in sorted(self.refusals().items())},
            mix=self.mix,
            redrive=self.redrive,
            circuit={
                "opens": fleet.events["circuit_opened"],
                "closes": len(fleet.circuit_open_seconds),
                "open_seconds": round(sum(fleet.circuit_open_seconds), 1),
                "longest_open_seconds": round(max(fleet.circuit_open_seconds, default=0.0), 1),
            },
            unsent=list(self.unsent),
            tenants=self.tenants(),
            unhealthy=[
                f"#{c.number} ({h.phase}): {h.line}" for c in fleet.processes for h in c.health if not h.healthy
            ],
            body_bytes=sum(len(p.body.encode("utf-8")) for p in self.plan),
        )
