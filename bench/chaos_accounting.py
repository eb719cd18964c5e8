"""The chaos suite's verdict, as pure functions over what a run read back, and the result it is recorded in.

Final places come from :func:`consumer.local.accounting.places`, the rule the demo's report uses
too; what is particular to chaos is here: DLQ copies from lost answers, the bad-input corpus,
how each consumer process ended, and the :class:`ChaosResult` both the run (:mod:`bench.chaos`)
and its reports (:mod:`bench.chaos_report`) use. Why an event was delivered twice or ended in
two places is :mod:`bench.chaos_evidence`'s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.corpus import Case
from consumer.exit_codes import ExitCode
from consumer.local import accounting
from consumer.local.harness import Fleet, Planned, event_id_of

#: A consumer killed at start-up, or started while the endpoint is down, exits 2 (a StartupError is
#: refused configuration to the CLI): ECS would start another task, and so does the supervisor here.
EXIT_STARTUP = int(ExitCode.CONFIG)
#: The consumers' log events the report counts.
REPORTED_EVENTS = frozenset(
    {
        "message_processed",
        "message_moved_to_dlq",
        "message_backoff",
        "duplicate_skipped",
        "message_in_progress_elsewhere",
        "receive_failed",
        "message_requeued",
        "dlq_send_failed",
        "handler_failed",
        "idempotency_update_failed",
        "idempotency_unavailable",
        "thread_crashed",
        "startup_failed",
    }
)

Record = dict[str, Any] | None

APPLIED, DEAD_LETTERED = "applied once", "DLQ with a reason"
#: Share of each event kind in the chaos stream, and where it must end.
KINDS: dict[str, tuple[float, str]] = {
    "good": (0.82, APPLIED),
    "flaky": (0.08, APPLIED),  # the downstream answers 503 to its first delivery
    "malformed": (0.05, DEAD_LETTERED),  # not JSON or breaks the schema
    "rejected": (0.05, DEAD_LETTERED),  # the downstream answers 422
}
#: Where each kind must end, in the shared accounting's terms.
PLACES = {
    kind: accounting.DELIVERED if place == APPLIED else accounting.DEAD_LETTERED for kind, (_, place) in KINDS.items()
}


@dataclass
class ChaosResult:
    """One run's results: what :mod:`bench.chaos` records in its JSON and the reports are made from."""

    options: dict[str, Any]
    produced: dict[str, int]
    accounting: dict[str, Any]
    repeats: dict[str, Any]
    corpus: list[dict[str, Any]]
    fifo: dict[str, Any]
    faults: dict[str, dict[str, int]]
    forwarded: dict[str, int]
    outages: list[dict[str, float]]
    kills: int
    consumers: list[dict[str, Any]]
    events: dict[str, int]
    phases: dict[str, float]
    elapsed_seconds: float
    failures: list[str] = field(default_factory=list)
    #: Messages the endpoint handed to two receives at once (bench.chaos_evidence.double_hand_outs); older runs
    #: recorded none.
    double_hand_outs: list[dict[str, Any]] = field(default_factory=list)
    #: The other handler shapes' fleets by name ("batch", "async"), each accounted for as the thread fleet above is
    #: (bench.chaos_lanes.lane_result); older runs had none.
    fleets: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChaosResult:
        """Read back :meth:`to_json` output (to rewrite the docs from a stored run)."""
        return cls(**{k: v for k, v in data.items() if k != "ok"})


def account_stream(
    plan: Sequence[Planned],
    places: Mapping[str, str],
    applied: set[str],
    by_event: Mapping[str, list[Record]],
    unknown: int,
    left: int,
    sent: set[str],
) -> dict[str, Any]:
    """Where each event of the stream ended. ``places``: kind -> its expected place (accounting's);
    ``by_event``: the DLQ's reason records per event id (``unknown``: DLQ messages of no event);
    ``left``: messages still in the source; ``sent``: the event ids SQS confirmed."""
    found = accounting.places(((p.event_id, places[p.kind]) for p in plan), applied, by_event)
    reasons = Counter(
        (r["kind"] + ": " + r["reason"].split(":")[0]) if r else "no reason (SQS redrive)"
        for records in by_event.values()
        for r in records
    )
    return {
        "applied_once": sum(1 for p in plan if p.event_id in applied),
        "applied_more_than_once": 0,  # the downstream applies a key at most once; repeats below
        "dead_lettered_events": len(by_event),
        "dlq_copies": sum(len(v) for v in by_event.values()),
        "good_in_dlq_with_reason": len(found.dead_lettered_unexpectedly),
        "lost": found.lost,
        "misplaced": found.delivered_unexpectedly,
        "in_two_places": found.in_two_places,
        # Filled by the run from its evidence (bench.chaos_evidence): the events in two places the endpoint caused,
        # those SIGKILLs made SQS redrive, and why each other one is neither.
        "in_two_places_by_endpoint": {},
        "in_two_places_by_sigkill": {},
        "in_two_places_unexplained": {},
        "dlq_without_reason_by_sigkill": {},  # only in the DLQ, with a copy SIGKILLs left for SQS's redrive
        "dlq_without_reason_unexplained": {},
        "dlq_without_reason": found.without_reason,
        "unknown_in_dlq": unknown,
        "left_in_source": left,
        "unsent": [p.event_id for p in plan if p.event_id not in sent],
        "dlq_reasons": dict(reasons.most_common()),
    }


