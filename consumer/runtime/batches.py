"""Batch handlers (``@worker(max_batch=...)``): collect a batch, run the handler once, settle each message on its own.

Each of ``concurrency`` handler threads collects its own batch: the first message it is handed, then more as the
pollers receive them, until ``max_batch`` or ``batch_window`` after the first (whatever has arrived with a window
of 0). The slots count messages, ``concurrency * max_batch``; a call running with fewer than ``max_batch`` messages
holds the rest of its room until it returns (:meth:`.Slots.hold`), so the pollers start a receive only for a thread
free to collect, never for a batch that would wait behind running ones. A receive already in flight when the last
free thread starts its call (it was started for that thread's room) may still bring up to a receive's worth per
poller; those wait for the next free thread, up to a call's ``max_duration``, and the heartbeat extends their leases
as it does running messages' (a batch handler's waiting messages are extended by design: heartbeat.py), so a short
lease (``max_lease``) cannot lapse while they wait.

Every message of the batch starts as a one-message handler's would (the circuit, a lease run down while it waited,
its idempotency claim: a duplicate of work done is deleted without reaching the handler, one held elsewhere is
handed back), then the handler is called once with the rest and each message is settled with the outcome its
:class:`~consumer.BatchResult` reports: the same settlement, backoff, DLQ moves, circuit and completions as a
one-message handler's. A message the result does not report as succeeded is never deleted (consumer/batch.py).
The heartbeat extends each message's lease and gives up on the call after ``max_duration`` (every message of it).
"""

from __future__ import annotations

import itertools
import logging
import queue
from collections.abc import Callable
from typing import Any

from consumer.batch import BatchResult, UnreportedMessage
from consumer.runtime.inflight import InFlight
from consumer.runtime.polling import TICK_SECONDS, Flow
from consumer.runtime.processing import HandlerRunner, Lease
from consumer.runtime.settlement import SUCCEEDED, Outcome, Settlement, Verdict
from consumer.runtime.wiring import Guard, Shared

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)


class BatchRunner(HandlerRunner):
    """Runs a batch handler on every handler thread: :meth:`run` collects a batch and settles it, again and again.

    The flow's ``slots`` are the pollers' (see the module docstring for the room a call holds).
    """

    def __init__(
        self,
        shared: Shared,
        *,
        handler: Callable[..., Any],
        flow: Flow,
        settlement: Settlement,
        guard: Guard,
        work: queue.SimpleQueue[list[InFlight]],
        lease: Lease,
    ) -> None:
        super().__init__(shared, handler=handler, flow=flow, settlement=settlement, guard=guard, work=work, lease=lease)
        self._slots = flow.slots
        assert self.contract.max_batch is not None
        self._max_batch = self.contract.max_batch
        self._window_seconds = float(self.contract.batch_window_seconds)
        self._calls = itertools.count(1)

    def run(self) -> None:
        while True:
            batch = self._collect(self._work.get())
            if batch:
                self.run_batch(batch)

    def _collect(self, first: list[InFlight]) -> list[InFlight]:
        """``first`` and what arrives until the batch is full or its window has passed; [] (handed back) once
        stopping."""
        batch = list(first)
        window_end = self._clock() + self._window_seconds
        while len(batch) < self._max_batch and not self._stop.is_set():
            remaining = window_end - self._clock()
            try:
                more = (
                    self._work.get(timeout=min(remaining, TICK_SECONDS)) if remaining > 0 else self._work.get_nowait()
                )
            except queue.Empty:
                if remaining <= 0:
                    break
                continue
            batch.extend(more)
        if self._stop.is_set():
            self._settlement.hand_back_unstarted(batch, "shutdown")
            return []
        return batch

    def run_batch(self, batch: list[InFlight]) -> None:
        """Start every message of ``batch`` as a one-message handler's would, call the handler once with those that
        run, and settle each."""
        room = self._max_batch - len(batch)
        self._slots.hold(room)  # until the call returns: see the module docstring
        try:
            call = next(self._calls)
            started = []
            for item in batch:
                item.call = call
                if self._begin(item):
                    started.append(item)
            if self._tracer is not None and started:
                self._tracer.run_batch(started, self._run_started)  # one span for the call (docs/tracing.md)
            else:
                self._run_started(started)
        finally:
            self._slots.release(room)

    def _run_started(self, started: list[InFlight]) -> None:
        """Claim each started message, then call the handler with those to run and settle each."""
        to_run = []
        for item in started:
            guarded = (
                self._guard(item) if self._idempotency is not None or item.message.unreadable is not None else None
            )
            if guarded is None:
                to_run.append(item)
            else:
                self._settlement.settle(item, guarded)
        if to_run:
            # The claims above run one after another (a DynamoDB call each): the call's max_duration, and the
            # heartbeat's give-up, count from when the handler is called, as a one-message handler's do.
            now = self._clock()
            for item in to_run:
                refusal = self._lease.at_call(item, now)
                if refusal is not None and self._table.release_running(item):
                    self.hand_back_at_call(item, refusal)
            called = [item for item in to_run if self._table.calling(item, now)]
            for item in to_run:
                if item not in called:  # handed back while the claims were under way
                    self._settlement.settle(item, self.not_called(item))
            if called:
                for item, outcome in zip(called, self._call(called), strict=True):
                    self._settlement.settle(item, outcome)

    def _call(self, items: list[InFlight]) -> list[Outcome]:
        """Call the handler once with ``items``' messages; each one's outcome, in order."""
        messages = [self._view(item) for item in items]
        started = self._clock()
        try:
            result: object = self.handler(messages)
        except BaseException as failure:  # noqa: BLE001 (as a one-message handler's: the whole batch failed)
            outcomes = [self.classify(failure)] * len(items)
        else:
            outcomes = self._outcomes(messages, result)
        self._metrics.timing("duration", (self._clock() - started) * 1000)
        self._metrics.count("batches")
        return outcomes

    def _outcomes(self, messages: list[Any], result: object) -> list[Outcome]:
        if not isinstance(result, BatchResult):
            why = f"the batch handler returned {type(result).__name__}, not a BatchResult: no message was reported"
            log.error("batch_result_invalid", extra={"returned": type(result).__name__, "messages": len(messages)})
            return [Outcome(Verdict.FAILED, UnreportedMessage(why))] * len(messages)
        outcomes, unreported = [], 0
        for message in messages:
            reported, error = result.outcome(message)
            if not reported:
                unreported += 1
                error = UnreportedMessage("the batch handler did not report this message: it is not deleted")
            outcomes.append(SUCCEEDED if error is None else self.classify(error))
        strangers = len(result) - (len(messages) - unreported)
        if unreported or strangers:
            # A message not of this batch is ignored: it is settled by the call it belongs to, if any.
            log.warning(
                "batch_messages_unreported",
                extra={"unreported": unreported, "not_in_batch": strangers, "messages": len(messages)},
            )
        return outcomes
