"""The lookahead: how many messages the pollers may receive ahead of free handlers, from the handlers' mean duration."""

from __future__ import annotations

import io
import threading
import time

import pytest

from consumer.contract import WorkerContract
from consumer.runtime.consumer import Collaborators, Consumer
from consumer.runtime.observability import Metrics
from consumer.runtime.polling import Lookahead, Slots
from consumer.runtime.wiring import Intake


def lookahead_of(slots: Slots, concurrency: int, wait_seconds: float = 1.0) -> Lookahead:
    return Lookahead(slots, concurrency=concurrency, batch_size=10, wait_seconds=wait_seconds)


def test_no_lookahead_until_a_handler_has_finished() -> None:
    slots, stop = Slots(2), threading.Event()
    lookahead_of(slots, 2)
    assert slots.reserve_up_to(10, stop) == 2


def test_short_handlers_get_a_batch_ahead() -> None:
    """Two handlers of 10 ms clear 200 a second: a full batch may wait for them, so a receive can ask for 10 more."""
    slots, stop = Slots(2), threading.Event()
    lookahead = lookahead_of(slots, 2)
    lookahead.finished(0.01)
    assert lookahead.extra == 10
    assert slots.reserve_up_to(20, stop) == 12


def test_the_lookahead_is_what_the_handlers_clear_in_the_wait() -> None:
    """Two handlers of 0.5 s clear 4 a second: 4 ahead. A 10-minute job: none."""
    slots = Slots(2)
    lookahead = lookahead_of(slots, 2)
    lookahead.finished(0.5)
    assert lookahead.extra == 4
    for _ in range(200):  # the running mean forgets the short ones
        lookahead.finished(600)
    assert lookahead.extra == 0
    assert slots.reserve_up_to(10, threading.Event()) == 2


def test_no_lookahead_when_switched_off() -> None:
    slots = Slots(2)
    lookahead = lookahead_of(slots, 2, wait_seconds=0)
    lookahead.finished(0.001)
    assert lookahead.extra == 0
    assert slots.reserve_up_to(10, threading.Event()) == 2


def test_a_lowered_lookahead_waits_for_the_messages_held_to_settle() -> None:
    """Eleven held (one handler, ten ahead); the lookahead drops to 0: no slot is free until ten more settle."""
    slots, stop = Slots(1, tick_seconds=0.01), threading.Event()
    slots.set_extra(10)
    assert slots.reserve_up_to(11, stop) == 11
    slots.set_extra(0)
    slots.release(10)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(slots.reserve_up_to(10, stop)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got  # 11 held, capacity 1: nothing free yet
    slots.release(1)
    waiter.join(5)
    assert got == [1]


def test_a_lookahead_lowered_during_a_fill_wait_never_reserves_less_than_one() -> None:
    """Four handlers and ten ahead, all held but the fill wait's few; the lookahead drops meanwhile and takes
    the free slots with it: the poller waits for a slot again rather than reserving a negative count."""
    slots, stop = Slots(4, tick_seconds=0.05), threading.Event()
    slots.set_extra(10)
    assert slots.reserve_up_to(11, stop) == 11  # 3 free
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(slots.reserve_up_to(10, stop, fill_seconds=0.3)))
    waiter.start()
    time.sleep(0.1)
    slots.set_extra(2)  # 3 - 8 = -5 free
    waiter.join(0.6)
    assert waiter.is_alive() and not got
    slots.release(6)  # 1 free
    waiter.join(5)
    assert got == [1]


def test_a_release_wakes_a_waiting_poller_without_waiting_for_its_tick() -> None:
    """A poller waiting for a slot (ticks 30 s apart) goes on as soon as one is released."""
    slots, stop = Slots(1, tick_seconds=30), threading.Event()
    assert slots.reserve_up_to(1, stop) == 1
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(slots.reserve_up_to(1, stop)))
    waiter.start()
    time.sleep(0.1)
    slots.release(1)
    waiter.join(5)
    assert got == [1]


def test_no_lookahead_while_no_handler_finishes() -> None:
    """Every handler busy with slow work (nothing finished for the wait): receive nothing ahead until one does."""
    now = [100.0]
    slots = Slots(2)
    lookahead = Lookahead(slots, concurrency=2, batch_size=10, wait_seconds=1.0, clock=lambda: now[0])
    lookahead.finished(0.01)
    assert lookahead.extra == 10
    now[0] += 0.9
    lookahead.check(now[0])
    assert lookahead.extra == 10
    now[0] += 0.2
    lookahead.check(now[0])
    assert lookahead.extra == 0
    lookahead.finished(0.01)
    assert lookahead.extra == 10


@pytest.mark.parametrize(
    ("contract", "max_rate", "ahead"),
    [
        (WorkerContract(max_duration_seconds=3, concurrency=2), None, 10),
        (WorkerContract(max_duration_seconds=3, concurrency=2, fifo=True), None, 0),
        (WorkerContract(max_duration_seconds=3, concurrency=2), 50.0, 0),
    ],
    ids=["standard", "fifo", "max_rate"],
)
def test_a_consumer_receives_ahead_only_on_a_standard_queue_without_a_rate(
    contract: WorkerContract, max_rate: float | None, ahead: int
) -> None:
    """FIFO: a hand-back spends a receive (and can end in the DLQ unattempted) and a group runs in order anyway;
    under max_rate a message received ahead would only wait for its turn. Neither receives ahead."""
    consumer = Consumer(
        object(),  # type: ignore[arg-type]  # never called: nothing runs
        queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/q" + (".fifo" if contract.fifo else ""),
        dlq_url=None,
        contract=contract,
        handler=lambda _: None,
        collaborators=Collaborators(metrics=Metrics(stream=io.StringIO())),
        intake=Intake(max_rate=max_rate),
    )
    consumer._lookahead.finished(0.001)
    assert consumer._lookahead.extra == ahead


def test_a_filling_poller_starts_over_when_another_takes_the_slots() -> None:
    """Two pollers: one fills a batch of 10 while the other takes the 5 free slots and receives. The first fills
    again from then on, and receives 10, rather than the 3 freed meanwhile at its original deadline."""
    slots, stop = Slots(20, tick_seconds=5), threading.Event()
    assert slots.reserve_up_to(20, stop) == 20
    slots.release(5)
    got: list[int] = []
    filling = threading.Thread(target=lambda: got.append(slots.reserve_up_to(10, stop, fill_seconds=1.0)))
    filling.start()
    time.sleep(0.2)
    assert slots.reserve_up_to(5, stop) == 5  # the other poller
    time.sleep(0.2)
    slots.release(3)
    time.sleep(1.0)  # past the first poller's original deadline
    assert not got
    slots.release(7)
    filling.join(5)
    assert got == [10]
