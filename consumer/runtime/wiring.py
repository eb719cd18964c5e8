"""The values a consumer is built from, and the few it wires its parts with.

A :class:`.Consumer` takes its queue, contract and handler, its :class:`.Collaborators` (consumer.py) and an
:class:`Intake` (how it takes messages in, beyond its contract). Each default is a bare local run's, so a test names
only what it replaces.

Inside, every part (the pollers, the handler runners, the settlement, the heartbeat) takes :class:`Shared`, what they
all read or report to, and the few other things it needs: :class:`.Flow` (polling.py: how much may be received and
started), :class:`Queues` (the SQS client and the two queue URLs), :class:`Guard` (the idempotency store and this
consumer's name in it). consumer.py builds each of them once. This module imports none of the parts: they import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from consumer.runtime.clock import Clock

if TYPE_CHECKING:  # annotations only: these modules import this one, and the stubs are a development dependency
    from mypy_boto3_sqs import SQSClient

    from consumer.contract import WorkerContract
    from consumer.runtime.idempotency import IdempotencyStore
    from consumer.runtime.inflight import InFlightTable
    from consumer.runtime.liveness import Liveness
    from consumer.runtime.observability import Metrics
    from consumer.runtime.protection import ScaleInProtection
    from consumer.runtime.stopping import Stopping
    from consumer.sources import Sources


@dataclass(frozen=True, kw_only=True)
class Intake:
    """How a consumer takes messages in, beyond what its contract says.

    ``task_role_id``: the RoleId of the role the consumer sends with; only a copy a session of it sent is trusted to
    carry its spent receives (``x-prior-receives``); None trusts none, so a requeued copy's count restarts.
    ``sources``: what the worker's declared SNS topics and EventBridge rules deliver
    (:class:`consumer.sources.Sources`; None: none). ``max_rate``: handler starts per second at most, across the
    handler threads; None takes the handler's ``@worker(max_rate=...)``.
    """

    task_role_id: str | None = None
    sources: Sources | None = None
    max_rate: float | None = None


@dataclass(frozen=True, kw_only=True)
class Shared:
    """What every part of one consumer reads or reports to.

    The ``contract`` it runs under; the ``clock`` it reads time from and waits through; its ``stopping`` (the stop
    event every loop reads, the drain's end, and ``closed`` once shutdown is done); the in-flight ``table`` every
    change of a message's state goes through; and what the outside reads of it: ``metrics``, the task's scale-in
    ``protection`` (busy while the table holds a message) and the ``liveness`` file (each loop's progress).
    """

    contract: WorkerContract
    clock: Clock
    stopping: Stopping
    table: InFlightTable
    metrics: Metrics
    protection: ScaleInProtection
    liveness: Liveness


@dataclass(frozen=True, kw_only=True)
class Queues:
    """The SQS ``client`` and the queues it reaches: the source (``queue_url``) and its DLQ (``dlq_url``; None: no DLQ
    known, a message is never moved)."""

    client: SQSClient
    queue_url: str
    dlq_url: str | None = None


@dataclass(frozen=True, kw_only=True)
class Guard:
    """The idempotency guard: the ``store`` its claims go to (None: no guard, ``@worker(idempotent=True)``) and this
    consumer's name in the store's records (``owner``, unique per run; each attempt adds a counter)."""

    store: IdempotencyStore | None
    owner: str