def sort_dlq(
    dlq: Iterable[tuple[dict[str, Any], Record]], corpus_ids: Mapping[str, Case], prefix: str
) -> tuple[dict[str, list[Record]], dict[str, Record], int]:
    """The DLQ's messages split into stream events (by event id), corpus cases (by name), and unknown.

    A corpus case's record is its first dead-lettering (the lowest receive count): one moved again at a later receive
    (its delete landed after its lease, on a loaded machine) was still moved with its reason at the first."""
    by_event: dict[str, list[Record]] = defaultdict(list)
    corpus_found: dict[str, Record] = {}
    unknown = 0
    for message, record in dlq:
        key = event_id_of(message)
        if record and record.get("original_message_id") in corpus_ids:
            name = corpus_ids[record["original_message_id"]].name
            earlier = corpus_found.get(name)
            if earlier is None or record["receive_count"] < earlier["receive_count"]:
                corpus_found[name] = record
        elif key and key.startswith(prefix):
            by_event[key].append(record)
        else:
            unknown += 1
    return by_event, corpus_found, unknown


def dlq_copies(dlq: Iterable[tuple[dict[str, Any], Record]], prefix: str) -> dict[str, list[tuple[str, Record]]]:
    """Event id -> its DLQ copies as (MessageId, reason record or None), for the stream's events (ids starting
    ``prefix``). SQS's redrive keeps a message's MessageId, so a copy without a reason names the source message it
    moved; a copy the consumer sent names it in its record (``original_message_id``)."""
    found: dict[str, list[tuple[str, Record]]] = defaultdict(list)
    for message, record in dlq:
        key = event_id_of(message)
        if key and key.startswith(prefix):
            found[key].append((str(message.get("MessageId")), record))
    return found


def stream_failures(a: Mapping[str, Any], repeats: Mapping[str, Any]) -> list[str]:
    """The stream's failures: anything lost, misplaced or left over, and the repeats, events in two places and DLQ
    copies without a reason whose cause is the consumer's or unknown (those the endpoint or the SIGKILLs caused are
    reported, not failed: bench.chaos_evidence); why SIGKILLs do not explain the others follows their failure."""
    failures = []
    by_endpoint, by_sigkill = a.get("in_two_places_by_endpoint", {}), a.get("in_two_places_by_sigkill", {})
    redriven = a.get("dlq_without_reason_by_sigkill", {})
    two = [key for key in a["in_two_places"] if key not in by_endpoint and key not in by_sigkill]
    reasonless = [key for key in a["dlq_without_reason"] if key not in by_sigkill and key not in redriven]
    for label, values in (
        ("lost", a["lost"]),
        ("in a wrong place", a["misplaced"]),
        ("in two places", two),
        ("in the DLQ without a reason (SQS's silent redrive)", reasonless),
        ("never sent (time ran out)", a["unsent"]),
    ):
        if values:
            failures.append(f"{len(values)} events {label}: {values[:5]}")
    why = {**a.get("dlq_without_reason_unexplained", {}), **a.get("in_two_places_unexplained", {})}
    for key in list(dict.fromkeys(two + reasonless))[:5]:
        if why.get(key):
            failures.append(f"{key}: SIGKILLs do not explain it: {why[key][0]}")
    if a["left_in_source"]:
        failures.append(f"{a['left_in_source']} messages left in the source queue")
    if repeats["unexplained"]:
        causes = "; ".join(
            f"{r['key']} by {', '.join(map(str, r['senders']))}: {r.get('cause', 'unexplained')}"
            for r in repeats["unexplained"]
        )
        failures.append(
            f"{len(repeats['unexplained'])} repeat deliveries explained neither by a SIGKILL nor by the endpoint"
            f" ({causes[:600]})"
        )
    return failures


#: The DLQ reason kinds each event kind may end with: the shape's own for a rejected one (the thread fleet's handler
#: raises PoisonMessage on a 422, the others a declared non_retryable type), ``unattempted`` for any (its lease ran
#: down before it started, at its last receive: bench.chaos_evidence's SIGKILL chains can leave one so).
UNATTEMPTED = "unattempted"


