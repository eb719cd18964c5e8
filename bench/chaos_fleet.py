"""The chaos suite's supervisor (consumer processes named for the downstream, SIGKILLed and replaced) and its watch
(waiting for a phase to settle while the supervisor keeps the fleets running)."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from bench.chaos_evidence import UA_APP_ID_ENV, ConsumerLogs, ReceiveLog, Run
from consumer.contract import WorkerContract
from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.harness import TIMED_OUT, ConsumerProcess, Fleet, Tick, queue_depth, settle


class Supervisor:
    """Starts consumers, SIGKILLs a random one every few seconds, and replaces those that exit on their own.

    Each consumer has a label, ``c<N>`` (its process number; ``<prefix>c<N>`` in another fleet: ``fifo-c<N>``,
    ``batch-c<N>``), at the end of its webhook URL, so the downstream knows who delivered, and in its botocore
    User-Agent (``AWS_SDK_UA_APP_ID``), so the proxy knows who received what; ``killed`` (label -> when) and
    ``replaced`` (each with its label) let a repeat delivery or an exit code be traced back, whichever fleet it is in.
    """

    def __init__(self, webhook_url: str, rng: random.Random, producing: threading.Event, deadline: float) -> None:
        self.webhook_url = webhook_url
        self.rng = rng
        self.producing = producing
        self.deadline = deadline
        self.killed: dict[str, float] = {}  # consumer label -> when it was SIGKILLed
        self.replaced: list[dict[str, Any]] = []  # consumers that exited on their own, replaced
        self._lock = threading.Lock()
        self._prefixes: dict[int, str] = {}  # id(fleet) -> its consumers' label prefix

    def label(self, fleet: Fleet, number: int) -> str:
        """Consumer ``number`` of ``fleet``'s label: its webhook path's last segment and its User-Agent app id."""
        return f"{self._prefixes.get(id(fleet), 'c')}{number}"

    def record(self, fleets: Sequence[Fleet], receives: ReceiveLog, contract: WorkerContract, started: float) -> Run:
        """What the run recorded of ``fleets``, by consumer label, for bench.chaos_evidence: the kills, the proxy's
        ``receives`` and every consumer's log; from their ``contract``, the source's lease (the idempotency claim's
        too) and the receives after which SQS's redrive moves a message."""
        logs = ConsumerLogs((self.label(one, c.number), c.log_path) for one in fleets for c in one.processes)
        lease, backstop = contract.visibility_timeout_seconds, contract.redrive_max_receive_count
        return Run(dict(self.killed), receives, logs, lease, started, backstop)

    def kills(self, fleet: Fleet) -> int:
        """How many of ``fleet``'s consumers were SIGKILLed."""
        return sum(1 for n in range(1, len(fleet.processes) + 1) if self.label(fleet, n) in self.killed)

    def start(self, fleet: Fleet, prefix: str | None = None) -> ConsumerProcess:
        """Start a consumer whose webhook URL and User-Agent name it, so the downstream and the proxy know who it is.

        ``prefix`` (``c`` unless given) starts the labels of ``fleet``'s consumers, this one's and every later one's."""
        with self._lock:
            prefix = self._prefixes.setdefault(id(fleet), prefix or "c")
            label = f"{prefix}{len(fleet.processes) + 1}"
            fleet.environment[WEBHOOK_URL_ENV] = f"{self.webhook_url}/{label}"
            fleet.environment[UA_APP_ID_ENV] = label
            return fleet.start()

    def kill_loop(self, fleets: Sequence[Fleet], every: float) -> None:
        """SIGKILL a random running consumer every ``every`` s (+-30 %) while producing, and start its replacement; with
        several fleets, each kill targets the next one in turn (so the kills, and the CPU their replacements' start-up
        costs, stay at one per ``every`` s, whatever the number of fleets)."""
        turn = 0
        while every > 0 and self.producing.is_set() and time.monotonic() < self.deadline:
            time.sleep(self.rng.uniform(0.7 * every, 1.3 * every))
            if not self.producing.is_set():
                return
            for fleet in (fleets[(turn + n) % len(fleets)] for n in range(len(fleets))):
                candidates = [c for c in fleet.alive() if c.ready]
                if candidates:
                    break
            else:
                continue
            turn = fleets.index(fleet) + 1
            victim = self.rng.choice(candidates)
            victim.asked_to_stop = True  # not a crash: the supervisor must not count it
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            # After the process is gone: whatever it sent came before.
            self.killed[self.label(fleet, victim.number)] = time.monotonic()
            self.start(fleet)

    def supervise(self, fleet: Fleet) -> None:
        """Replace consumers that exited on their own (as ECS would), recording how they ended."""
        for consumer in fleet.crashed():
            consumer.asked_to_stop = True
            consumer.exit_code = consumer.process.returncode
            label = self.label(fleet, consumer.number)
            self.replaced.append({"label": label, "number": consumer.number, "exit_code": consumer.exit_code})
            self.start(fleet)


