"""Why an event reached the downstream twice, or ended in two places: the causes, read from what the run recorded.

The consumer promises one effect per event; a second 200 for one ``Idempotency-Key`` (a repeat delivery) or an
event both applied and dead-lettered needs a cause, and the run records what it takes to name one:

* the proxy sees every SQS request a consumer makes, and each consumer's botocore ``User-Agent`` carries its label
  (``AWS_SDK_UA_APP_ID``, set by the supervisor): :class:`ReceiveLog` keeps which receive answer handed which
  message (with its ``idempotency-key``, the event id) to whom, when, at which ``ApproximateReceiveCount``, and
  every visibility change or delete sent for it;
* the downstream records each delivery's sender and arrival, the supervisor each SIGKILL;
* each consumer's log says what it did with each message, by MessageId (:class:`ConsumerLogs`).

A repeat's cause (:func:`classify_repeats`): the first is checked against every earlier successful delivery of the
key, the others against the last one (whose completion should have made the repeat's claim find the key done):

``endpoint``
    The repeat arrived inside the earlier holder's lease: the earlier holder received the event at ``h`` (the proxy
    stamps the answer before passing it on, so its claim came after ``h`` and its idempotency lease ran at least
    until ``h + lease``), and the repeat's sender claimed before it delivered, so before ``h + lease``. The store
    admitted a second claim on a live lease, which a DynamoDB conditional write never does: moto's server runs
    requests on threads without a lock around its backends, and two concurrent conditional PutItems on one key can
    both succeed there (docs/evidence/CHAOS.md has the reproduction). Not the consumer's.
``sigkill``
    The earlier sender was SIGKILLed before the repeat arrived and its log never says the event's message was
    processed: it died between the downstream's 200 and recording completion, so after its lease another consumer
    delivered again. The kill is compared with the repeat, never with the earlier delivery's arrival: the harness
    stamps an arrival when its (busy) downstream thread gets to the request, which under load can be after it
    stamped the kill of the sender, although the request was sent before.
``lease_lapsed``
    The earlier sender was alive when the repeat arrived, and the repeat came at least a lease after the earlier
    sender received the event: it held the event past its lease without renewing it (a stalled heartbeat: the
    consumer's fault, or a machine too loaded to run it). The earlier sender's log lines for the message are the
    evidence. Fails the run.
``unexplained``
    Anything else. Fails the run.

An event applied and also in the DLQ, or in the DLQ with a copy without a reason, has two causes that are not the
consumer's:

``endpoint``
    One of its messages was handed to a second receive while the first receive's lease was running
    (:func:`double_hand_outs`): the two holders then act on one message at once (the one that finds the other's claim
    hands a copy back; the other, at its last receive, dead-letters the original), which SQS, handing a message to one
    receive per visibility timeout, never causes.
``sigkill``
    A holder whose message's fate was decided (applied, or dead-lettered with its reason) was SIGKILLed before a
    delete for it was applied (a consumer batches a delete for up to a second, and takes longer on a loaded machine),
    so the message came back (:func:`two_places_by_sigkill`): every later receive ended with nobody holding it (its
    holder SIGKILLed so, or the answer never reaching a consumer: lost by the proxy, or handed to the long poll a
    SIGKILLed consumer left waiting at moto) until SQS's redrive moved it without a reason; or, dead-lettered before
    it was applied, a later receive applied it; or, an event nobody decided, every receive of it ended so from its
    first (each holder SIGKILLed before it got to the event: a batch handler's consumer holds a batch's worth). A
    holder alive at the end of its lease with no delete applied, or that gave up its delete, is the consumer's, and
    fails the run.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.proxy import Exchange
from consumer.runtime.idempotency import IDEMPOTENCY_KEY_ATTRIBUTE

SIGKILL, ENDPOINT, LEASE_LAPSED, UNEXPLAINED = "sigkill", "endpoint", "lease_lapsed", "unexplained"
#: The causes that fail the run: the consumer's (or a machine too loaded to run it), or none found.
CONSUMER_CAUSES = frozenset({LEASE_LAPSED, UNEXPLAINED})
#: The environment variable botocore appends to its User-Agent as ``app/<value>``: each consumer's label.
UA_APP_ID_ENV = "AWS_SDK_UA_APP_ID"
_APP_ID = re.compile(r"\bapp/(\S+)")
_CHANGES = frozenset({"ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "DeleteMessage", "DeleteMessageBatch"})
_LOST_LEASE = "no longer held its lease"


@dataclass
class Delivery:
    sender: str  # the consumer's label (the last segment of its webhook URL's path)
    at: float  # monotonic, when the downstream read the request
    status: int


@dataclass(frozen=True)
class Receive:
    """One message in one ReceiveMessage answer moto gave."""

    sender: str | None  # the receiving consumer's label; None for a client without one
    message_id: str
    receive_count: int
    key: str | None  # the idempotency-key attribute: the event id
    at: float  # monotonic, when the answer came back from moto (before the proxy passed it on)
    passed_on: bool  # the consumer got it (False: a lost answer; the message is in flight with nobody)
    visibility: float | None = None  # the receive's own VisibilityTimeout, if it asked for one (else the queue's)
    handle: str = ""  # the receipt handle this receive gave: its deletes and visibility changes name it


@dataclass(frozen=True)
class Ack:
    """A delete or visibility change sent with one receive's handle, and whether moto applied it."""

    operation: str  # "delete" or "visibility"
    sent_at: float  # monotonic, when the request reached the proxy
    applied: bool  # moto answered 200 without listing the entry as failed (the client may not have seen it)
    seconds: float | None = None  # a visibility change's new timeout


