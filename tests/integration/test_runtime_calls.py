"""The recorder of the runtime's AWS calls: what it keeps, in this process and in subprocesses, and the IAM action of
each operation. test_runtime_calls_listed.py checks what it recorded against tests/infra/runtime_calls.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import boto3
import pytest

from consumer.contract import WorkerContract
from consumer.runtime.drift import check_queue
from tests.integration.conftest import REGION, ROOT, create_pair
from tests.integration.recorder import runtime_call_recorder

CONTRACT = WorkerContract(max_duration_seconds=90, concurrency=8)


def test_recorder_keeps_runtime_calls_and_ignores_the_tests_own(sqs: Any) -> None:
    """A call made by consumer/runtime/drift.py is recorded with its action and queue; the test's own calls are not."""
    call = ("sqs.GetQueueAttributes", "sqs:GetQueueAttributes", "source")
    runtime_call_recorder.forget(call)
    pair = create_pair(sqs, CONTRACT)
    sqs.get_queue_attributes(QueueUrl=pair.queue_url, AttributeNames=["All"])
    assert call not in runtime_call_recorder.recorded()
    check_queue(sqs, queue_url=pair.queue_url, dlq_url=pair.dlq_url, contract=CONTRACT)
    assert call in runtime_call_recorder.recorded()
    assert not [c for c in runtime_call_recorder.recorded() if c[0] == "sqs.CreateQueue"]


def test_recorder_follows_subprocesses(moto_server: str, runtime_calls: Path, tmp_path: Path) -> None:
    """A subprocess started by a test records its runtime calls through sitecustomize, and only those."""
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)
    pair = create_pair(sqs, CONTRACT)
    script = textwrap.dedent(
        f"""
        import boto3
        from consumer.contract import WorkerContract
        from consumer.runtime.drift import check_queue
        sqs = boto3.client("sqs", region_name={REGION!r}, endpoint_url={moto_server!r})
        sqs.list_queues()
        check_queue(sqs, queue_url={pair.queue_url!r}, dlq_url={pair.dlq_url!r},
                    contract=WorkerContract(max_duration_seconds=90, concurrency=8))
        """
    )
    before = set(runtime_calls.glob("*.jsonl"))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (written_file,) = set(runtime_calls.glob("*.jsonl")) - before
    written = [json.loads(line) for line in written_file.read_text().splitlines()]
    assert written == [
        {"operation": "sqs.GetQueueAttributes", "action": "sqs:GetQueueAttributes", "resource": "source"}
    ]


@pytest.mark.parametrize(
    ("operation", "action"),
    [
        ("sqs.DeleteMessageBatch", "sqs:DeleteMessage"),
        ("sqs.ChangeMessageVisibilityBatch", "sqs:ChangeMessageVisibility"),
        ("sqs.SendMessageBatch", "sqs:SendMessage"),
        ("sqs.ReceiveMessage", "sqs:ReceiveMessage"),
        ("sts.GetCallerIdentity", "none"),
    ],
)
def test_operations_map_to_the_iam_action_that_authorises_them(operation: str, action: str) -> None:
    """SQS authorises a batch call with its single form's action; GetCallerIdentity needs none; others keep their name."""
    service, name = operation.split(".")
    assert runtime_call_recorder.iam_action(service, name) == action
