"""The messages this process holds, and the one lock every change of their state goes through.

A received message is an :class:`InFlight` record in the :class:`InFlightTable` from its
receive until its outcome has reached the acknowledger. Pollers, handler threads, the heartbeat and
shutdown all move records between states; the table makes each move one step under its
lock, so a handler finishing, the heartbeat giving up on it and shutdown handing it back
can never all act on the same message.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from consumer.message import Message
from consumer.runtime.acknowledger import Ticket
from consumer.runtime.idempotency import IdempotencyStore
from consumer.runtime.observability import trace_context

# Every runtime module logs as "consumer": the logger name is part of each JSON line operators filter on.
log = logging.getLogger("consumer")


class State(enum.Enum):
    WAITING = "waiting"  # received, not started
    RUNNING = "running"
    TIMED_OUT = "timed_out"  # given up on: no extension, no delete; still holds its slot
    DONE = "done"
    DELETING = "deleting"  # done with, its delete waiting for its batch: held (extended) until it is sent
    RELEASED = "released"  # handed back unstarted, or at the drain timeout


class LogContext:
    """The fields every log line about one message carries, trace ids included; bound once at the receive.

    Built for every message, read only for the few that are logged about (a failure, a move, a hand-back; the
    per-message ``message_processed`` line is DEBUG): so the trace ids and the group are worked out from the message
    on the first :meth:`fields` call, not at the receive.
    """

    __slots__ = ("_bound", "message", "queue_url")

    def __init__(self, message: Message, queue_url: str) -> None:
        self.message = message
        self.queue_url = queue_url
        self._bound: dict[str, Any] | None = None

    @classmethod
    def of(cls, message: Message, queue_url: str) -> LogContext:
        return cls(message, queue_url)

    @property
    def trace(self) -> Mapping[str, str]:
        return trace_context(self.message.message_attributes, self.message.attributes)

    @property
    def message_group_id(self) -> str | None:
        """The MessageGroupId: a tenant on a standard (fair) queue, the order key on FIFO; None when the producer
        set none. Logs only, never a metric dimension: one dimension value per tenant is a metric (and a cost) per
        tenant."""
        group = self.message.attributes.get("MessageGroupId")  # receive asks for every system attribute ("All")
        return group if isinstance(group, str) else None

    def fields(self, **more: Any) -> dict[str, Any]:
        """The bound fields, then ``more``, as a log call's ``extra``."""
        bound = self._bound
        if bound is None:
            bound = {
                "message_id": self.message.message_id,
                "receive_count": self.message.receive_count,
                "queue_url": self.queue_url,
            }
            group = self.message_group_id
            if group is not None:
                bound["message_group_id"] = group
            bound |= self.trace
            self._bound = bound
        return bound | more


@dataclass(eq=False)
class InFlight:
    message: Message
    received_at: float
    visible_until: float
    context: LogContext
    state: State = State.WAITING
    #: When its handler was called (None until then: a running message's claim may take a while, and max_duration
    #: counts from the call).
    started_at: float | None = None
    key: str | None = None
    owner: str = ""  # unique per attempt, so a stale attempt can never touch a newer one's record
    call: int | None = None  # the batch handler call it is part of (None: a call of its own)
    ticket: Ticket = field(init=False)

    def __post_init__(self) -> None:
        self.ticket = Ticket(
            # Held: waiting to start (a batch handler's message waiting for a free thread is extended too), running, or
            # done with and settling (until a backoff or a release is queued for it: Ticket.settled).
            self.message.message_id,
            self.message.receipt_handle,
            is_running=lambda: self.state in (State.RUNNING, State.WAITING, State.DONE, State.DELETING),
        )


def update_record(
    store: IdempotencyStore | None, operation: Literal["release", "renew"], item: InFlight, **seconds: int
) -> bool | None:
    """Release or renew ``item``'s idempotency record (none without a guard, or before a key); what the store
    answered (``renew``: whether the lease is still ``item``'s), or None. A failure is logged, never raised."""
    if store is None or item.key is None:
        return None
    try:
        result: bool | None = getattr(store, operation)(item.key, owner=item.owner, **seconds)
    except Exception as error:  # noqa: BLE001 (the message outcome stands; the record expires)
        log.warning(
            "idempotency_update_failed",
            extra={"operation": operation, "message_id": item.message.message_id, "error": str(error)},
        )
        return None
    return result


