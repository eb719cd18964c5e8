"""The downstream circuit's state machine and the max_rate pacing, on an injected clock (no threads, no AWS)."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import timedelta

import pytest

from consumer import DownstreamUnavailable, worker
from consumer.contract import WorkerContract
from consumer.declaration import max_rate_of
from consumer.errors import ContractError
from consumer.runtime.circuit import PAUSED, PROBE, Circuit, CircuitState, RateLimit
from consumer.runtime.observability import Metrics


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def circuit_of(clock: FakeClock, stream: io.StringIO | None = None, **contract: int) -> Circuit:
    values = {"max_duration_seconds": 30, "retry_backoff_base_seconds": 2, "retry_backoff_max_seconds": 60}
    metrics = Metrics(dimensions={"Queue": "q"}, stream=stream or io.StringIO(), clock=lambda: 0.0)
    return Circuit(WorkerContract(**(values | contract)), metrics=metrics, clock=clock)


def probing(clock: FakeClock, probe: str) -> Circuit:
    """A circuit opened for 2 s, then half-open with ``probe`` received as its probe."""
    circuit = circuit_of(clock)
    circuit.open(2, "m1")
    clock.now += 2
    assert circuit.receive_limit() == PROBE
    circuit.probing([probe])
    return circuit


def test_circuit_closed_receives_without_limit_and_starts_anything() -> None:
    """A fresh circuit is closed: no receive limit, every message may start."""
    circuit = circuit_of(FakeClock())
    assert (circuit.state, circuit.receive_limit(), circuit.may_start("m1")) == (CircuitState.CLOSED, None, True)


def test_circuit_open_pauses_receiving_and_starting_for_retry_after() -> None:
    """Opened with retry_after=10: nothing is received or started until 10 s have passed on the clock."""
    clock = FakeClock()
    circuit = circuit_of(clock)
    assert circuit.open(10, "m1") == 10
    assert (circuit.state, circuit.receive_limit(), circuit.may_start("m2")) == (CircuitState.OPEN, PAUSED, False)
    clock.now += 9.9
    assert circuit.receive_limit() == PAUSED
    assert circuit.seconds_paused() == pytest.approx(0.1)


def test_circuit_half_open_gives_exactly_one_probe() -> None:
    """After the pause the first poller to ask probes (one message); the others wait; only the probe may start."""
    clock = FakeClock()
    circuit = circuit_of(clock)
    circuit.open(10, "m1")
    clock.now += 10
    assert circuit.receive_limit() == PROBE
    assert circuit.state is CircuitState.HALF_OPEN
    assert circuit.receive_limit() == PAUSED
    circuit.probing(["probe"])
    assert (circuit.may_start("probe"), circuit.may_start("other")) == (True, False)


def test_circuit_probe_success_closes_and_logs_how_long_it_was_open(caplog: pytest.LogCaptureFixture) -> None:
    """The probe's answer closes the circuit: receiving is unlimited again; circuit_closed carries the seconds
    open, and the EMF metrics hold one open and the time open."""
    clock, stream = FakeClock(), io.StringIO()
    circuit = circuit_of(clock, stream)
    caplog.set_level(logging.INFO, logger="consumer")
    circuit.open(10, "m1")
    clock.now += 12
    circuit.receive_limit()
    circuit.probing(["probe"])
    circuit.answered("probe", True)
    assert (circuit.state, circuit.receive_limit(), circuit.may_start("any")) == (CircuitState.CLOSED, None, True)
    closed = [r for r in caplog.records if r.getMessage() == "circuit_closed"]
    assert [getattr(r, "open_seconds", None) for r in closed] == [12.0]
    circuit._metrics.flush()
    document = json.loads(stream.getvalue())
    assert (document["circuit_opens"], document["circuit_open"]) == (1, [12000.0])


def test_circuit_another_outage_on_the_probe_reopens_with_a_doubled_pause_capped() -> None:
    """Without retry_after the pause is the contract's backoff for the opens in a row (2, 4, 8 ...), capped
    at retry_backoff_max; the time open counts from the first open to the close."""
    clock = FakeClock()
    circuit = circuit_of(clock, retry_backoff_max_seconds=5)
    pauses = []
    for _ in range(4):
        pauses.append(circuit.open(None, "m"))
        clock.now += pauses[-1]
        assert circuit.receive_limit() == PROBE
        circuit.probing(["m"])
    assert pauses == [2, 4, 5, 5]
    assert circuit.opens_in_a_row == 4
    circuit.answered("m", True)
    assert (circuit.state, circuit.opens_in_a_row) == (CircuitState.CLOSED, 0)


def test_circuit_retry_after_beyond_the_backoff_max_is_capped() -> None:
    """A downstream asking for an hour gets retry_backoff_max (60 s here): the probe costs one message."""
    circuit = circuit_of(FakeClock())
    assert circuit.open(3600, "m1") == 60


def test_circuit_a_second_outage_while_open_is_not_a_new_open() -> None:
    """A handler already running meets the outage too: the pause may grow, the opens in a row do not."""
    clock = FakeClock()
    circuit = circuit_of(clock)
    circuit.open(10, "m1")
    clock.now += 5
    assert circuit.open(20, "m2") == 20
    assert circuit.opens_in_a_row == 1


def test_circuit_empty_probe_receive_lets_the_next_receive_probe() -> None:
    """A probe receive that found nothing gives the probe back: the next poller probes."""
    clock = FakeClock()
    circuit = circuit_of(clock)
    circuit.open(2, "m1")
    clock.now += 2
    assert circuit.receive_limit() == PROBE
    circuit.probing([])
    assert circuit.receive_limit() == PROBE


def test_circuit_probe_that_never_reached_the_downstream_is_not_an_answer() -> None:
    """A deferred or duplicate probe (answered=None) neither closes the circuit nor blocks the next probe."""
    clock = FakeClock()
    circuit = probing(clock, "p")
    circuit.answered("p", None)
    assert (circuit.state, circuit.receive_limit()) == (CircuitState.HALF_OPEN, PROBE)


def test_circuit_probe_lost_past_the_attempt_timeout_frees_the_next_probe() -> None:
    """A probe whose outcome never comes back blocks further probes only for max_duration."""
    clock = FakeClock()
    circuit = probing(clock, "p")
    clock.now += 29.9
    assert circuit.receive_limit() == PAUSED
    clock.now += 0.1
    assert circuit.receive_limit() == PROBE


def test_circuit_outcome_of_a_message_other_than_the_probe_does_not_close_it() -> None:
    """A handler that was running when the circuit opened succeeds: the circuit stays as it was."""
    clock = FakeClock()
    circuit = circuit_of(clock)
    circuit.open(2, "m1")
    circuit.answered("running-before", True)
    assert circuit.state is CircuitState.OPEN


@pytest.mark.parametrize("retry_after", [-1, float("nan"), float("inf"), "10", True])
def test_downstream_unavailable_rejects_a_retry_after_that_is_not_seconds(retry_after: object) -> None:
    """retry_after must be a timedelta, finite seconds >= 0, or None; the error names it and the value."""
    with pytest.raises(ValueError) as error:
        DownstreamUnavailable(retry_after=retry_after)  # type: ignore[arg-type]
    assert str(error.value) == (
        f'"retry_after" must be a timedelta, a finite number of seconds >= 0, or None: {retry_after!r}'
    )


def test_downstream_unavailable_takes_a_timedelta_or_seconds() -> None:
    """Both forms give seconds; None leaves the pause to the consumer."""
    assert DownstreamUnavailable(retry_after=timedelta(minutes=1)).retry_after_seconds == 60.0
    assert DownstreamUnavailable(retry_after=0).retry_after_seconds == 0.0
    assert DownstreamUnavailable().retry_after_seconds is None


def test_rate_limit_spaces_starts_one_interval_apart() -> None:
    """At 4 per second, starts asked at once are given turns 0.25 s apart (no burst)."""
    clock = FakeClock()
    limit = RateLimit(4, clock)
    waits: list[float] = []

    class Recorder(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return False

    stop = Recorder()
    assert all(limit.acquire(stop) for _ in range(4))
    assert waits == pytest.approx([0.25, 0.5, 0.75])


def test_rate_limit_gives_up_the_wait_when_stopping() -> None:
    """A worker waiting for its turn returns False as soon as shutdown begins."""
    limit = RateLimit(0.001, FakeClock())
    stop = threading.Event()
    assert limit.acquire(stop) is True
    stop.set()
    assert limit.acquire(stop) is False


@pytest.mark.parametrize("max_rate", [0, 0.0009, 10_001, True, "5"])
def test_worker_rejects_a_max_rate_out_of_bounds(max_rate: object) -> None:
    """max_rate is a number of starts per second within its bounds; the error names it, the rule and the value."""
    with pytest.raises(ContractError) as error:
        worker(max_duration=10, max_rate=max_rate)  # type: ignore[arg-type]
    assert str(error.value) == (
        f'"max_rate" must be a number of handler starts per second between 0.001 and 10000, or None: {max_rate!r}'
    )


@pytest.mark.parametrize("max_rate", [0.001, 10_000, None])
def test_worker_keeps_max_rate_beside_the_contract(max_rate: float | None) -> None:
    """Both edges and None are accepted, and the declared rate is read back; the contract is unchanged by it. (A
    lease long enough for 0.001 starts per second: a held message may wait 1000 s for its turn.)"""

    @worker(max_duration=3000, max_lease=3600, max_rate=max_rate)
    def handle(message: object) -> None: ...

    @worker(max_duration=3000, max_lease=3600)
    def plain(message: object) -> None: ...

    assert max_rate_of(handle) == max_rate
    assert handle.__worker_contract__ == plain.__worker_contract__  # type: ignore[attr-defined]
