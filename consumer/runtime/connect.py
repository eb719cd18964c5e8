"""What a start connects to, the container's (consumer/runtime/cli.py) and a Lambda environment's
(consumer/runtime/cold_start.py) alike: the region's clients, the source queue checked against the contract, the DLQ,
and the idempotency guard's store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from consumer.runtime.clients import dynamodb_client, sqs_client
from consumer.runtime.config import RuntimeConfig, resolve_region
from consumer.runtime.drift import QueueBinding, check_queue, queue_name_from_url
from consumer.runtime.idempotency import DynamoDBStore, IdempotencyStore, InMemoryStore

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from consumer.queue_attributes import QueueAttributes


@dataclass(frozen=True)
class Connected:
    """The SQS ``client`` (every client of a run is made in one region), the source queue's ``binding`` (its ARN and
    its DLQ's), the ``dlq_url`` and the guard's ``store`` (None: ``@worker(idempotent=True)``, no guard)."""

    client: SQSClient
    binding: QueueBinding
    dlq_url: str
    store: IdempotencyStore | None


def connect(config: RuntimeConfig, environ: Mapping[str, str], *, expected: QueueAttributes | None = None) -> Connected:
    """Clients with the runtime's bounded timeouts (clients.py), the queue checked (drift.check_queue; ``expected``:
    the target's source attributes, the container's when None), the DLQ its redrive policy names when ``DLQ_URL`` is
    unset (a local run), and the guard's store: the stack's table, or one in memory without one."""
    import boto3

    region, _ = resolve_region(environ, config.queue_url, configured=boto3.Session().region_name)
    session = boto3.Session(region_name=region)  # every client of the run is made from it, in that region
    # Bounded timeouts and attempts, the ones the liveness allowances are derived from (clients.py).
    client = sqs_client(session, config.contract)
    binding = check_queue(
        client,
        queue_url=config.queue_url,
        dlq_url=config.dlq_url,
        contract=config.contract,
        check_retention=config.from_stack,
        expected=expected,
    )
    dlq_url = config.dlq_url
    if dlq_url is None:  # a local run: find the DLQ through the queue's own redrive policy
        account, _ = queue_name_from_url(config.queue_url)
        dlq_name = binding.dead_letter_queue_arn.rsplit(":", 1)[-1]
        dlq_url = client.get_queue_url(QueueName=dlq_name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    store: IdempotencyStore | None = None  # @worker(idempotent=True): no guard, and the stack made no table
    if not config.contract.idempotent:
        table = config.idempotency_table
        store = DynamoDBStore(table, client=dynamodb_client(session, config.contract)) if table else InMemoryStore()
    return Connected(client=client, binding=binding, dlq_url=dlq_url, store=store)
