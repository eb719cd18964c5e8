"""Async handlers (``async def``): ``concurrency`` coroutines on one event loop the runtime owns.

The pollers hand each message to the loop (:class:`LoopFeed`), which starts it as a task at once; the slots bound
how many run. What blocks (an idempotency claim in DynamoDB, a settlement that sends to the DLQ or requeues a copy)
runs on the loop's executor (``ASYNC_EXECUTOR_THREADS`` threads), never inside the loop.

Cancellation is how a coroutine sees the deadline and the stop: every tick the loop's watcher cancels a handler
past :attr:`Message.deadline` (its ``max_duration``, or the drain's end once stopping). Past ``max_duration`` the
attempt is given up on as a thread's is (timed out, no delete, the message comes back after its lease); at the
drain's end it is handed back as shutdown hands back a thread's. Either way the handler gets ``CancelledError`` at
its ``await`` and may clean up; its result no longer counts, and its slot is free once it returns.

The watcher also beats the ``event-loop`` entry of the liveness file: a coroutine that blocks the loop with a
synchronous call stops the beat while the pollers and the heartbeat go on, and ``python -m consumer health`` fails
after ``EVENT_LOOP_STALL_SECONDS``, so ECS replaces the task (consumer/runtime/liveness.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, cast

from consumer.limits import ASYNC_EXECUTOR_THREADS
from consumer.runtime.clock import wait_for_future
from consumer.runtime.inflight import InFlight
from consumer.runtime.polling import TICK_SECONDS, Flow
from consumer.runtime.processing import HandlerRunner, Lease
from consumer.runtime.settlement import SUCCEEDED, Outcome, Settlement, Verdict
from consumer.runtime.wiring import Guard, Shared

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

EVENT_LOOP = "event-loop"


class LoopFeed(queue.SimpleQueue):  # type: ignore[type-arg]
    """The pollers' work queue for an async handler: each group put is started on the loop at once, so nothing
    waits in it (``get_nowait`` at shutdown finds it empty; a task started during shutdown hands itself back)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, start: Callable[[list[InFlight]], None]) -> None:
        super().__init__()
        self._loop = loop
        self._start = start

    def put(self, item: list[InFlight], block: bool = True, timeout: float | None = None) -> None:
        self._loop.call_soon_threadsafe(self._start, item)


