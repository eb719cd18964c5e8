"""A virtual clock for the consumer runtime (``consumer/runtime/clock.py``'s protocol), scheduled from a seed.

Every thread of a run is a real thread, but only one holds the baton at a time: it runs until it waits on a primitive
of this clock (a lock, condition, event, queue, sleep, join, the event loop's select), and at each such primitive it
may also be preempted, with the seed's probability. The waiting thread then hands the baton to a runnable thread the
seed picks. When no thread can run, virtual time jumps to the earliest deadline among the waiting ones, so a
15-minute lease passes at once and nothing depends on how fast the machine is. The same seed gives the same run,
choice for choice.

What the scheduler finds by itself:

- a deadlock: no thread can run and none waits with a deadline;
- a thread acquiring a lock it already holds (a signal handler run while the interrupted code held that lock: CPython
  then blocks for ever, https://github.com/python/cpython/issues/126434);
- an event loop that waited (a sleep, a call's latency, a timed wait) outside its selector: a blocking call on the
  loop, which stalls every coroutine;
- a run past its horizon, or a thread that holds the baton for long in real time (a busy loop, or a wait that does
  not go through this clock), with its stack.

A signal is delivered as CPython delivers one: its handler runs on the target thread between two of its steps, here
at one of its primitives (inside a lock's critical section too), or while it waits.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

#: Real seconds the baton may stand still (no thread steps) before the run is reported as stalled: a wait outside
#: this clock, or a busy loop. A run that is only long in real seconds (a loaded machine) goes on.
REAL_STALL_SECONDS = 60.0

NEW, RUNNABLE, BLOCKED, FROZEN, DONE = "new", "runnable", "blocked", "frozen", "done"


class SimulationError(Exception):
    """Something the scheduler itself saw go wrong: a deadlock, a blocked event loop, a stall, a run past its horizon."""


class Unwound(BaseException):
    """Raised inside a thread of a run that is over, or of a consumer that was killed, at its next primitive.

    A BaseException, like SystemExit, so the runtime's ``except Exception`` never takes it for an error to handle.
    """


class SimThread:
    """A thread of the run (``threading.Thread``'s subset the runtime uses: start, join, is_alive, name)."""

    _ids = itertools.count()

    def __init__(self, sim: Simulation, target: Callable[[], object], name: str, group: str) -> None:
        self.sim = sim
        self.target = target
        self.name = name
        self.group = group  # a consumer's name: a kill freezes the whole group
        self.ident = next(SimThread._ids)
        self.state = NEW
        self.deadline: float | None = None
        self.woken_by: str | None = None  # "notify" | "timeout" | "signal"
        self.blocked_on: Any = None
        self.blocked_what = ""
        self.killed = False
        self.suspended = False  # its group is frozen (a Lambda execution environment between invocations)
        self.signals: list[Callable[[], None]] = []
        self.go = threading.Lock()
        self.go.acquire()
        self.joiners: list[SimThread] = []
        self.error: BaseException | None = None
        self._os = threading.Thread(target=self._main, name=f"sim:{name}", daemon=True)

    def __repr__(self) -> str:
        return f"<SimThread {self.name} {self.state}>"

    # --- threading.Thread's API ------------------------------------------------------------------------------------
    def start(self) -> None:
        self.sim.start(self)

    def join(self, timeout: float | None = None) -> None:
        self.sim.join(self, timeout)

    def is_alive(self) -> bool:
        return self.state not in (NEW, DONE)

    @property
    def daemon(self) -> bool:
        return True

    # --- the real thread ---------------------------------------------------------------------------------------------
    def _main(self) -> None:
        self.go.acquire()  # wait for the baton
        sim = self.sim
        try:
            if self.killed or sim.over:
                raise Unwound
            self.target()
        except Unwound:
            pass
        except BaseException as error:  # noqa: BLE001 (recorded: a thread's crash is the run's failure)
            self.error = error
            sim.crashed(self, error)
        finally:
            sim.finished(self)


class Simulation:
    """One run's virtual clock and scheduler (:class:`bench.sim.clock.SimClock` adds the primitives the runtime's
    :class:`consumer.runtime.clock.Clock` makes).

    ``seed`` decides every choice: which runnable thread goes on, whether a thread is preempted at a primitive
    (``switch_probability``, itself drawn from the seed when None), when a signal lands. ``horizon_seconds`` bounds
    the run's virtual time.
    """

    #: Where the clocks start: a monotonic clock far from 0, and an epoch time in 2027.
    MONOTONIC_START = 100_000.0
    WALL_START = 1_800_000_000.0

    def __init__(
        self, seed: int, *, switch_probability: float | None = None, horizon_seconds: float = 7 * 24 * 3600
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.switch_probability = (
            self.rng.choice((0.0, 0.05, 0.3)) if switch_probability is None else switch_probability
        )
        self.horizon = horizon_seconds
        self.now = 0.0
        self.threads: list[SimThread] = []  # alive or new, in creation order
        self.current: SimThread | None = None
        self.main: SimThread | None = None
        self.over = False
        self.errors: list[str] = []
        self.events: list[str] = []  # the event log (record)
        self.switches = 0
        self._baton_back = threading.Lock()  # the controller (the caller of run) waits on it
        self._baton_back.acquire()
        self._loops: dict[int, Any] = {}  # thread ident -> the event loop it runs

    # --- time ---------------------------------------------------------------------------------------------------------
    def monotonic(self) -> float:
        return self.MONOTONIC_START + self.now

    def time(self) -> float:
        return self.WALL_START + self.now

    def sleep(self, seconds: float) -> None:
        self.preempt(entry=True)
        if seconds > 0:
            self.block(None, self.now + seconds, "sleep")

    # --- running --------------------------------------------------------------------------------------------------------
    def run(
        self, main: Callable[[], object], *, group: str = "world", real_timeout: float = REAL_STALL_SECONDS
    ) -> None:
        """Run ``main`` (and every thread it starts) until ``main`` returns or the run fails; the other threads stay
        where they are for the caller to inspect the world, until :meth:`close`."""
        thread = SimThread(self, main, "main", group)
        self.main = thread
        thread.state = RUNNABLE
        self.threads.append(thread)
        thread._os.start()
        self._hand_to(self._pick())
        moved = -1
        while not self._baton_back.acquire(timeout=real_timeout):
            if self.switches != moved:  # the run went on in the window (a long run on a loaded machine): no stall
                moved = self.switches
                continue
            holder = self.current
            self.error(
                f"stalled: {holder.name if holder else '?'} held the baton for {real_timeout:.0f} real seconds"
                f" (a wait that does not go through the simulated clock, or a busy loop):\n{_stack(holder)}"
            )
            return

    def close(self, real_timeout: float = REAL_STALL_SECONDS) -> None:
        """End the run: every thread left raises :class:`Unwound` at its next primitive and ends."""
        self.over = True
        for thread in list(self.threads):
            if thread.state is DONE:
                continue
            thread.state = RUNNABLE
            self.current = thread
            thread.go.release()
            if not self._baton_back.acquire(timeout=real_timeout):
                self.errors.append(f"thread {thread.name} did not unwind:\n{_stack(thread)}")
        self.current = None

    def error(self, text: str) -> None:
        """Record a failure the scheduler saw; the run stops at once."""
        self.errors.append(text)
        self.record(f"error {text.splitlines()[0]}")

    def record(self, event: str) -> None:
        """One line of the event log, stamped with the virtual time and the thread."""
        name = self.current.name if self.current is not None else "-"
        group = self.current.group if self.current is not None else "-"
        self.events.append(f"{self.now:12.3f} {group}/{name} {event}")

    # --- threads ------------------------------------------------------------------------------------------------------
    def start(self, thread: SimThread) -> None:
        if thread.state is not NEW:
            raise RuntimeError("threads can only be started once")
        self.check_running()
        thread.state = RUNNABLE
        self.threads.append(thread)
        thread._os.start()
        self.preempt()

    def join(self, thread: SimThread, timeout: float | None) -> None:
        deadline = None if timeout is None else self.now + max(timeout, 0.0)
        while thread.state is not DONE:
            if deadline is not None and self.now >= deadline:
                return
            self.block(thread, deadline, f"join {thread.name}", waiters=thread.joiners)

    def crashed(self, thread: SimThread, error: BaseException) -> None:
        if not self.over and not thread.killed:
            text = "".join(traceback.format_exception(error)).rstrip()
            self.error(f"thread {thread.group}/{thread.name} crashed:\n{text}")

    def finished(self, thread: SimThread) -> None:
        """(On ``thread``'s own OS thread, as its last act.) Hand the baton on, or back to the controller."""
        thread.state = DONE
        if thread in self.threads:
            self.threads.remove(thread)
        for joiner in thread.joiners:
            self.wake(joiner, "notify")
        thread.joiners.clear()
        if self.over or thread is self.main or self.errors:
            self.current = None
            self._give_back()
            return
        self._hand_to(self._pick())

    def kill(self, group: str, *, but_me: bool = False) -> None:
        """SIGKILL: every thread of ``group`` stops where it is, for good (its code never runs again); ``but_me``: the
        running thread goes on (a process's main thread exiting: its other threads end with the process)."""
        for thread in self.threads:
            if thread.group == group and thread is not self.current:
                thread.killed = True
                self._unwait(thread)
                thread.state = FROZEN
        if self.current is not None and self.current.group == group and not but_me:
            self.current.killed = True
            self.current.state = FROZEN
            self.switch()

    def signal(self, thread: SimThread, handler: Callable[[], None]) -> None:
        """Deliver a signal to ``thread``: ``handler`` runs on it at one of its next steps (or in its wait)."""
        thread.signals.append(handler)
        if thread.state is BLOCKED and (thread.deadline is None or self.rng.random() < 0.5):
            # CPython interrupts a blocked wait (a lock's acquire, a sleep) and runs the handler there, then waits on
            # (PEP 475). Otherwise, by the seed, the signal arrives as the thread next wakes (its wait has a deadline):
            # the handler runs at one of its next steps, inside a critical section too, where a thread between two
            # steps meets it. Computation takes no virtual time, so only this finds a signal landing mid-step. Whoever
            # times a signal reads when its handler ran (the world: a SIGTERM's drain counts from it).
            thread.state, thread.woken_by = RUNNABLE, "signal"

    # --- the scheduler ------------------------------------------------------------------------------------------------
    def check_running(self) -> SimThread:
        me = self.current
        if me is None or me._os is not threading.current_thread():
            raise SimulationError("a simulated primitive waited outside the simulation's threads")
        return me

    def preempt(self, *, entry: bool = False) -> None:
        """A step where the running thread may be interrupted: by a signal, or by another thread the seed picks.

        A pending signal's handler runs for sure at a primitive's ``entry`` (as CPython runs it before the call, so a
        handler that releases what the call would wait for is seen by it), and at any other step by the seed: inside a
        critical section too."""
        me = self.current
        if me is None:  # outside the run: its set-up, or the checks after it
            return
        if me.killed or self.over:
            raise Unwound
        if me.signals and (entry or self.rng.random() < 0.5):
            self._deliver(me)
        if self.switch_probability and self.rng.random() < self.switch_probability:
            me.state = RUNNABLE
            self.switch()

    def block(
        self,
        on: Any,
        deadline: float | None,
        what: str,
        waiters: list[SimThread] | None = None,
        *,
        recheck: bool = False,
    ) -> str:
        """The running thread waits on ``on`` (woken by :meth:`wake`) until ``deadline``; why it woke.

        A signal still pending here runs first; ``recheck``: the caller loops on its condition, so it gets back at once
        ("signal") to look again, what the handler did (a lock released, an item put) being the condition's."""
        me = self.check_running()
        if me.killed or self.over:
            raise Unwound
        if me.signals:
            self._deliver(me)
            if recheck:
                return "signal"
        if deadline is not None and deadline <= self.now:
            self.preempt()
            return "timeout"
        loop = self._loops.get(me.ident)
        waited_from = self.now
        queue_ = waiters if waiters is not None else (on.waiters if on is not None else None)
        while True:
            me.state, me.deadline, me.blocked_on, me.blocked_what, me.woken_by = BLOCKED, deadline, queue_, what, None
            if queue_ is not None:
                queue_.append(me)
            self.switch()
            why = me.woken_by
            if why != "signal":
                break
            # A signal interrupted the wait: its handler runs here, then the wait goes on (PEP 475), unless the
            # handler itself woke it.
            try:
                while me.signals:
                    me.signals.pop(0)()
            except BaseException:
                self._unwait(me)
                raise
            if me.woken_by == "notify" or (deadline is not None and self.now >= deadline):
                self._unwait(me)
                why = me.woken_by if me.woken_by == "notify" else "timeout"
                break
            self._unwait(me)
        if loop is not None and what != "select" and what != "lock" and self.now > waited_from:
            self.error(
                f"the event loop waited {self.now - waited_from:.3f} s in {what} outside its selector (a blocking call"
                f" on the loop stalls every coroutine):\n{''.join(traceback.format_stack(limit=12)[:-2])}"
            )
        return why or "notify"

    def _deliver(self, me: SimThread) -> None:
        while me.signals:
            me.signals.pop(0)()

    def wake(self, thread: SimThread, why: str) -> None:
        if thread.state is BLOCKED:
            self._unwait(thread)
            thread.state, thread.woken_by, thread.deadline = RUNNABLE, why, None
        elif thread.woken_by == "signal":
            thread.woken_by = why  # woken while its signal handler runs: the wait ends after it

    def _unwait(self, thread: SimThread) -> None:
        waiters = thread.blocked_on
        if waiters is not None and thread in waiters:
            waiters.remove(thread)
        thread.blocked_on = None

    def switch(self) -> None:
        """The running thread (its state set) gives up the baton; returns once it has it again."""
        me = self.current
        assert me is not None
        self.switches += 1
        nxt = self._pick()
        if nxt is not me:
            self._hand_to(nxt)
            me.go.acquire()
        if me.killed or self.over:
            raise Unwound
        if me.signals and me.woken_by != "signal" and self.rng.random() < 0.5:
            # A signal that arrived while it waited, not delivered in the wait: CPython runs its handler at one of the
            # thread's next steps, here or at a later primitive (inside a lock it takes next, too); before it waits
            # again at the latest (block).
            self._deliver(me)

    def _hand_to(self, thread: SimThread | None) -> None:
        if thread is None:  # nothing can run: the run is over (an error was recorded)
            self.current = None
            self._give_back()
            return
        self.current = thread
        thread.go.release()

    def _give_back(self) -> None:
        """The baton back to the controller; once it gave up on a stalled run nobody waits for it."""
        with contextlib.suppress(RuntimeError):  # released already: the controller reported a stall
            self._baton_back.release()

    def _pick(self) -> SimThread | None:
        while not self.errors:
            live = [t for t in self.threads if not t.suspended]
            runnable = [t for t in live if t.state is RUNNABLE]
            if runnable:
                return runnable[0] if len(runnable) == 1 else self.rng.choice(runnable)
            timed = [t for t in live if t.state is BLOCKED and t.deadline is not None]
            if not timed:
                waiting = ", ".join(f"{t.group}/{t.name} in {t.blocked_what}" for t in live if t.state is BLOCKED)
                self.error(f"deadlock: no thread can run and none waits with a deadline ({waiting})")
                break
            soonest = min(t.deadline for t in timed if t.deadline is not None)
            if soonest > self.horizon:
                self.error(f"the run passed its horizon of {self.horizon:.0f} virtual seconds")
                break
            self.now = max(self.now, soonest)
            for thread in timed:
                if thread.deadline is not None and thread.deadline <= self.now:
                    self.wake(thread, "timeout")
        return None


def _stack(thread: SimThread | None) -> str:
    """Where ``thread``'s real thread is now: for a report of a stall."""
    if thread is None:
        return ""
    frame = sys._current_frames().get(thread._os.ident or -1)
    return "".join(traceback.format_stack(frame, limit=20)) if frame is not None else "(no frame)"


def freeze(sim: Simulation, group: str, frozen: bool = True) -> None:
    """Freeze every thread of ``group`` where it is (``frozen``), as Lambda freezes an execution environment between
    invocations: none runs, and none wakes at its deadline, until it is thawed (``frozen`` False): then they run
    again, and those whose deadline passed meanwhile wake at once. Never the running thread's own group."""
    for thread in sim.threads:
        if thread.group == group:
            thread.suspended = frozen
