"""Receiving: free handler slots, and the pollers that long-poll only for as many messages as there are slots.

A poller reserves free slots first, then long-polls for at most that many messages. The slots are the
handlers plus a :class:`Lookahead`: messages received ahead of free handlers, as many as the handlers
clear in ``LOOKAHEAD_WAIT_SECONDS`` at their mean duration, so a receive overlaps their work.
"""

from __future__ import annotations

import logging
import queue
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from consumer.contract import WorkerContract
from consumer.limits import SQS_MAX_WAIT_SECONDS
from consumer.message import Attempt, Message
from consumer.runtime.circuit import PAUSED
from consumer.runtime.clock import SYSTEM, Clock, Waitable
from consumer.runtime.inflight import Admission, InFlight, LogContext
from consumer.runtime.liveness import poller_loop

if TYPE_CHECKING:  # the stubs are a development dependency: the image does not carry them
    from mypy_boto3_sqs.type_defs import ReceiveMessageResultTypeDef

    from consumer.runtime.circuit import Circuit, RateLimit
    from consumer.runtime.wiring import Intake, Queues, Shared

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

LONG_POLL_SECONDS = SQS_MAX_WAIT_SECONDS
RECEIVE_ERROR_MAX_BACKOFF_SECONDS = 20
#: How often a thread waiting on something else looks at the stop event again.
TICK_SECONDS = 0.5
#: A busy poller waits at most this long for enough free slots to receive a full batch
#: (see Slots.reserve_up_to); 0.2 SQS requests per message needs full batches.
BATCH_FILL_SECONDS = 0.1
#: How long a message received ahead of a free handler (see :class:`Lookahead`) may expect to wait for one;
#: 0 receives only for free handlers. At most a heartbeat interval (1 s or more), so a message that waited
#: still has more lease left than the heartbeat's extension threshold when it starts.
LOOKAHEAD_WAIT_SECONDS = 1.0
#: How many handler durations the lookahead's running mean remembers (an exponential moving average's span).
LOOKAHEAD_SPAN = 64


@dataclass(frozen=True)
class Timings:
    """The runtime's timing knobs, read from consumer/runtime/consumer.py's module when a consumer is built (so a test
    or a benchmark that sets them there tunes every part): this module's constants of the same names by default."""

    tick_seconds: float = TICK_SECONDS
    long_poll_seconds: int = LONG_POLL_SECONDS
    batch_fill_seconds: float = BATCH_FILL_SECONDS
    lookahead_wait_seconds: float = LOOKAHEAD_WAIT_SECONDS


