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
    processes: list[Process] = field(default_factory=list)
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
