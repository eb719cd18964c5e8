"""The DLQ message format has one home (consumer/runtime/dead_letter.py): the consumer writes it, the DLQ tool reads it."""

from __future__ import annotations

import json

import pytest

from consumer.message import Message
from consumer.runtime.dead_letter import (
    REASON_ATTRIBUTE,
    read_reason,
    read_reason_safely,
    send_entry,
    send_parameters,
)

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def reason_attribute(text: str) -> dict[str, dict[str, str]]:
    return {REASON_ATTRIBUTE: {"DataType": "String", "StringValue": text}}


def test_read_reason_safely_reads_what_the_consumer_wrote() -> None:
    """The tool's reader gets back the record the consumer's move wrote, as the runtime's reader does."""
    message = Message(body="b", message_id="m-1", receipt_handle="rh", receive_count=3)
    params = send_parameters(message, dlq_url="dlq", reason="bad", kind="poison", source_queue_url="src")
    received = {"MessageAttributes": params["MessageAttributes"]}
    assert read_reason_safely(received) == read_reason(params["MessageAttributes"])


def test_read_reason_safely_is_none_for_a_message_sqs_moved() -> None:
    """A message SQS's redrive moved carries no reason: None, as the runtime's reader says."""
    assert read_reason_safely({"MessageAttributes": {}}) is None


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_read_reason_safely_keeps_a_malformed_reason_as_unknown(text: str) -> None:
    """A reason that is not a JSON object is shown as it is, never raised: the tool must get past it."""
    assert read_reason_safely({"MessageAttributes": reason_attribute(text)}) == {"kind": "unknown", "reason": text}


def test_read_reason_raises_on_a_malformed_reason() -> None:
    """The runtime's reader stays strict: what the consumer wrote is JSON, anything else is a bug to see."""
    with pytest.raises(json.JSONDecodeError):
        read_reason(reason_attribute("not json"))


def test_send_entry_carries_the_trace_header() -> None:
    """A message sent back out of the DLQ stays in its X-Ray trace, as the consumer's move does."""
    entry = send_entry(
        "0", body="b", message_attributes={}, attributes={"AWSTraceHeader": TRACE}, fallback_dedup_id="f", fifo=False
    )
    assert entry == {
        "Id": "0",
        "MessageBody": "b",
        "MessageSystemAttributes": {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}},
    }


def test_send_entry_standard_keeps_the_tenant() -> None:
    """On a standard queue the MessageGroupId is the tenant (fair queues): a redriven message keeps it, with no
    deduplication id (FIFO only)."""
    entry = send_entry(
        "0", body="b", message_attributes={}, attributes={"MessageGroupId": "acme"}, fallback_dedup_id="f", fifo=False
    )
    assert entry == {"Id": "0", "MessageBody": "b", "MessageGroupId": "acme"}


def test_send_entry_fifo_restores_the_original_deduplication_id() -> None:
    """On FIFO, the group is kept and the source's deduplication id (from the reason) wins over the DLQ's."""
    entry = send_entry(
        "0",
        body="b",
        message_attributes={},
        attributes={"MessageGroupId": "g", "MessageDeduplicationId": "delivery-id"},
        fallback_dedup_id="f",
        fifo=True,
        original_dedup_id="d-9",
    )
    assert (entry["MessageGroupId"], entry["MessageDeduplicationId"]) == ("g", "d-9")


@pytest.mark.parametrize(("dlq_url", "deduplicated"), [("https://q/dlq", False), ("https://q/dlq.fifo", True)])
def test_move_to_the_dlq_keeps_the_group_and_deduplicates_on_fifo_only(dlq_url: str, deduplicated: bool) -> None:
    """A tenant's message keeps its MessageGroupId in a standard DLQ, with no deduplication id (SQS takes one on
    FIFO queues only); a FIFO message is deduplicated on its delivery's MessageId."""
    message = Message(body="b", message_id="m-1", receipt_handle="rh", attributes={"MessageGroupId": "acme"})
    params = send_parameters(message, dlq_url=dlq_url, reason="bad", kind="poison", source_queue_url="src")
    assert params["MessageGroupId"] == "acme"
    assert params.get("MessageDeduplicationId") == ("m-1" if deduplicated else None)
