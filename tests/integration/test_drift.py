"""The start-up drift check against live queues (moto in-process; a dead endpoint for the one error only a socket shows)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from consumer.contract import WorkerContract
from consumer.runtime.drift import QueueDriftError, StartupError, check_queue
from tests.integration.conftest import REGION, create_pair

CONTRACT = WorkerContract(max_duration_seconds=90, concurrency=8)


def test_check_queue_accepts_a_queue_built_from_the_contract(sqs: Any) -> None:
    """A pair with the contract's visibility, retention and redrive passes and returns both ARNs."""
    pair = create_pair(sqs, CONTRACT)
    binding = check_queue(sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=CONTRACT)
    assert binding.queue_arn.endswith(pair.queue_url.rsplit("/", 1)[1])
    assert binding.dead_letter_queue_arn.endswith(pair.dlq_url.rsplit("/", 1)[1])


def test_check_queue_reports_visibility_drift_with_the_fix(sqs: Any) -> None:
    """A 30 s visibility against a 100 s contract names both values and how to fix it."""
    pair = create_pair(sqs, CONTRACT, VisibilityTimeout="30")
    with pytest.raises(QueueDriftError) as raised:
        check_queue(sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=CONTRACT)
    assert raised.value.differences == ["VisibilityTimeout is 30 s, the contract derives 100 s from max_duration 90 s"]
    assert "redeploy the stack" in str(raised.value)


def test_check_queue_reports_every_difference_at_once(sqs: Any) -> None:
    """Retention, max receive count and a wrong DLQ are all listed in one error."""
    other = create_pair(sqs, CONTRACT)
    other_dlq_arn = sqs.get_queue_attributes(QueueUrl=other.dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    pair = create_pair(
        sqs,
        CONTRACT,
        MessageRetentionPeriod="60",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": other_dlq_arn, "maxReceiveCount": 1}),
    )
    with pytest.raises(QueueDriftError) as raised:
        check_queue(sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=CONTRACT)
    differences = raised.value.differences
    assert differences[0] == "MessageRetentionPeriod is 60 s, the contract says 345600 s"
    assert (
        differences[1] == "RedrivePolicy maxReceiveCount is 1, the contract derives 7 (max_receive_count 5 + backstop)"
    )
    assert differences[2].startswith(f"RedrivePolicy sends to {other_dlq_arn}, but DLQ_URL is")


def test_check_queue_refuses_a_queue_without_redrive(sqs: Any) -> None:
    """No redrive policy means poison messages would loop forever."""
    pair = create_pair(sqs, CONTRACT, RedrivePolicy="")
    with pytest.raises(QueueDriftError, match="has no RedrivePolicy"):
        check_queue(sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=CONTRACT)


def test_check_queue_reports_fifo_mismatch(sqs: Any) -> None:
    """A standard queue under a FIFO contract is drift."""
    pair = create_pair(sqs, CONTRACT)
    fifo_contract = WorkerContract(max_duration_seconds=90, concurrency=8, fifo=True)
    with pytest.raises(QueueDriftError, match="FifoQueue is false, the contract says true"):
        check_queue(sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=fifo_contract)


def test_check_queue_missing_queue_is_a_clear_startup_error(sqs: Any) -> None:
    """A queue that does not exist is reported, never created."""
    pair = create_pair(sqs, CONTRACT)
    missing = pair.queue_url.rsplit("/", 1)[0] + "/no-such-queue"
    with pytest.raises(StartupError, match="the queue does not exist"):
        check_queue(sqs, queue_url=missing, dlq_url=pair.dlq_url, contract=CONTRACT)
    assert not [u for u in sqs.list_queues().get("QueueUrls", []) if u.endswith("/no-such-queue")]


def test_check_queue_unreachable_endpoint_is_a_clear_startup_error() -> None:
    """A dead endpoint fails fast with the operation, the queue and what to check (a local stack not served)."""
    from botocore.config import Config

    client = boto3.client(
        "sqs",
        region_name=REGION,
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1),
    )
    url = "http://127.0.0.1:9/123456789012/source"
    with pytest.raises(StartupError, match=f"GetQueueAttributes on {url} failed") as raised:
        check_queue(client, queue_url=url, dlq_url="http://127.0.0.1:9/123456789012/dlq", contract=CONTRACT)
    assert "nothing answers there; check QUEUE_URL and AWS_ENDPOINT_URL" in str(raised.value)
    assert "`python -m consumer local up` is serving" in str(raised.value)
