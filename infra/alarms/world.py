"""Modeled scenarios' raw material: the calls a fleet of consumers, producers and an operator make, as events.

A :class:`World` is a script, not a simulator of the runtime: each helper writes the calls the consumer makes for
one message's path, as consumer/runtime does it (a success is a receive and a delete; a failure a receive and a
backoff by visibility change, until the last allowed receive moves it to the DLQ with a send and a delete; a poison
message is moved at once), and the counts the consumer writes as EMF for them. The SQS, Container Insights and EMF
publishing rules (:mod:`infra.alarms.sqs_model`) turn them into datapoints, as for a recorded run.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from consumer.contract import WorkerContract
from consumer.lambda_target import LambdaTarget
from infra.alarms.events import CALLER, SqsEvent, scripted_event
from infra.alarms.lambda_model import Invocation

MINUTE, HOUR, DAY = 60, 3600, 86400
#: The alarms of a scenario exist from here on; the world runs from t = 0, so they start with 20 minutes of history.
CREATED_SECONDS = 20 * MINUTE
#: Seconds between a message's send and its receive when the fleet keeps up (a long poll answers at once).
PICKUP_SECONDS = 1.0


@dataclass
class WorkerFacts:
    """What a scenario needs to know of one worker of an environment (from its cdk.json and contract)."""

    source: str
    dlq: str
    cluster: str
    service: str
    contract: WorkerContract
    min_tasks: int
    max_tasks: int
    #: A lambda worker's function name and target (None for an ECS worker).
    function: str | None = None
    target: LambdaTarget | None = None
    #: The worker's alarm name prefix (``<stack>`` for the stack's default worker, else ``<stack>-<identity>``).
    prefix: str = ""

    @property
    def visibility_seconds(self) -> int:
        """The source's visibility timeout: the contract's, or the Lambda target's (six function timeouts)."""
        if self.target is not None:
            return self.target.queue_visibility_seconds
        return self.contract.visibility_timeout_seconds

    @property
    def duration(self) -> float:
        """The handler's average duration (the contract defaults it to half max_duration when undeclared)."""
        return float(self.contract.average_duration_seconds or max(1, self.contract.max_duration_seconds // 2))

    @property
    def awake_tasks(self) -> int:
        """The fleet a scenario scripts while traffic flows: min_tasks, or one task for a worker that scales to zero
        (its fleet awake; the wake-up scenarios derive it from the wake-up and scaling models instead)."""
        return max(1, self.min_tasks)

    @property
    def per_task_per_minute(self) -> float:
        return self.contract.concurrency * 60 / self.duration


@dataclass
class World:
    """Events, EMF counts and task counts of one scenario, written by the helpers below."""

    facts: WorkerFacts
    events: list[SqsEvent] = field(default_factory=list)
    counts: list[tuple[float, str, float]] = field(default_factory=list)
    tasks: list[tuple[float, int, int]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    #: The first worker's scaling policy from the template (infra.alarms.scaling.ScalingPolicy), for the burst.
    policy: object = None
    #: The first worker's wake-up from the template (infra.alarms.wake_up.WakeUp), None unless min_tasks is 0.
    wake_up: object = None
    #: When the scenario's alarms are created (the timeline's), for a builder that evaluates the wake-up alarm.
    created: int = CREATED_SECONDS
    #: The first worker's Container Insights datapoints that reach CloudWatch late: minute start (s) -> seconds after
    #: the minute's end (math.inf: never), the ``ci-late`` rule (infra.alarms.publishers).
    late_task_counts: dict[float, float] = field(default_factory=dict)
    #: A lambda worker's invocations and throttled invocation requests (their times), :mod:`infra.alarms.lambda_model`.
    invocations: list[Invocation] = field(default_factory=list)
    throttles: list[float] = field(default_factory=list)
    #: The source's visibility timeout, read once: a receive's default hold, written for every scripted message.
    _hold: int = field(init=False)

    def __post_init__(self) -> None:
        self._hold = self.facts.visibility_seconds

    # --- calls ---------------------------------------------------------------------------
    # The events are the helpers' own (an op each writes, an id it issued, a visibility it gives): built unchecked.
    def send(self, t: float, queue: str | None = None, *, by: str = "caller", enqueued: float | None = None) -> str:
        message_id = f"m{next(self._ids)}"
        event = SqsEvent if by != CALLER else scripted_event  # another ``by`` is the caller's: checked
        self.events.append(
            event(t=t, queue=queue or self.facts.source, op="send", message_id=message_id, by=by, enqueued=enqueued)
        )
        return message_id

    def receive(self, t: float, message_id: str, queue: str | None = None, visibility: float | None = None) -> None:
        hold = self._hold if visibility is None else visibility
        self.events.append(scripted_event(t, queue or self.facts.source, "receive", message_id, hold))
        if queue in (None, self.facts.source):
            self.count(t, "received")

    def delete(self, t: float, message_id: str, queue: str | None = None) -> None:
        self.events.append(scripted_event(t, queue or self.facts.source, "delete", message_id))

    def release(self, t: float, message_id: str, seconds: float, queue: str | None = None) -> None:
        self.events.append(scripted_event(t, queue or self.facts.source, "change_visibility", message_id, seconds))

    def call(self, t: float, queue: str | None = None) -> None:
        self.events.append(scripted_event(t, queue or self.facts.source, "call"))

    def handled(self, sent: float, received: float, done: float) -> str:
        """One message of the source: sent, received (its default hold), processed and deleted at ``done``, with
        the consumer's counts. The calls of :meth:`send`, :meth:`receive`, :meth:`delete` and :meth:`count` in one,
        for the fleets' hundreds of thousands of messages."""
        message_id = f"m{next(self._ids)}"
        source = self.facts.source
        self.events += (
            scripted_event(sent, source, "send", message_id),
            scripted_event(received, source, "receive", message_id, self._hold),
            scripted_event(done, source, "delete", message_id),
        )
        self.counts += ((received, "received", 1), (done, "processed", 1), (done, "deleted", 1))
        return message_id

    def count(self, t: float, metric: str, value: float = 1) -> None:
        self.counts.append((t, metric, value))

    def set_tasks(self, t: float, running: int, desired: int | None = None) -> None:
        self.tasks.append((t, running, running if desired is None else desired))

    def late_task_count(self, minute: float, seconds: float = math.inf) -> None:
        """Container Insights' datapoints of the minute starting at ``minute`` reach CloudWatch ``seconds`` after the
        minute's end (default: never)."""
        self.late_task_counts[minute] = seconds

    # --- one message's path ------------------------------------------------------------------
    def processed(self, t: float, *, wait: float = 0.0) -> str:
        """Sent at ``t``, received after ``wait`` (a backlog), done after the average duration, deleted."""
        received = t + PICKUP_SECONDS + wait
        return self.handled(t, received, received + self.facts.duration)

    def poisoned(self, t: float) -> str:
        """A message the handler calls poison: moved to the DLQ with a reason at once (one send, one delete)."""
        message_id = self.send(t)
        received = t + PICKUP_SECONDS
        self.receive(received, message_id)
        done = received + self.facts.duration
        self.dead_letter(done, message_id)
        self.count(done, "poisoned")
        return message_id

    def dead_letter(self, t: float, message_id: str) -> str:
        """The consumer's move: a SendMessage to the DLQ (a caller's send, counted by NumberOfMessagesSent), then the
        delete from the source."""
        moved = self.send(t, self.facts.dlq)
        self.delete(t, message_id)
        self.count(t, "dead_lettered")
        self.count(t, "deleted")
        return moved

    def failing(self, t: float) -> str:
        """A message every attempt fails: backoffs by visibility change, then the consumer's move on its last
        allowed receive (``max_receive_count``)."""
        contract = self.facts.contract
        message_id = self.send(t)
        at = t + PICKUP_SECONDS
        for receive_count in range(1, contract.max_receive_count + 1):
            self.receive(at, message_id)
            at += self.facts.duration
            self.count(at, "failed")
            if receive_count == contract.max_receive_count:
                self.dead_letter(at, message_id)
                break
            backoff = contract.retry_backoff_seconds(receive_count)
            self.release(at, message_id, backoff)
            at += backoff
        return message_id

    def steady(self, start: float, end: float, per_minute: float, kind: str = "processed") -> None:
        """Messages every ``60 / per_minute`` seconds from ``start`` to ``end``, each taking the named path."""
        if per_minute <= 0:
            return
        step = 60.0 / per_minute
        path = {"processed": self.processed, "failing": self.failing, "poisoned": self.poisoned}[kind]
        t = start
        while t < end:
            path(t)
            t += step

    # --- the operator's dlq commands (consumer/ops) ---------------------------------------------
    def dlq_stats(self, t: float) -> None:
        """``dlq stats``: GetQueueAttributes only."""
        self.call(t, self.facts.dlq)

    def dlq_read(self, t: float, message_ids: list[str], *, visibility: float = 30, release: bool = True) -> None:
        """``dlq peek`` / ``export`` (no delete) / ``redrive --dry-run``: each message received (one more receive,
        which SQS counts against the age metric), then released (visibility 0) or left to its lease."""
        self.call(t, self.facts.dlq)
        for index, message_id in enumerate(message_ids):
            self.receive(t + 0.01 * index, message_id, self.facts.dlq, visibility)
            if release:
                self.release(t + 1, message_id, 0, self.facts.dlq)

    def dlq_redrive(self, t: float, message_ids: list[str], *, outcome: str = "processed") -> None:
        """``dlq redrive``: SQS's move task takes every message back to the source, where the consumer processes it (or
        it fails again and comes back). The task sends with SendMessageBatch, so the source counts new messages."""
        self.call(t, self.facts.dlq)
        for index, message_id in enumerate(message_ids):
            at = t + 0.05 * index
            self.delete(at, message_id, self.facts.dlq)
            back = self.send(at, self.facts.source)
            self.receive(at + PICKUP_SECONDS, back)
            done = at + PICKUP_SECONDS + self.facts.duration
            if outcome == "processed":
                self.delete(done, back)
                self.count(done, "processed")
                self.count(done, "deleted")
            else:
                self.dead_letter(done, back)


@dataclass
class Timeline:
    """What a builder returns: the fault's start, the evaluation's end, the queues already idle at t = 0 (and since
    when, negative seconds), and the times DLQ messages would expire (for the "a day before expiry" goal)."""

    onset: float
    end: float
    idle_since: dict[str, float] = field(default_factory=dict)
    expiries: list[float] = field(default_factory=list)
    #: When the alarms are created: after some history, as for a stack that has run a while (a first deploy sets less).
    created: int = CREATED_SECONDS
    #: A worker at zero tasks: each wake-up as (when its alarm acted, when its task ran; None: never), seconds.
    wake_ups: list[tuple[float, float | None]] = field(default_factory=list)
    #: A modeled fleet's cuts of its desired count: (when, from, to, whether the wake-up's policy made it), seconds.
    scale_ins: list[tuple[float, int, int, bool]] = field(default_factory=list)
