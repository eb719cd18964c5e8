"""The simulated world's SQS and DynamoDB against moto's: one set of checks, run on both, and both agree.

``world``: moto's backends behind the world's transport on a virtual clock (bench/sim/aws.py), the calls made from a
thread of the simulation. ``moto``: moto as it ships, in process (``mock_aws``), its clock a manual one the check
moves (the two functions moto's SQS reads the time from), so no check waits on the wall clock.

Where the world departs from moto to follow AWS's documentation, a check of its own shows the world doing what the
documentation says and moto not: if moto changes, its half fails and says so.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from bench.sim.aws import Aws, Faults
from bench.sim.clock import SimClock

Check = Callable[["Side"], None]


@dataclass
class Side:
    """One side of the contract: its clients and how it moves time on."""

    sqs: Any
    dynamodb: Any
    advance: Callable[[float], None]


def on_world(check: Check) -> None:
    """Run ``check`` in a thread of a simulated world (no faults, 1 ms each way); fail with what it raised."""
    sim = SimClock(0, switch_probability=0.0)
    with Aws(sim, random.Random(0), Faults(), latency_ms=(1.0, 1.0)) as aws:

        def main() -> None:
            side = Side(aws.client("sqs", caller="check"), aws.client("dynamodb", caller="check"), sim.sleep)
            check(side)

        sim.run(main)
        sim.close()
    assert not sim.errors, sim.errors[0]


@contextlib.contextmanager
def manual_moto_clock() -> Iterator[Callable[[float], None]]:
    """moto's SQS on a manual clock (its own two time functions): ``advance(seconds)`` moves it."""
    import moto.sqs.models as models

    now = [models.unix_time()]
    saved = models.unix_time, models.unix_time_millis
    models.unix_time, models.unix_time_millis = (lambda: now[0]), (lambda: now[0] * 1000)  # type: ignore[assignment]

    def advance(seconds: float) -> None:
        now[0] += seconds

    try:
        yield advance
    finally:
        models.unix_time, models.unix_time_millis = saved  # type: ignore[assignment]


def on_moto(check: Check) -> None:
    with mock_aws(), manual_moto_clock() as advance:
        session = boto3.Session(aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1")
        check(Side(session.client("sqs"), session.client("dynamodb"), advance))


SIDES = {"world": on_world, "moto": on_moto}


def queue(side: Side, name: str, **attributes: str) -> str:
    return str(side.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


def receive(side: Side, url: str, count: int = 10, **more: Any) -> list[dict[str, Any]]:
    answer = side.sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=count, MessageSystemAttributeNames=["All"], **more
    )
    return list(answer.get("Messages", []))


# --------------------------------------------------------------------------------------------- what both must do
def visibility_expires_and_counts_the_receive(side: Side) -> None:
    url = queue(side, "q", VisibilityTimeout="30")
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    assert [m["Body"] for m in receive(side, url)] == ["m"]
    side.advance(20)
    assert receive(side, url) == []
    side.advance(11)
    again = receive(side, url)
    assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in again] == [("m", "2")]


def a_delete_with_the_current_handle_removes_it(side: Side) -> None:
    url = queue(side, "q", VisibilityTimeout="5")
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    [message] = receive(side, url)
    side.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    side.advance(6)
    assert receive(side, url) == []


def a_batch_reports_each_entry(side: Side) -> None:
    url = queue(side, "q", VisibilityTimeout="5")
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    [message] = receive(side, url)
    answer = side.sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "good", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 60},
            {"Id": "bad", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 60},
        ],
    )
    assert [e["Id"] for e in answer.get("Successful", [])] == ["good"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in answer["Failed"]] == [
        ("bad", "ReceiptHandleIsInvalid", True)
    ]
    side.advance(30)
    assert receive(side, url) == []  # extended to 60 s from the change


def the_redrive_policy_moves_it_after_max_receives(side: Side) -> None:
    dlq = queue(side, "q-dlq")
    policy = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:q-dlq", "maxReceiveCount": 2})
    url = queue(side, "q", VisibilityTimeout="5", RedrivePolicy=policy)
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    for _ in range(2):
        assert len(receive(side, url)) == 1
        side.advance(6)
    assert receive(side, url) == []
    assert [m["Body"] for m in receive(side, dlq)] == ["m"]


