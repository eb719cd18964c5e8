"""Async handlers (``async def``) through the real runtime, against moto in-process: coroutines on
one event loop with ``concurrency`` in flight, the outcomes a thread's handler has, cancellation at the deadline
and at the drain's end, and a blocked loop noticed by the health check."""

from __future__ import annotations

import asyncio
import json
import threading
import time
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
from consumer.testing import depth, drain, receive_visible, running, wait_until
from tests.integration.conftest import create_pair
from tests.integration.support import consumer_of, fast_contract, holds_nothing, send


def async_contract(**overrides: Any) -> Any:
    return fast_contract(asynchronous=True, **overrides)


def test_coroutines_run_concurrently_on_one_thread(sqs: Any) -> None:
    """30 messages, concurrency 30, each handler awaiting: all 30 are in flight at once, every one on the same
    (event loop) thread, and every message is deleted."""
    contract = async_contract(concurrency=30)
    pair = create_pair(sqs, contract)
    send(sqs, pair.queue_url, *(f"m{i}" for i in range(30)))
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

    with running(consumer_of(sqs, pair, contract, handle)) as result:
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
    assert most[0] == 30
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert sorted(done) == sorted(f"m{i}" for i in range(30))
    assert result.exit_code == ExitCode.OK


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


def test_an_async_handler_has_a_thread_handlers_outcomes(sqs: Any) -> None:
    """Return deletes; PoisonMessage and a declared non-retryable type go to the DLQ at once with their reasons; any
    other error is retried, then moved with it."""
    contract = contract_of(outcomes)
    assert contract.asynchronous
    pair = create_pair(sqs, contract)
    send(sqs, pair.queue_url, "ok", "poison", "rejected", "failing")
    with running(consumer_of(sqs, pair, contract, outcomes)) as result:
        # The DLQ too: a retry waiting out its backoff as a delayed copy is neither visible nor in flight.
        wait_until(lambda: holds_nothing(sqs, pair.queue_url) and depth(sqs, pair.dlq_url).total == 3, timeout=30)
    moved = {m["Body"]: read_reason(m["MessageAttributes"]) or {} for m in drain(sqs, pair.dlq_url)}
    assert {body: (r["kind"], r["reason"]) for body, r in moved.items()} == {
        "poison": ("poison", "not an order"),
        "rejected": ("non_retryable", "KeyError: 'order_id'"),
        "failing": ("exhausted", "failed 2 times; last error: RuntimeError: always"),
    }
    assert result.exit_code == ExitCode.OK


def test_a_handler_running_at_the_drain_end_is_cancelled_and_handed_back(sqs: Any) -> None:
    """Stopping, a coroutine still running at the drain's end gets CancelledError and its message is handed back
    at once (a requeued copy visible again, not after its lease); one that finishes within the drain is deleted."""
    contract = async_contract(concurrency=2, max_duration_seconds=30, stop_timeout_seconds=6)  # drains for 1 s
    pair = create_pair(sqs, contract)
    send(sqs, pair.queue_url, "slow", "quick")
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

    consumer = consumer_of(sqs, pair, contract, handle)
    with running(consumer) as result:
        wait_until(lambda: depth(sqs, pair.queue_url).in_flight == 2, timeout=10)
        time.sleep(0.5)
    assert finished == ["quick"]
    assert len(cancelled) == 1 and cancelled[0] <= 0.2  # at the drain's end
    assert result.exit_code == ExitCode.OK
    (back,) = receive_visible(sqs, pair.queue_url)
    assert back["Body"] == "slow"


def test_a_blocked_event_loop_fails_the_health_check(sqs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A coroutine calling time.sleep holds the loop: the pollers and the heartbeat still beat, the event loop does
    not, and `python -m consumer health`'s check names the event loop once its allowance has passed."""
    monkeypatch.setattr(consumer_module, "EVENT_LOOP_STALL_SECONDS", 2)
    contract = async_contract(concurrency=2, max_duration_seconds=30)
    pair = create_pair(sqs, contract)
    progress = tmp_path / "liveness.json"
    blocking, release = threading.Event(), threading.Event()

    async def handle(message: Message) -> None:
        blocking.set()
        release.wait(20)  # a synchronous call inside a coroutine: the loop stops

    consumer = consumer_of(sqs, pair, contract, handle, liveness=Liveness(progress))
    with running(consumer):
        wait_until(lambda: progress.exists() and EVENT_LOOP in json.loads(progress.read_text())["loops"], timeout=10)
        time.sleep(3)  # past the 2 s allowance: healthy only because the idle loop keeps beating
        assert check(progress, time.time())[0]
        send(sqs, pair.queue_url, "block")
        wait_until(blocking.is_set, timeout=10)
        wait_until(lambda: not check(progress, time.time())[0], timeout=10)
        healthy, line = check(progress, time.time())
        release.set()
    assert "event-loop stalled" in line and "poller-0 stalled" not in line and "heartbeat stalled" not in line


def test_a_coroutine_function_under_a_thread_contract_is_refused(sqs: Any) -> None:
    """A thread would call it, get a coroutine back, never run it, and delete the message: refused at once."""
    contract = fast_contract()
    pair = create_pair(sqs, contract)

    async def handle(message: Message) -> None: ...

    with pytest.raises(ContractError, match='"handler" must be a def function'):
        consumer_of(sqs, pair, contract, handle)


class SlowClaims(InMemoryStore):
    """The runtime's own in-memory store, each claim taking 1.5 s: a claim that waited its turn on the executor."""

    def claim(self, key: str, *, owner: str, lease_seconds: int) -> Claim:
        time.sleep(1.5)
        return super().claim(key, owner=owner, lease_seconds=lease_seconds)


def test_max_duration_counts_from_the_handler_start_not_the_claim(sqs: Any) -> None:
    """A 1 s max_duration and a claim that takes 1.5 s: the handler still gets its whole second (0.5 s of work is
    done and deleted), because the attempt counts from when the handler starts, not from before its claim."""
    contract = async_contract(concurrency=1, max_duration_seconds=1)
    pair = create_pair(sqs, contract)
    send(sqs, pair.queue_url, "work")
    done: list[int] = []

    async def handle(message: Message) -> None:
        await asyncio.sleep(0.5)
        done.append(message.receive_count)

    with running(consumer_of(sqs, pair, contract, handle, idempotency=SlowClaims())) as result:
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
    assert done == [1]
    assert result.exit_code == ExitCode.OK


def test_concurrency_bounds_the_coroutines_in_flight(sqs: Any) -> None:
    """concurrency=2 and 12 messages of 0.2 s: never more than 2 handlers at once (no message is received ahead to
    start as a third task), and all 12 are done."""
    contract = async_contract(concurrency=2)
    pair = create_pair(sqs, contract)
    send(sqs, pair.queue_url, *(f"m{i}" for i in range(12)))
    in_flight, most, done = [0], [0], []

    async def handle(message: Message) -> None:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.2)
        in_flight[0] -= 1
        done.append(message.body)

    with running(consumer_of(sqs, pair, contract, handle)):
        wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=30)
    assert most[0] == 2 and len(done) == 12
