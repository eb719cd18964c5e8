"""No client of `python -m consumer run` discards a connection at its declared concurrency (moto's server, HTTP).

urllib3 discards a connection whenever more threads return one than the client's pool holds ("Connection pool is
full, discarding connection"), and the next call opens a new one (TCP, and TLS on AWS). botocore's pool holds 10 by
default: a 32-slot worker's threads overflowed both its SQS and its DynamoDB pool, many times a second.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import botocore
import pytest
from moto import mock_aws

from consumer.declaration import contract_of
from consumer.runtime.clients import dynamodb_client, sqs_client, user_agent
from consumer.testing import depth, wait_until
from tests.integration.conftest import REGION, consumer_run_environment, create_pair
from tests.integration.handlers import wide
from tests.integration.processes import create_table, effects

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 320
DISCARDED = "Connection pool is full"


@pytest.fixture
def server_sqs(moto_server: str) -> Any:
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)


def test_process_at_32_slots_with_the_idempotency_table_discards_no_connection(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list
) -> None:
    """320 messages through 32 slots, claims and completions on DynamoDB: all processed once, and not one
    "Connection pool is full" line from either client's pool."""
    pair = create_pair(server_sqs, contract_of(wide))
    for start in range(0, MESSAGES, 10):
        entries = [{"Id": str(i), "MessageBody": f"m-{start + i}"} for i in range(10)]
        server_sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
    side_effects = tmp_path / "effects"
    env = consumer_run_environment(
        moto_server,
        QUEUE_URL=pair.queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:wide",
        CONSUMER_IDEMPOTENCY_TABLE=create_table(moto_server),
        SIDE_EFFECTS_FILE=str(side_effects),
    )
    log = tmp_path / "consumer.log"  # a file, not a pipe: nobody reads the log while the test waits
    process = subprocess.Popen(
        [sys.executable, "-m", "consumer", "run"], cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    process_guard.append(process)
    wait_until(
        lambda: len(effects(side_effects)) >= MESSAGES and depth(server_sqs, pair.queue_url).total == 0,
        timeout=120,
        what=f"{MESSAGES} messages processed and deleted",
    )
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert sorted(e["body"] for e in effects(side_effects)) == sorted(f"m-{n}" for n in range(MESSAGES))
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert [line["event"] for line in lines if DISCARDED in line.get("event", "")] == []


def test_every_request_carries_the_user_agent_fixed_at_start(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's clients send the User-Agent built once (botocore composes its own twice per request), with the
    SDKs' app id as app/<id>, the label the chaos suite reads; SQS and DynamoDB alike."""
    monkeypatch.setenv("AWS_SDK_UA_APP_ID", "c7")
    contract = contract_of(wide)
    sent: list[str] = []
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        sqs, dynamodb = sqs_client(session, contract), dynamodb_client(session, contract)
        for client in (sqs, dynamodb):
            client.meta.events.register("before-send", lambda request, **_: sent.append(request.headers["User-Agent"]))
        sqs.list_queues()
        dynamodb.list_tables()
    expected = user_agent()  # boto3's session appends "Botocore/<version>" to it
    assert [header.decode() for header in sent] == [f"{expected} Botocore/{botocore.__version__}"] * 2
    assert expected.startswith("sqs-worker-consumer ua/2.1 ") and expected.endswith(" app/c7")
