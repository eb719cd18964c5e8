"""Async handlers (``async def``) through the real runtime, on the simulated clock (tests/integration/virtual.py):
coroutines on one event loop with ``concurrency`` in flight, the outcomes a thread's handler has, cancellation at the
deadline and at the drain's end, and a blocked loop noticed by the health check. The runtime's event loop is the
clock's, so a coroutine's ``asyncio.sleep`` passes in virtual time."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from consumer import Message, PoisonMessage, worker
from consumer.declaration import contract_of
from consumer.errors import ContractError
from consumer.exit_codes import ExitCode
from consumer.runtime import consumer as consumer_module
from consumer.runtime.coroutines import EVENT_LOOP
from consumer.runtime.dead_letter import read_reason
from consumer.runtime.idempotency import Claim, InMemoryStore
from consumer.runtime.liveness import Liveness, check
from consumer.testing import depth, drain, receive_visible
from tests.integration.conftest import create_pair
from tests.integration.support import consumer_of, fast_contract, holds_nothing, send
from tests.integration.virtual import Virtual


def async_contract(**overrides: Any) -> Any:
    return fast_contract(asynchronous=True, **overrides)


def test_coroutines_run_concurrently_on_one_thread(virtual: Virtual) -> None:
    """30 messages, concurrency 30, each handler awaiting: all 30 are in flight at once, every one on the same
    (event loop) thread, and every message is deleted. On the virtual clock."""
    contract = async_contract(concurrency=30)
    in_flight, most, threads, done = [0], [0], set(), []
    everyone = asyncio.Event()

    async def handle(message: Message) -> None:
        threads.add(threading.get_ident())
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        if in_flight[0] == 30:
            everyone.set()
        try:
            await asyncio.wait_for(everyone.wait(), timeout=10)
        finally:
            in_flight[0] -= 1
        done.append(message.body)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, *(f"m{i}" for i in range(30)))
        with virtual.running(virtual.consumer_of(pair, contract, handle)) as exit_code:
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
        assert most[0] == 30
        assert len(threads) == 1 and threading.get_ident() not in threads
        assert sorted(done) == sorted(f"m{i}" for i in range(30))
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


@worker(
    max_duration=3,
    concurrency=4,
    max_receive_count=2,
    retry_backoff_base=1,
    retry_backoff_max=1,
    non_retryable=(KeyError,),
)
async def outcomes(message: Message) -> None:
    await asyncio.sleep(0)
    if message.body == "poison":
        raise PoisonMessage("not an order")
    if message.body == "rejected":
        raise KeyError("order_id")
    if message.body == "failing":
        raise RuntimeError("always")


def test_an_async_handler_has_a_thread_handlers_outcomes(virtual: Virtual) -> None:
    """Return deletes; PoisonMessage and a declared non-retryable type go to the DLQ at once with their reasons; any
    other error is retried, then moved with it. On the virtual clock."""
    contract = contract_of(outcomes)
    assert contract.asynchronous

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "ok", "poison", "rejected", "failing")
        with virtual.running(virtual.consumer_of(pair, contract, outcomes)) as exit_code:
            # The DLQ too: a retry waiting out its backoff as a delayed copy is neither visible nor in flight.
            virtual.wait_until(
                lambda: holds_nothing(sqs, pair.queue_url) and depth(sqs, pair.dlq_url).total == 3, timeout=30
            )
        moved = {m["Body"]: read_reason(m["MessageAttributes"]) or {} for m in drain(sqs, pair.dlq_url)}
        assert {body: (r["kind"], r["reason"]) for body, r in moved.items()} == {
            "poison": ("poison", "not an order"),
            "rejected": ("non_retryable", "KeyError: 'order_id'"),
            "failing": ("exhausted", "failed 2 times; last error: RuntimeError: always"),
        }
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


def test_a_handler_running_at_the_drain_end_is_cancelled_and_handed_back(virtual: Virtual) -> None:
    """Stopping, a coroutine still running at the drain's end gets CancelledError and its message is handed back
    at once (a requeued copy visible again, not after its lease); one that finishes within the drain is deleted.
    On the virtual clock."""
    contract = async_contract(concurrency=2, max_duration_seconds=30, stop_timeout_seconds=6)  # drains for 1 s
    cancelled: list[float] = []
    finished: list[str] = []

    async def handle(message: Message) -> None:
        if message.body == "quick":
            while not message.stopping:
                await asyncio.sleep(0.05)
            finished.append(message.body)  # finishes within the drain
            return
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            cancelled.append(message.remaining())
            raise

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "slow", "quick")
        consumer = virtual.consumer_of(pair, contract, handle)
        with virtual.running(consumer) as exit_code:
            virtual.wait_until(lambda: depth(sqs, pair.queue_url).in_flight == 2, timeout=10)
            virtual.sim.sleep(0.5)
        assert finished == ["quick"]
        assert len(cancelled) == 1 and cancelled[0] <= 0.2  # at the drain's end
        assert exit_code == [ExitCode.OK]
        (back,) = receive_visible(sqs, pair.queue_url)
        assert back["Body"] == "slow"

    virtual.run(body)


def test_a_blocked_event_loop_fails_the_health_check(
    virtual: Virtual, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coroutine making a synchronous call holds the loop: the pollers and the heartbeat still beat, the event loop
    does not, and `python -m consumer health`'s check names the event loop once its allowance has passed.

    On the virtual clock. The synchronous call waits for a lock the test holds: the scheduler ends a run whose event
    loop waits outside its selector on a sleep or an event (its own check for a blocked loop), not on a lock."""
    monkeypatch.setattr(consumer_module, "EVENT_LOOP_STALL_SECONDS", 2)
    contract = async_contract(concurrency=2, max_duration_seconds=30)
    progress = tmp_path / "liveness.json"
    blocking, held = virtual.sim.event(), virtual.sim.lock()

    async def handle(message: Message) -> None:
        blocking.set()
        if held.acquire(timeout=20):  # a synchronous call inside a coroutine: the loop stops
            held.release()

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        held.acquire()
        liveness = Liveness(progress, clock=virtual.sim.time)
        consumer = virtual.consumer_of(pair, contract, handle, liveness=liveness)
        with virtual.running(consumer):
            virtual.wait_until(
                lambda: progress.exists() and EVENT_LOOP in json.loads(progress.read_text())["loops"], timeout=10
            )
            virtual.sim.sleep(3)  # past the 2 s allowance: healthy only because the idle loop keeps beating
            assert check(progress, virtual.sim.time())[0]
            send(sqs, pair.queue_url, "block")
            virtual.wait_until(blocking.is_set, timeout=10)
            virtual.wait_until(lambda: not check(progress, virtual.sim.time())[0], timeout=10)
            healthy, line = check(progress, virtual.sim.time())
            held.release()
        assert "event-loop stalled" in line and "poller-0 stalled" not in line and "heartbeat stalled" not in line

    virtual.run(body)