def a_delayed_message_waits(side: Side) -> None:
    url = queue(side, "q")
    side.sqs.send_message(QueueUrl=url, MessageBody="m", DelaySeconds=10)
    assert receive(side, url) == []
    side.advance(11)
    assert [m["Body"] for m in receive(side, url)] == ["m"]


def retention_ends_a_message(side: Side) -> None:
    url = queue(side, "q", MessageRetentionPeriod="60")
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    side.advance(61)
    assert receive(side, url) == []


def a_fifo_group_is_locked_while_in_flight(side: Side) -> None:
    url = queue(side, "q.fifo", FifoQueue="true", VisibilityTimeout="30")
    for body in ("a", "b"):
        side.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g", MessageDeduplicationId=body)
    assert [m["Body"] for m in receive(side, url, 1)] == ["a"]
    assert receive(side, url) == []  # b waits behind a, in flight


def a_fifo_send_is_deduplicated(side: Side) -> None:
    url = queue(side, "q.fifo", FifoQueue="true")
    for _ in range(2):
        side.sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="same")
    assert len(receive(side, url)) == 1


def a_conditional_put_fails_with_the_old_item(side: Side) -> None:
    side.dynamodb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    put = {
        "TableName": "t",
        "ConditionExpression": "attribute_not_exists(pk)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    side.dynamodb.put_item(Item={"pk": {"S": "k"}, "owner": {"S": "a"}}, **put)
    with pytest.raises(ClientError) as refused:
        side.dynamodb.put_item(Item={"pk": {"S": "k"}, "owner": {"S": "b"}}, **put)
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert refused.value.response["Item"]["owner"] == {"S": "a"}


CHECKS = [
    visibility_expires_and_counts_the_receive,
    a_delete_with_the_current_handle_removes_it,
    a_batch_reports_each_entry,
    the_redrive_policy_moves_it_after_max_receives,
    a_delayed_message_waits,
    retention_ends_a_message,
    a_fifo_group_is_locked_while_in_flight,
    a_fifo_send_is_deduplicated,
    a_conditional_put_fails_with_the_old_item,
]


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_world_and_moto_agree(side: str, check: Check) -> None:
    """The check holds on both sides: what SQS and DynamoDB document, the world keeps."""
    SIDES[side](check)


# ------------------------------------------------------------- where the world follows the documentation, not moto
def fifo_group_resumes_from_its_first_message(side: Side) -> list[str]:
    """Two messages of a group received together, their lease lapsed: "messages that belong to the same message group
    are processed in order" (FIFO-queues-understanding-logic.html), so the next receive starts from the first."""
    url = queue(side, "q.fifo", FifoQueue="true", VisibilityTimeout="30")
    for body in ("a", "b"):
        side.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g", MessageDeduplicationId=body)
    assert [m["Body"] for m in receive(side, url)] == ["a", "b"]
    side.advance(31)
    return [m["Body"] for m in receive(side, url, 1)]


def twelve_hours_count_from_the_receive(side: Side) -> bool:
    """A message sent 11 hours before its receive can have its visibility set to 2 hours: the limit is 12 hours "from
    the receive" (API_ChangeMessageVisibility.html), not from the send. True if the change was accepted."""
    url = queue(side, "q", VisibilityTimeout="30")
    side.sqs.send_message(QueueUrl=url, MessageBody="m", DelaySeconds=0)
    side.advance(11 * 3600)
    [message] = receive(side, url)
    try:
        side.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=7200)
    except ClientError:
        return False
    return True


def a_receive_retried_with_its_attempt_id_gets_the_same_messages(side: Side) -> list[str]:
    """A FIFO receive retried with its ReceiveRequestAttemptId, its messages untouched, "returns the same messages and
    receipt handles" (API_ReceiveMessage.html). Returns the bodies the retry got."""
    url = queue(side, "q.fifo", FifoQueue="true", VisibilityTimeout="30")
    side.sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="a")
    first = receive(side, url, ReceiveRequestAttemptId="attempt-1")
    again = receive(side, url, ReceiveRequestAttemptId="attempt-1")
    if again:
        assert again[0]["ReceiptHandle"] == first[0]["ReceiptHandle"]
    return [m["Body"] for m in again]


def a_superseded_handle_changes_no_visibility(side: Side) -> tuple[bool, list[str]]:
    """A message received twice: a visibility change with the first receive's handle is refused ("The receipt handle
    has expired") and the second receive keeps its lease. Returns whether it was refused and what a receive then
    gets."""
    url = queue(side, "q", VisibilityTimeout="30")
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    [first] = receive(side, url)
    side.advance(31)
    assert [m["Body"] for m in receive(side, url)] == ["m"]
    try:
        side.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    except ClientError:
        refused = True
    else:
        refused = False
    return refused, [m["Body"] for m in receive(side, url)]


