"""The chaos suite's fault-injecting proxy, over HTTP between boto3 and moto's server on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from bench.chaos_evidence import ReceiveLog, double_hand_outs
from bench.proxy import ERROR_AFTER, THROTTLE_BEFORE, FaultPlan, FaultProxy
from consumer.testing import depth, wait_until
from tests.integration.conftest import REGION

NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def direct(moto_server: str) -> Any:
    """A client straight to moto: the truth the proxy's faults are checked against."""
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)


@pytest.fixture
def queue_url(direct: Any) -> str:
    return direct.create_queue(QueueName=f"chaos-{uuid.uuid4().hex[:12]}")["QueueUrl"]


def proxy_for(moto_server: str, plan: FaultPlan) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_server, plan)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def throttling(moto_server: str) -> Iterator[FaultProxy]:
    yield from proxy_for(moto_server, FaultPlan(throttle_before=1.0))


@pytest.fixture
def answer_losing(moto_server: str) -> Iterator[FaultProxy]:
    yield from proxy_for(moto_server, FaultPlan(error_after=1.0))


@pytest.fixture
def clean(moto_server: str) -> Iterator[FaultProxy]:
    yield from proxy_for(moto_server, FaultPlan())


def client(proxy: FaultProxy, config: Config = NO_RETRIES) -> Any:
    return boto3.client("sqs", region_name=REGION, endpoint_url=proxy.url, config=config)


def test_proxy_throttle_is_retried_by_botocore_and_never_reaches_moto(
    throttling: FaultProxy, direct: Any, queue_url: str
) -> None:
    """With 3 attempts in all botocore retries the throttle twice, then raises RequestThrottled; moto got nothing."""
    sqs = client(throttling, Config(retries={"mode": "standard", "total_max_attempts": 3}))
    with pytest.raises(ClientError) as raised:
        sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    assert raised.value.response["Error"]["Code"] == "RequestThrottled"
    assert raised.value.response["ResponseMetadata"]["RetryAttempts"] == 2
    assert throttling.faults[(THROTTLE_BEFORE, "SendMessage")] == 3
    assert depth(direct, queue_url).visible == 0


def test_proxy_error_after_forwarding_applied_the_operation(
    answer_losing: FaultProxy, direct: Any, queue_url: str
) -> None:
    """The client sees InternalError, yet moto holds the message: the lost answer."""
    with pytest.raises(ClientError, match="InternalError"):
        client(answer_losing).send_message(QueueUrl=queue_url, MessageBody="applied anyway")
    assert depth(direct, queue_url).visible == 1
    assert answer_losing.faults[(ERROR_AFTER, "SendMessage")] == 1


def test_proxy_lost_send_answer_retried_makes_a_duplicate(
    answer_losing: FaultProxy, direct: Any, queue_url: str
) -> None:
    """A retried SendMessage whose answers were lost puts one copy per attempt on the queue."""
    with pytest.raises(ClientError):
        client(answer_losing, Config(retries={"mode": "standard", "total_max_attempts": 2})).send_message(
            QueueUrl=queue_url, MessageBody="twice"
        )
    assert depth(direct, queue_url).visible == 2


def test_proxy_lost_receive_answer_leaves_the_message_in_flight(
    answer_losing: FaultProxy, direct: Any, queue_url: str
) -> None:
    """A ReceiveMessage applied by moto but answered 500: the message is in flight, unseen by the client."""
    direct.send_message(QueueUrl=queue_url, MessageBody="m")
    with pytest.raises(ClientError, match="InternalError"):
        client(answer_losing).receive_message(QueueUrl=queue_url, VisibilityTimeout=30)
    attributes = direct.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "1",
    )


def test_proxy_without_faults_forwards_unchanged(clean: FaultProxy, direct: Any, queue_url: str) -> None:
    """Fault-free, a send and a receive through the proxy behave as against moto, and nothing is counted."""
    sqs = client(clean)
    sqs.send_message(QueueUrl=queue_url, MessageBody="hello")
    (message,) = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    assert message["Body"] == "hello"
    assert sum(clean.faults.values()) == 0 and clean.forwarded["SendMessage"] == 1