def test_a_coroutine_function_under_a_thread_contract_is_refused(sqs: Any) -> None:
    """A thread would call it, get a coroutine back, never run it, and delete the message: refused at once."""
    contract = fast_contract()
    pair = create_pair(sqs, contract)

    async def handle(message: Message) -> None: ...

    with pytest.raises(ContractError, match='"handler" must be a def function'):
        consumer_of(sqs, pair, contract, handle)


class SlowClaims(InMemoryStore):
    """The runtime's own in-memory store, each claim taking 1.5 s (slept with ``sleep``): a claim that waited its turn
    on the executor."""

    def __init__(self, *, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        super().__init__(clock=clock)
        self._sleep = sleep

    def claim(self, key: str, *, owner: str, lease_seconds: int) -> Claim:
        self._sleep(1.5)
        return super().claim(key, owner=owner, lease_seconds=lease_seconds)


def test_max_duration_counts_from_the_handler_start_not_the_claim(virtual: Virtual) -> None:
    """A 1 s max_duration and a claim that takes 1.5 s: the handler still gets its whole second (0.5 s of work is
    done and deleted), because the attempt counts from when the handler starts, not from before its claim. On the
    virtual clock."""
    contract = async_contract(concurrency=1, max_duration_seconds=1)
    done: list[int] = []

    async def handle(message: Message) -> None:
        await asyncio.sleep(0.5)
        done.append(message.receive_count)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, "work")
        store = SlowClaims(clock=virtual.sim.time, sleep=virtual.sim.sleep)
        with virtual.running(virtual.consumer_of(pair, contract, handle, idempotency=store)) as exit_code:
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
        assert done == [1]
        assert exit_code == [ExitCode.OK]

    virtual.run(body)


def test_concurrency_bounds_the_coroutines_in_flight(virtual: Virtual) -> None:
    """concurrency=2 and 12 messages of 0.2 s: never more than 2 handlers at once (no message is received ahead to
    start as a third task), and all 12 are done. On the virtual clock."""
    contract = async_contract(concurrency=2)
    in_flight, most, done = [0], [0], []

    async def handle(message: Message) -> None:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.2)
        in_flight[0] -= 1
        done.append(message.body)

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        send(sqs, pair.queue_url, *(f"m{i}" for i in range(12)))
        with virtual.running(virtual.consumer_of(pair, contract, handle)):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=30)
        assert most[0] == 2 and len(done) == 12

    virtual.run(body)