def expected_dlq_kinds(rejected_kind: str) -> dict[str, frozenset[str]]:
    """Event kind -> the reason kinds its DLQ copies may carry, for a fleet whose rejected events end ``rejected_kind``.

    A good or flaky event is dead-lettered only once its retries are spent (``exhausted``); a malformed one is poison
    at its first receive. Any other kind is a handler or runtime that classified the event wrongly, though the event
    is "in the DLQ with a reason" all the same."""
    return {
        "good": frozenset({"exhausted", UNATTEMPTED}),
        "flaky": frozenset({"exhausted", UNATTEMPTED}),
        "malformed": frozenset({"poison", UNATTEMPTED}),
        "rejected": frozenset({rejected_kind, UNATTEMPTED}),
    }


def dlq_kinds(plan: Sequence[Planned], by_event: Mapping[str, list[Record]]) -> dict[str, dict[str, int]]:
    """Event kind -> reason kind -> DLQ copies carrying it (copies without a reason are counted elsewhere)."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for planned in plan:
        for record in by_event.get(planned.event_id, []):
            if record is not None:
                found[planned.kind][str(record.get("kind"))] += 1
    return {kind: dict(counts.most_common()) for kind, counts in sorted(found.items())}


def kind_failures(kinds: Mapping[str, Mapping[str, int]], expected: Mapping[str, frozenset[str]]) -> list[str]:
    """A failure per event kind some of whose DLQ copies carry a reason kind it may not end with."""
    failures = []
    for kind, counts in kinds.items():
        wrong = {reason: n for reason, n in counts.items() if reason not in expected.get(kind, frozenset())}
        if wrong:
            allowed = " or ".join(sorted(expected.get(kind, frozenset())))
            found = ", ".join(f"{n} {reason}" for reason, n in wrong.items())
            failures.append(f"{kind} events dead-lettered with the wrong reason kind: {found} (expected {allowed})")
    return failures


def dead_lettered_at_first_receive(record: Record) -> bool:
    """A poison message the consumer moved itself, with its reason, on its first receive."""
    return record is not None and record["receive_count"] == 1 and record["kind"] == "poison"


def check_of(name: str, what: str, place: str, record: Record, ok: bool, **extra: Any) -> dict[str, Any]:
    """One corpus or FIFO row of the report."""
    return {
        "name": name,
        "what": what,
        **extra,
        "place": place,
        "receive_count": record["receive_count"] if record else None,
        "reason": record["reason"][:120] if record else None,
        "ok": ok,
    }


def corpus_checks(corpus: Iterable[Case], found: Mapping[str, Record]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each standard corpus case: in the DLQ with a reason at receive 1, or a failure."""
    checks, failures = [], []
    for case in corpus:
        record = found.get(case.name)
        ok = dead_lettered_at_first_receive(record)
        place = "DLQ" if record else "missing"
        checks.append(check_of(case.name, case.what, place, record, ok, body_chars=len(case.body)))
        if not ok:
            failures.append(f"corpus {case.name}: not in the DLQ with a reason at receive 1 ({record})")
    return checks, failures


def consumer_endings(
    fleets: Sequence[tuple[str, Fleet]],
    label: Callable[[Fleet, int], str],
    killed: Mapping[str, float],
    replaced: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """How each consumer process ended (SIGKILL, on its own, SIGTERM), and the endings that fail the run.

    ``fleets``: (name, fleet); ``label`` names a fleet's consumer number as the supervisor does; ``killed`` and
    ``replaced`` are the supervisor's, by consumer label.
    """
    consumers, failures = [], []
    for name, one in fleets:
        for c in one.processes:
            own_label = label(one, c.number)
            how = "SIGKILL" if own_label in killed else None
            own = [r for r in replaced if r["label"] == own_label]
            if own:
                how = f"exited on its own ({own[0]['exit_code']})"
            elif how is None:
                how = "SIGTERM"
            code = c.final_exit_code
            consumers.append(
                {
                    "fleet": name,
                    "number": c.number,
                    "ended_by": how,
                    "exit_code": code,
                    "stopped_in_seconds": c.stopped_in_rounded,
                }
            )
            if how == "SIGTERM" and code != 0:
                failures.append(f"consumer {own_label} exited {code} after SIGTERM")
            if own and own[0]["exit_code"] != EXIT_STARTUP:
                failures.append(f"consumer {own_label} crashed with exit {own[0]['exit_code']}")
    return consumers, failures


def reported_events(events: Mapping[str, int]) -> dict[str, int]:
    """The log events the report shows, sorted by name."""
    return {k: v for k, v in sorted(events.items()) if k in REPORTED_EVENTS or k.startswith("moved_to_dlq:")}
