"""consumer.producer: the entries it builds and how it retries and reports a batch's failed entries (Stubber)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from consumer.errors import ContractError
from consumer.message import Message
from consumer.producer import Outgoing, entries, send
from consumer.runtime.idempotency import idempotency_key

URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/q-source"
TRACEPARENT = f"00-{'ab' * 16}-{'cd' * 8}-01"


@pytest.fixture
def sqs() -> Any:
    return boto3.client("sqs", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_entries_carry_key_trace_tenant_and_delay() -> None:
    """One message: the idempotency-key and traceparent attributes, the tenant as MessageGroupId, its delay."""
    (entry,) = entries(
        [Outgoing(body="{}", idempotency_key="evt-1", tenant="acme", delay_seconds=5, traceparent=TRACEPARENT)]
    )
    assert entry == {
        "Id": "0",
        "MessageBody": "{}",
        "MessageAttributes": {
            "idempotency-key": {"DataType": "String", "StringValue": "evt-1"},
            "traceparent": {"DataType": "String", "StringValue": TRACEPARENT},
        },
        "MessageGroupId": "acme",
        "DelaySeconds": 5,
    }


def test_entries_key_is_what_the_runtime_reads() -> None:
    """The consumer's idempotency_key() of a message so sent is the producer's key."""
    (entry,) = entries([Outgoing(body="{}", idempotency_key="evt-1")])
    received = Message(body="{}", message_id="m", receipt_handle="r", message_attributes=entry["MessageAttributes"])
    assert idempotency_key(received) == "attr:evt-1"


def test_entries_default_keys_are_unique_and_ids_are_unique() -> None:
    """Without a key each message gets its own UUID; entry ids are unique within a batch; no tenant, no group id."""
    built = entries([Outgoing(body="same") for _ in range(10)])
    keys = {e["MessageAttributes"]["idempotency-key"]["StringValue"] for e in built}
    assert len(keys) == 10
    assert [e["Id"] for e in built] == [str(n) for n in range(10)]
    assert not any("MessageGroupId" in e or "DelaySeconds" in e for e in built)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (Outgoing(body="{}", delay_seconds=901), '"messages[0].delay_seconds" must be between 0 and 900: 901'),
        (Outgoing(body="{}", delay_seconds=-1), '"messages[0].delay_seconds" must be between 0 and 900: -1'),
        (Outgoing(body="", tenant="a"), "\"messages[0].body\" must be a non-empty string: ''"),
        (Outgoing(body="{}", tenant="x" * 129), '"messages[0].tenant" must be 1 to 128 printable ASCII characters'),
        (Outgoing(body="{}", tenant="a b"), '"messages[0].tenant" must be 1 to 128 printable ASCII characters'),
        (Outgoing(body="{}", group_id="g"), '"messages[0].group_id" is only for FIFO queues'),
    ],
)
def test_entries_refuse_naming_the_message_and_rule(message: Outgoing, expected: str) -> None:
    """Errors name the message's field, the rule and the value."""
    with pytest.raises(ContractError) as raised:
        entries([message])
    assert str(raised.value).startswith(expected)


def test_entries_accept_both_delay_edges_and_a_128_character_tenant() -> None:
    """0 and 900 s are valid delays; a 128-character tenant is valid."""
    built = entries([Outgoing(body="{}", delay_seconds=900, tenant="x" * 128), Outgoing(body="{}", delay_seconds=0)])
    assert (built[0]["DelaySeconds"], "DelaySeconds" in built[1]) == (900, False)


def test_entries_on_fifo_refuse_a_tenant_and_take_an_explicit_group_id() -> None:
    """On FIFO a tenant is refused (the group id is the order key): group_id says so explicitly."""
    with pytest.raises(ContractError, match=r'^"messages\[0\].tenant" is only for standard queues'):
        entries([Outgoing(body="{}", tenant="acme", group_id="g")], fifo=True)
    (entry,) = entries([Outgoing(body="{}", group_id="order-7", deduplication_id="d")], fifo=True)
    assert (entry["MessageGroupId"], entry["MessageDeduplicationId"]) == ("order-7", "d")


def ok(*ids: str) -> list[dict[str, str]]:
    return [{"Id": i, "MessageId": f"m-{i}", "MD5OfMessageBody": "x"} for i in ids]


def test_send_batches_of_ten(sqs: Any) -> None:
    """23 messages: three calls of 10, 10 and 3 entries, every message reported sent."""
    with Stubber(sqs) as stub:
        for ids in (range(0, 10), range(10, 20), range(20, 23)):
            stub.add_response(
                "send_message_batch",
                {"Successful": ok(*map(str, ids)), "Failed": []},
                {"QueueUrl": URL, "Entries": [ANY] * len(ids)},
            )
        result = send(sqs, URL, [Outgoing(body=f"b{n}") for n in range(23)])
        stub.assert_no_pending_responses()
    assert [m.body for m, _ in result.sent] == [f"b{n}" for n in range(23)]
    assert result.failed == []


