"""What happened to the queues, as calls: the input of the SQS publishing model (:mod:`infra.alarms.sqs_model`).

Both sources of a scenario write this: a recording of a real local run (a proxy between the consumer, producer and
operator tools and the local endpoint logs every call) and a modeled scenario (a script of calls). The model turns
it into the datapoints SQS would publish, so recorded and modeled scenarios meet the same documented rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from operator import attrgetter
from typing import Any

#: ``send``: a message enters ``queue`` (``by`` says who moved it: a caller's SendMessage, or SQS's redrive policy
#: moving it from its source after maxReceiveCount receives; ``enqueued`` is the original enqueue time SQS keeps
#: for a redrive move of a standard queue's message). ``receive``: a ReceiveMessage returned it (``visibility``:
#: seconds it stays hidden). ``delete``: DeleteMessage. ``change_visibility``: ChangeMessageVisibility (``visibility``
#: seconds from ``t``; 0 makes it visible at once). ``call``: any other API call on the queue (GetQueueAttributes, an
#: empty receive, ...): it keeps the queue active. ``purge``: PurgeQueue.
OPS = ("send", "receive", "delete", "change_visibility", "call", "purge")
CALLER, REDRIVE = "caller", "redrive"


@dataclass(frozen=True)
class SqsEvent:
    t: float
    queue: str
    op: str
    message_id: str | None = None
    by: str = CALLER
    visibility: float | None = None
    enqueued: float | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"SqsEvent op: must be one of {', '.join(OPS)}, got {self.op!r}")
        if self.by not in (CALLER, REDRIVE):
            raise ValueError(f"SqsEvent by: must be {CALLER!r} or {REDRIVE!r}, got {self.by!r}")
        if self.op in ("send", "receive", "delete", "change_visibility") and not self.message_id:
            raise ValueError(f"SqsEvent {self.op} at t={self.t}: needs a message_id")
        if self.op in ("receive", "change_visibility") and self.visibility is None:
            raise ValueError(f"SqsEvent {self.op} at t={self.t}: needs visibility (seconds)")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and not (k == "by" and v == CALLER)}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> SqsEvent:
        return cls(**document)


_new = object.__new__
_set = object.__setattr__


def scripted_event(
    t: float,
    queue: str,
    op: str,
    message_id: str | None = None,
    visibility: float | None = None,
    by: str = CALLER,
    enqueued: float | None = None,
) -> SqsEvent:
    """An :class:`SqsEvent` whose writer guarantees what ``__post_init__`` checks (an op of :data:`OPS`, a message_id
    where the op needs one, a visibility for receive and change_visibility, ``by`` CALLER or REDRIVE), built without
    the checks: the modeled scenarios' scripts (:mod:`infra.alarms.world`) write millions of events, and the frozen
    dataclass's ``__init__`` costs five times this. Events from outside (a recording, a test) go through
    ``SqsEvent(...)`` and are checked."""
    event = _new(SqsEvent)
    _set(
        event,
        "__dict__",
        {
            "t": t,
            "queue": queue,
            "op": op,
            "message_id": message_id,
            "by": by,
            "visibility": visibility,
            "enqueued": enqueued,
        },
    )
    return event


def sorted_events(events: Iterable[SqsEvent]) -> list[SqsEvent]:
    return sorted(events, key=attrgetter("t"))
