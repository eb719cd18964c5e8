"""When the consumer stops, and how a signal asks it to without taking a lock.

``stop()`` (from any thread: shutdown asked by code, every slot stuck, a thread crashed) sets the stop event every
part reads and fixes when the drain ends. A signal handler must not do that: ``Event.set`` takes the event's lock,
and a handler runs on the main thread between two of its steps, possibly while that very thread holds the lock inside
``Event.wait``; CPython then blocks for ever (https://github.com/python/cpython/issues/126434). So the SIGTERM handler
calls :meth:`Stopping.request`, which writes the time and releases a lock the main thread waits to take: a release
never blocks, and wakes that wait at once. The main thread (:meth:`Stopping.wait_for_a_stop`) then calls
:meth:`Stopping.stop` itself.
"""

from __future__ import annotations

import math

from consumer.runtime.clock import Clock

#: How often the main thread looks at the stop flags on its own, a safety net only: a request or a stop releases the
#: lock it waits on, which wakes it at once, and a release made before its wait leaves the lock free for it to take.
SIGNAL_CHECK_SECONDS = 10.0


class Stopping:
    """The consumer's stop: ``event`` (what every part reads), ``drain_end`` (on ``clock``; inf until stopping), and
    ``closed`` (set once shutdown is done: the heartbeat and an async handler's event loop end then)."""

    def __init__(self, clock: Clock, drain_seconds: float) -> None:
        self.event = clock.event()
        #: When shutdown stops waiting for running handlers (on ``clock``); inf until stop(). Handlers see it.
        self.drain_end = math.inf
        #: When a signal asked to stop (request), on ``clock``; the drain counts from it.
        self.requested_at: float | None = None
        self._now = clock.monotonic
        self._drain_seconds = drain_seconds
        self._wake = clock.lock()  # held: the main thread waits to take it; request() and stop() release it
        self._wake.acquire()
        self.closed = clock.event()

    def stop(self) -> None:
        """Begin shutdown, from any thread but a signal handler: the drain is counted from the stop asked for first
        (ECS counts its stop timeout from the SIGTERM)."""
        if not self.event.is_set():
            asked = self.requested_at
            self.drain_end = (self._now() if asked is None else asked) + self._drain_seconds
        self.event.set()
        self._wake_main()

    def request(self) -> None:
        """Ask to stop, from a signal handler: no lock taken (the module docstring)."""
        if self.requested_at is None:
            self.requested_at = self._now()
        self._wake_main()

    def wait_for_a_stop(self) -> None:
        """The main thread's wait: until :meth:`stop`, or a :meth:`request` it then turns into a stop."""
        while not self.event.is_set():  # read without a lock: a signal handler may interrupt this thread anywhere
            if self.requested_at is not None:
                self.stop()
                return
            self._wake.acquire(timeout=SIGNAL_CHECK_SECONDS)

    def _wake_main(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:  # released already: the main thread is awake, or about to take it
            pass
