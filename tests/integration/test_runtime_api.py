"""The function image's entry point, ``python -m awslambdaric consumer.lambda_entry.handler``, as AWS's runtime
interface client runs it against the Runtime API (consumer/local/runtime_api.py's model of it), on moto's server.
The client is AWS's own: it is the check that the model speaks the documented API."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from consumer.lambda_event import event_of
from consumer.local.runtime_api import RuntimeApi
from tests.integration.conftest import REGION, consumer_run_environment, create_lambda_pair
from tests.integration.support import fast_contract

HANDLER = "tests.integration.handlers:poison_if_bad"


@pytest.fixture
def runtime_api() -> Iterator[RuntimeApi]:
    with RuntimeApi() as api:
        yield api


def start_runtime(api: RuntimeApi, endpoint: str, **variables: str) -> subprocess.Popen[str]:
    """The function's runtime process, as the image's entry point starts it, polling ``api`` for events."""
    env = consumer_run_environment(endpoint, AWS_LAMBDA_RUNTIME_API=api.address, **variables)
    return subprocess.Popen(
        [sys.executable, "-m", "awslambdaric", "consumer.lambda_entry.handler"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def received(sqs: Any, queue_url: str, count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while len(messages) < count:
        messages += sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
    return messages


@pytest.mark.real
def test_runtime_api_invocation_answers_batch_item_failures(
    server_sqs: Any, moto_server: str, runtime_api: RuntimeApi
) -> None:
    """Two invocations of one runtime process (the environment reused): a poison record goes to the DLQ and a good
    one is processed, neither listed; then a record of the next event too. Real: the runtime interface client is a
    process of its own with a C extension speaking HTTP to the Runtime API."""
    pair = create_lambda_pair(server_sqs, fast_contract(max_duration_seconds=5, concurrency=2, max_receive_count=3))
    arn = server_sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["QueueArn"])["Attributes"]
    variables = {"QUEUE_URL": pair.queue_url, "DLQ_URL": pair.dlq_url, "QUEUE_ARN": arn["QueueArn"]}
    runtime = start_runtime(runtime_api, moto_server, CONSUMER_HANDLER=HANDLER, **variables)
    try:
        for body in ("good", "bad"):
            server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody=body)
        event = event_of(received(server_sqs, pair.queue_url, 2), queue_arn=arn["QueueArn"], region=REGION)
        first = runtime_api.invoke(event, timeout_seconds=30)
        server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="again")
        event = event_of(received(server_sqs, pair.queue_url, 1), queue_arn=arn["QueueArn"], region=REGION)
        second = runtime_api.invoke(event, timeout_seconds=30)
    finally:
        runtime.kill()
        output, _ = runtime.communicate(timeout=10)
    assert (first.kind, first.body, second.kind, second.body) == (
        "response",
        {"batchItemFailures": []},
        "response",
        {"batchItemFailures": []},
    ), output
    dead = server_sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dead] == ["bad"]


@pytest.mark.real
def test_runtime_api_configuration_error_is_a_function_error(moto_server: str, runtime_api: RuntimeApi) -> None:
    """Without QUEUE_URL the first invocation fails as a function error naming the variable (Lambda then retries the
    batch: nothing is deleted). Real: as above."""
    runtime = start_runtime(runtime_api, moto_server, CONSUMER_HANDLER=HANDLER)
    try:
        answer = runtime_api.invoke({"Records": []}, timeout_seconds=30)
    finally:
        runtime.kill()
        output, _ = runtime.communicate(timeout=10)
    assert (answer.kind, answer.body["errorType"]) == ("error", "ContractError"), output
    assert '"QUEUE_URL" must be set' in answer.body["errorMessage"]
