"""The waiting primitives of the simulated clock: ``threading``'s, ``queue``'s, ``concurrent.futures``' and asyncio's
counterparts that wait on :class:`bench.sim.scheduler.Simulation`'s virtual time (see that module)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import selectors
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from bench.sim.scheduler import SimThread, Simulation, Unwound


class SimLock:
    """``threading.Lock``: not reentrant (its owner acquiring it again is CPython's deadlock, reported)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.owner: SimThread | None = None
        self.waiters: list[SimThread] = []

    def acquire(self, blocking: bool = True, timeout: float = -1, *, signals_first: bool = True) -> bool:
        """``signals_first``: a pending signal's handler runs before the lock is looked at (CPython runs it before the
        call); else it may run just after the lock is taken (inside the critical section)."""
        sim = self.sim
        sim.preempt(entry=signals_first)
        me = sim.current
        deadline = None if timeout is None or timeout < 0 else sim.now + timeout
        if self.owner is not None and self.owner is me and blocking and deadline is None:
            # Waiting for ever on a lock this very thread holds: only its own code, further up the stack, would release
            # it. (With a timeout it is a wait, which another thread, or a signal handler, may end by a release.)
            sim.error(
                f"deadlock: {me.group}/{me.name} acquires a lock it holds (threading.Lock is not reentrant; a signal"
                f" handler run inside the lock's critical section blocks for ever):\n"
                f"{''.join(traceback.format_stack(limit=14)[:-1])}"
            )
            sim.switch()  # the run is over: the error is recorded and nothing runs again
        while self.owner is not None:
            if not blocking or (deadline is not None and sim.now >= deadline):
                return False
            sim.block(self, deadline, "lock", recheck=True)
        self.owner = me
        sim.preempt()  # a step inside the critical section: a signal can land here
        return True

    def release(self) -> None:
        if self.owner is None:
            current = self.sim.current
            if self.sim.over or (current is not None and current.killed):
                return  # unwinding: a condition's wait ended without taking its lock back
            raise RuntimeError("release unlocked lock")
        self.owner = None
        for waiter in list(self.waiters):
            self.sim.wake(waiter, "notify")

    def locked(self) -> bool:
        return self.owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


class SimCondition:
    """``threading.Condition`` on a :class:`SimLock`."""

    def __init__(self, sim: Simulation, lock: SimLock | None = None) -> None:
        self.sim = sim
        self._lock = lock or SimLock(sim)
        self.waiters: list[SimThread] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        sim = self.sim
        if self._lock.owner is not sim.current:
            raise RuntimeError("cannot wait on un-acquired lock")
        self._lock.release()
        try:
            deadline = None if timeout is None else sim.now + max(timeout, 0.0)
            why = sim.block(self, deadline, "condition")
        finally:
            if not (sim.over or (sim.current is not None and sim.current.killed)):
                # CPython's wait takes its lock back in C: a pending signal's handler runs before or just after.
                self._lock.acquire(signals_first=sim.rng.random() < 0.5)
        return why == "notify"

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        end = None if timeout is None else self.sim.now + timeout
        result = predicate()
        while not result:
            remaining = None if end is None else end - self.sim.now
            if remaining is not None and remaining <= 0:
                break
            self.wait(remaining)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        for waiter in self.waiters[:n]:
            self.sim.wake(waiter, "notify")

    def notify_all(self) -> None:
        self.notify(len(self.waiters))


class SimEvent:
    """``threading.Event``, built as CPython builds it: a flag under a condition (so a signal handler that sets it
    while the interrupted thread is inside ``wait``'s critical section meets the same non-reentrant lock)."""

    def __init__(self, sim: Simulation) -> None:
        self._cond = SimCondition(sim, SimLock(sim))
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._cond:
            signaled = self._flag
            if not signaled:
                signaled = self._cond.wait(timeout)
            return signaled


class SimQueue:
    """``queue.SimpleQueue``: ``get`` with a timeout raises ``queue.Empty``, as the real one does."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._items: deque[Any] = deque()
        self.waiters: list[SimThread] = []

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self._items.append(item)
        if self.waiters:
            self.sim.wake(self.waiters[0], "notify")
        self.sim.preempt()

    put_nowait = put

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        sim = self.sim
        sim.preempt(entry=True)
        deadline = None if timeout is None else sim.now + max(timeout, 0.0)
        while not self._items:
            if not block or (deadline is not None and sim.now >= deadline):
                raise queue.Empty
            sim.block(self, deadline, "queue", recheck=True)
        return self._items.popleft()

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)


class SimExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool of :class:`SimThread` s (asyncio's ``set_default_executor`` insists on a ThreadPoolExecutor)."""

    def __init__(self, sim: Simulation, max_workers: int, thread_name_prefix: str) -> None:  # noqa: D107
        # ThreadPoolExecutor's own __init__ makes real locks and a real queue: none of it is used here.
        self._sim = sim
        self._work = SimQueue(sim)
        self._workers: list[SimThread] = []
        self._max = max_workers
        self._prefix = thread_name_prefix
        self._closed = False
        self._idle = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._work.put((future, fn, args, kwargs))
        if self._idle == 0 and len(self._workers) < self._max:
            thread = self._sim.thread(self._run, name=f"{self._prefix}_{len(self._workers)}")
            self._workers.append(thread)
            thread.start()
        return future

    def _run(self) -> None:
        while True:
            self._idle += 1
            try:
                work = self._work.get()
            finally:
                self._idle -= 1
            if work is None:
                return
            future, fn, args, kwargs = work
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except Unwound:
                raise
            except BaseException as error:  # noqa: BLE001 (the future carries it, as a real pool's does)
                future.set_exception(error)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        if cancel_futures:
            while True:  # as CPython's: a worker may take the last item between a look and a get
                try:
                    work = self._work.get_nowait()
                except queue.Empty:
                    break
                if work is not None:
                    work[0].cancel()
        for _ in self._workers:
            self._work.put(None)
        if wait:
            for thread in self._workers:
                thread.join()


class _SimSelector(selectors.BaseSelector):
    """The event loop's selector: it never has a ready file, it waits on the virtual clock until woken
    (``call_soon_threadsafe``) or the loop's next timer."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._keys: dict[int, selectors.SelectorKey] = {}
        self._woken = False
        self.waiters: list[SimThread] = []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.unregister(fileobj)
        return self.register(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        sim = self.sim
        if self._woken:
            self._woken = False
            sim.preempt()
            return []
        if timeout is not None and timeout <= 0:
            sim.preempt()
            return []
        deadline = None if timeout is None else sim.now + timeout
        sim.block(self, deadline, "select")
        self._woken = False
        return []

    def wake(self) -> None:
        self._woken = True
        for waiter in list(self.waiters):
            self.sim.wake(waiter, "notify")

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return dict(self._keys)

    def close(self) -> None:
        self._keys.clear()


class SimEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on the virtual clock: ``time()`` is the simulation's, its waits are the simulation's."""

    def __init__(self, sim: Simulation) -> None:
        self._sim = sim
        super().__init__(selector=_SimSelector(sim))

    def time(self) -> float:
        return self._sim.monotonic()

    def _write_to_self(self) -> None:
        self._selector.wake()  # type: ignore[attr-defined]

    def run_forever(self) -> None:
        me = self._sim.current
        assert me is not None
        self._sim._loops[me.ident] = self
        try:
            super().run_forever()
        finally:
            self._sim._loops.pop(me.ident, None)
