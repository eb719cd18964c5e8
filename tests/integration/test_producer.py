"""What consumer.producer sends, the consumer processes, logging each message's tenant (moto in-process)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from consumer import Message
from consumer.exit_codes import ExitCode
from consumer.producer import Outgoing, send
from consumer.testing import running, wait_until
from tests.integration.conftest import create_pair
from tests.integration.support import consumer_of, fast_contract, holds_nothing

TRACEPARENT = f"00-{'ab' * 16}-{'cd' * 8}-01"


def test_producer_sends_what_the_consumer_processes_with_the_tenant_logged(
    sqs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """12 messages of two tenants (two batches): each handled once, deleted, and its message_processed line
    carries its tenant (message_group_id) and trace; a message without a tenant carries none."""
    contract = fast_contract(fair_queue=True)
    pair = create_pair(sqs, contract)
    outgoing = [
        Outgoing(body=f"b{n}", idempotency_key=f"evt-{n}", tenant=("noisy", "quiet")[n % 2], traceparent=TRACEPARENT)
        for n in range(11)
    ] + [Outgoing(body="b11", idempotency_key="evt-11")]
    result = send(sqs, pair.queue_url, outgoing)
    assert (len(result.sent), result.failed) == (12, [])
    caplog.set_level(logging.DEBUG, logger="consumer")  # message_processed is a DEBUG line
    seen: list[Message] = []
    with running(consumer_of(sqs, pair, contract, seen.append)) as outcome:
        wait_until(lambda: len(seen) == 12 and holds_nothing(sqs, pair.queue_url))
    assert outcome.exit_code == ExitCode.OK
    assert sorted(m.body for m in seen) == sorted(f"b{n}" for n in range(12))
    processed = {
        r.message_id: r.__dict__
        for r in caplog.records
        if r.getMessage() == "message_processed"  # type: ignore[attr-defined]
    }
    tenant_of = {message_id: m.body for m, message_id in result.sent}
    logged = {tenant_of[i]: (fields.get("message_group_id"), fields.get("trace_id")) for i, fields in processed.items()}
    assert logged == {
        **{f"b{n}": (("noisy", "quiet")[n % 2], "ab" * 16) for n in range(11)},
        "b11": (None, None),
    }
