"""consumer.testing's waiting and running helpers, with no queue: time, threads and a stand-in client."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from consumer.testing import Run, WaitTimeoutError, drain, poll_until, running, wait_until

ROOT = Path(__file__).resolve().parents[2]


class StoppableConsumer:
    """Runs until stop(), then returns ``code``: the shape of Consumer that running() needs."""

    def __init__(self, code: int = 0) -> None:
        self.code = code
        self.stopped = threading.Event()
        self.started = threading.Event()

    def run(self) -> int:
        self.started.set()
        self.stopped.wait()
        return self.code

    def stop(self) -> None:
        self.stopped.set()


class DeafConsumer(StoppableConsumer):
    """Ignores stop(): running() must fail rather than hang."""

    def stop(self) -> None:
        pass


def test_running_runs_the_consumer_in_a_thread_and_collects_its_exit_code_on_leaving() -> None:
    """Inside the block the consumer runs; leaving stops it and the code run() returned is kept."""
    consumer = StoppableConsumer(code=3)
    with running(consumer) as run:
        assert consumer.started.wait(5)
        assert run.exit_code is None
    assert consumer.stopped.is_set()
    assert run == Run(exit_code=3)


def test_running_fails_when_the_consumer_does_not_stop_in_time() -> None:
    """A consumer that ignores stop() raises WaitTimeoutError naming the timeout, after stop_timeout."""
    consumer = DeafConsumer()
    with pytest.raises(WaitTimeoutError) as raised:
        with running(consumer, stop_timeout=0.2):
            assert consumer.started.wait(5)
    assert str(raised.value) == "consumer did not stop within 0.2 s of stop()"
    consumer.stopped.set()  # let its thread end


def test_running_stops_the_consumer_when_the_block_raises() -> None:
    """A failing assertion inside the block still stops the consumer, and the assertion is what propagates."""
    consumer = StoppableConsumer()
    with pytest.raises(ZeroDivisionError):
        with running(consumer):
            1 / 0  # noqa: B018
    assert consumer.stopped.is_set()


def test_poll_until_returns_true_once_the_condition_holds() -> None:
    """A condition that becomes true on the third call: True, after exactly three calls."""
    calls: list[int] = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) == 3

    assert poll_until(third_time, 5, interval=0.01) is True
    assert len(calls) == 3


def test_poll_until_returns_false_after_the_timeout() -> None:
    """A condition that never holds: False, no sooner than the timeout."""
    started = time.monotonic()
    assert poll_until(lambda: False, 0.2, interval=0.01) is False
    assert time.monotonic() - started >= 0.2


def test_poll_until_checks_once_even_with_no_time_left() -> None:
    """A zero timeout still asks the condition once: a condition already true is not a timeout."""
    assert poll_until(lambda: True, 0) is True


def test_wait_until_raises_naming_what_and_the_timeout() -> None:
    """The error says what was awaited and for how long, and is an AssertionError (a test failure)."""
    with pytest.raises(WaitTimeoutError) as raised:
        wait_until(lambda: False, 0.1, "the queue empty", interval=0.01)
    assert str(raised.value) == "not within 0.1 s: the queue empty"
    assert isinstance(raised.value, AssertionError)


def test_wait_until_returns_when_the_condition_holds() -> None:
    """No error for a condition that holds."""
    wait_until(lambda: True, 0.1)


class RefusingDeletes:
    """An SQS client whose queue holds one message and whose batch delete fails for every entry."""

    def __init__(self) -> None:
        self.receives = 0

    def receive_message(self, **_: Any) -> dict[str, Any]:
        self.receives += 1
        return {"Messages": [{"MessageId": "m", "ReceiptHandle": "h"}]} if self.receives == 1 else {}

    def delete_message_batch(self, **_: Any) -> dict[str, Any]:
        return {"Successful": [], "Failed": [{"Id": "0", "Code": "ReceiptHandleIsInvalid", "SenderFault": True}]}


def test_drain_raises_when_a_delete_fails() -> None:
    """A message drain() could not delete is not reported as drained: the failed entry is in the error."""
    with pytest.raises(AssertionError, match="delete_message_batch failed for .*ReceiptHandleIsInvalid"):
        drain(RefusingDeletes(), "https://sqs.example/q")


def test_consumer_testing_imports_neither_moto_nor_pytest_nor_boto3() -> None:
    """It ships in the image (no moto, no pytest there), and taking a client in means it needs no boto3."""
    code = (
        "import sys, consumer.testing\n"
        "print(sorted(m for m in ('moto', 'pytest', 'boto3', 'botocore') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
