"""The handler's signals in the public API: ``@worker(non_retryable=...)`` and a message's attempt view.

The runtime's use of them is tested against moto in tests/integration/test_consumer_signals.py.
"""

from __future__ import annotations

import math
import threading

import pytest

from consumer import ContractError, Message, worker
from consumer.declaration import contract_of, non_retryable_of
from consumer.message import Attempt


class ValidationError(Exception):
    """A handler's own error type."""


def test_worker_non_retryable_is_kept_beside_the_contract_and_changes_no_timing() -> None:
    """non_retryable_of finds the declared types, () when none; the contract and its environment are unchanged."""

    @worker(max_duration=90, non_retryable=(KeyError, ValidationError))
    def declared(message: Message) -> None: ...

    @worker(max_duration=90)
    def plain(message: Message) -> None: ...

    assert (non_retryable_of(declared), non_retryable_of(plain)) == ((KeyError, ValidationError), ())
    assert contract_of(declared).to_env() == contract_of(plain).to_env()


def test_non_retryable_of_an_undecorated_function_is_empty() -> None:
    """A handler the runtime is given without @worker (a test's lambda) declares nothing: every error retries."""
    assert non_retryable_of(lambda message: None) == ()


RULE = "must be a tuple of Exception subclasses, such as (KeyError, ValueError)"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (KeyError, f"\"non_retryable\" {RULE}: <class 'KeyError'>"),
        ([KeyError], f"\"non_retryable\" {RULE}: [<class 'KeyError'>]"),
        (None, f'"non_retryable" {RULE}: not set'),
        (
            (KeyError, SystemExit),
            f"\"non_retryable\" {RULE}; SystemExit is not one: (<class 'KeyError'>, <class 'SystemExit'>)",
        ),
        (
            (KeyboardInterrupt,),
            f"\"non_retryable\" {RULE}; KeyboardInterrupt is not one: (<class 'KeyboardInterrupt'>,)",
        ),
        ((BaseException,), f"\"non_retryable\" {RULE}; BaseException is not one: (<class 'BaseException'>,)"),
        ((KeyError("x"),), f"\"non_retryable\" {RULE}; KeyError('x') is not one: (KeyError('x'),)"),
        (("KeyError",), f"\"non_retryable\" {RULE}; 'KeyError' is not one: ('KeyError',)"),
        ((int,), f"\"non_retryable\" {RULE}; int is not one: (<class 'int'>,)"),
    ],
    ids=["bare-class", "list", "None", "SystemExit", "KeyboardInterrupt", "BaseException", "instance", "name", "int"],
)
def test_worker_non_retryable_refuses_anything_but_a_tuple_of_exception_classes(value: object, expected: str) -> None:
    """At declaration, naming non_retryable, the rule (and the entry that breaks it) and the value received."""
    with pytest.raises(ContractError) as raised:
        worker(max_duration=90, non_retryable=value)  # type: ignore[arg-type]
    assert str(raised.value) == expected


def test_worker_non_retryable_takes_the_edges_of_its_rule() -> None:
    """The empty tuple (the default) and Exception itself (every error non-retryable) are both declarable."""

    @worker(max_duration=90, non_retryable=())
    def none(message: Message) -> None: ...

    @worker(max_duration=90, non_retryable=(Exception,))
    def every(message: Message) -> None: ...

    assert (non_retryable_of(none), non_retryable_of(every)) == ((), (Exception,))


def test_message_built_outside_a_consumer_has_no_deadline_and_is_not_stopping() -> None:
    """Message(...) as a handler's unit test builds it: deadline and remaining() infinite, stopping false."""
    message = Message(body="{}", message_id="m-1", receipt_handle="rh")
    assert (message.deadline, message.remaining(), message.stopping) == (math.inf, math.inf, False)


def test_message_attempt_view_reads_its_deadline_on_its_clock_and_its_stop_signal() -> None:
    """remaining() is the deadline less the attempt's clock, never below 0; stopping follows the stop event."""
    now = [100.0]
    stop = threading.Event()
    message = Message(
        body="{}",
        message_id="m-1",
        receipt_handle="rh",
        attempt=Attempt(deadline=130.0, stop=stop, clock=lambda: now[0]),
    )
    assert (message.deadline, message.remaining(), message.stopping) == (130.0, 30.0, False)
    now[0], _ = 131.0, stop.set()
    assert (message.remaining(), message.stopping) == (0.0, True)


def test_message_attempt_is_not_part_of_its_identity() -> None:
    """Two views of one received message compare equal, and the attempt stays out of repr (it holds a clock)."""
    plain = Message(body="{}", message_id="m-1", receipt_handle="rh")
    viewed = Message(body="{}", message_id="m-1", receipt_handle="rh", attempt=Attempt(deadline=5.0))
    assert plain == viewed
    assert "attempt" not in repr(viewed)


def test_max_rate_must_start_every_held_message_within_its_lease() -> None:
    """A rate under which the last of ``concurrency`` held messages would wait past its lease (less the heartbeat's
    threshold) is refused, naming max_rate, the arithmetic and the value; a rate that fits is accepted."""
    from consumer.declaration import max_rate_of

    with pytest.raises(ContractError) as refused:

        @worker(max_duration=1, concurrency=4, max_rate=0.25)  # 16 s of waiting; 11 s lease, 4 s threshold
        def slow(message: Message) -> None: ...

    assert str(refused.value) == (
        '"max_rate" must start every held message within its lease: concurrency 4 / max_rate 0.25 = 16 s of waiting'
        " is more than the 7 s the 11 s visibility timeout leaves before the heartbeat's 4 s threshold (raise"
        " max_rate, lower concurrency, or raise max_duration or max_lease): 0.25"
    )

    @worker(max_duration=1, concurrency=4, max_rate=0.6)  # 6.7 s of waiting: fits
    def fits(message: Message) -> None: ...

    assert max_rate_of(fits) == 0.6
