"""What SQS publishes to CloudWatch for a run's calls: the raw ``AWS/SQS`` datapoints, rule by documented rule.

The input is what happened to the queues (:class:`~infra.alarms.events.SqsEvent`, from a recording or a scripted
scenario); the output a :class:`~infra.alarms.definitions.Series`, so a recorded and a modeled scenario meet the same
rules before the alarms read them. Each rule is in :data:`RULES` (id, one line, the page it comes from); where the
documentation is silent, the rule says the reading chosen (``reading=True``) and the functions take a keyword for
the other reading where it matters to an alarm. A function given ``applied`` adds the id of every rule that shaped
its result, so a scenario can check that the rule it is about did apply.

The model is event-driven (a heap of expiries, of visibility ends and of the oldest messages per queue) and samples
each queue once a minute, so eight days of minutes with thousands of messages take a fraction of a second.
Container Insights and the consumer's EMF lines are in :mod:`infra.alarms.publishers` (whose rules :data:`RULES` lists).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infra.alarms.definitions import Series, metric_key
from infra.alarms.events import CALLER, SqsEvent, sorted_events
from infra.alarms.gc_pause import paused_gc
from infra.alarms.lambda_model import LAMBDA_RULES
from infra.alarms.publishers import (
    CI_PER_MINUTE,
    CI_ZERO_TASKS,
    EMF_FLUSH_TIME,
    EMF_SUM_PER_FLUSH,
    MISSING,
    PUBLISHER_RULES,
    ZERO,
    Rule,
    minutes,
)

__all__ = ["RULES", "RULES_BY_ID", "QueueSpec", "rule", "rules_markdown", "sqs_series"]

NAMESPACE = "AWS/SQS"
VISIBLE = "ApproximateNumberOfMessagesVisible"
NOT_VISIBLE = "ApproximateNumberOfMessagesNotVisible"
DELAYED = "ApproximateNumberOfMessagesDelayed"
AGE = "ApproximateAgeOfOldestMessage"
SENT = "NumberOfMessagesSent"
RECEIVED = "NumberOfMessagesReceived"
DELETED = "NumberOfMessagesDeleted"
#: The metrics :func:`sqs_series` publishes (NumberOfEmptyReceives is not: an event does not say whether a receive
#: came back empty, so empty receives are ``call`` events, which only keep a queue active).
METRICS = (VISIBLE, NOT_VISIBLE, DELAYED, AGE, SENT, RECEIVED, DELETED)

#: A queue with no message and no call for this long is inactive: SQS stops publishing its metrics.
IDLE_SECONDS = 6 * 3600
#: The documented worst case of the delay before an inactive queue's metrics come back.
WAKE_DELAY_SECONDS = 900
#: On a standard queue, a message received this many times and not deleted leaves ApproximateAgeOfOldestMessage.
AGE_RECEIVE_LIMIT = 3

SQS_METRICS_URL = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html"
)
SQS_MONITORING_URL = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-monitoring-using-cloudwatch.html"
)
SQS_VISIBILITY_URL = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html"
)
SQS_RETENTION_URL = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-basic-architecture.html"
)
SQS_DLQ_RETENTION_URL = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html"
SQS_DLQ_URL = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html"

SQS_PER_MINUTE = "sqs-per-minute"
SQS_IDLE = "sqs-idle"
SQS_WAKE_DELAY = "sqs-wake-delay"
SQS_VISIBILITY = "sqs-visibility"
SQS_DELAYED_ZERO = "sqs-delayed-zero"
SQS_AGE_HELD = "sqs-age-held"
SQS_AGE_RECEIVES = "sqs-age-receives"
SQS_AGE_DLQ_MOVE = "sqs-age-dlq-move"
SQS_AGE_ALL_EXCLUDED = "sqs-age-all-excluded"
SQS_RETENTION = "sqs-retention"
SQS_RETENTION_MOVE = "sqs-retention-move"
SQS_SENT = "sqs-sent"
SQS_RECEIVED_DELETED = "sqs-received-deleted"
SQS_SAMPLE_INSTANT = "sqs-sample-instant"

SQS_RULES: tuple[Rule, ...] = (
    Rule(
        SQS_PER_MINUTE,
        "SQS publishes each queue's metrics at one-minute intervals (t = the minute's start) while the queue is "
        "active, with QueueName as the only dimension.",
        SQS_MONITORING_URL,
    ),
    Rule(
        SQS_IDLE,
        "A queue is active for up to six hours after it last contained a message or any action accessed it; an "
        "inactive queue publishes nothing.",
        SQS_MONITORING_URL,
    ),
    Rule(
        SQS_WAKE_DELAY,
        "A delay of up to 15 minutes occurs when a queue is activated from an inactive state; modeled as its worst "
        "case: no datapoint for wake_delay_seconds after the call or message that wakes it.",
        SQS_MONITORING_URL,
    ),
    Rule(
        SQS_VISIBILITY,
        "A received message is in flight (NotVisible) until its visibility timeout ends or ChangeMessageVisibility "
        "sets a new one (0: visible at once); a held message not in flight is Visible.",
        SQS_VISIBILITY_URL,
    ),
    Rule(
        SQS_DELAYED_ZERO,
        "ApproximateNumberOfMessagesDelayed counts messages of a delay queue or sent with a delay; the events have "
        "neither, so it is 0 every active minute.",
        SQS_METRICS_URL,
    ),
    Rule(
        SQS_AGE_HELD,
        "ApproximateAgeOfOldestMessage, the age of the oldest non-deleted message (in flight or not), is reported "
        "only while the queue contains at least one message.",
        SQS_METRICS_URL,
    ),
    Rule(
        SQS_AGE_RECEIVES,
        "For standard queues, a message received three or more times and not deleted is moved to the back of the "
        "queue and the metric reflects the next message that hasn't exceeded that threshold (poison pills are "
        "excluded until processed); FIFO queues do not reorder. Receives are counted per queue (reading: the docs "
        "do not say whether a moved message brings its count).",
        SQS_METRICS_URL,
    ),
    Rule(
        SQS_AGE_DLQ_MOVE,
        "When the redrive policy moves a message to a dead-letter queue, its age resets: the DLQ's metric counts from "
        "the move, not from the original send (although a standard queue keeps the enqueue time for expiry).",
        SQS_DLQ_RETENTION_URL,
    ),
    Rule(
        SQS_AGE_ALL_EXCLUDED,
        "Docs silent on what is published when every message held is left out of the age. excluded_age='missing' "
        "(default): no datapoint; 'zero': 0.",
        SQS_METRICS_URL,
        reading=True,
    ),
    Rule(
        SQS_RETENTION,
        "SQS deletes a message that has been in its queue longer than the queue's retention period, counted from its "
        "enqueue time; the deletion is not a DeleteMessage (reading: not counted in NumberOfMessagesDeleted).",
        SQS_RETENTION_URL,
    ),
    Rule(
        SQS_RETENTION_MOVE,
        "For standard queues the expiration is always based on the original enqueue timestamp, unchanged by a move to "
        "the DLQ (the event's enqueued); for FIFO queues the enqueue timestamp resets when the message is moved.",
        SQS_DLQ_RETENTION_URL,
    ),
    Rule(
        SQS_SENT,
        "NumberOfMessagesSent counts the messages added by a caller per minute: a message sent to a dead-letter queue "
        "manually is counted, one moved there by the redrive policy after failed processing is not.",
        SQS_DLQ_URL + "#sqs-dlq-number-of-messages",
    ),
    Rule(
        SQS_RECEIVED_DELETED,
        "NumberOfMessagesReceived counts the messages ReceiveMessage returned per minute; NumberOfMessagesDeleted every "
        "successful DeleteMessage, duplicates included (reading: PurgeQueue, expiry and the redrive policy's moves "
        "are not deletions of a caller and are not counted).",
        SQS_METRICS_URL,
    ),
    Rule(
        SQS_SAMPLE_INSTANT,
        "Docs silent on which instant of a minute the Approximate* gauges describe. Reading: the minute's end (every "
        "call of the minute applied); a message sent and deleted within one minute is never seen as Visible.",
        SQS_METRICS_URL,
        reading=True,
    ),
)

#: Every rule of the model (SQS, Container Insights, EMF, Lambda and its mapping), in the order docs print them.
RULES: tuple[Rule, ...] = SQS_RULES + PUBLISHER_RULES + LAMBDA_RULES
#: The rules that shape every published minute (the others are added to ``applied`` only when they fire).
ALWAYS_APPLIED = frozenset(
    {SQS_PER_MINUTE, SQS_VISIBILITY, SQS_DELAYED_ZERO, SQS_AGE_HELD, SQS_SENT, SQS_RECEIVED_DELETED, SQS_SAMPLE_INSTANT}
)
RULES_BY_ID: Mapping[str, Rule] = {r.id: r for r in RULES}
assert len(RULES_BY_ID) == len(RULES), "rule ids must be unique"
assert {CI_PER_MINUTE, CI_ZERO_TASKS, EMF_FLUSH_TIME, EMF_SUM_PER_FLUSH} <= set(RULES_BY_ID)


def rule(rule_id: str) -> Rule:
    """The rule named ``rule_id``; an unknown id is refused naming the known ones (a catalogue's typo fails loud)."""
    try:
        return RULES_BY_ID[rule_id]
    except KeyError:
        raise KeyError(f"unknown rule {rule_id!r}; known: {', '.join(RULES_BY_ID)}") from None


def rules_markdown() -> str:
    """The rules as a markdown table (id, rule, source), for the docs."""
    lines = ["| id | rule | source |", "| --- | --- | --- |"]
    for r in RULES:
        text = ("**Reading (docs silent).** " if r.reading else "") + r.text.replace("|", "\\|")
        lines.append(f"| `{r.id}` | {text} | {r.url} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class QueueSpec:
    """A queue as the model needs it (its name is the QueueName dimension). ``visibility_timeout`` is the queue's
    default, for scripts that write events: each receive event carries the visibility it was given."""

    name: str
    fifo: bool = False
    retention_seconds: int = 4 * 86400
    visibility_timeout: int = 30


@dataclass(eq=False, slots=True)
class _Message:
    """One message in one queue: ``born`` is where its age counts from, ``expires`` when retention deletes it."""

    id: str
    born: float
    expires: float
    receives: int = 0
    visible_until: float = -math.inf
    in_flight: bool = False
    held: bool = True


@dataclass(eq=False)
class _Queue:
    """A queue's state, its publishing periods ``[(publish_from, until)]`` and per-minute counts."""

    spec: QueueSpec
    last_activity: float
    held: dict[str, _Message] = field(default_factory=dict)
    in_flight: int = 0
    #: Publishing periods; the last one's ``until`` is None while it is open (computed from last_activity).
    periods: list[tuple[float, float | None]] = field(default_factory=list)
    oldest: list[tuple[float, int, _Message]] = field(default_factory=list)
    visibility_ends: list[tuple[float, int, _Message]] = field(default_factory=list)
    counts: dict[str, Counter[int]] = field(
        default_factory=lambda: {SENT: Counter(), RECEIVED: Counter(), DELETED: Counter()}
    )

    def open(self) -> bool:
        return bool(self.periods) and self.periods[-1][1] is None

    def inactive_at(self, t: float) -> bool:
        """Whether the queue is inactive at ``t`` (before applying anything that happens at ``t``)."""
        return not self.held and t >= self.last_activity + IDLE_SECONDS

    def excluded(self, message: _Message) -> bool:
        return not self.spec.fifo and message.receives >= AGE_RECEIVE_LIMIT


class _Model:
    """The event-driven state of every queue; :func:`sqs_series` drives it minute by minute."""

    def __init__(self, queues: Sequence[QueueSpec], start: float, idle_since: Mapping[str, float], wake_delay: float):
        self.queues: dict[str, _Queue] = {}
        self.wake_delay = wake_delay
        self.applied: set[str] = set()
        self.expiries: list[tuple[float, int, _Message, _Queue]] = []
        self.sequence = itertools.count()
        for spec in queues:
            if spec.name in self.queues:
                raise ValueError(f"queue {spec.name!r} given twice")
            queue = _Queue(spec, last_activity=idle_since.get(spec.name, start))
            if not queue.inactive_at(start):
                queue.periods.append((-math.inf, None))  # active since before the start: no wake delay
            self.queues[spec.name] = queue
        unknown = set(idle_since) - set(self.queues)
        if unknown:
            raise ValueError(f"idle_since names queues not given: {', '.join(sorted(unknown))}")

    # --- time passing --------------------------------------------------------------------------
    def expire(self, until: float) -> None:
        """Retention: delete every message whose retention ran out at or before ``until``."""
        while self.expiries and self.expiries[0][0] <= until:
            at, _, message, queue = heapq.heappop(self.expiries)
            if message.held and queue.held.get(message.id) is message:
                self.remove(queue, message, at)
                self.applied.add(SQS_RETENTION)

    def wake(self, queue: _Queue, t: float) -> None:
        """A call or an arriving message at ``t`` on an inactive queue: a new publishing period, after the delay."""
        if queue.open():
            queue.periods[-1] = (queue.periods[-1][0], queue.last_activity + IDLE_SECONDS)
        queue.periods.append((t + self.wake_delay, None))
        if self.wake_delay > 0:
            self.applied.add(SQS_WAKE_DELAY)

    # --- messages ----------------------------------------------------------------------------------
    def add(self, queue: _Queue, message: _Message) -> None:
        old = queue.held.get(message.id)
        if old is not None:
            self.remove(queue, old, message.born)
        queue.held[message.id] = message
        sequence = next(self.sequence)
        heapq.heappush(queue.oldest, (message.born, sequence, message))
        heapq.heappush(self.expiries, (message.expires, sequence, message, queue))

    def remove(self, queue: _Queue, message: _Message, t: float) -> None:
        del queue.held[message.id]
        message.held = False
        if message.in_flight:
            message.in_flight = False
            queue.in_flight -= 1
        if not queue.held:
            queue.last_activity = max(queue.last_activity, t)

    def hide(self, queue: _Queue, message: _Message, t: float, seconds: float) -> None:
        """Visibility: in flight until ``t + seconds``, or visible at once for ``seconds <= 0``."""
        message.visible_until = t + seconds
        if seconds <= 0:
            if message.in_flight:
                message.in_flight = False
                queue.in_flight -= 1
            return
        if not message.in_flight:
            message.in_flight = True
            queue.in_flight += 1
        heapq.heappush(queue.visibility_ends, (message.visible_until, next(self.sequence), message))

    def apply(self, events: Sequence[SqsEvent], index: int, until: float) -> int:
        """Apply ``events[index:]`` (sorted by t) in order, up to the first at or after ``until``; returns its index.

        Each call or arriving message keeps its queue active (and wakes it if inactive). This loop runs once per
        event of a scenario (millions), so it binds what it reads to locals and tests before calling: retention
        only when the earliest expiry is due, the wake only for an inactive queue."""
        queues, expiries, floor = self.queues, self.expiries, math.floor
        count = len(events)
        while index < count:
            event = events[index]
            t = event.t
            if t >= until:
                break
            index += 1
            queue = queues.get(event.queue)
            if queue is None:
                raise ValueError(f"event at t={t} on queue {event.queue!r}, which is not among the queues given")
            if expiries and expiries[0][0] <= t:
                self.expire(t)
            if not queue.held and t >= queue.last_activity + IDLE_SECONDS:
                self.wake(queue, t)
            if t > queue.last_activity:
                queue.last_activity = t
            op, message_id = event.op, event.message_id
            if op == "send":
                assert message_id is not None
                self.send(queue, event, message_id)
                continue
            message = queue.held.get(message_id) if message_id else None
            if op == "receive":
                queue.counts[RECEIVED][floor(t / 60)] += 1
                if message is not None:
                    message.receives += 1
                    assert event.visibility is not None
                    self.hide(queue, message, t, event.visibility)
            elif op == "delete":
                queue.counts[DELETED][floor(t / 60)] += 1
                if message is not None:
                    self.remove(queue, message, t)
            elif op == "change_visibility":
                if message is not None:
                    assert event.visibility is not None
                    self.hide(queue, message, t, event.visibility)
            elif op == "purge":
                for held in list(queue.held.values()):
                    self.remove(queue, held, t)
        return index

    def send(self, queue: _Queue, event: SqsEvent, message_id: str) -> None:
        retention, t = queue.spec.retention_seconds, event.t
        if event.by == CALLER:
            queue.counts[SENT][math.floor(t / 60)] += 1
            self.add(queue, _Message(message_id, t, t + retention))
            return
        # The redrive policy's move: not a caller's send; the message leaves the queue that held it.
        for other in self.queues.values():
            moved = other.held.get(message_id)
            if other is not queue and moved is not None:
                self.remove(other, moved, event.t)
        enqueued = event.t
        if event.enqueued is not None and event.enqueued != event.t:
            self.applied.add(SQS_AGE_DLQ_MOVE)
            self.applied.add(SQS_RETENTION_MOVE)
            if not queue.spec.fifo:
                enqueued = event.enqueued
        self.add(queue, _Message(message_id, born=event.t, expires=enqueued + retention))

    # --- the minute's datapoints -------------------------------------------------------------------
    def publishing(self, queue: _Queue, minute: float) -> bool:
        """Whether the queue publishes the datapoint of ``minute`` (its minute overlaps a publishing period)."""
        for publish_from, until in reversed(queue.periods):
            if until is None:
                until = math.inf if queue.held else queue.last_activity + IDLE_SECONDS
            if minute + 60 > publish_from and minute < until:
                return True
            if until <= minute:
                break
        return False

    def waking(self, queue: _Queue, minute: float) -> bool:
        """Whether ``minute`` is unpublished for the wake delay (the queue woke before its end), not for idling."""
        if not queue.open():
            return False
        publish_from = queue.periods[-1][0]
        return publish_from - self.wake_delay < minute + 60 <= publish_from

    def gauges(self, queue: _Queue, at: float, excluded_age: str, published: bool) -> tuple[int, int, float | None]:
        """Visible, not visible and the age of the oldest message counted, at ``at`` (the rules that shaped them
        are marked applied if the minute is ``published``)."""
        ends = queue.visibility_ends
        while ends and ends[0][0] <= at:
            ended, _, message = heapq.heappop(ends)
            if message.held and message.in_flight and message.visible_until == ended:
                message.in_flight = False
                queue.in_flight -= 1
        oldest = queue.oldest
        while oldest and (not oldest[0][2].held or queue.excluded(oldest[0][2])):
            _, _, message = heapq.heappop(oldest)
            if message.held and published:
                self.applied.add(SQS_AGE_RECEIVES)
        age: float | None = None
        if oldest:
            age = at - oldest[0][0]
        elif queue.held:
            if published:
                self.applied.add(SQS_AGE_ALL_EXCLUDED)
            age = 0.0 if excluded_age == ZERO else None
        return len(queue.held) - queue.in_flight, queue.in_flight, age


@paused_gc()  # millions of acyclic objects: see infra.alarms.gc_pause
def sqs_series(
    events: Sequence[SqsEvent],
    queues: Sequence[QueueSpec],
    *,
    start: float,
    end: float,
    idle_since: Mapping[str, float] | None = None,
    wake_delay_seconds: float = WAKE_DELAY_SECONDS,
    excluded_age: str = MISSING,
    applied: set[str] | None = None,
) -> Series:
    """The AWS/SQS datapoints of ``queues`` for the minutes in ``[start, end)``, from the calls ``events``.

    Times are seconds on the series clock; minutes are its multiples of 60. A queue starts empty and active, or
    inactive if ``idle_since`` says it has had no message and no call since a time six hours or more before
    ``start``. ``excluded_age`` is the reading of an age with every held message left out (``"missing"`` or
    ``"zero"``). The ids of the rules that shaped the result are added to ``applied``.
    """
    if excluded_age not in (MISSING, ZERO):
        raise ValueError(f"excluded_age: must be {MISSING!r} or {ZERO!r}, got {excluded_age!r}")
    if wake_delay_seconds < 0:
        raise ValueError(f"wake_delay_seconds: must be >= 0, got {wake_delay_seconds}")
    model = _Model(queues, start, idle_since or {}, wake_delay_seconds)
    ordered = sorted_events(events)
    points: dict[str, dict[str, list[tuple[float, float]]]] = {name: {m: [] for m in METRICS} for name in model.queues}
    # Each queue with its output lists, bound once: the loop below runs every minute of every queue.
    outputs = []
    for name, queue in model.queues.items():
        out = points[name]
        lists = out[VISIBLE], out[NOT_VISIBLE], out[DELAYED], out[AGE], out[SENT], out[RECEIVED], out[DELETED]
        outputs.append((queue, *lists))
    index = 0
    for minute in minutes(start, end):
        at = minute + 60
        index = model.apply(ordered, index, at)
        model.expire(at)
        for queue, visible_out, in_flight_out, delayed_out, age_out, sent_out, received_out, deleted_out in outputs:
            publishing = model.publishing(queue, minute)
            visible, in_flight, age = model.gauges(queue, at, excluded_age, publishing)
            if not publishing:
                if not model.waking(queue, minute):
                    model.applied.add(SQS_IDLE)
                continue
            key, counts = minute // 60, queue.counts
            visible_out.append((minute, visible))
            in_flight_out.append((minute, in_flight))
            delayed_out.append((minute, 0.0))
            if age is not None:
                age_out.append((minute, age))
            sent_out.append((minute, counts[SENT].get(key, 0)))
            received_out.append((minute, counts[RECEIVED].get(key, 0)))
            deleted_out.append((minute, counts[DELETED].get(key, 0)))
    for event in ordered[index:]:  # after the last minute: checked, not published
        if event.queue not in model.queues:
            raise ValueError(f"event at t={event.t} on queue {event.queue!r}, which is not among the queues given")
    if any(values for per_queue in points.values() for values in per_queue.values()):
        model.applied.update(ALWAYS_APPLIED)
    if applied is not None:
        applied.update(model.applied)
    return Series(
        {
            metric_key(NAMESPACE, metric, {"QueueName": name}): values
            for name, per_queue in points.items()
            for metric, values in per_queue.items()
        }
    )
