"""Helpers the in-process consumer tests share: a contract with short timings, a consumer of a queue pair, a batch
send, and moto's one sender id."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from moto.sqs.models import DEFAULT_SENDER_ID

from consumer import Message
from consumer.contract import WorkerContract
from consumer.runtime.consumer import Collaborators, Consumer
from consumer.runtime.wiring import Intake
from consumer.testing import depth
from tests.integration.conftest import QueuePair

#: moto records one SenderId for every message, whoever sent it. As the consumer's task role id it makes the
#: test's own sends count as the consumer's copies, where a test exercises a carried receive count.
MOTO_SENDER_ID = DEFAULT_SENDER_ID


def fast_contract(**overrides: Any) -> WorkerContract:
    """A contract with short timings (3 s max duration, 1 s backoffs, three receives), ``overrides`` applied."""
    values: dict[str, Any] = {
        "max_duration_seconds": 3,
        "concurrency": 4,
        "max_receive_count": 3,
        "retry_backoff_base_seconds": 1,
        "retry_backoff_max_seconds": 1,
    }
    values.update(overrides)
    return WorkerContract(**values)


#: Intake's fields, told apart from Collaborators' in consumer_of's options.
INTAKE_FIELDS = frozenset(field.name for field in dataclasses.fields(Intake))


def consumer_of(
    sqs: Any, pair: QueuePair, contract: WorkerContract, handler: Callable[[Message], None], **options: Any
) -> Consumer:
    """A consumer of ``pair`` with ``handler`` under ``contract``; ``options`` are fields of :class:`Collaborators`
    and :class:`Intake`, each passed in its own (a name of neither is refused)."""
    intake = Intake(**{name: value for name, value in options.items() if name in INTAKE_FIELDS})
    collaborators = Collaborators(**{name: value for name, value in options.items() if name not in INTAKE_FIELDS})
    return Consumer(
        sqs,
        queue_url=pair.queue_url,
        dlq_url=pair.dlq_url,
        contract=contract,
        handler=handler,
        collaborators=collaborators,
        intake=intake,
    )


def send(sqs: Any, url: str, *bodies: str) -> None:
    """Send ``bodies`` to ``url`` in batches of ten."""
    for start in range(0, len(bodies), 10):
        entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)


def holds_nothing(sqs: Any, url: str) -> bool:
    """Whether the queue at ``url`` holds no message, visible or in flight: two reads of its depth in a row say so.

    One read can miss a message: SQS counts visible and in-flight messages one after the other, so a message whose
    lease ends between the two counts is in neither (moto, loaded by other threads, shows it in a few reads out of a
    hundred). Its next lease lasts a second at least, so it cannot slip between the counts of the read right after.
    """
    return depth(sqs, url).total == 0 and depth(sqs, url).total == 0


def create_table(client: Any) -> str:
    """An idempotency table shaped like the stack's: string partition key ``pk``, TTL on ``expires_at``."""
    name = f"idem-{uuid.uuid4().hex[:12]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"})
    return name
