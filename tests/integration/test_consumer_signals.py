"""What a handler tells the consumer, and what the consumer tells a handler, against moto (in-process and over HTTP).

A handler raising a type it declared ``non_retryable`` sends its message to the DLQ at the first receive.
"""

from __future__ import annotations

from typing import Any

from consumer import Message, worker
from consumer.runtime.consumer import EXIT_OK
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, drain, receive_visible, running, wait_until
from tests.integration.conftest import create_pair
from tests.integration.test_consumer import consumer_of, fast_contract


class ValidationError(Exception):
    """A handler's own error for a message that fails its schema."""


class MissingFieldError(ValidationError):
    """A subclass: declaring ValidationError covers it."""


def test_consumer_moves_a_declared_non_retryable_error_to_dlq_at_the_first_receive(sqs: Any) -> None:
    """Declared types, a subclass included: one handler call each, then the DLQ with kind non_retryable and the
    error's type and text as reason, at receive 1 (the retry budget untouched)."""
    contract = fast_contract()
    pair = create_pair(sqs, contract)
    sqs.send_message(QueueUrl=pair.queue_url, MessageBody="no-key")
    sqs.send_message(QueueUrl=pair.queue_url, MessageBody="no-field")
    calls: list[tuple[str, int]] = []

    @worker(max_duration=3, non_retryable=(KeyError, ValidationError))
    def handle(message: Message) -> None:
        calls.append((message.body, message.receive_count))
        if message.body == "no-key":
            raise KeyError("order_id")
        raise MissingFieldError("customer is required")

    with running(consumer_of(sqs, pair, contract, handle)) as result:
        wait_until(lambda: depth(sqs, pair.dlq_url).total == 2)
        wait_until(lambda: depth(sqs, pair.queue_url).total == 0)
    assert result.exit_code == EXIT_OK
    assert sorted(calls) == [("no-field", 1), ("no-key", 1)]
    reasons = {m["Body"]: read_reason(m["MessageAttributes"]) or {} for m in drain(sqs, pair.dlq_url)}
    assert {body: (r["kind"], r["reason"], r["receive_count"]) for body, r in reasons.items()} == {
        "no-key": ("non_retryable", "KeyError: 'order_id'", 1),
        "no-field": ("non_retryable", "MissingFieldError: customer is required", 1),
    }


def test_consumer_still_retries_an_error_not_declared_non_retryable(sqs: Any) -> None:
    """A handler declaring KeyError that raises ValueError: every allowed receive is an attempt, then exhausted."""
    contract = fast_contract(concurrency=1)
    pair = create_pair(sqs, contract)
    sqs.send_message(QueueUrl=pair.queue_url, MessageBody="job")
    attempts: list[int] = []

    @worker(max_duration=3, non_retryable=(KeyError,))
    def handle(message: Message) -> None:
        attempts.append(message.receive_count)
        raise ValueError("downstream 503")

    with running(consumer_of(sqs, pair, contract, handle)):
        wait_until(lambda: depth(sqs, pair.dlq_url).total == 1)
        wait_until(lambda: depth(sqs, pair.queue_url).total == 0)
    assert attempts == [1, 2, 3]
    (moved,) = receive_visible(sqs, pair.dlq_url)
    reason = read_reason(moved["MessageAttributes"]) or {}
    assert (reason["kind"], reason["reason"]) == ("exhausted", "failed 3 times; last error: ValueError: downstream 503")
