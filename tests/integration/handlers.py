"""Handlers the runtime tests run, in-process and as `python -m consumer run` subprocesses.

Side effects go to the file named by SIDE_EFFECTS_FILE (one line per completed
effect), so a test can count them across process restarts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

from consumer import ConfigurationError, Message, PoisonMessage, worker

#: The environments ``require_token`` was called with (a unit test reads them).
SETUP_CALLS: list[Mapping[str, str]] = []


def record(message: Message) -> None:
    path = os.environ.get("SIDE_EFFECTS_FILE")
    if path:
        with open(path, "a") as out:
            out.write(
                json.dumps({"body": message.body, "pid": os.getpid(), "receive_count": message.receive_count}) + "\n"
            )


def mark_started(message: Message) -> None:
    """Appends the body to SIDE_EFFECTS_FILE + ".started": a test signals only once the handler really runs (under
    load the receive can come well before the handler starts, and a message not yet started is handed back)."""
    path = os.environ.get("SIDE_EFFECTS_FILE")
    if path:
        with open(path + ".started", "a") as out:
            out.write(message.body + "\n")


@worker(max_duration=5, concurrency=2, max_receive_count=3, retry_backoff_base=1, retry_backoff_max=1)
def slow(message: Message) -> None:
    """Marks its start, sleeps for the seconds in the body (a number), then records its side effect."""
    mark_started(message)
    time.sleep(float(message.body))
    record(message)


@worker(max_duration=30, max_lease=4, concurrency=1)
def killed_on_first_receive(message: Message) -> None:
    """Marks its start and hangs on the first receive (a test SIGKILLs the process there); on a later one records its
    side effect at once. The heartbeat keeps its 4 s lease while it runs, however late the kill comes within its 30 s,
    and once the process is gone the lease brings the message back within 4 s."""
    mark_started(message)
    if message.receive_count == 1:
        time.sleep(30)
    record(message)


@worker(max_duration=5, concurrency=2, max_receive_count=3)
def poison_if_bad(message: Message) -> None:
    """Records good bodies; a body of "bad" is poison."""
    if message.body == "bad":
        raise PoisonMessage("body was 'bad'")
    record(message)


@worker(max_duration=5, concurrency=3, fifo=True, max_receive_count=3)
def ordered_slow(message: Message) -> None:
    """FIFO: marks its start (SIDE_EFFECTS_FILE + ".started"), sleeps 2 s, then records its side effect (3 slots: one
    receive can bring a group of 3)."""
    mark_started(message)
    time.sleep(2)
    record(message)


def require_token(environ: Mapping[str, str]) -> None:
    """A start-up check: refuses unless HANDLER_TOKEN is set."""
    SETUP_CALLS.append(environ)
    if not environ.get("HANDLER_TOKEN"):
        raise ConfigurationError("HANDLER_TOKEN", "must be set to the downstream's token", environ.get("HANDLER_TOKEN"))


@worker(
    max_duration=5, concurrency=2, max_receive_count=3, retry_backoff_base=1, retry_backoff_max=1, setup=require_token
)
def guarded(message: Message) -> None:
    """``slow``'s declaration with a start-up check that refuses to start without HANDLER_TOKEN."""
    slow(message)


def broken_check(environ: Mapping[str, str]) -> None:
    """A start-up check with a bug: it reads a variable that is not there."""
    environ["NOT_SET_ANYWHERE"]


def exiting_check(environ: Mapping[str, str]) -> None:
    """A start-up check that calls sys.exit(), as a script-minded check might."""
    raise SystemExit(4)


@worker(max_duration=5, setup=exiting_check)
def exiting_setup(message: Message) -> None:
    """A handler whose start-up check exits the interpreter instead of refusing."""


@worker(max_duration=5, setup=broken_check)
def broken_setup(message: Message) -> None:
    """A handler whose start-up check raises something other than ConfigurationError."""


#: What a lookup says about a customer: a value from the message (personal data a sender chose) in an exception's text.
CUSTOMER_ERROR = "alice@example.com is not a customer"


def look_up_customer(body: str) -> None:
    """The handlers' own code that raises: a KeyError (declared non_retryable) for "reject", else a ValueError."""
    if body == "reject":
        raise KeyError(CUSTOMER_ERROR)
    raise ValueError(CUSTOMER_ERROR)


@worker(max_duration=5, concurrency=2, max_receive_count=2, retry_backoff_base=1, non_retryable=(KeyError,))
def refuses_customer(message: Message) -> None:
    """Always fails, the customer's address in the error (error_text's default: kept in reasons and logs)."""
    look_up_customer(message.body)


@worker(
    max_duration=5,
    concurrency=2,
    max_receive_count=2,
    retry_backoff_base=1,
    non_retryable=(KeyError,),
    error_text="omit",
)
def refuses_customer_quietly(message: Message) -> None:
    """Always fails as refuses_customer does, declaring that error text stays out of reasons and logs."""
    look_up_customer(message.body)


@worker(max_duration=5, concurrency=32)
def wide(message: Message) -> None:
    """32 slots, 20 ms each, recording each side effect: every handler thread calls SQS (deletes) and DynamoDB (claims)
    at once, as a busy deployed worker does."""
    time.sleep(0.02)
    record(message)
