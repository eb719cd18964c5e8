"""What one run of the simulated world left, for the invariants to read (bench/sim/invariants.py)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.sim.plan import Plan
from consumer.contract import WorkerContract

if TYPE_CHECKING:
    from bench.sim.scheduler import SimThread
    from consumer.runtime.cli import StopOnSignal
    from consumer.runtime.consumer import Consumer
    from consumer.runtime.invocation import LambdaWorker


@dataclass
class Attempt:
    """One handler call's part for one event."""

    event: str
    process: str
    started: float
    receive_count: int
    ended: float | None = None
    outcome: str = ""  # applied | failed | poison | hung


@dataclass
class Process:
    """One consumer process: its name (the group of its threads), its main thread and its exit."""

    name: str
    slot: int
    thread: SimThread
    signal: StopOnSignal
    started: float
    consumer: Consumer | None = None
    exit_code: int | None = None
    exited: float | None = None
    killed: float | None = None
    sigterm: float | None = None


@dataclass(eq=False)
class Environment:
    """One Lambda execution environment (bench/sim/functions.py): a process to the invariants (its name labels its
    threads, its requests and the mapping's for it; Lambda stopping it is a kill), with its worker and what runs in it.
    """

    name: str
    slot: int  # its lane: the mapping's poller that invokes it
    started: float
    worker: LambdaWorker | None = None  # built at its cold start
    busy: bool = False  # an invocation of it runs (until the mapping has deleted what the answer let it)
    invocations: int = 0
    killed: float | None = None  # Lambda stopped it (a timeout), or discarded it with a handler running
    discarded: float | None = None  # Lambda discarded it idle
    # A process's, never set here: an environment does not exit, nor receive a SIGTERM.
    exit_code: int | None = None
    exited: float | None = None
    sigterm: float | None = None


@dataclass
class Run:
    """What a run left: read by the invariants (bench/sim/invariants.py)."""

    plan: Plan
    contract: WorkerContract
    kinds: dict[str, str] = field(default_factory=dict)  # event -> kind
    groups: dict[str, str] = field(default_factory=dict)  # event -> FIFO group (send order within it)
    sent: list[str] = field(default_factory=list)
    effects: dict[str, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))
    attempts: list[Attempt] = field(default_factory=list)
    #: The container's processes, or a Lambda plan's execution environments (each a process to the invariants: its
    #: name labels its threads and requests, the mapping's for it included; Lambda stopping it at a timeout is a kill).
    processes: list[Process | Environment] = field(default_factory=list)
    #: A Lambda plan's invocations, one line each (the environment, what it carried, how it ended).
    invocations: list[str] = field(default_factory=list)
    #: Events a receive delivered that no consumer saw: a throttled invocation's batch (its receive spent, unseen).
    unseen: list[str] = field(default_factory=list)
    source: list[dict[str, Any]] = field(default_factory=list)  # messages left in the source queue
    dlq: list[dict[str, Any]] = field(default_factory=list)  # messages in the DLQ (body, reason)
    audit: list[str] = field(default_factory=list)  # what the world's own watch saw go wrong during the run
    #: (event, process, when, state): a receive handed out a message that live process still held
    held_again: list[tuple[str, str, float, str]] = field(default_factory=list)
    settled_at: float | None = None
    errors: list[str] = field(default_factory=list)  # the scheduler's
    events: list[str] = field(default_factory=list)  # the event log
    ledger: Any = None
    queue_url: str = ""
    dlq_url: str = ""