class Admission(enum.Enum):
    """What :meth:`InFlightTable.admit` did with a receive's messages."""

    LATE = "late"  # shutdown has collected its hand-backs: not admitted
    FIRST = "first"  # admitted into an empty table: the task has just become busy
    MORE = "more"  # admitted beside messages already in flight


class InFlightTable:
    """The in-flight records and their state transitions, each one step under one lock.

    It also counts pollers between a receive's answer and handing its messages on
    (``dispatching``): shutdown waits for them before it collects what to hand back,
    and admits no receive once it has (:meth:`close`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, InFlight] = {}
        self._dispatching = 0
        self._receiving = 0
        self._closing = False

    def __len__(self) -> int:
        return len(self._items)

    def is_idle(self) -> bool:
        with self._lock:
            return not self._items

    # --- pollers ----------------------------------------------------------------
    def admit(self, items: list[InFlight]) -> Admission:
        """Take a receive's messages in and count their poller as dispatching (until :meth:`dispatched`)."""
        with self._lock:
            if self._closing:
                return Admission.LATE
            self._dispatching += 1
            for item in items:
                self._items[id(item)] = item
            return Admission.FIRST if len(self._items) == len(items) else Admission.MORE

    def dispatched(self) -> None:
        """The poller of an admitted receive has handed all of it on (or back)."""
        with self._lock:
            self._dispatching -= 1

    def receiving(self, delta: int) -> None:
        """A poller's receive call starts (+1), or ends with what it brought handed on or back (-1)."""
        with self._lock:
            self._receiving += delta

    @property
    def receives_in_flight(self) -> int:
        with self._lock:
            return self._receiving

    # --- handler runners --------------------------------------------------------
    def start(self, item: InFlight, *, key: str | None, owner: str) -> bool:
        """WAITING -> RUNNING (its idempotency claim, then its handler; ``started_at`` is set at the handler's call);
        False if it was handed back (or given up on) before it could start."""
        with self._lock:
            if item.state is not State.WAITING:
                return False
            item.state = State.RUNNING
            item.key, item.owner = key, owner
            return True

    def finish(self, item: InFlight, *, late: bool = False) -> State:
        """RUNNING -> DONE (and TIMED_OUT -> DONE if ``late``: a success past max_duration still counts); returns the
        state found, so a result that no longer counts can be told apart."""
        with self._lock:
            found = item.state
            if found is State.RUNNING or (late and found is State.TIMED_OUT):
                item.state = State.DONE
            return found

    def release_waiting(self, item: InFlight) -> bool:
        """WAITING -> RELEASED and out of the table; False if it had started (or was released) already."""
        with self._lock:
            if item.state is not State.WAITING:
                return False
            item.state = State.RELEASED
            self._items.pop(id(item), None)
            return True

    def remove(self, item: InFlight) -> bool:
        """Take ``item`` out once its outcome has reached the acknowledger; True if nothing is left in flight."""
        with self._lock:
            self._items.pop(id(item), None)
            return not self._items

    # --- heartbeat --------------------------------------------------------------
    def time_out_overruns(
        self, now: float, timeout_seconds: float, stuck_seconds: float | None = None
    ) -> tuple[list[InFlight], int]:
        """RUNNING past ``timeout_seconds`` -> TIMED_OUT; returns those, and how many handler calls are stuck: timed
        out and running past ``stuck_seconds`` (the end of their lease, after which a late success can no longer be
        settled; ``timeout_seconds`` when None)."""
        stuck_after = timeout_seconds if stuck_seconds is None else stuck_seconds
        with self._lock:
            overrun = [
                i
                for i in self._items.values()
                if i.state is State.RUNNING and i.started_at is not None and now - i.started_at > timeout_seconds
            ]
            for item in overrun:
                item.state = State.TIMED_OUT
            # Handler calls, not messages: the messages of one batch handler call hold one slot of concurrency.
            stuck = len(
                {
                    id(i) if i.call is None else i.call
                    for i in self._items.values()
                    if i.state is State.TIMED_OUT and i.started_at is not None and now - i.started_at > stuck_after
                }
            )
        return overrun, stuck

    def give_up(self) -> tuple[list[InFlight], list[InFlight]]:
        """A Lambda invocation about to end gives up on what it cannot wait for: every RUNNING one whose handler was
        called -> TIMED_OUT, however long it has run, and every one still claiming -> RELEASED (:meth:`calling` then
        refuses its call). Returns both."""
        with self._lock:
            running = [i for i in self._items.values() if i.state is State.RUNNING]
            for item in running:
                item.state = State.TIMED_OUT if item.started_at is not None else State.RELEASED
        return [i for i in running if i.state is State.TIMED_OUT], [i for i in running if i.state is State.RELEASED]

    def calling(self, item: InFlight, now: float) -> bool:
        """Its handler is called now (``started_at``, from which max_duration counts); False if it is no longer
        RUNNING: handed back while its claim was under way (a drain's end, a Lambda invocation's give-up), never to be
        called."""
        with self._lock:
            if item.state is not State.RUNNING:
                return False
            item.started_at = now
            return True

    def holds(self, items: list[InFlight]) -> bool:
        """Whether any of ``items`` is still here unsettled: waiting, running, or done with and settling."""
        with self._lock:
            return any(id(i) in self._items and i.state is not State.TIMED_OUT for i in items)

    def release_running(self, item: InFlight) -> bool:
        """RUNNING -> RELEASED (an async handler cancelled at its deadline or the drain's end); False if the heartbeat
        or shutdown got to it first."""
        with self._lock:
            if item.state is not State.RUNNING:
                return False
            item.state = State.RELEASED
            return True

    def waiting(self, *, behind_given_up: bool = True) -> list[InFlight]:
        """Received and not started: a batch handler's messages collected or waiting for a free thread, a FIFO group's
        waiting their turn. ``behind_given_up`` False leaves out a FIFO group's messages waiting behind one given up on
        (TIMED_OUT): their handler thread is held by that handler, so the group cannot go on here."""
        with self._lock:
            waiting = [i for i in self._items.values() if i.state is State.WAITING]
            if behind_given_up:
                return waiting
            stuck = {i.context.message_group_id for i in self._items.values() if i.state is State.TIMED_OUT}
        return [i for i in waiting if i.context.message_group_id not in stuck]

    def running(self) -> list[InFlight]:
        """Started: claiming, or its handler called."""
        with self._lock:
            return [i for i in self._items.values() if i.state is State.RUNNING]

    def settling(self) -> list[InFlight]:
        """Done with and still held: its outcome under way (a completion, a copy, a delete at once: on a slow table,
        seconds), or its delete waiting for its batch, which writes the batch's completions first."""
        with self._lock:
            return [i for i in self._items.values() if i.state in (State.DONE, State.DELETING)]

    def deleting(self, item: InFlight) -> bool:
        """DONE -> DELETING: its delete is handed over to wait for its batch, and it stays here (held, extended) until
        :meth:`remove` once the delete is sent; False if it is not held here (a hand-back of a message never started).
        """
        with self._lock:
            if item.state is not State.DONE or id(item) not in self._items:
                return False
            item.state = State.DELETING
            return True

    # --- shutdown ---------------------------------------------------------------
    def unsettled(self) -> list[InFlight]:
        """Running, or done with an outcome not yet handed to the acknowledger."""
        with self._lock:
            return [i for i in self._items.values() if i.state in (State.RUNNING, State.DONE)]

    def close(self) -> int:
        """Admit no more receives; returns how many pollers are still dispatching."""
        with self._lock:
            self._closing = True
            return self._dispatching

    @property
    def dispatching(self) -> int:
        with self._lock:
            return self._dispatching

    def release_unfinished(self) -> list[tuple[InFlight, bool]]:
        """RUNNING or WAITING -> RELEASED; returns each with whether it was attempted (it was running)."""
        with self._lock:
            unfinished = [
                (i, i.state is State.RUNNING) for i in self._items.values() if i.state in (State.RUNNING, State.WAITING)
            ]
            for item, _ in unfinished:
                item.state = State.RELEASED
        return unfinished
