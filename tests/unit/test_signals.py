"""The handler's signals in the public API: ``@worker(non_retryable=...)``.

The runtime's use of them is tested against moto in tests/integration/test_consumer_signals.py.
"""

from __future__ import annotations

import pytest

from consumer import ContractError, Message, worker
from consumer.declaration import contract_of, non_retryable_of


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
