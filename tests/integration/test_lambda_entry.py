"""``consumer.lambda_entry.handler``, the function's entry point: built from the variables the stack writes, on moto
in process, as Lambda calls it with an event source mapping's event."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from consumer import lambda_entry
from consumer.declaration import contract_of, load_handler
from consumer.errors import ContractError
from consumer.lambda_event import event_of
from consumer.runtime.drift import QueueDriftError
from tests.integration.conftest import REGION, create_lambda_pair, create_pair

HANDLER = "tests.integration.handlers:poison_if_bad"


class Context:
    """Lambda's context object: 30 s left whenever asked (nothing here waits)."""

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.fixture
def fresh_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A new execution environment: no worker built yet. The entry configures the root logger as its own (it drops
    the Lambda runtime's handler): the test's logging is put back after."""
    monkeypatch.setattr(lambda_entry, "_worker", None)
    root, runtime = logging.getLogger(), logging.getLogger("consumer")
    saved = (list(root.handlers), root.level, runtime.level)
    switches = (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing)  # noqa: SLF001
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    runtime.setLevel(saved[2])
    logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing = switches  # noqa: SLF001


def received(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    return sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]


def test_entry_answers_the_failures_of_the_event_from_the_stacks_variables(
    sqs: Any, monkeypatch: pytest.MonkeyPatch, fresh_environment: None
) -> None:
    """The first invocation builds the worker from QUEUE_URL, DLQ_URL and CONSUMER_HANDLER; a poison message goes to
    the DLQ (not listed), a good one is not listed either, and only a failing one would be."""
    pair = create_lambda_pair(sqs, contract_of(load_handler(HANDLER)))
    queue_arn = sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for variable, value in {
        "QUEUE_URL": pair.queue_url,
        "DLQ_URL": pair.dlq_url,
        "QUEUE_ARN": queue_arn,
        "CONSUMER_HANDLER": HANDLER,
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(variable, value)
    sqs.send_message(QueueUrl=pair.queue_url, MessageBody="good")
    sqs.send_message(QueueUrl=pair.queue_url, MessageBody="bad")
    event = event_of(received(sqs, pair.queue_url), queue_arn=queue_arn, region=REGION)
    assert lambda_entry.handler(event, Context()) == {"batchItemFailures": []}
    dead = sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dead] == ["bad"]


def test_entry_without_queue_url_fails_the_invocation(monkeypatch: pytest.MonkeyPatch, fresh_environment: None) -> None:
    """A configuration error raises from the invocation (Lambda then retries the batch: nothing is deleted), naming
    the variable."""
    monkeypatch.delenv("QUEUE_URL", raising=False)
    monkeypatch.setenv("CONSUMER_HANDLER", HANDLER)
    with pytest.raises(ContractError, match='"QUEUE_URL" must be set'):
        lambda_entry.handler({"Records": []}, Context())


def test_entry_queue_shaped_for_the_container_fails_the_invocation_naming_the_visibility(
    sqs: Any, monkeypatch: pytest.MonkeyPatch, fresh_environment: None
) -> None:
    """The cold start checks the queue against the Lambda target: a queue with the container's visibility fails the
    invocation, the difference named (as the container refuses to start on a drifted queue)."""
    contract = contract_of(load_handler(HANDLER))
    pair = create_pair(sqs, contract)
    for variable, value in {"QUEUE_URL": pair.queue_url, "DLQ_URL": pair.dlq_url, "CONSUMER_HANDLER": HANDLER}.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(QueueDriftError, match=f"VisibilityTimeout is {contract.visibility_timeout_seconds} s"):
        lambda_entry.handler({"Records": []}, Context())
