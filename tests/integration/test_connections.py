"""No client of `python -m consumer run` discards a connection at its declared concurrency (moto's server, HTTP).

urllib3 discards a connection whenever more threads return one than the client's pool holds ("Connection pool is
full, discarding connection"), and the next call opens a new one (TCP, and TLS on AWS). botocore's pool holds 10 by
default: a 32-slot worker's threads overflowed both its SQS and its DynamoDB pool, many times a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import botocore
import pytest
from moto import mock_aws

from consumer.declaration import contract_of
from consumer.runtime.clients import dynamodb_client, sqs_client, user_agent
from consumer.testing import depth
from tests.integration.conftest import REGION, create_pair
from tests.integration.handlers import wide
from tests.integration.processes import create_table, effects

MESSAGES = 100
DISCARDED = "Connection pool is full"


@pytest.fixture
def server_sqs(moto_server: str) -> Any:
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)


def test_run_at_32_slots_with_the_idempotency_table_discards_no_connection(
    moto_server: str, server_sqs: Any, tmp_path: Path, consumer_run: Any
) -> None:
    """100 messages through 32 slots (every slot three times over), claims and completions on DynamoDB, over HTTP to moto's server: all processed
    once, and not one "Connection pool is full" line (urllib3's warning, which the run's log carries) from either
    client's pool."""
    pair = create_pair(server_sqs, contract_of(wide))
    for start in range(0, MESSAGES, 10):
        entries = [{"Id": str(i), "MessageBody": f"m-{start + i}"} for i in range(10)]
        server_sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)
    side_effects = tmp_path / "effects"
    result = consumer_run(
        moto_server,
        QUEUE_URL=pair.queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:wide",
        CONSUMER_IDEMPOTENCY_TABLE=create_table(moto_server),
        SIDE_EFFECTS_FILE=str(side_effects),
        stop_when=lambda: len(effects(side_effects)) >= MESSAGES and depth(server_sqs, pair.queue_url).total == 0,
    )
    assert result.exit_code == 0, result
    assert [line["event"] for line in result.events() if DISCARDED in line["event"]] == []
    assert sorted(e["body"] for e in effects(side_effects)) == sorted(f"m-{n}" for n in range(MESSAGES))
    assert any(line["event"] == "message_processed" for line in result.events())  # the log is the run's


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