def test_send_retries_only_the_failed_entries_then_reports_them(sqs: Any) -> None:
    """Entry 1 throttled twice then taken; entry 2 a sender fault reported at once; nothing dropped."""
    failed = lambda i, code, fault: {"Id": i, "Code": code, "Message": code, "SenderFault": fault}  # noqa: E731
    sleeps: list[float] = []
    with Stubber(sqs) as stub:
        stub.add_response(
            "send_message_batch",
            {
                "Successful": ok("0"),
                "Failed": [failed("1", "ThrottlingException", False), failed("2", "InvalidParameterValue", True)],
            },
            {"QueueUrl": URL, "Entries": [ANY] * 3},
        )
        stub.add_response(
            "send_message_batch",
            {"Successful": [], "Failed": [failed("1", "ThrottlingException", False)]},
            {"QueueUrl": URL, "Entries": [ANY]},
        )
        stub.add_response(
            "send_message_batch", {"Successful": ok("1"), "Failed": []}, {"QueueUrl": URL, "Entries": [ANY]}
        )
        result = send(sqs, URL, [Outgoing(body=f"b{n}") for n in range(3)], sleep=sleeps.append)
        stub.assert_no_pending_responses()
    assert [m.body for m, _ in result.sent] == ["b0", "b1"]
    (failure,) = result.failed
    assert (failure.message.body, failure.entry["Id"], failure.code, failure.sender_fault) == (
        "b2",
        "2",
        "InvalidParameterValue",
        True,
    )
    assert sleeps == [0.2, 0.4]


def test_send_reports_what_still_fails_after_its_retries(sqs: Any) -> None:
    """An entry throttled on every attempt (1 + retries) is reported with SQS's error, never dropped."""
    throttled = {
        "Successful": [],
        "Failed": [{"Id": "0", "Code": "Throttled", "Message": "slow down", "SenderFault": False}],
    }
    with Stubber(sqs) as stub:
        for _ in range(3):
            stub.add_response("send_message_batch", throttled, {"QueueUrl": URL, "Entries": [ANY]})
        result = send(sqs, URL, [Outgoing(body="b")], retries=2, sleep=lambda _: None)
        stub.assert_no_pending_responses()
    (failure,) = result.failed
    assert (failure.code, failure.error, failure.sender_fault, result.sent) == ("Throttled", "slow down", False, [])


def test_send_refuses_before_sending_anything(sqs: Any) -> None:
    """A bad eleventh message fails the call before the first batch goes out (the stub has no response)."""
    with Stubber(sqs), pytest.raises(ContractError, match=r'"messages\[10\].delay_seconds"'):
        send(sqs, URL, [Outgoing(body="b")] * 10 + [Outgoing(body="b", delay_seconds=1000)])


def test_send_splits_batches_at_sqs_s_one_mebibyte(sqs: Any) -> None:
    """Ten 200 KB messages are over SQS's 1 MiB per batch: two calls of 5 (each under the limit), all sent."""
    body = "x" * 200_000
    with Stubber(sqs) as stub:
        for ids in (range(0, 5), range(5, 10)):
            stub.add_response(
                "send_message_batch",
                {"Successful": ok(*map(str, ids)), "Failed": []},
                {"QueueUrl": URL, "Entries": [ANY] * len(ids)},
            )
        result = send(sqs, URL, [Outgoing(body=body) for _ in range(10)])
        stub.assert_no_pending_responses()
    assert (len(result.sent), result.failed) == (10, [])


def test_send_reports_a_failed_call_with_what_was_sent_before_and_what_was_not_sent(sqs: Any) -> None:
    """The second call fails as a whole: the first batch is reported sent, the second failed with the call's error,
    the third NotSent; nothing raised, nothing unaccounted for."""
    with Stubber(sqs) as stub:
        stub.add_response("send_message_batch", {"Successful": ok(*map(str, range(10))), "Failed": []})
        stub.add_client_error("send_message_batch", service_error_code="AccessDenied", service_message="no")
        result = send(sqs, URL, [Outgoing(body=f"b{n}") for n in range(25)])
    assert [m.body for m, _ in result.sent] == [f"b{n}" for n in range(10)]
    codes = [(f.message.body, f.code) for f in result.failed]
    assert codes == [(f"b{n}", "AccessDenied") for n in range(10, 20)] + [(f"b{n}", "NotSent") for n in range(20, 25)]
    assert result.failed[0].exception is not None


def test_entries_refuse_a_message_over_sqs_s_size_or_attribute_limits() -> None:
    """Over 1 MiB with its attributes, or more than 9 attributes (one stays free for the consumer's hand-back count):
    refused before anything is sent, naming the message."""
    with pytest.raises(ContractError, match=r'"messages\[0\]\.body" must be at most 1048576 bytes'):
        entries([Outgoing(body="x" * 1_048_576)])
    nine = {f"a{n}": "v" for n in range(8)}  # with the idempotency key: 9
    assert len(entries([Outgoing(body="b", attributes=nine)])[0]["MessageAttributes"]) == 9
    with pytest.raises(ContractError, match=r'"messages\[0\]\.attributes" must leave the message at most 9'):
        entries([Outgoing(body="b", attributes=nine | {"a8": "v"})])
