"""The downstream circuit: closed, open (no receiving) for a pause, half-open (one probe), closed again.

A handler raising :class:`~consumer.DownstreamUnavailable` opens it. While open the pollers receive
nothing, and what the consumer holds but has not started is handed back (see :mod:`.settlement`);
running handlers finish. When the pause is over one poller receives a single message, the probe: its
success (or any outcome that is not ``DownstreamUnavailable``: the downstream answered) closes the
circuit; another ``DownstreamUnavailable`` reopens it for a longer pause.

The pause is the later of what the downstream asked (``retry_after``) and the contract's retry backoff
for the opens in a row (``retry_backoff_seconds(n)``: base, doubling), never above
``retry_backoff_max_seconds``: the declared bound on how long a message waits between attempts.

Also here: :class:`RateLimit`, ``@worker(max_rate=...)``'s pacing of handler starts.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

from consumer.contract import WorkerContract
from consumer.runtime.clock import Waitable
from consumer.runtime.observability import Metrics

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

#: Receive limits :meth:`Circuit.receive_limit` answers besides "no limit" (None).
PAUSED, PROBE = 0, 1


class CircuitState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Circuit:
    """The circuit's state, shared by pollers, handler runners and settlement under one lock; ``clock`` is monotonic
    seconds.

    ``probe_timeout_seconds``: a probe whose outcome has not come back by then (a handler past its
    timeout, or a probe handed back at shutdown) no longer blocks the next probe.
    """

    def __init__(
        self,
        contract: WorkerContract,
        *,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        probe_timeout_seconds: float | None = None,
    ) -> None:
        self.contract = contract
        self._metrics = metrics
        self._clock = clock
        self._probe_timeout = contract.max_duration_seconds if probe_timeout_seconds is None else probe_timeout_seconds
        self._lock = threading.Lock()
        self.state = CircuitState.CLOSED
        self.opens_in_a_row = 0
        self._opened_at = 0.0  # when it left CLOSED: the time open counts from there to the close
        self._until = 0.0  # end of the current pause
        self._probe: str | None = None  # message id of the probe, once received
        self._probe_taken_at: float | None = None  # a poller is receiving (or a handler thread running) the probe

    def pause(self, retry_after_seconds: float | None, opens_in_a_row: int) -> float:
        """Seconds to stay open: the later of ``retry_after`` and the backoff for this open, capped (module doc)."""
        backoff = self.contract.retry_backoff_seconds(opens_in_a_row)
        asked = 0.0 if retry_after_seconds is None else retry_after_seconds
        return float(min(max(asked, backoff), self.contract.retry_backoff_max_seconds))

    def open(self, retry_after_seconds: float | None, message_id: str) -> float:
        """The downstream is down: stop receiving; returns the seconds left in the pause (what a hand-back delays)."""
        now = self._clock()
        with self._lock:
            if self.state is CircuitState.OPEN:
                # A handler that was already running met the same outage: no new open, the pause may grow.
                self._until = max(self._until, now + self.pause(retry_after_seconds, self.opens_in_a_row))
                return self._until - now
            if self.state is CircuitState.CLOSED:
                self._opened_at = now
            self.opens_in_a_row += 1
            pause = self.pause(retry_after_seconds, self.opens_in_a_row)
            self.state, self._until = CircuitState.OPEN, now + pause
            self._probe = self._probe_taken_at = None
        self._metrics.count("circuit_opens")
        log.warning(
            "circuit_opened",
            extra={
                "pause_seconds": pause,
                "retry_after_seconds": retry_after_seconds,
                "opens_in_a_row": self.opens_in_a_row,
                "message_id": message_id,
            },
        )
        return pause

    def receive_limit(self) -> int | None:
        """How many messages a poller may receive now: None (no limit), :data:`PROBE` (this poller probes) or 0.

        The first poller to ask once the pause is over takes the probe; the others wait for its outcome.
        """
        now = self._clock()
        with self._lock:
            if self.state is CircuitState.CLOSED:
                return None
            if self.state is CircuitState.OPEN:
                if now < self._until:
                    return PAUSED
                self.state = CircuitState.HALF_OPEN
                log.info("circuit_half_open", extra={"open_seconds": round(now - self._opened_at, 3)})
            if self._probe_taken_at is not None and now - self._probe_taken_at < self._probe_timeout:
                return PAUSED
            self._probe, self._probe_taken_at = None, now
            return PROBE

    def seconds_paused(self) -> float:
        """Seconds until the pause ends (0 when not open): how long a poller can sleep."""
        with self._lock:
            return max(0.0, self._until - self._clock()) if self.state is CircuitState.OPEN else 0.0

    def probing(self, message_ids: list[str]) -> None:
        """The probe receive answered with ``message_ids`` (at most one); none: the next receive probes again."""
        with self._lock:
            if self.state is CircuitState.HALF_OPEN:
                if message_ids:
                    self._probe = message_ids[0]
                else:
                    self._probe_taken_at = None

    def may_start(self, message_id: str) -> bool:
        """Whether a received message may start now: any while closed, only the probe while half-open."""
        state = self.state  # the common case, closed, read without the lock (one attribute read)
        if state is CircuitState.CLOSED:
            return True
        with self._lock:
            return self.state is CircuitState.CLOSED or (
                self.state is CircuitState.HALF_OPEN and message_id == self._probe
            )

    def answered(self, message_id: str, downstream_answered: bool | None) -> None:
        """A started message's outcome: True (the downstream answered) closes a half-open circuit on its probe;
        None (no attempt reached the downstream: deferred, a duplicate) lets the next receive probe again."""
        state = self.state
        if state is CircuitState.CLOSED:
            # Without the lock: a probe is taken while half-open, before its message is handed to a handler thread, and
            # only its own answer closes the circuit again; read closed here, this message is no probe.
            return
        now = self._clock()
        with self._lock:
            if self.state is not CircuitState.HALF_OPEN or message_id != self._probe:
                return
            if downstream_answered is None:
                self._probe = self._probe_taken_at = None
                return
            open_seconds = now - self._opened_at
            self.state, self.opens_in_a_row = CircuitState.CLOSED, 0
            self._probe = self._probe_taken_at = None
        self._metrics.timing("circuit_open", open_seconds * 1000)
        log.info("circuit_closed", extra={"open_seconds": round(open_seconds, 3), "probe_message_id": message_id})


class RateLimit:
    """At most ``per_second`` handler starts per second across the handler threads: starts are spaced 1/rate apart.

    No burst allowance, so any one-second window holds at most ``per_second`` starts (a bucket of one token):
    a rate-limited API counts requests per window, and a burst after a quiet spell is what trips it.
    Twenty lines of our own rather than a dependency in the image.
    """

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = 1.0 / per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._next = float("-inf")

    def acquire(self, stop: Waitable) -> bool:
        """Wait for this thread's turn to start a handler; False if ``stop`` was set first (the turn is not used)."""
        wait = self.reserve()
        return wait <= 0 or not stop.wait(wait)

    def reserve(self) -> float:
        """Take the next turn; the seconds to wait for it (an event loop awaits them, a thread waits in acquire)."""
        with self._lock:
            now = self._clock()
            turn = max(now, self._next)
            self._next = turn + self._interval
        return turn - now
