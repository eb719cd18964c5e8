"""consumer/local/mapping.py's event source mapping, against AWS's documented rules for a function's answer
(https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html), on moto in process: what it
deletes for each kind of answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from consumer.local.mapping import EventSourceMapping
from tests.integration.conftest import REGION, create_pair
from tests.integration.support import fast_contract, send


def mapping_of(sqs: Any, function: Callable[[Mapping[str, Any], Any], Any], **options: Any) -> EventSourceMapping:
    pair = create_pair(sqs, fast_contract())
    arn = sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    send(sqs, pair.queue_url, "a", "b", "c")
    return EventSourceMapping(
        client=sqs, queue_url=pair.queue_url, queue_arn=arn, region=REGION, function=function, wait_seconds=0, **options
    )


def first_id(event: Mapping[str, Any]) -> str:
    return str(event["Records"][0]["messageId"])


@pytest.mark.parametrize(
    ("answer", "deleted"),
    [
        (lambda event: None, 3),
        (lambda event: {"batchItemFailures": []}, 3),
        (lambda event: {"batchItemFailures": [{"itemIdentifier": first_id(event)}]}, 2),
        (lambda event: {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}, 0),
        (lambda event: {"batchItemFailures": [{"itemIdentifier": ""}]}, 0),
    ],
    ids=["none", "empty-list", "one-listed", "unknown-id", "empty-id"],
)
def test_mapping_deletes_what_the_answer_does_not_list(sqs: Any, answer: Callable[..., Any], deleted: int) -> None:
    """Not listed: deleted; an answer naming an id not of the batch, or an empty one, fails the whole batch."""
    mapping = mapping_of(sqs, lambda event, context: answer(event))
    invoked = mapping.poll()
    assert invoked is not None and (len(invoked.message_ids), len(invoked.deleted)) == (3, deleted)


def test_mapping_deletes_nothing_when_the_function_raises(sqs: Any) -> None:
    """A function error fails the whole batch."""

    def fail(event: Mapping[str, Any], context: Any) -> None:
        raise RuntimeError("boom")

    invoked = mapping_of(sqs, fail).poll()
    assert invoked is not None and (invoked.deleted, invoked.failed_whole) == ([], "function error: RuntimeError: boom")


def test_mapping_deletes_nothing_when_the_function_answers_past_its_timeout(sqs: Any) -> None:
    """An answer after the function's timeout is no answer: Lambda stopped it, nothing is deleted."""
    now = [0.0]

    def slow(event: Mapping[str, Any], context: Any) -> None:
        assert context.get_remaining_time_in_millis() == 5_000
        now[0] += 6.0

    invoked = mapping_of(sqs, slow, timeout_seconds=5.0, clock=lambda: now[0]).poll()
    assert invoked is not None and (invoked.deleted, invoked.failed_whole) == ([], "timed out")
