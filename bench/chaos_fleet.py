"""The chaos suite's supervisor: consumer processes named for the downstream, SIGKILLed and replaced."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench.chaos_evidence import UA_APP_ID_ENV, ConsumerLogs, ReceiveLog, Run
from consumer.contract import WorkerContract
from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.harness import ConsumerProcess, Fleet


class Supervisor:
    """Starts consumers, SIGKILLs a random one every few seconds, and replaces those that exit on their own.

    Each consumer has a label, ``c<N>`` (its process number; ``fifo-c<N>`` in the FIFO fleet), at the end of its
    webhook URL, so the downstream knows who delivered, and in its botocore User-Agent
    (``AWS_SDK_UA_APP_ID``), so the proxy knows who received what; ``killed`` (number -> when) and ``replaced``
    let a repeat delivery or an exit code be traced back. The numbers are those of the fleet the kills target.
    """

    def __init__(self, webhook_url: str, rng: random.Random, producing: threading.Event, deadline: float) -> None:
        self.webhook_url = webhook_url
        self.rng = rng
        self.producing = producing
        self.deadline = deadline
        self.killed: dict[int, float] = {}  # consumer number -> when it was SIGKILLed
        self.replaced: list[dict[str, Any]] = []  # consumers that exited on their own, replaced
        self._lock = threading.Lock()
        self._prefixes: dict[int, str] = {}  # id(fleet) -> its consumers' label prefix

    def label(self, fleet: Fleet, number: int) -> str:
        """Consumer ``number`` of ``fleet``'s label: its webhook path's last segment and its User-Agent app id."""
        return f"{self._prefixes.get(id(fleet), 'c')}{number}"

    def record(self, fleets: Sequence[Fleet], receives: ReceiveLog, contract: WorkerContract, started: float) -> Run:
        """What the run recorded, by consumer label, for bench.chaos_evidence: the kills (of the first fleet's
        consumers), the proxy's receives and every consumer's log; from the run's ``contract``, the source's lease
        (the idempotency claim's too) and the receives after which SQS's redrive moves a message."""
        logs = ConsumerLogs((self.label(one, c.number), c.log_path) for one in fleets for c in one.processes)
        killed = {self.label(fleets[0], number): at for number, at in self.killed.items()}
        lease, backstop = contract.visibility_timeout_seconds, contract.redrive_max_receive_count
        return Run(killed, receives, logs, lease, started, backstop)

    def start(self, fleet: Fleet, prefix: str = "c") -> ConsumerProcess:
        """Start a consumer whose webhook URL and User-Agent name it, so the downstream and the proxy know who it is."""
        with self._lock:
            self._prefixes[id(fleet)] = prefix
            label = f"{prefix}{len(fleet.processes) + 1}"
            fleet.environment[WEBHOOK_URL_ENV] = f"{self.webhook_url}/{label}"
            fleet.environment[UA_APP_ID_ENV] = label
            return fleet.start()

    def kill_loop(self, fleet: Fleet, every: float) -> None:
        """SIGKILL a random running consumer every ``every`` s (+-30 %) while producing, and start its replacement."""
        while every > 0 and self.producing.is_set() and time.monotonic() < self.deadline:
            time.sleep(self.rng.uniform(0.7 * every, 1.3 * every))
            if not self.producing.is_set():
                return
            candidates = [c for c in fleet.alive() if c.ready]
            if not candidates:
                continue
            victim = self.rng.choice(candidates)
            victim.asked_to_stop = True  # not a crash: the supervisor must not count it
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            self.killed[victim.number] = time.monotonic()  # after the process is gone: whatever it sent came before
            self.start(fleet)

    def supervise(self, fleet: Fleet) -> None:
        """Replace consumers that exited on their own (as ECS would), recording how they ended."""
        for consumer in fleet.crashed():
            consumer.asked_to_stop = True
            consumer.exit_code = consumer.process.returncode
            self.replaced.append({"number": consumer.number, "exit_code": consumer.exit_code})
            self.start(fleet)
