"""The runtime's AWS calls, recorded during this run, are all listed where the permissions tier evaluates them.

``tests/infra/runtime_calls.json`` lists every call the consumer runtime makes, as (operation, IAM
action, resource); ``tests/infra/test_permissions.py`` checks the synthesized task role allows each
one on AWS. The last test of the run (moved there by conftest) fails on a call the list lacks, so a new
runtime call cannot ship without its permission being evaluated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import boto3
import pytest

from consumer.contract import WorkerContract
from consumer.runtime.drift import check_queue
from consumer.testing import wait_until
from tests.integration.conftest import REGION, ROOT, WORKER_CALLS, create_pair, shared_directory
from tests.integration.recorder import runtime_call_recorder

RUNTIME_CALLS_FILE = ROOT / "tests" / "infra" / "runtime_calls.json"
CONTRACT = WorkerContract(max_duration_seconds=90, concurrency=8)
#: How long the check waits for the other workers to finish their tests (the slowest run alone takes about 90 s).
OTHER_WORKERS_TIMEOUT_SECONDS = 600


def listed_calls() -> set[tuple[str, str, str]]:
    calls = json.loads(RUNTIME_CALLS_FILE.read_text())["calls"]
    return {(c["operation"], c["action"], c["resource"]) for c in calls}


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


def other_workers_calls(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str, str]]:
    """Under pytest-xdist: what the runtime made on every other worker, once each has finished (this test is the last
    one sent, so the last on its worker, and the others end as it runs); nothing in a serial run."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count:
        return set()
    directory = shared_directory(tmp_path_factory) / WORKER_CALLS
    others = [directory / f"gw{n}.jsonl" for n in range(int(count)) if f"gw{n}" != worker]
    wait_until(
        lambda: all(path.exists() for path in others),
        timeout=OTHER_WORKERS_TIMEOUT_SECONDS,
        what=f"every other xdist worker's runtime calls in {directory}",
        interval=0.2,
    )
    return runtime_call_recorder.recorded_by_subprocesses(directory)


def test_every_runtime_call_is_listed_for_the_permissions_tier(
    runtime_calls: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every AWS call the runtime made in this run is in tests/infra/runtime_calls.json (this test runs last)."""
    made = runtime_call_recorder.recorded() | runtime_call_recorder.recorded_by_subprocesses(runtime_calls)
    made |= other_workers_calls(tmp_path_factory)
    if not made:
        pytest.skip("no runtime code made an AWS call in this run")
    missing = sorted(made - listed_calls())
    assert not missing, "\n".join(
        f"the runtime called {operation} ({action} on the {resource}), which {RUNTIME_CALLS_FILE.relative_to(ROOT)}"
        " does not list: add it there, and tests/infra/test_permissions.py will check the task role allows it"
        for operation, action, resource in missing
    )