@dataclass
class ReceiveLog:
    """The proxy's observer: every message a receive answer carried, every visibility change and delete sent."""

    receives: list[Receive] = field(default_factory=list)
    #: MessageId -> when each visibility change or delete naming one of its receipt handles reached the proxy.
    changes: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    #: Receipt handle -> each delete and visibility change sent with it, and how moto answered.
    acks: dict[str, list[Ack]] = field(default_factory=lambda: defaultdict(list))
    _message_of: dict[str, str] = field(default_factory=dict)  # receipt handle -> MessageId
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, exchange: Exchange) -> None:
        if exchange.operation == "ReceiveMessage" and exchange.status == 200:
            self._received(exchange)
        elif exchange.operation in _CHANGES:
            self._acknowledged(exchange)

    def _acknowledged(self, exchange: Exchange) -> None:
        # Recorded whatever the answer: a failed forward or a lost answer may still have been applied.
        request = json.loads(exchange.body or b"{}")
        batch = "Entries" in request
        entries = request.get("Entries") or [request]
        failed: set[str] = set()
        if exchange.status == 200 and batch:
            failed = {str(f.get("Id")) for f in json.loads(exchange.answer or b"{}").get("Failed", [])}
        operation = "delete" if exchange.operation.startswith("Delete") else "visibility"
        with self._lock:
            for entry in entries:
                handle = str(entry.get("ReceiptHandle"))
                message_id = self._message_of.get(handle)
                if message_id is None:
                    continue
                self.changes[message_id].append(exchange.sent_at)
                applied = exchange.status == 200 and str(entry.get("Id")) not in failed
                seconds = entry.get("VisibilityTimeout")
                ack = Ack(operation, exchange.sent_at, applied, None if seconds is None else float(seconds))
                self.acks[handle].append(ack)

    def _received(self, exchange: Exchange) -> None:
        label = _APP_ID.search(exchange.user_agent)
        sender = label[1] if label else None
        asked = json.loads(exchange.body or b"{}").get("VisibilityTimeout")
        visibility = None if asked is None else float(asked)
        for message in json.loads(exchange.answer).get("Messages", []):
            key = message.get("MessageAttributes", {}).get(IDEMPOTENCY_KEY_ATTRIBUTE, {}).get("StringValue")
            count = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 0))
            at, passed_on = exchange.answered_at, exchange.passed_on
            handle = message["ReceiptHandle"]
            receive = Receive(sender, message["MessageId"], count, key, at, passed_on, visibility, handle)
            with self._lock:
                self._message_of[handle] = message["MessageId"]
                self.receives.append(receive)

    def only(self, senders: Callable[[str], bool]) -> ReceiveLog:
        """A copy holding the receives of the consumers ``senders`` accepts (by label), and the visibility changes
        and deletes of what they received: one fleet's record, when several fleets share the proxy."""
        with self._lock:
            receives = [r for r in self.receives if r.sender is not None and senders(r.sender)]
            messages, handles = {r.message_id for r in receives}, {r.handle for r in receives}
            changes = defaultdict(list, {m: list(at) for m, at in self.changes.items() if m in messages})
            acks = defaultdict(list, {h: list(acks) for h, acks in self.acks.items() if h in handles})
            return ReceiveLog(receives, changes, acks, {h: m for h, m in self._message_of.items() if h in handles})

    def of_message(self, message_id: str) -> list[Receive]:
        """Every receive of one message, passed on or not, in order."""
        with self._lock:
            return sorted((r for r in self.receives if r.message_id == message_id), key=lambda r: r.at)

    def holds(self) -> dict[str, list[Receive]]:
        """Per event id, the receives that reached a consumer, in order."""
        with self._lock:
            found: dict[str, list[Receive]] = defaultdict(list)
            for receive in sorted(self.receives, key=lambda r: r.at):
                if receive.key is not None and receive.passed_on and receive.sender is not None:
                    found[receive.key].append(receive)
            return found