class Slots:
    """Counts free handler slots; a timed-out handler keeps its slot until its thread returns."""

    def __init__(self, total: int, clock: Clock = SYSTEM, *, tick_seconds: float = TICK_SECONDS) -> None:
        self._total = total
        self._capacity = total  # handlers plus the lookahead (set_extra)
        self._free = total
        self._clock = clock.monotonic
        self._tick_seconds = tick_seconds
        self._condition = clock.condition()
        #: How many free slots each waiting poller needs to go on (one entry per waiter): a release wakes the
        #: pollers only once one of them can go on, not once per finished handler (a thread switch each).
        self._needs: list[int] = []
        self._takes = 0  # reservations made so far: a filling poller sees another one take the slots

    def reserve_up_to(
        self,
        wanted: int,
        stop: Waitable,
        fill_seconds: float = 0.0,
        on_wait: Callable[[], None] | None = None,
    ) -> int:
        """Take between 1 and ``wanted`` free slots, waiting for the first; 0 once ``stop`` is set.

        ``on_wait`` is called every tick while no slot is free: waiting for busy handlers is progress
        (liveness), not a stalled poll loop.

        With fewer than ``wanted`` free (some handlers still running), wait up to
        ``fill_seconds`` longer for more to free up: a busy consumer then receives
        full batches instead of one message per ReceiveMessage call. An idle
        consumer has every slot free and never waits.
        """
        with self._condition:
            while True:
                while self._free <= 0 and not stop.is_set():  # below 0 while a lowered lookahead settles
                    if on_wait is not None:
                        on_wait()
                    self._wait_for(1, self._tick_seconds)
                batch = min(wanted, self._capacity)
                deadline = self._clock() + fill_seconds
                takes = self._takes
                while self._free < batch and not stop.is_set() and (remaining := deadline - self._clock()) > 0:
                    self._wait_for(batch, remaining)
                    if self._takes != takes:
                        # Another poller took the slots this one was filling with (and is receiving for them):
                        # fill again from here rather than receive the few left over at the old deadline.
                        takes, deadline = self._takes, self._clock() + fill_seconds
                        if on_wait is not None:
                            on_wait()
                if stop.is_set():
                    return 0
                if self._free > 0:
                    taken = min(batch, self._free)
                    self._free -= taken
                    self._takes += 1
                    return taken
                # The lookahead was lowered during the fill wait and took the free slots with it: wait again.

    def _wait_for(self, need: int, timeout: float) -> None:
        """Wait (lock held) until ``need`` slots may be free, or ``timeout``."""
        self._needs.append(need)
        try:
            self._condition.wait(timeout)
        finally:
            self._needs.remove(need)

    def release(self, count: int = 1) -> None:
        if count:
            with self._condition:
                self._free += count
                if self._needs and self._free >= min(self._needs):
                    self._condition.notify_all()

    def hold(self, count: int) -> None:
        """Take ``count`` slots without waiting (free may go below 0): a batch handler call holds room for a full
        batch while it runs, so pollers receive only for handlers free to take a batch (:meth:`release` gives it
        back)."""
        if count:
            with self._condition:
                self._free -= count

    @property
    def extra(self) -> int:
        """How many more messages than handlers may be held now (:meth:`set_extra`)."""
        return self._capacity - self._total

    def set_extra(self, extra: int) -> None:
        """Hold up to ``extra`` more messages than there are handlers (received ahead, waiting for one).

        Lowering it takes effect as messages settle: the free count may go below 0 until then.
        """
        with self._condition:
            if extra == self._capacity - self._total:
                return
            self._free += extra - (self._capacity - self._total)
            self._capacity = self._total + extra
            if self._needs and self._free >= min(self._needs):
                self._condition.notify_all()


