"""The botocore configuration of every AWS client ``python -m consumer run`` builds, from one place.

The timeouts and attempts are :data:`consumer.limits.SQS_CLIENT` and :data:`consumer.limits.DYNAMODB_CLIENT`,
the numbers the liveness allowances are derived from (``poll_stall_seconds``, ``heartbeat_stall_seconds``):
a client left on botocore's defaults (60 s connect, 60 s read) could wait longer than its loop's allowance,
and one slow AWS answer, seen by every task at once, would have ECS replace them all together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.config import Config

from consumer.limits import DYNAMODB_CLIENT, SQS_CLIENT, ClientTimeouts

if TYPE_CHECKING:  # the stubs are a development dependency: the image does not carry them
    import boto3
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from consumer.contract import WorkerContract

__all__ = ["client_config", "dynamodb_client", "dynamodb_connections", "sqs_client", "sqs_connections"]

#: Threads beyond the workers and pollers that may call a client at once: the acknowledger's (deletes and visibility
#: changes after their flush interval; the completions batched with them) and the main thread's start-up calls.
OTHER_CALLING_THREADS = 2


def client_config(timeouts: ClientTimeouts, max_connections: int | None = None) -> Config:
    """botocore's ``Config`` for ``timeouts``: standard retry mode, bounded connect and read timeouts, and a
    connection pool of ``max_connections`` (botocore's default of 10 when None).

    ``total_max_attempts``, not ``max_attempts``: botocore reads the latter as retries after the first attempt
    (``max_attempts=3`` makes 4 attempts), which the worst case would then undercount.
    """
    config = Config(
        retries={"mode": "standard", "total_max_attempts": timeouts.max_attempts},
        connect_timeout=timeouts.connect_seconds,
        read_timeout=timeouts.read_seconds,
    )
    return config if max_connections is None else config.merge(Config(max_pool_connections=max_connections))


def sqs_connections(contract: WorkerContract) -> int:
    """The SQS client's pool: one connection per thread that may call it at once. Each poller long-polls on its
    own; each worker may send a batch of deletes (the one it filled), a hand-back or a DLQ move; and the others.

    A pool smaller than that makes urllib3 discard a connection each time one more thread finishes a call ("Connection
    pool is full, discarding connection") and open a new one (TCP and, on AWS, TLS) for the next."""
    return contract.concurrency + contract.pollers + OTHER_CALLING_THREADS


def dynamodb_connections(contract: WorkerContract) -> int:
    """The idempotency store's pool: a claim per worker, the completions of a batch of deletes on the thread sending
    it (a worker, or the acknowledger), and the heartbeat's renewals."""
    return contract.concurrency + OTHER_CALLING_THREADS


def sqs_client(session: boto3.Session, contract: WorkerContract) -> SQSClient:
    """The SQS client of a run: receives (long polls), deletes, visibility changes, DLQ moves."""
    return session.client("sqs", config=client_config(SQS_CLIENT, sqs_connections(contract)))


def dynamodb_client(session: boto3.Session, contract: WorkerContract) -> DynamoDBClient:
    """The idempotency store's client (claims, completions and the heartbeat's lease renewals)."""
    return session.client("dynamodb", config=client_config(DYNAMODB_CLIENT, dynamodb_connections(contract)))