def double_hand_outs(log: ReceiveLog, lease_seconds: float) -> dict[str, list[Receive]]:
    """MessageId -> the two receives that got it at once: the second answered with the same receive count (one
    receive handed to two receivers), or less than half the first receive's visibility timeout (its own, else the
    queue's ``lease_seconds``) after it, with no visibility change or delete of the message sent in between (half: room
    for the time between moto marking the message received and the proxy stamping its answer). SQS hands a message
    to one receive per visibility timeout
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html)."""
    by_message: dict[str, list[Receive]] = defaultdict(list)
    for receive in sorted(log.receives, key=lambda r: r.at):
        by_message[receive.message_id].append(receive)
    found = {}
    for message_id, receives in by_message.items():
        changed = log.changes.get(message_id, [])
        for first, second in zip(receives, receives[1:], strict=False):
            quiet = not any(first.at - lease_seconds <= at <= second.at for at in changed)
            invisible = lease_seconds if first.visibility is None else first.visibility
            if first.receive_count == second.receive_count or (quiet and second.at - first.at < invisible / 2):
                found[message_id] = [first, second]
                break
    return found


@dataclass(frozen=True)
class Line:
    sender: str
    event: str
    receive_count: int | None
    timestamp: str


class ConsumerLogs:
    """Every consumer's JSON log lines about each message (by MessageId), and the store's lost-lease warnings."""

    def __init__(self, logs: Iterable[tuple[str, Path]]) -> None:
        """``logs``: each consumer's label and log file."""
        self.by_message: dict[str, list[Line]] = defaultdict(list)
        self.lost_leases: dict[str, list[Line]] = defaultdict(list)  # event id -> the warnings naming it
        for label, path in logs:
            for raw in path.read_bytes().splitlines() if path.exists() else []:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue  # a line cut by a SIGKILL
                if not isinstance(line, dict) or "event" not in line:
                    continue
                entry = Line(label, str(line["event"]), line.get("receive_count"), str(line.get("timestamp", "")))
                if "message_id" in line:
                    self.by_message[str(line["message_id"])].append(entry)
                elif _LOST_LEASE in entry.event:
                    for key in re.findall(r"attr:(\S+)", entry.event):
                        self.lost_leases[key].append(entry)

    def processed(self, sender: str, message_ids: Iterable[str]) -> bool:
        """Whether ``sender`` logged one of ``message_ids`` processed (logged after its completion was recorded)."""
        return any(
            line.sender == sender and line.event == "message_processed"
            for message_id in message_ids
            for line in self.by_message.get(message_id, [])
        )

    def gave_up_deleting(self, sender: str, message_id: str) -> bool:
        """Whether ``sender`` logged giving up a delete of ``message_id`` (its acknowledger's tries spent)."""
        return any(
            line.sender == sender and line.event == "delete_failed" for line in self.by_message.get(message_id, [])
        )

    def told(self, message_ids: Iterable[str], senders: Iterable[str]) -> list[str]:
        """What ``senders`` logged about ``message_ids``, one short string per line, in log order."""
        wanted = set(senders)
        lines = [line for m in message_ids for line in self.by_message.get(m, []) if line.sender in wanted]
        return [f"{line.timestamp[11:23]} {line.sender} {line.event} (receive {line.receive_count})" for line in lines]