class Lookahead:
    """How many messages a poller may receive ahead of free handlers: as many as the handlers clear in
    ``wait_seconds``, from the running mean of their durations, at most one batch; 0 until one has finished.

    A receive then overlaps the handlers' work instead of waiting for it: with short handlers a free handler
    finds the next message already here, and a receive can ask for a full batch at any concurrency. Slow
    handlers get fewer, and none once together they clear less than one message in ``wait_seconds`` (a mean
    above ``wait_seconds * concurrency``): no message is expected to wait here longer than that while another
    task could run it, and two 10-minute jobs never hold anything back.

    Example::

        lookahead = Lookahead(slots, concurrency=16, batch_size=10, wait_seconds=1.0)
        lookahead.finished(0.05)  # after each handler: 16 handlers clear 320 a second, so a batch of 10 ahead
    """

    def __init__(
        self,
        slots: Slots,
        *,
        concurrency: int,
        batch_size: int,
        wait_seconds: float,
        clock: Callable[[], float] = SYSTEM.monotonic,
    ) -> None:
        self._slots = slots
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._wait_seconds = wait_seconds
        self._clock = clock
        self._alpha = 2 / (LOOKAHEAD_SPAN + 1)
        self.mean_seconds: float | None = None
        self._last_finished = clock()

    @classmethod
    def for_contract(
        cls, slots: Slots, contract: WorkerContract, *, rated: bool, wait_seconds: float, clock: Callable[[], float]
    ) -> Lookahead:
        """The lookahead of ``contract``'s consumer (``rated``: under ``max_rate``), waiting ``wait_seconds`` (the
        module's LOOKAHEAD_WAIT_SECONDS, or an ablation's); none where a message received ahead would only wait:
        under max_rate the rate is the bottleneck; on FIFO a hand-back spends a receive (and can end in the DLQ
        unattempted), and a group runs in order on one handler thread anyway; a batch handler's free threads collect
        while the others run (the batch is its own lookahead); an async handler's message starts as a task as it
        arrives (one received ahead would run beyond concurrency)."""
        ahead = not (rated or contract.fifo or contract.max_batch or contract.asynchronous)
        return cls(
            slots,
            concurrency=contract.concurrency,
            batch_size=contract.batch_size,
            wait_seconds=wait_seconds if ahead else 0.0,
            clock=clock,
        )

    @property
    def extra(self) -> int:
        return self._slots.extra

    def finished(self, seconds: float) -> None:
        """One handler ran ``seconds``: update the mean, and the slots' extra capacity when it changes."""
        self._last_finished = self._clock()
        mean = self.mean_seconds
        # Unlocked: handler threads race on a float, and a lost update only delays the mean by one sample. Racing
        # set_extra calls may land out of order; the next handler to finish compares again and corrects it.
        self.mean_seconds = mean = seconds if mean is None else mean + self._alpha * (seconds - mean)
        if self._wait_seconds <= 0:
            return
        extra = min(self._batch_size, int(self._wait_seconds * self._concurrency / max(mean, 1e-6)))
        if extra != self._slots.extra:
            self._slots.set_extra(extra)

    def check(self, now: float) -> None:
        """No handler has finished for ``wait_seconds`` (every one busy with slow work, or none running): receive
        nothing ahead until one does. The mean only moves when a handler finishes, so a slowdown would otherwise
        keep receiving a batch ahead for handlers that no longer clear it (the heartbeat calls this every tick)."""
        if self._slots.extra and now - self._last_finished > self._wait_seconds:
            self._slots.set_extra(0)


class HandsBack(Protocol):
    """What a poller needs of the settlement (settlement.py, which imports this module): handing messages back."""

    def hand_back_unstarted(self, items: list[InFlight], why: str, delay: int = 0, copy: bool = False) -> None: ...

    def hand_back(
        self, item: InFlight, why: str, delay: int = 0, attempted: bool = False, copy: bool = False
    ) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Flow:
    """How much may be received and started: the handler ``slots`` (what the pollers reserve and the settlement
    frees), the ``lookahead`` beyond them (None: none, a Lambda invocation's), the downstream ``circuit`` (open: receive and start nothing) and
    ``@worker(max_rate=...)``'s pacing of handler starts (``rate``; None: none)."""

    slots: Slots
    lookahead: Lookahead | None
    circuit: Circuit
    rate: RateLimit | None = None


def tasks_of(received: list[InFlight], *, fifo: bool) -> list[list[InFlight]]:
    """The handler runners' tasks of a receive: one per message on a standard queue; on FIFO one per message group,
    its messages in order."""
    if not fifo:
        return [[item] for item in received]
    by_group: OrderedDict[str, list[InFlight]] = OrderedDict()
    for item in received:
        by_group.setdefault(item.message.attributes.get("MessageGroupId", ""), []).append(item)
    return list(by_group.values())