def a_superseded_handle_deletes_nothing(side: Side) -> list[str]:
    """A delete with the first receive's handle of a message received twice "will still succeed, but the message might
    not be deleted" (API_DeleteMessage.html): the world takes "not". Returns what a receive gets once the second
    lease has run out."""
    url = queue(side, "q", VisibilityTimeout="30")
    side.sqs.send_message(QueueUrl=url, MessageBody="m")
    [first] = receive(side, url)
    side.advance(31)
    assert [m["Body"] for m in receive(side, url)] == ["m"]
    side.sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    side.advance(31)
    return [m["Body"] for m in receive(side, url)]


def a_batch_fails_only_the_superseded_entry(side: Side) -> tuple[list[str], list[str]]:
    """A ChangeMessageVisibilityBatch with a superseded handle and a live one: the batch reports "a combination of
    successful and unsuccessful actions" (API_ChangeMessageVisibilityBatch.html), the stale entry failed and the live
    one changed. Returns the ids that succeeded and those that failed."""
    url = queue(side, "q", VisibilityTimeout="30")
    side.sqs.send_message(QueueUrl=url, MessageBody="stale")
    [first] = receive(side, url)
    side.advance(31)
    side.sqs.send_message(QueueUrl=url, MessageBody="live")
    again = {m["Body"]: m for m in receive(side, url)}
    entries = [
        {"Id": "stale", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 60},
        {"Id": "live", "ReceiptHandle": again["live"]["ReceiptHandle"], "VisibilityTimeout": 60},
    ]
    answer = side.sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
    return sorted(e["Id"] for e in answer.get("Successful", [])), sorted(e["Id"] for e in answer.get("Failed", []))


@pytest.mark.parametrize(
    ("departure", "documented", "moto"),
    [
        (fifo_group_resumes_from_its_first_message, ["a"], ["b"]),
        (twelve_hours_count_from_the_receive, True, False),
        (a_receive_retried_with_its_attempt_id_gets_the_same_messages, ["a"], []),
        (a_superseded_handle_changes_no_visibility, (True, []), (False, [])),
        (a_superseded_handle_deletes_nothing, ["m"], []),
        (a_batch_fails_only_the_superseded_entry, (["live"], ["stale"]), (["live", "stale"], [])),
    ],
    ids=[
        "fifo_group_resumes_from_its_first_message",
        "twelve_hours_count_from_the_receive",
        "receive_attempt_id",
        "superseded_handle_visibility",
        "superseded_handle_delete",
        "superseded_handle_in_a_batch",
    ],
)
def test_the_world_follows_the_documentation_where_moto_departs(departure: Any, documented: Any, moto: Any) -> None:
    """The world gives what AWS documents; moto as shipped gives something else (if moto changes, this says so)."""
    results: dict[str, Any] = {}
    for name, side in SIDES.items():
        side(lambda s, name=name: results.__setitem__(name, departure(s)))
    assert results == {"world": documented, "moto": moto}


def test_the_long_poll_waits_on_the_virtual_clock_and_returns_on_a_send() -> None:
    """A receive waiting 20 s returns as soon as a message is sent, 5 virtual seconds in ("returns as soon as a message
    is available", sqs-short-and-long-polling.html); an empty one returns when its wait ends. moto's own long poll
    waits on the wall clock, so only the world's is checked here."""
    sim = SimClock(0, switch_probability=0.0)
    times: dict[str, float] = {}
    with Aws(sim, random.Random(0), Faults(), latency_ms=(0.0, 0.0)) as aws:

        def main() -> None:
            sqs = aws.client("sqs", caller="check")
            url = sqs.create_queue(QueueName="q")["QueueUrl"]
            start = sim.now
            sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
            times["empty"] = sim.now - start

            def send_later() -> None:
                sim.sleep(5)
                sqs.send_message(QueueUrl=url, MessageBody="m")

            sim.thread(send_later, name="sender").start()
            start = sim.now
            answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
            times["sent"], times["got"] = sim.now - start, len(answer.get("Messages", []))

        sim.run(main)
        sim.close()
    assert not sim.errors, sim.errors
    assert times == {"empty": 20.0, "sent": 5.0, "got": 1}
