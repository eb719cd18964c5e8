"""How the runtime treats a failed attempt, against moto (in-process and over HTTP): whatever the handler
raises."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from consumer import Message
from consumer.dead_letter import read_reason
from consumer.runtime import EXIT_OK
from tests.integration.conftest import create_pair
from tests.integration.test_consumer import consumer_of, depth, drain, fast_contract, running, wait_until


class HandlerAborted(BaseException):
    """A handler's own BaseException subclass, neither SystemExit nor KeyboardInterrupt."""


@pytest.mark.parametrize(
    "raise_it",
    [lambda: SystemExit(3), lambda: KeyboardInterrupt(), lambda: HandlerAborted("gave up")],
    ids=["SystemExit", "KeyboardInterrupt", "BaseException-subclass"],
)
def test_consumer_treats_a_handler_raising_a_base_exception_as_a_failed_attempt(
    sqs: Any, caplog: pytest.LogCaptureFixture, raise_it: Callable[[], BaseException]
) -> None:
    """With one slot, every attempt after the first needs the slot back; each failure is logged, backed off,
    and the last allowed receive moves the message to the DLQ with the exception as reason."""
    contract = fast_contract(concurrency=1)
    pair = create_pair(sqs, contract)
    sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job")
    attempts: list[int] = []
    expected = f"{type(raise_it()).__name__}: {raise_it()}"

    def handle(message: Message) -> None:
        attempts.append(message.receive_count)
        raise raise_it()

    caplog.set_level(logging.INFO, logger="consumer")
    worker = consumer_of(sqs, pair, contract, handle)
    with running(worker) as result:
        wait_until(lambda: depth(sqs, pair.dlq_url) == 1)
        wait_until(lambda: depth(sqs, pair.queue_url) == 0)
    assert attempts == [1, 2, 3]
    assert result["code"] == EXIT_OK
    events = [(r.getMessage(), getattr(r, "error", None)) for r in caplog.records]
    assert events.count(("handler_failed", expected)) == 3
    assert [e for e, _ in events].count("message_backoff") == 2
    (moved,) = drain(sqs, pair.dlq_url)
    reason = read_reason(moved["MessageAttributes"]) or {}
    assert (reason["kind"], reason["reason"]) == ("exhausted", f"failed 3 times; last error: {expected}")