def test_proxy_observer_records_who_received_which_event_and_the_visibility_changes(
    moto_server: str, direct: Any, queue_url: str
) -> None:
    """The chaos suite's evidence: a receive answer's receiver (its User-Agent app id), message, receive count and
    idempotency key; a lost answer (error_after) is a receive nobody holds; a hand-back (visibility 0) between two
    receives makes the second SQS's doing, not a double hand-out."""
    log = ReceiveLog()
    losing = FaultProxy(moto_server, FaultPlan(error_after=1.0), observer=log)
    losing.start()
    key = {"idempotency-key": {"DataType": "String", "StringValue": "evt-1"}}
    everything = {"MessageSystemAttributeNames": ["All"], "MessageAttributeNames": ["All"]}  # as the consumer asks
    direct.send_message(QueueUrl=queue_url, MessageBody="m", MessageAttributes=key)
    try:
        with pytest.raises(ClientError, match="InternalError"):
            client(losing).receive_message(QueueUrl=queue_url, VisibilityTimeout=0, **everything)
        losing.pause_faults()
        labelled = client(losing, Config(retries={"total_max_attempts": 1}, user_agent_appid="c7"))
        (message,) = labelled.receive_message(QueueUrl=queue_url, **everything)["Messages"]
        labelled.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
        labelled.receive_message(QueueUrl=queue_url, **everything)
    finally:
        losing.stop()
    assert [(r.sender, r.receive_count, r.key, r.passed_on) for r in log.receives] == [
        (None, 1, "evt-1", False),
        ("c7", 2, "evt-1", True),
        ("c7", 3, "evt-1", True),
    ]
    assert [r.sender for r in log.holds()["evt-1"]] == ["c7", "c7"]
    assert len(log.changes[message["MessageId"]]) == 1
    assert double_hand_outs(log, lease_seconds=30) == {}


def test_proxy_paused_faults_forward_everything(throttling: FaultProxy, direct: Any, queue_url: str) -> None:
    """pause_faults() turns a throttle-everything plan into a clean pass-through."""
    throttling.pause_faults()
    client(throttling).send_message(QueueUrl=queue_url, MessageBody="x")
    assert depth(direct, queue_url).visible == 1


def test_proxy_outage_refuses_connections_then_serves_on_the_same_port(
    clean: FaultProxy, direct: Any, queue_url: str
) -> None:
    """During the endpoint restart connections fail; afterwards the same URL works, moto's state intact."""
    sqs = client(clean)
    sqs.send_message(QueueUrl=queue_url, MessageBody="before")
    url = clean.url
    outage = threading.Thread(target=clean.outage, args=(1.5,))
    outage.start()
    time.sleep(0.7)
    with pytest.raises(EndpointConnectionError):
        client(clean).get_queue_attributes(QueueUrl=queue_url)
    outage.join()
    assert clean.url == url
    assert depth(direct, queue_url).visible == 1
    assert sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"
    ] == {"ApproximateNumberOfMessages": "1"}
    assert len(clean.outages) == 1


def test_proxy_paused_faults_apply_to_answers_of_earlier_requests(
    answer_losing: FaultProxy, direct: Any, queue_url: str
) -> None:
    """A long poll drawn for error_after before the pause gets its real answer when that comes after it."""
    got: list[Any] = []
    poll = threading.Thread(
        target=lambda: got.append(client(answer_losing).receive_message(QueueUrl=queue_url, WaitTimeSeconds=10))
    )
    poll.start()
    wait_until(lambda: answer_losing.in_flight == 1, 20.0, interval=0.02)
    answer_losing.pause_faults()
    direct.send_message(QueueUrl=queue_url, MessageBody="after the pause")
    poll.join(15)
    assert [m["Body"] for m in got[0]["Messages"]] == ["after the pause"]
    assert answer_losing.faults[(ERROR_AFTER, "ReceiveMessage")] == 0


DEAD_POLL = """
import sys, boto3
sqs = boto3.client("sqs", region_name=sys.argv[3], endpoint_url=sys.argv[1])
sqs.receive_message(QueueUrl=sys.argv[2], WaitTimeSeconds=3)
"""


@pytest.mark.real
def test_proxy_settle_outlasts_the_long_poll_of_a_sigkilled_client(
    clean: FaultProxy, direct: Any, queue_url: str
) -> None:
    """A SIGKILLed client's long poll still waits at moto and swallows the next message (one receive
    count up, in flight for its lease); after settle() the next message is received at count 1.
    Real: a client process SIGKILLed in the middle of its long poll, whose connection only the kernel closes."""

    def killed_poller() -> None:
        process = subprocess.Popen([sys.executable, "-c", DEAD_POLL, clean.url, queue_url, REGION])
        wait_until(lambda: clean.in_flight == 1, 20.0, interval=0.02)
        process.kill()
        process.wait()

    killed_poller()
    direct.send_message(QueueUrl=queue_url, MessageBody="swallowed")
    wait_until(
        lambda: depth(direct, queue_url).visible == 0, 20.0, interval=0.02
    )  # the hazard is real: the dead poll took it
    attributes = direct.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "1"
    direct.purge_queue(QueueUrl=queue_url)

    killed_poller()
    clean.settle(timeout=10)
    assert clean.in_flight == 0
    direct.send_message(QueueUrl=queue_url, MessageBody="kept")
    (message,) = direct.receive_message(QueueUrl=queue_url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert (message["Body"], message["Attributes"]["ApproximateReceiveCount"]) == ("kept", "1")
