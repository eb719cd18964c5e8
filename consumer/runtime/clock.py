"""The one clock the runtime reads time from and waits through.

Every timestamp the runtime takes and every wait it makes (an Event or Condition wait, a queue's timeout, a sleep, a
backoff, a long poll's deadline, the drain) goes through a :class:`Clock`, given to the :class:`.Consumer` once. The
default, :data:`SYSTEM`, is the machine's: ``time.monotonic``, ``time.time`` and the ``threading``, ``queue``,
``concurrent.futures`` and ``asyncio`` primitives themselves, so production pays nothing for it. A test gives another
clock instead: the simulated world's (``bench/sim``) advances only when every thread of the run waits, so a 15-minute
lease or SQS's 12-hour budget passes in milliseconds and a loaded machine cannot starve a run.

What the clock makes is what can be waited on. A lock held only for in-memory steps, never across a wait or an AWS
call, is a plain ``threading.Lock`` (the in-flight table's, the metrics', the circuit's): nothing can wait on it for
long, so nothing needs the clock there.

The consumer's parts find it in what they all share (:class:`.wiring.Shared`) and keep the reading functions they
use; a helper that only reads the time (the circuit, the lookahead, the completions) takes a reading function
(``clock.monotonic`` or ``clock.time``), one that waits takes the :class:`Clock`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time as _time
from collections.abc import Callable
from typing import Any, Protocol


class Waitable(Protocol):
    """What the runtime does with an event: ``threading.Event``'s subset."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Clock(Protocol):
    """Time and the primitives that wait on it. :data:`SYSTEM` is the machine's; ``bench/sim`` has a simulated one."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (``time.monotonic``): deadlines, leases, durations."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (``time.time``): what is written for others to read (records, metrics, reasons)."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def lock(self) -> threading.Lock:
        """A lock that may be held across a wait (a Condition's, or one held through a call that takes time)."""
        ...

    def condition(self, lock: threading.Lock | None = None) -> threading.Condition: ...

    def event(self) -> threading.Event: ...

    def simple_queue(self) -> queue.SimpleQueue[Any]: ...

    def thread(self, target: Callable[[], object], *, name: str) -> threading.Thread:
        """A daemon thread, not started."""
        ...

    def executor(self, max_workers: int, thread_name_prefix: str) -> concurrent.futures.ThreadPoolExecutor: ...

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """A new event loop whose ``time()`` is :meth:`monotonic` and whose waits are this clock's."""
        ...


class SystemClock:
    """The machine's clock and primitives: what the image runs."""

    monotonic = staticmethod(_time.monotonic)
    time = staticmethod(_time.time)
    sleep = staticmethod(_time.sleep)
    lock = staticmethod(threading.Lock)
    condition = staticmethod(threading.Condition)
    event = staticmethod(threading.Event)

    @staticmethod
    def simple_queue() -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()

    @staticmethod
    def thread(target: Callable[[], object], *, name: str) -> threading.Thread:
        return threading.Thread(target=target, name=name, daemon=True)

    @staticmethod
    def executor(max_workers: int, thread_name_prefix: str) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix)

    @staticmethod
    def event_loop() -> asyncio.AbstractEventLoop:
        return asyncio.new_event_loop()


#: The machine's clock: the default everywhere a clock is taken.
SYSTEM: Clock = SystemClock()


def wait_for_future(clock: Clock, future: concurrent.futures.Future[Any], timeout: float) -> bool:
    """Wait up to ``timeout`` for ``future`` on ``clock`` (``Future.result(timeout)`` waits on the machine's time);
    True once it is done."""
    done = clock.event()
    future.add_done_callback(lambda _future: done.set())
    return done.wait(timeout)