@dataclass(frozen=True)
class Run:
    """What a run recorded, for the classifiers: kills by consumer label, receives, logs, the lease, the start."""

    killed: Mapping[str, float]
    receives: ReceiveLog
    logs: ConsumerLogs
    lease_seconds: float
    started: float
    #: The redrive policy's maxReceiveCount: a message SQS moved itself had this many receives (None: not checked).
    redrive_max_receive_count: int | None = None

    def at(self, seconds: float) -> str:
        """A monotonic time as the evidence shows it: seconds since the run started."""
        return f"+{seconds - self.started:.2f} s"


def classify_repeats(deliveries: Mapping[str, Sequence[Delivery]], run: Run) -> dict[str, Any]:
    """Every delivery after the first 200 per key, with its cause (see the module) and the evidence for it."""
    holds = run.receives.holds()
    found = []
    for key, history in deliveries.items():
        successes = [d for d in history if d.status == 200]
        for n in range(1, len(successes)):
            cause, evidence = _cause(key, successes[:n], successes[n], holds.get(key, []), run)
            found.append({"key": key, "senders": [d.sender for d in successes], "cause": cause, "evidence": evidence})
    return {
        "raw_repeat_deliveries": len(found),
        "explained_by_sigkill": sum(1 for r in found if r["cause"] == SIGKILL),
        "caused_by_endpoint": sum(1 for r in found if r["cause"] == ENDPOINT),
        # The consumer's (or the machine's load), or no cause found: these fail the run.
        "unexplained": [r for r in found if r["cause"] in CONSUMER_CAUSES],
        "repeats": found,
    }


def _cause(
    key: str, earlier: Sequence[Delivery], repeat: Delivery, holds: Sequence[Receive], run: Run
) -> tuple[str, list[str]]:
    def at(seconds: float) -> str:
        return f"+{seconds - run.started:.2f} s"

    def held_by(delivery: Delivery) -> list[Receive]:
        return [h for h in holds if h.sender == delivery.sender and h.at <= delivery.at]

    def told(delivery: Delivery) -> list[str]:
        return run.logs.told(sorted({h.message_id for h in held_by(delivery)}), {delivery.sender, repeat.sender})

    again = f"{repeat.sender} delivered again at {at(repeat.at)}"
    for before in earlier:
        held = held_by(before)
        # The earliest receive before the delivery: whichever receive the delivering claim followed, it came after this.
        if held and repeat.at < held[0].at + run.lease_seconds:
            return ENDPOINT, [
                f"{before.sender} received {key} at {at(held[0].at)} (message {held[0].message_id}, receive"
                f" {held[0].receive_count}) and delivered at {at(before.at)}; {again}, inside {before.sender}'s"
                f" {run.lease_seconds:g} s lease: the store admitted a second claim on a live lease",
                *told(before),
            ]
    before = earlier[-1]  # its completion is what should have made the repeat's claim find the key done
    held = held_by(before)
    killed = run.killed.get(before.sender)
    if killed is not None and killed <= repeat.at:
        if not run.logs.processed(before.sender, {h.message_id for h in held}):
            return SIGKILL, [
                f"{before.sender} delivered (read by the downstream at {at(before.at)}) and was SIGKILLed at"
                f" {at(killed)} before logging it processed; {again}",
                *told(before),
            ]
    elif held:
        return LEASE_LAPSED, [
            f"{before.sender} received {key} at {at(held[0].at)}, delivered at {at(before.at)} and was alive when"
            f" {again}: it held the event past its {run.lease_seconds:g} s lease",
            *(f"{line.timestamp[11:23]} {line.sender}: {line.event}" for line in run.logs.lost_leases.get(key, [])),
            *told(before),
        ]
    return UNEXPLAINED, [f"{before.sender} delivered at {at(before.at)}; {again}", *told(before)]