#: A fleet being watched: its name, its consumers, the source queue they consume and what the progress line adds
#: before the queue's depth (a producer's "sent n/m").
Watched = tuple[str, Fleet, str, Callable[[], str]]


class Watch:
    """Waits for a phase to settle, looking every ``poll_seconds``: replaces the watched fleets' crashed consumers
    (through the ``supervisor``, whose deadline ends any wait), counts their log events, reads their sources' depths
    through ``sqs`` (never faulted), and prints a progress line per fleet every 5 s, timed from ``started``.
    ``busy()`` says something is still to come (a producer)."""

    def __init__(
        self,
        supervisor: Supervisor,
        sqs: Any,
        console: Console,
        busy: Callable[[], bool],
        started: float,
        poll_seconds: float = 1.0,
    ) -> None:
        self.supervisor, self.sqs, self.console = supervisor, sqs, console
        self.busy, self.started, self.deadline, self.poll_seconds = busy, started, supervisor.deadline, poll_seconds

    def depth(self, queue_url: str) -> tuple[int, int]:
        """(visible, in flight or delayed) of a queue."""
        depth = queue_depth(self.sqs, queue_url)
        return depth.visible, depth.not_visible + depth.delayed

    def wait(self, done: Callable[[], bool], watched: Sequence[Watched], quiet_seconds: float | None = None) -> bool:
        """Until ``done()``, or (``quiet_seconds`` given) every watched source is empty and no log line came for that
        long; False if the deadline came first."""
        last_print = 0.0

        def look() -> Tick:
            nonlocal last_print
            depths = []
            for _, fleet, queue_url, _ in watched:
                self.supervisor.supervise(fleet)
                fleet.read_logs()
                depths.append(self.depth(queue_url))
            if time.monotonic() - last_print > 5:
                last_print = time.monotonic()
                self._progress(watched, depths)
            events = sum(sum(fleet.events.values()) for _, fleet, _, _ in watched)
            return Tick((tuple(depths), events), any(depth != (0, 0) for depth in depths) or self.busy())

        ended = settle(look, done, deadline=self.deadline, poll_seconds=self.poll_seconds, quiet_seconds=quiet_seconds)
        return ended != TIMED_OUT

    def _progress(self, watched: Sequence[Watched], depths: Sequence[tuple[int, int]]) -> None:
        for (name, fleet, _, note), (visible, in_flight) in zip(watched, depths, strict=True):
            self.console.print(
                f"  {time.monotonic() - self.started:5.0f} s  {name:8}{note()}  source visible/in flight"
                f" {visible}/{in_flight}  processed {fleet.events['message_processed']}"
                f"  to DLQ {fleet.events['message_moved_to_dlq']}  running {len(fleet.alive())}"
                f"  killed {self.supervisor.kills(fleet)}",
                highlight=False,
            )
