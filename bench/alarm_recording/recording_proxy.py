"""The recorder's ears: a proxy between every client and moto's server, and the calls it saw as :class:`SqsEvent`.

Why a proxy: the consumer, the producer and the operator's ``python -m consumer dlq`` commands are separate
processes with their own botocore clients; pointing their ``AWS_ENDPOINT_URL`` at one proxy records what each of them
asked and what the endpoint answered without touching their code. The transport is :class:`bench.proxy.FaultProxy`
with no fault planned (it forwards every request unchanged and hands each exchange to an observer); this module keeps
the exchanges and translates them when asked (:func:`translate`), all at once, because the proxy reports an exchange
after the client has its answer: a DeleteMessage can be observed before the ReceiveMessage whose receipt handle it
names, and translating at the end maps every handle whatever order the observer saw them in.

SQS's own redrive-policy moves happen inside the endpoint, where no client sees them: moto moves a message whose
receive count reached ``maxReceiveCount`` to the DLQ during a later ReceiveMessage on the source, without returning
it. :meth:`RecordingProxy.watch_redrive` wraps ``add_message`` of the DLQ's queue object in moto's in-process backend
(the recorder runs moto's server in its own process): a message arriving with a receive count above 0 was moved, not
sent (a SendMessage always creates a message never received). It is logged as a ``send`` on the DLQ by ``redrive``,
at the moment moto moved it, with ``enqueued`` the time its original SendMessage was answered (SQS keeps the original
enqueue time of a standard queue's message it redrives).

Only botocore's JSON protocol (``X-Amz-Target: AmazonSQS.<Operation>``, every botocore since 1.31) is translated; a
request in another protocol is counted in :attr:`RecordingProxy.unreadable` and the recorder refuses the recording.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from bench.proxy import Exchange, FaultProxy
from infra.alarms.events import REDRIVE, SqsEvent, sorted_events

SQS_TARGET = "AmazonSQS."
#: Operations on messages, translated one event per message; every other operation naming a queue is a ``call``.
_SENDS = frozenset({"SendMessage", "SendMessageBatch"})
_DELETES = frozenset({"DeleteMessage", "DeleteMessageBatch"})
_CHANGES = frozenset({"ChangeMessageVisibility", "ChangeMessageVisibilityBatch"})
#: How much earlier than a receive's ``t`` moto may have taken the message (its answer's way back, on a loaded machine).
HAND_OUT_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class QueueInfo:
    """A recorded queue as the recording's ``queues`` lists it; ``visibility_timeout`` is what a receive that asks
    for none gets."""

    name: str
    fifo: bool
    retention_seconds: int
    visibility_timeout: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "fifo": self.fifo,
            "retention_seconds": self.retention_seconds,
            "visibility_timeout": self.visibility_timeout,
        }


@dataclass(frozen=True)
class Clock:
    """The recording's zero on both clocks: the proxy stamps exchanges with ``time.monotonic()``, the consumer its
    EMF documents with the wall clock (epoch milliseconds)."""

    wall: float
    monotonic: float

    @classmethod
    def now(cls) -> Clock:
        return cls(wall=time.time(), monotonic=time.monotonic())

    def since_monotonic(self, stamp: float) -> float:
        return round(stamp - self.monotonic, 3)

    def since_epoch(self, seconds: float) -> float:
        return round(seconds - self.wall, 3)

    def elapsed(self) -> float:
        return self.since_monotonic(time.monotonic())


@dataclass(frozen=True)
class RedriveMove:
    """A message moto moved to ``queue`` by the redrive policy: when (monotonic), and its original send (epoch ms)."""

    at: float
    queue: str
    message_id: str
    sent_timestamp_ms: int | None


def queue_name(queue_url: str) -> str:
    return urlsplit(queue_url).path.rstrip("/").rsplit("/", 1)[-1]


def _json(raw: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def translate(
    exchanges: Iterable[Exchange],
    clock: Clock,
    queues: Mapping[str, QueueInfo],
    moves: Iterable[RedriveMove] = (),
) -> list[SqsEvent]:
    """The events of ``exchanges`` on ``queues`` (by name; calls on other queues are left out) and of ``moves``.

    Each event's ``t`` is when its request reached the proxy (before moto applied it), except a receive that returned
    messages: that is when moto's answer came back (a long poll hands its messages out when it returns, not when it
    was asked). So each message's events keep their causal order: its send before any receive of it, a receive
    before the delete or visibility change that names its handle, a visibility change before the receive it made
    possible. A request that got no 200 changed nothing but reached the endpoint: a ``call``.
    A batch's failed entries are left out. A delete or visibility change whose receipt handle no recorded receive
    gave (a handle from before the recording) is a ``call``: its message is unknown.
    """
    exchanges = list(exchanges)
    handles: dict[str, str] = {}  # receipt handle -> message id, from every receive's answer
    for exchange in exchanges:
        if exchange.operation == "ReceiveMessage" and exchange.status == 200:
            for message in _json(exchange.answer).get("Messages", []):
                handles[str(message.get("ReceiptHandle"))] = str(message.get("MessageId"))
    events: list[SqsEvent] = []
    for exchange in exchanges:
        request = _json(exchange.body)
        url = request.get("QueueUrl")
        name = queue_name(url) if isinstance(url, str) else request.get("QueueName")
        if not isinstance(name, str) or name not in queues:
            continue
        t = clock.since_monotonic(exchange.sent_at)
        if exchange.status != 200:
            events.append(SqsEvent(t, name, "call"))
            continue
        answer = _json(exchange.answer)
        if exchange.operation == "ReceiveMessage" and answer.get("Messages"):
            t = clock.since_monotonic(exchange.answered_at)
        events.extend(_translate_one(exchange.operation, request, answer, t, queues[name], handles))
    first_sends: dict[str | None, float] = {}
    for event in events:
        if event.op == "send":
            first_sends.setdefault(event.message_id, event.t)
    for move in moves:
        original = first_sends.get(move.message_id)
        if original is None and move.sent_timestamp_ms is not None:
            original = clock.since_epoch(move.sent_timestamp_ms / 1000)
        at = clock.since_monotonic(move.at)
        events.append(SqsEvent(at, move.queue, "send", move.message_id, by=REDRIVE, enqueued=original))
    return sorted_events(events)


def _translate_one(
    operation: str,
    request: Mapping[str, Any],
    answer: Mapping[str, Any],
    t: float,
    queue: QueueInfo,
    handles: Mapping[str, str],
) -> list[SqsEvent]:
    """One answered (HTTP 200) request on ``queue``, as events."""
    name = queue.name
    if operation == "SendMessage":
        return [SqsEvent(t, name, "send", str(answer["MessageId"]))]
    if operation == "SendMessageBatch":
        return [SqsEvent(t, name, "send", str(entry["MessageId"])) for entry in answer.get("Successful", [])]
    if operation == "ReceiveMessage":
        messages = answer.get("Messages", [])
        if not messages:
            return [SqsEvent(t, name, "call")]
        asked = request.get("VisibilityTimeout")
        visibility = float(queue.visibility_timeout if asked is None else asked)
        return [SqsEvent(t, name, "receive", str(m["MessageId"]), visibility=visibility) for m in messages]
    if operation in _DELETES or operation in _CHANGES:
        batch = operation.endswith("Batch")
        entries = request.get("Entries", []) if batch else [request]
        done = {str(entry.get("Id")) for entry in answer.get("Successful", [])} if batch else None
        events = []
        for entry in entries:
            if done is not None and str(entry.get("Id")) not in done:
                continue
            message_id = handles.get(str(entry.get("ReceiptHandle")))
            if message_id is None:
                events.append(SqsEvent(t, name, "call"))
            elif operation in _DELETES:
                events.append(SqsEvent(t, name, "delete", message_id))
            else:
                visibility = float(entry.get("VisibilityTimeout", 0))
                events.append(SqsEvent(t, name, "change_visibility", message_id, visibility=visibility))
        return events
    if operation == "PurgeQueue":
        return [SqsEvent(t, name, "purge")]
    return [SqsEvent(t, name, "call")]


def double_hand_outs(events: Iterable[SqsEvent]) -> list[SqsEvent]:
    """The receives that handed out a message another receive still held (its lease not over, no delete since).

    SQS never does this; moto's server can (it serves requests on threads without a lock around a queue, so two
    concurrent long polls may take the same message). The recorder warns about them: such a recording holds a moto
    artifact (two receives and two deletes of one message) and is better made again. A receive up to
    :data:`HAND_OUT_SLACK_SECONDS` before the lease ends is not one: its ``t`` is when the answer came back, a little
    after moto took the message.
    """
    leases: dict[tuple[str, str | None], float] = {}
    doubled = []
    for event in sorted_events(events):
        key = (event.queue, event.message_id)
        if event.op == "receive":
            if leases.get(key, float("-inf")) > event.t + HAND_OUT_SLACK_SECONDS:
                doubled.append(event)
            leases[key] = event.t + (event.visibility or 0)
        elif event.op == "change_visibility":
            leases[key] = event.t + (event.visibility or 0)
        elif event.op == "delete":
            leases.pop(key, None)
    return doubled


class RecordingProxy:
    """Forward every request from ``url`` to ``upstream`` (moto's server) and keep the exchanges for :meth:`events`.

    Example::

        proxy = RecordingProxy(moto_url, clock, {"orders": QueueInfo("orders", False, 345600, 30)})
        proxy.start()                      # clients use proxy.url as AWS_ENDPOINT_URL
        proxy.watch_redrive(dlq_url)       # moves by the redrive policy into that DLQ
        ...
        proxy.stop()
        events = proxy.events()
    """

    def __init__(self, upstream: str, clock: Clock, queues: Mapping[str, QueueInfo]) -> None:
        self.clock = clock
        self.queues = dict(queues)
        self._exchanges: list[Exchange] = []
        self._moves: list[RedriveMove] = []
        self._lock = threading.Lock()
        #: Requests the proxy forwarded but could not read (not botocore's JSON protocol for SQS).
        self.unreadable = 0
        self._proxy = FaultProxy(upstream, observer=self._observe)
        # A client process exiting mid keep-alive resets its connection; socketserver would print a traceback for
        # each, burying the recorder's own output. Nothing is lost: the proxy observes only answered requests.
        self._proxy._server.handle_error = lambda *_: None  # type: ignore[method-assign]  # noqa: SLF001
        self.url = self._proxy.url

    def start(self) -> None:
        self._proxy.start()

    def stop(self) -> None:
        self._proxy.stop()

    def settle(self) -> None:
        """Wait until every request forwarded now was answered (and so observed)."""
        self._proxy.settle()

    def _observe(self, exchange: Exchange) -> None:
        with self._lock:
            if exchange.operation in ("GET", "POST") or not exchange.operation:
                self.unreadable += 1  # no X-Amz-Target: a query-protocol request, or not a service call
            else:
                self._exchanges.append(exchange)

    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def events(self) -> list[SqsEvent]:
        """Every event recorded so far, sorted by ``t``."""
        with self._lock:
            exchanges, moves = list(self._exchanges), list(self._moves)
        return translate(exchanges, self.clock, self.queues, moves)

    def watch_redrive(self, dlq_url: str, region: str) -> None:
        """Record the messages moto's redrive policy moves into the DLQ at ``dlq_url`` (see the module).

        Needs moto's server in this process (``ThreadedMotoServer``): the hook is on its in-memory queue object.
        """
        from moto.sqs.models import sqs_backends

        account, name = urlsplit(dlq_url).path.strip("/").split("/")[-2:]
        queue = sqs_backends[account][region].queues[name]
        original = queue.add_message

        def add_message(message: Any) -> None:
            original(message)
            if message.approximate_receive_count > 0 and any(m is message for m in list(queue._messages)):
                sent = message.sent_timestamp
                move = RedriveMove(time.monotonic(), name, str(message.id), int(sent) if sent else None)
                with self._lock:
                    self._moves.append(move)

        setattr(queue, "add_message", add_message)  # noqa: B010 (an instance attribute over the method: this queue only)
