"""The lookahead: how many messages the pollers may receive ahead of free handlers, from the handlers' mean duration."""

from __future__ import annotations

import threading

from consumer.runtime.polling import Lookahead, Slots


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
