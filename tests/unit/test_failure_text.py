"""What the runtime writes of an exception (``consumer/runtime/failures.py``) and the ``@worker(error_text=...)`` it
follows: the declaration is validated in the contract's error shape, the text is kept by default, and when omitted the
place named is the handler code's frame, even when a library raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer import Message, worker
from consumer.declaration import error_text_of
from consumer.errors import ContractError
from consumer.runtime.failures import OMITTED, FailureText, handler_code

THIS_FILE = "tests/unit/test_failure_text.py"


def raised(function: object) -> BaseException:
    """The exception ``function()`` raises, with its traceback."""
    try:
        function()  # type: ignore[operator]
    except BaseException as error:  # noqa: BLE001 (whatever it raises is the subject)
        return error
    raise AssertionError(f"{function} raised nothing")


def line_of(comment: str) -> int:
    """The line of this file that ends with ``# <comment>``."""
    source = Path(__file__).read_text().splitlines()
    return next(number for number, line in enumerate(source, start=1) if line.endswith(f"# {comment}"))


def refuse() -> None:
    raise ValueError("alice@example.com is not a customer")  # the raise


def parse() -> None:
    json.loads("alice@example.com")  # the call: json's decoder raises, in the standard library


@pytest.mark.parametrize("value", ["hide", "", None, True, "OMIT"])
def test_worker_refuses_an_error_text_it_does_not_know(value: object) -> None:
    """error_text is "include" or "omit"; anything else is refused naming the parameter, the rule and the value."""
    with pytest.raises(ContractError) as refused:
        worker(max_duration=10, error_text=value)  # type: ignore[arg-type]
    assert str(refused.value) == (
        '"error_text" must be "include" (an exception\'s type and text) or "omit" (its type and where the handler'
        f" raised it): {'not set' if value is None else repr(value)}"
    )


def test_worker_keeps_error_text_beside_the_contract_include_by_default() -> None:
    """Undeclared (or an undecorated function) is "include"; declared "omit" is kept on the function."""

    @worker(max_duration=10)
    def default(message: Message) -> None: ...

    @worker(max_duration=10, error_text="omit")
    def quiet(message: Message) -> None: ...

    assert [error_text_of(default), error_text_of(quiet), error_text_of(print)] == ["include", "omit", "include"]


def test_failure_text_by_default_is_the_type_and_the_text() -> None:
    """The default is what the runtime always wrote: ``Type: text``."""
    assert FailureText()(raised(refuse)) == "ValueError: alice@example.com is not a customer"


def test_failure_text_omitted_names_the_type_and_the_line_that_raised() -> None:
    """Omitted: the type, this file (relative to where the tests package lives), the line and the function."""
    described = FailureText(omit=True, code=handler_code(refuse))(raised(refuse))
    where = f"{THIS_FILE}:{line_of('the raise')} in refuse"
    assert described == f"ValueError at {where} ({OMITTED})"


def test_failure_text_omitted_names_the_handlers_line_when_a_library_raised() -> None:
    """json's decoder raised: the place named is the handler code's call into it, not the library's line."""
    described = FailureText(omit=True, code=handler_code(parse))(raised(parse))
    line = line_of("the call: json's decoder raises, in the standard library")
    where = f"{THIS_FILE}:{line}"
    assert described == f"JSONDecodeError at {where} in parse ({OMITTED})"


def test_failure_text_omitted_outside_the_handlers_code_names_the_deepest_frame() -> None:
    """An error that never passed through the handler's code (the idempotency store's) is placed where it rose."""
    described = FailureText(omit=True, code=Path("/nowhere/workers"))(raised(parse))
    assert described.startswith("JSONDecodeError at json/decoder.py:")
    assert described.endswith(f" in raw_decode ({OMITTED})")


def test_failure_text_omitted_without_a_traceback_says_so() -> None:
    """An exception never raised has no place: the text still stays out."""
    described = FailureText(omit=True)(ValueError("alice@example.com"))
    assert described == f"ValueError at an unknown place (no traceback) ({OMITTED})"


def test_handler_code_is_the_top_level_package_or_the_module_file() -> None:
    """A handler in a package is located by the package's directory; one built at run time by nothing."""
    assert handler_code(refuse) == Path(__file__).resolve().parents[1]
    assert handler_code(lambda: None) == Path(__file__).resolve().parents[1]
    anonymous = type("Handler", (), {"__module__": "no_such_module_anywhere"})()
    assert handler_code(anonymous) is None  # type: ignore[arg-type]