def two_places_by_endpoint(
    in_two_places: Sequence[str], hand_outs: Mapping[str, list[Receive]], logs: ConsumerLogs
) -> dict[str, list[str]]:
    """Event id -> evidence, for the events in two places one of whose messages the endpoint handed to two receives
    at once (:func:`double_hand_outs`); the others stay failures."""
    found: dict[str, list[str]] = {}
    for message_id, (first, second) in hand_outs.items():
        if first.key in in_two_places:
            found[first.key] = [
                f"message {message_id} handed to {first.sender} (receive {first.receive_count}) and to"
                f" {second.sender} (receive {second.receive_count}) {second.at - first.at:.3f} s apart",
                *logs.told([message_id], {s for s in (first.sender, second.sender) if s is not None}),
            ]
    return found


def two_places_by_lost_delete(in_two_places: Sequence[str], run: Run) -> dict[str, list[str]]:
    """Event id -> evidence, for the events in two places one of whose messages a receive handed out after a delete of
    it was answered as applied (moto's unlocked queue, rebuilt by concurrent deletes; SQS's "at least once")."""
    found: dict[str, list[str]] = {}
    deleted: dict[str, tuple[Receive, float]] = {}  # MessageId -> the receive a delete was applied for, and when
    for receive in sorted(run.receives.receives, key=lambda r: r.at):
        gone = deleted.get(receive.message_id)
        if gone is not None and receive.at > gone[1] and receive.key in in_two_places and receive.key not in found:
            found[receive.key] = [
                f"message {receive.message_id}: a delete with receive {gone[0].receive_count}'s handle by"
                f" {gone[0].sender}, sent at {run.at(gone[1])}, was applied; receive {receive.receive_count} by"
                f" {receive.sender} at {run.at(receive.at)} handed it out again",
                *run.logs.told([receive.message_id], {s for s in (gone[0].sender, receive.sender) if s is not None}),
            ]
        applied = [
            a.sent_at for a in run.receives.acks.get(receive.handle, []) if a.operation == "delete" and a.applied
        ]
        if applied and receive.message_id not in deleted:
            deleted[receive.message_id] = (receive, min(applied))
    return found


#: A DLQ copy as the classifiers read it: its MessageId and its reason record (None: SQS's redrive moved it).
Copy = tuple[str, Mapping[str, Any] | None]