class AsyncRunner(HandlerRunner):
    """Runs the event loop (:meth:`run`, on one thread) and every coroutine of an ``async def`` handler.

    The loop and its executor are made by the consumer's clock; the loop ends once shutdown is done (the stopping's
    ``closed``) and beats the liveness file's ``event-loop`` entry. Each message starts as a task on the loop as the
    pollers hand it on (:attr:`feed`, their work queue). ``on_crash`` stops the process when a message's task raises
    what nothing expected, as a guarded thread's death does (``thread_crashed``).
    """

    def __init__(
        self,
        shared: Shared,
        *,
        handler: Callable[..., Any],
        flow: Flow,
        settlement: Settlement,
        guard: Guard,
        lease: Lease,
        on_crash: Callable[[], None],
    ) -> None:
        waits = shared.clock  # the consumer's clock, whose event loop and executor these are
        self.loop = waits.event_loop()
        self.feed = LoopFeed(self.loop, self._spawn)
        super().__init__(
            shared,
            handler=handler,
            flow=flow,
            settlement=settlement,
            guard=guard,
            work=self.feed,
            lease=lease,
        )
        self._liveness = shared.liveness
        self._closed = shared.stopping.closed
        self._on_crash = on_crash
        self._waits = waits
        threads = min(self.contract.concurrency, ASYNC_EXECUTOR_THREADS)
        self._executor = waits.executor(threads, "settle")
        self.loop.set_default_executor(self._executor)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Running handlers' tasks by message, and why the watcher cancelled one ("timeout" or "drain").
        self._running: dict[InFlight, asyncio.Task[None]] = {}
        self._cancelled: dict[InFlight, str] = {}
        self._thread: threading.Thread | None = None  # the loop's, when :meth:`submit` started it

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._watch)
        try:
            self.loop.run_forever()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def submit(self, group: list[InFlight]) -> concurrent.futures.Future[None]:
        """Run ``group`` (a task, as the pollers hand on) on the loop, started on a thread of its own at the first
        call; the future ends with the task (a Lambda invocation waits on it). :meth:`close` ends the loop."""
        if self._thread is None:
            self._thread = self._waits.thread(self.run, name=EVENT_LOOP)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(self._run_group(group), self.loop)

    def close(self) -> None:
        """End the loop :meth:`submit` started."""
        self._closed.set()
        self.loop.call_soon_threadsafe(self.loop.stop)

    def cancel_running(self, wait_seconds: float) -> None:
        """At the drain's end (shutdown, from its thread): cancel every running handler, then wait up to
        ``wait_seconds`` for them to return, each handing its message back (:meth:`_given_up`). A loop held by a
        synchronous call answers nothing: shutdown then hands the messages back itself."""
        future = asyncio.run_coroutine_threadsafe(self._cancel_all(wait_seconds), self.loop)
        if not wait_for_future(self._waits, future, wait_seconds + 0.5):
            future.cancel()  # a blocked or stopped loop: shutdown's own hand-back follows

    async def _cancel_all(self, wait_seconds: float) -> None:
        tasks = []
        for item, task in list(self._running.items()):
            self._cancelled[item] = "drain"
            del self._running[item]
            task.cancel()
            tasks.append(task)
        if tasks:
            await asyncio.wait(tasks, timeout=wait_seconds)

    # --- on the loop ------------------------------------------------------------
    def _spawn(self, group: list[InFlight]) -> None:
        task = self.loop.create_task(self._run_group(group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._crashed)

    def _crashed(self, task: asyncio.Task[None]) -> None:
        """A message's task that raised (a settlement's call failing as nothing expects) would leave its message in
        flight and, for FIFO, its group blocked in a process that looks alive: stop the process instead (exit 1), as
        a guarded thread's death does, so ECS replaces it and the message's lease brings it back."""
        failure = None if task.cancelled() else task.exception()
        if failure is None:
            return
        log.critical(
            "thread_crashed",
            exc_info=failure,
            extra={"thread_name": f"{EVENT_LOOP}:{task.get_name()}"},
        )
        self._on_crash()

    def _watch(self) -> None:
        """Every tick: beat the loop's liveness, cancel handlers past their deadline, end the loop once closed."""
        self._liveness.beat(EVENT_LOOP)
        if self._closed.is_set():
            self.loop.stop()
            return
        now = self._clock()
        for item, task in list(self._running.items()):
            message = item.message
            if now >= message.attempt.deadline:
                why = "timeout"
            elif now >= message.attempt.drain_end():
                why = "drain"
            else:
                continue
            self._cancelled[item] = why
            del self._running[item]
            task.cancel()
        self.loop.call_later(TICK_SECONDS, self._watch)

    async def _run_group(self, group: list[InFlight]) -> None:
        for index, item in enumerate(group):
            if self._stop.is_set():
                await self._blocking(self._settlement.hand_back_unstarted, group[index:], self._lease.stop_reason)
                return
            if not await self._process_async(item) and self.contract.fifo:
                # Order within a group: nothing after a failed message may run before it.
                await self._blocking(self._settlement.hand_back_unstarted, group[index + 1 :], "fifo_group_blocked")
                return

    async def _process_async(self, item: InFlight) -> bool:
        if not await self._begin_async(item):
            return False
        if self._tracer is not None:  # the attempt's span, current in this task
            return await self._tracer.process_async(item, self._run_started)
        return await self._run_started(item)

    async def _begin_async(self, item: InFlight) -> bool:
        """The loop's ``_begin``: a max_rate turn is awaited, a hand-back runs on the executor (a send, a visibility
        change, the ECS agent's protection call: each may wait on the network), the rest does not wait."""
        if self._rate is not None and self._circuit.may_start(item.message.message_id):
            await asyncio.sleep(self._rate.reserve())
        refusal = self._refusal(item)
        if refusal is not None:
            await self._blocking(self._refuse, item, refusal)
            return False
        return self._start(item)

    async def _run_started(self, item: InFlight) -> bool:
        if self._idempotency is not None or item.message.unreadable is not None:
            guarded = await self._blocking(self._guard, item)
            if guarded is not None:
                return bool(await self._blocking(self._settlement.settle, item, guarded))
        outcome = await self._attempt_async(item)
        why = self._cancelled.pop(item, None)
        if why is not None:
            await self._blocking(self._given_up, item, why)
        return bool(await self._blocking(self._settlement.settle, item, outcome))

    async def _attempt_async(self, item: InFlight) -> Outcome:
        # The claim may have waited its turn on the executor behind many others: the attempt, its max_duration and
        # the heartbeat's give-up count from now, when the handler is called.
        started = self._clock()
        refusal = self._lease.at_call(item, started)
        if refusal is not None and self._table.release_running(item):
            await self._blocking(self.hand_back_at_call, item, refusal)
        if not self._table.calling(item, started):  # handed back while its claim was under way, or now
            return await self._blocking(self.not_called, item)  # type: ignore[no-any-return]
        task = asyncio.current_task()
        assert task is not None
        self._running[item] = task
        try:
            await cast("Awaitable[object]", self.handler(self._view(item)))
            outcome = SUCCEEDED
        except asyncio.CancelledError as cancelled:
            outcome = Outcome(Verdict.FAILED, cancelled)  # not counted if the watcher cancelled it (_given_up)
        except BaseException as failure:  # noqa: BLE001 (any handler error means "retry later", as a thread's)
            outcome = self.classify(failure)
        finally:
            self._running.pop(item, None)
        seconds = self._clock() - started
        self._metrics.timing("duration", seconds * 1000)
        if self._lookahead is not None:
            self._lookahead.finished(seconds)
        return outcome

    def _given_up(self, item: InFlight, why: str) -> None:
        """The watcher cancelled ``item``'s handler: past max_duration it is timed out (its lease brings it back);
        at the drain's end it is handed back, unless shutdown did first. Its settlement then finds it so and only
        frees its slot."""
        if why == "timeout":
            # Released, not TIMED_OUT: a cancelled coroutine returns, so it is not a stuck slot (the heartbeat counts
            # TIMED_OUT ones, and gives up on a coroutine itself only past a grace: a loop that cannot cancel it).
            if self._table.release_running(item):  # else the heartbeat gave up first, and logged it
                self._metrics.count("timed_out")
                log.error(
                    "handler_timed_out",
                    extra=item.context.fields(max_duration_seconds=self.contract.max_duration_seconds, cancelled=True),
                )
        elif self._table.release_running(item):
            self._settlement.hand_back_at_drain(item, attempted=True)
            log.warning("message_handed_back", extra=item.context.fields(cancelled=True))

    async def _blocking(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` on the executor: a call that may wait on the network never blocks the loop."""
        return await self.loop.run_in_executor(None, call, *args)
