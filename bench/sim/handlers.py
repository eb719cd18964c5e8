"""The simulated world's handlers: how each event's handler behaves, by its kind and its attempt (bench/sim/plan.py, ``KINDS``).

Each records the attempt when it starts and its side effect when its work is done (``Run.attempts`` and
``Run.effects``): effects are counted at the handler, never from the consumer's logs. Work takes virtual time
(``Simulation.sleep``, or ``asyncio.sleep`` on the simulated loop).
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.sim.run import Attempt, Run
from bench.sim.scheduler import Simulation
from consumer.batch import BatchResult
from consumer.message import DownstreamUnavailable, Message, PoisonMessage

if TYPE_CHECKING:
    from bench.sim.plan import Plan


class Transient(Exception):
    """What a flaky or failing handler raises."""


class Handlers:
    """The world's handlers for one run (see the module docstring); ``rng`` draws each call's work."""

    def __init__(self, plan: Plan, run: Run, sim: Simulation, rng: random.Random) -> None:
        self.plan = plan
        self.run = run
        self.sim = sim
        self.rng = rng
        self._calls: dict[str, int] = defaultdict(int)  # event -> handler calls so far

    def _behaviour(self, event: str) -> tuple[str, float]:
        """What this call does for ``event`` (applied | failed | poison) and how long it works first."""
        self._calls[event] += 1
        call, kind, mean = self._calls[event], self.run.kinds[event], self.plan.max_duration
        work = self.rng.uniform(*self.plan.duration)
        if kind == "flaky" and call == 1 or kind == "failing":
            return "failed", work
        if kind == "poison":
            return "poison", work
        if kind == "slow":
            return "applied", self.rng.uniform(*self.plan.slow) * mean
        if kind == "unavailable" and call == 1:
            return "unavailable", work
        if kind == "overrun" and call == 1:
            return "applied", 1.3 * self.run.contract.attempt_timeout_seconds
        if kind == "hang" and call == 1:
            return "applied", 20.0 * mean
        return "applied", work

    def _begin(self, message: Message, process: str) -> tuple[Attempt, str, float]:
        event = message.body
        attempt = Attempt(event, process, self.sim.now, message.receive_count)
        self.run.attempts.append(attempt)
        outcome, work = self._behaviour(event)
        self.sim.record(f"handler {event} starts receive={message.receive_count} will={outcome} in={work:.3f}")
        return attempt, outcome, work

    def _end(self, attempt: Attempt, outcome: str) -> None:
        attempt.ended, attempt.outcome = self.sim.now, outcome
        if outcome == "applied":
            self.run.effects[attempt.event].append((self.sim.now, attempt.process))
        self.sim.record(f"handler {attempt.event} {outcome}")

    def for_process(self, process: str) -> Callable[..., Any]:
        """The handler of the plan's shape, as ``process`` runs it."""
        sim = self.sim
        if self.plan.shape == "async":

            async def handle_async(message: Message) -> None:
                attempt, outcome, work = self._begin(message, process)
                await asyncio.sleep(work)
                self._finish(attempt, outcome)

            return handle_async
        if self.plan.shape == "batch":

            def handle_batch(messages: list[Message]) -> BatchResult:
                begun = [(message, *self._begin(message, process)) for message in messages]
                sim.sleep(max(work for _, _, _, work in begun))
                result = BatchResult()
                for message, attempt, outcome, _ in begun:
                    self._end(attempt, outcome)
                    if outcome == "applied":
                        result.succeeded(message)
                    elif outcome == "poison":
                        result.poison(message, "simulated poison")
                    elif outcome == "unavailable":
                        result.failed(message, DownstreamUnavailable("simulated outage", retry_after=5))
                    else:
                        result.failed(message, Transient("simulated failure"))
                return result

            return handle_batch

        def handle(message: Message) -> None:
            attempt, outcome, work = self._begin(message, process)
            sim.sleep(work)
            self._finish(attempt, outcome)

        return handle

    def _finish(self, attempt: Attempt, outcome: str) -> None:
        self._end(attempt, outcome)
        if outcome == "poison":
            raise PoisonMessage("simulated poison")
        if outcome == "unavailable":
            raise DownstreamUnavailable("simulated outage", retry_after=5)
        if outcome == "failed":
            raise Transient("simulated failure")
