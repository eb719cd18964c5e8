"""The simulated world's clock: :class:`consumer.runtime.clock.Clock` on a :class:`bench.sim.scheduler.Simulation`.

The runtime takes it as its clock (``Consumer(collaborators=Collaborators(clock=...))``): its locks, conditions,
events, queues, threads, executor and event loop are the simulation's (bench/sim/primitives.py), so every wait is on
virtual time and every thread is scheduled from the seed (bench/sim/scheduler.py says how).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.sim.primitives import SimCondition, SimEvent, SimEventLoop, SimExecutor, SimLock, SimQueue
from bench.sim.scheduler import SimThread, Simulation

__all__ = ["SimClock"]


class SimClock(Simulation):
    """A simulation that is also the runtime's clock (``monotonic``, ``time`` and ``sleep`` are the simulation's)."""

    def lock(self) -> SimLock:
        return SimLock(self)

    def condition(self, lock: SimLock | None = None) -> SimCondition:
        return SimCondition(self, lock)

    def event(self) -> SimEvent:
        return SimEvent(self)

    def simple_queue(self) -> SimQueue:
        return SimQueue(self)

    def thread(self, target: Callable[[], object], *, name: str) -> SimThread:
        group = self.current.group if self.current is not None else ""
        return SimThread(self, target, name, group)

    def executor(self, max_workers: int, thread_name_prefix: str) -> SimExecutor:
        return SimExecutor(self, max_workers, thread_name_prefix)

    def event_loop(self) -> SimEventLoop:
        return SimEventLoop(self)
