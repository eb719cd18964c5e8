"""The chaos suite's supervisor: consumer processes named for the downstream, SIGKILLed and replaced."""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Any

from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.harness import ConsumerProcess, Fleet


class Supervisor:
    """Starts consumers, SIGKILLs a random one every few seconds, and replaces those that exit on their own.

    Each consumer's webhook URL ends in ``/c<N>`` (its process number), so the downstream knows
    who delivered; ``killed`` (number -> when) and ``replaced`` let a repeat delivery or an exit
    code be traced back. The numbers are those of the fleet the kills target.
    """

    def __init__(self, webhook_url: str, rng: random.Random, producing: threading.Event, deadline: float) -> None:
        self.webhook_url = webhook_url
        self.rng = rng
        self.producing = producing
        self.deadline = deadline
        self.killed: dict[int, float] = {}  # consumer number -> when it was SIGKILLed
        self.replaced: list[dict[str, Any]] = []  # consumers that exited on their own, replaced
        self._lock = threading.Lock()

    def start(self, fleet: Fleet) -> ConsumerProcess:
        """Start a consumer whose webhook URL names it, so the downstream knows who delivered."""
        with self._lock:
            fleet.environment[WEBHOOK_URL_ENV] = f"{self.webhook_url}/c{len(fleet.processes) + 1}"
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
            self.killed[victim.number] = time.monotonic()
            self.start(fleet)

    def supervise(self, fleet: Fleet) -> None:
        """Replace consumers that exited on their own (as ECS would), recording how they ended."""
        for consumer in fleet.crashed():
            consumer.asked_to_stop = True
            consumer.exit_code = consumer.process.returncode
            self.replaced.append({"number": consumer.number, "exit_code": consumer.exit_code})
            self.start(fleet)