class Poller:
    """Reserve free slots, long-poll for at most that many messages, admit them and queue them on ``work`` for the
    handler runners.

    One instance serves every poller thread (``contract.pollers``); each runs :meth:`run`. ``intake`` says whose
    copies are trusted with their spent receives and how the declared sources' deliveries are read; ``timings`` how
    long a receive waits (``long_poll_seconds``) and how long a busy poller waits to fill a batch
    (``batch_fill_seconds``). The ``settlement`` hands back the messages of a receive answered after shutdown began
    (``hand_back_unstarted``), or after shutdown closed the in-flight table (``hand_back``: a long poll that took the
    copies it requeued).
    """

    def __init__(
        self,
        shared: Shared,
        *,
        queues: Queues,
        intake: Intake,
        flow: Flow,
        settlement: HandsBack,
        work: queue.SimpleQueue[list[InFlight]],
        timings: Timings,
    ) -> None:
        self.client = queues.client
        self.queue_url = queues.queue_url  # this name tells the runtime call recorder (tests) which queue a call is for
        self.contract = shared.contract
        self.task_role_id = intake.task_role_id
        self._slots = flow.slots
        self._table = shared.table
        self._work = work
        self._stop = shared.stopping.event
        self._metrics = shared.metrics
        self._protection = shared.protection
        self._hand_back_unstarted = settlement.hand_back_unstarted
        self._hand_back = settlement.hand_back
        self._clock = shared.clock.monotonic
        self._long_poll_seconds = timings.long_poll_seconds
        self._batch_fill_seconds = timings.batch_fill_seconds
        self._liveness = shared.liveness
        self._circuit = flow.circuit
        stopping = shared.stopping
        self._drain_end: Callable[[], float] = lambda: stopping.drain_end
        self._sources = intake.sources or None  # none declared: from_sqs reads no body

    def run(self, index: int = 0) -> None:
        """Poller ``index``'s loop; it records progress (liveness) after every receive returns, empty or not, and
        while it waits on purpose (an open circuit, a receive error's backoff)."""
        loop = poller_loop(index)

        def progress() -> None:
            self._liveness.beat(loop)

        error_backoff = 1.0
        attempt = self._attempt_id()  # FIFO: one ReceiveRequestAttemptId until a receive answers
        # Wait to fill a batch only while receives come back more than half full (a backlog: a full batch will
        # come). After a receive that brought less, the queue is all but empty and the next message should be
        # picked up at once, not after a fill wait.
        backlog = False
        while not self._stop.is_set():
            fill_seconds = self._batch_fill_seconds if backlog else 0.0
            reserved = self._slots.reserve_up_to(self.contract.batch_size, self._stop, fill_seconds, on_wait=progress)
            if not reserved:
                continue
            limit = self._circuit.receive_limit()
            if limit is not None:
                # Open: receive nothing until the pause ends. Half-open: this poller receives the one probe.
                self._slots.release(reserved - limit)
                reserved = limit
                if limit == PAUSED:  # paused on purpose: not a stalled loop
                    self.wait_on_purpose(min(max(self._circuit.seconds_paused(), 0.05), TICK_SECONDS), progress)
                    continue
            outcome = self._receive_once(reserved, limit, progress, attempt)
            if isinstance(outcome, Exception):
                log.warning(
                    "receive_failed",
                    extra={"queue_url": self.queue_url, "error": str(outcome), "retry_in_seconds": error_backoff},
                )
                # Bounded exponential wait: an unreachable endpoint costs one call per wait, no busy loop.
                self.wait_on_purpose(error_backoff, progress)
                error_backoff = min(error_backoff * 2, RECEIVE_ERROR_MAX_BACKOFF_SECONDS)
                continue
            error_backoff = 1.0
            attempt = self._attempt_id()  # a new receive; after a failed one the same id again (_attempt_id)
            backlog = outcome

    def _receive_once(
        self, reserved: int, limit: int | None, progress: Callable[[], None], attempt: str | None
    ) -> bool | Exception:
        """One receive for ``reserved`` slots, its messages handed on (or back); whether it was a backlog (more
        than half of what it asked for: SQS may return fewer than it holds, so "all of it" is too strict), or
        the error it failed with. Counted as a receive in flight throughout: shutdown waits for those."""
        self._table.receiving(+1)
        try:
            try:
                if attempt is None:
                    response = self.client.receive_message(
                        QueueUrl=self.queue_url,
                        MaxNumberOfMessages=reserved,
                        WaitTimeSeconds=self._long_poll_seconds,
                        MessageSystemAttributeNames=["All"],
                        MessageAttributeNames=["All"],
                    )
                else:
                    response = self.client.receive_message(
                        QueueUrl=self.queue_url,
                        MaxNumberOfMessages=reserved,
                        WaitTimeSeconds=self._long_poll_seconds,
                        MessageSystemAttributeNames=["All"],
                        MessageAttributeNames=["All"],
                        ReceiveRequestAttemptId=attempt,
                    )
            except (ClientError, BotoCoreError) as error:
                progress()  # the receive returned, with an error: the loop is alive
                self._slots.release(reserved)
                if limit is not None:
                    self._circuit.probing([])
                return error
            progress()
            received = self._received(response)
            if limit is not None:
                self._circuit.probing([item.message.message_id for item in received])
            self._dispatch(received, reserved)
            return 2 * len(received) > reserved
        finally:
            self._table.receiving(-1)

    def _attempt_id(self) -> str | None:
        """On FIFO, a ReceiveRequestAttemptId for a receive: botocore sends it again with a retry, and the poller
        with its next receive when every retry failed, so a receive whose answer was lost gets the same messages
        instead of leaving their group locked for a visibility timeout with a receive spent
        (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-receiverequestattemptid-request-parameter.html).
        botocore does not fill it; SQS does, but anew for each request, so a retry would not share it."""
        return uuid.uuid4().hex if self.contract.fifo else None

    def wait_on_purpose(self, seconds: float, progress: Callable[[], None]) -> None:
        """Wait ``seconds`` (less if stopping) and count the wait as progress: a pause the consumer chose (a
        receive error's backoff; any other deliberate pause of receiving) is not a stalled loop (liveness.py)."""
        deadline = self._clock() + seconds
        while not self._stop.is_set() and (remaining := deadline - self._clock()) > 0:
            progress()
            self._stop.wait(min(remaining, TICK_SECONDS))

    def _received(self, response: ReceiveMessageResultTypeDef) -> list[InFlight]:
        now = self._clock()
        lease_end = now + self.contract.visibility_timeout_seconds
        received = []
        for raw in response.get("Messages", []):
            # Each receive is a new Message with the one attempt a handler runner may make at it (its deadline set as
            # it starts): what the handler sees, never copied per attempt.
            attempt = Attempt(stop=self._stop, clock=self._clock, drain_end=self._drain_end)
            message = Message.from_sqs(raw, own_role_id=self.task_role_id, attempt=attempt, sources=self._sources)
            received.append(InFlight(message, now, lease_end, LogContext.of(message, self.queue_url)))
        return received

    def _dispatch(self, received: list[InFlight], reserved: int) -> None:
        self._slots.release(reserved - len(received))
        if not received:
            return
        self._metrics.count("received", len(received))
        admission = self._table.admit(received)
        if admission is Admission.LATE:
            # Answered after shutdown collected its hand-backs (a long poll outstanding at SIGTERM, answered by
            # the copies shutdown requeued): hand them back now (shutdown waits for this) rather than strand them
            # until their lease ends.
            self._slots.release(len(received))
            log.warning("received_after_shutdown", extra={"count": len(received), "queue_url": self.queue_url})
            for item in received:
                self._hand_back(item, "received_after_shutdown")
                log.info(
                    "message_released", extra={"message_id": item.message.message_id, "why": "received_after_shutdown"}
                )
            return
        try:
            if self._stop.is_set():
                # A long poll answered during shutdown: nothing of it may start now.
                self._hand_back_unstarted(received, "shutdown")
                return
            if admission is Admission.FIRST:
                self._protection.busy()
            for group in tasks_of(received, fifo=self.contract.fifo):
                self._work.put(group)
        finally:
            self._table.dispatched()