def two_places_by_sigkill(
    events: Sequence[str],
    dlq_copies: Mapping[str, Sequence[Copy]],
    deliveries: Mapping[str, Sequence[Delivery]],
    run: Run,
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(excused, not excused): event id -> evidence, for ``events`` (applied and in the DLQ, or in the DLQ with a copy
    without a reason), ``dlq_copies`` giving each event's DLQ copies.

    Excused when SIGKILLs explain each of the event's DLQ copies, from the receive its fate was decided in on (the
    one its effect was applied in, else the first that dead-lettered it with a reason):

    * a copy without a reason (SQS's redrive moved the message, MessageId kept): every receive of that message from
      the decision on ended with nobody holding it: its answer never reached a consumer (lost by the proxy, or
      answered to the poll of a consumer SIGKILLed before), or its holder was SIGKILLed before the end of its lease
      with no delete for it applied. Each such receive cost the message one of the redrive policy's receives, its
      fate unchanged; past ``maxReceiveCount`` SQS moved it to the DLQ
      (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html);
    * of an applied event, a copy with a reason: its holder dead-lettered the message at a receive before the one the
      effect was applied in, and was SIGKILLed before a delete for it was applied. The consumer sends the DLQ copy
      before it deletes (at worst in two places, never in none: consumer/runtime/settlement.py), so the message came
      back and a later receive applied it.

    * of an event nobody decided (every copy without a reason), and of another message of the event than the one
      decided (a send repeated after a lost answer): every receive of it, from its first, ended so.

    A holder alive at the end of its lease without a delete applied, or that gave up its delete (``delete_failed``),
    a delete applied that did not end the message, a receive missing from the records, a copy dead-lettered after
    the effect was applied, or an event nobody decided with a copy carrying a reason: not excused (the consumer's,
    or no cause found).
    """
    excused: dict[str, list[str]] = {}
    refused: dict[str, list[str]] = {}
    for key in events:
        ok, evidence = _explained_by_kills(key, dlq_copies.get(key, ()), deliveries.get(key, ()), run)
        (excused if ok else refused)[key] = evidence
    return excused, refused


def _explained_by_kills(
    key: str, copies: Sequence[Copy], history: Sequence[Delivery], run: Run
) -> tuple[bool, list[str]]:
    """Whether SIGKILLs explain each of ``key``'s DLQ copies, and the evidence: what fails the rule first, if anything."""
    if not copies:
        return False, [f"{key}: no DLQ copy recorded"]
    applied = next((d for d in history if d.status == 200), None)
    if applied is not None:
        held = [h for h in run.receives.holds().get(key, []) if h.sender == applied.sender and h.at <= applied.at]
        if not held:
            return False, [f"{applied.sender} applied {key} at {run.at(applied.at)}; no receive of it by them recorded"]
        decided = held[-1]  # the receive the effect was applied in: the last one before the delivery
        head = f"{applied.sender} applied {key} (read by the downstream at {run.at(applied.at)}) holding message"
    else:
        moves = [m for m in (_dead_lettering(record, run) for _, record in copies if record is not None) if m]
        if not moves and all(record is None for _, record in copies):  # nobody decided it: every receive counts
            lines = [f"nobody applied or dead-lettered {key}: each receive of its message ended with nobody holding it"]
            problems = [problem for message_id, _ in copies for problem in _every_receive(message_id, run, lines)]
            return not problems, problems + lines
        if not moves:
            return False, [f"{key}: neither applied nor dead-lettered with a reason, yet in the DLQ"]
        decided = min(moves, key=lambda r: r.at)
        head = f"{decided.sender} dead-lettered {key} with its reason, holding message"
    problems: list[str] = []
    lines = [f"{head} {decided.message_id} from receive {decided.receive_count} at {run.at(decided.at)}"]
    for message_id, record in copies:
        if record is None and message_id != decided.message_id:
            # Another copy of the event (a producer's send repeated after a lost answer): all its receives count.
            problems += _every_receive(message_id, run, lines)
        elif record is None:
            problems += _receives_after(message_id, decided.at, run, lines)
        elif applied is not None:
            problems += _dead_lettered_before(record, decided, run, lines)
    return not problems, problems + lines


def _every_receive(message_id: str, run: Run, lines: list[str]) -> list[str]:
    """:func:`_receives_after` for every receive of ``message_id``, from its first (which must be recorded)."""
    first = next(iter(run.receives.of_message(message_id)), None)
    problems = []
    if first is not None and first.receive_count != 1:
        problems.append(f"message {message_id}: its first receive recorded is {first.receive_count}: one missing")
    return problems + _receives_after(message_id, -math.inf, run, lines)


def _dead_lettering(record: Mapping[str, Any], run: Run) -> Receive | None:
    """The receive a consumer's DLQ copy was made in (its record names the message and the receive count)."""
    message_id, count = str(record.get("original_message_id")), record.get("receive_count")
    moved = [r for r in run.receives.of_message(message_id) if r.receive_count == count and r.passed_on]
    return moved[-1] if moved else None


def _dead_lettered_before(record: Mapping[str, Any], source: Receive, run: Run, lines: list[str]) -> list[str]:
    """What fails the rule for a DLQ copy with a reason of an applied event (nothing: dead-lettered before the effect
    was applied by a holder SIGKILLed before its delete); the evidence is added to ``lines``."""
    receive = _dead_lettering(record, run)
    if receive is None:
        problem = f"{record.get('original_message_id')} dead-lettered at receive {record.get('receive_count')}"
        return [f"{problem}, a receive not recorded"]
    what = (
        f"{receive.sender} dead-lettered {receive.message_id} at receive {receive.receive_count} ({record.get('kind')})"
    )
    if receive.at >= source.at:
        problem = f"{what}, not before the receive the effect was applied in: the consumer dead-lettered it after"
        lines.append(problem)
        return [problem]
    fine, line = _ended_unheld(receive, run)
    lines += [f"{what}, before the effect was applied", line]
    lines += run.logs.told([receive.message_id], {receive.sender} if receive.sender is not None else set())
    return [] if fine else [line]


def _receives_after(message_id: str, since: float, run: Run, lines: list[str]) -> list[str]:
    """What fails the rule for the receives of ``message_id`` from ``since`` on (nothing: each ended with nobody
    holding the message); the evidence for each is added to ``lines``."""
    receives = [r for r in run.receives.of_message(message_id) if r.at >= since]
    if not receives:
        return [f"message {message_id}: no receive recorded after the effect was applied"]
    problems = []
    counts = [r.receive_count for r in receives]
    if counts != list(range(counts[0], counts[0] + len(counts))):
        problems.append(f"message {message_id}: receives {counts} recorded after the effect was applied: one missing")
    backstop = run.redrive_max_receive_count
    if backstop is not None and counts[-1] < backstop:
        problems.append(
            f"message {message_id}: last receive recorded {counts[-1]}, redrive after {backstop}: one missing"
        )
    for receive in receives:
        fine, line = _ended_unheld(receive, run)
        lines.append(line)
        if not fine:
            problems.append(line)
    lines.append(f"message {message_id} then moved to the DLQ by SQS's redrive, without a reason")
    lines += run.logs.told([message_id], {r.sender for r in receives if r.sender is not None})
    return problems


def _ended_unheld(receive: Receive, run: Run) -> tuple[bool, str]:
    """Whether ``receive`` ended with nobody holding the message (see :func:`two_places_by_sigkill`), and why."""
    sender = receive.sender
    head = f"receive {receive.receive_count} of {receive.message_id} at {run.at(receive.at)} by {sender}"
    killed = run.killed.get(sender) if sender is not None else None
    acks = run.receives.acks.get(receive.handle, [])
    deletes = [a for a in acks if a.operation == "delete"]
    if any(a.applied for a in deletes):
        return False, f"{head}: a delete for it was applied, yet SQS moved the message later"
    if sender is not None and run.logs.gave_up_deleting(sender, receive.message_id):
        return False, f"{head}: {sender} gave up its delete (delete_failed) while alive: the consumer's"
    sent = f"; deletes sent, none applied, at {', '.join(run.at(a.sent_at) for a in deletes)}" if deletes else ""
    if killed is not None and killed <= receive.at:
        return True, f"{head}: answered after {sender} was SIGKILLed at {run.at(killed)}: nobody held it"
    if not receive.passed_on:
        return True, f"{head}: the answer never reached {sender} (lost by the proxy or its restart): nobody held it"
    lease_end = receive.at + (run.lease_seconds if receive.visibility is None else receive.visibility)
    for change in sorted((a for a in acks if a.operation == "visibility" and a.applied), key=lambda a: a.sent_at):
        lease_end = change.sent_at + (change.seconds or 0.0)  # each change restarts the lease from when it was made
    if killed is None or killed >= lease_end:
        when = "never SIGKILLed" if killed is None else f"SIGKILLed only at {run.at(killed)}"
        return False, (
            f"{head}: {sender} was alive at the end of its lease at {run.at(lease_end)} ({when})"
            f" and no delete for it was applied{sent or '; none sent'}: the consumer's"
        )
    return True, (
        f"{head}: {sender} SIGKILLed at {run.at(killed)} ({killed - receive.at:.2f} s after the receive, its lease"
        f" ran to {run.at(lease_end)}) before a delete for it was applied{sent or '; none sent'}"
    )


@dataclass(frozen=True)
class Traced:
    """What a run's result records of its evidence (see :func:`trace`)."""

    repeats: dict[str, Any]
    by_endpoint: dict[str, list[str]]  # event in two places -> evidence the endpoint caused it
    by_sigkill: dict[str, list[str]]  # event in two places -> evidence SIGKILLs did it
    unexplained: dict[str, list[str]]  # the other events in two places -> why neither cause holds
    hand_outs: list[dict[str, Any]]
    redriven_by_sigkill: dict[str, list[str]]  # event only in the DLQ, a copy without a reason -> evidence, as above
    redriven_unexplained: dict[str, list[str]]  # the others -> why SIGKILLs do not explain them

    def accounting(self) -> dict[str, dict[str, list[str]]]:
        """The events in two places, or in the DLQ without a reason, by cause, as the stream's accounting records them
        (bench.chaos_accounting)."""
        return {
            "in_two_places_by_endpoint": self.by_endpoint,
            "in_two_places_by_sigkill": self.by_sigkill,
            "in_two_places_unexplained": self.unexplained,
            "dlq_without_reason_by_sigkill": self.redriven_by_sigkill,
            "dlq_without_reason_unexplained": self.redriven_unexplained,
        }


def trace(
    deliveries: Mapping[str, Sequence[Delivery]],
    places: Mapping[str, Any],
    run: Run,
    dlq_copies: Mapping[str, Sequence[Copy]] | None = None,
) -> Traced:
    """What a run's result records: the repeats with their causes, the events in two places and those in the DLQ with
    a copy without a reason (``places``: the stream's ``in_two_places`` and ``dlq_without_reason``) the endpoint or
    the SIGKILLs caused (with the evidence) and why the others are neither, and the messages the endpoint handed to
    two receives at once."""
    in_two_places, without_reason = places.get("in_two_places", []), places.get("dlq_without_reason", [])
    hand_outs = double_hand_outs(run.receives, run.lease_seconds)
    recorded = [
        {"message_id": m, "key": first.key, "receives": [[r.sender, r.receive_count] for r in (first, second)]}
        for m, (first, second) in hand_outs.items()
    ]
    by_endpoint = two_places_by_lost_delete(in_two_places, run)
    by_endpoint |= two_places_by_endpoint(in_two_places, hand_outs, run.logs)
    others = [key for key in in_two_places if key not in by_endpoint]
    by_sigkill, unexplained = two_places_by_sigkill(others, dlq_copies or {}, deliveries, run)
    redriven = [key for key in without_reason if key not in in_two_places]
    redriven_by_sigkill, redriven_unexplained = two_places_by_sigkill(redriven, dlq_copies or {}, deliveries, run)
    repeats = classify_repeats(deliveries, run)
    return Traced(repeats, by_endpoint, by_sigkill, unexplained, recorded, redriven_by_sigkill, redriven_unexplained)
