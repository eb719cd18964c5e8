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

__all__ = ["client_config", "dynamodb_client", "sqs_client"]


def client_config(timeouts: ClientTimeouts) -> Config:
    """botocore's ``Config`` for ``timeouts``: standard retry mode, bounded connect and read timeouts.

    ``total_max_attempts``, not ``max_attempts``: botocore reads the latter as retries after the first attempt
    (``max_attempts=3`` makes 4 attempts), which the worst case would then undercount.
    """
    return Config(
        retries={"mode": "standard", "total_max_attempts": timeouts.max_attempts},
        connect_timeout=timeouts.connect_seconds,
        read_timeout=timeouts.read_seconds,
    )


def sqs_client(session: boto3.Session) -> SQSClient:
    """The SQS client of a run: receives (long polls), deletes, visibility changes, DLQ moves."""
    return session.client("sqs", config=client_config(SQS_CLIENT))


def dynamodb_client(session: boto3.Session) -> DynamoDBClient:
    """The idempotency store's client (claims, completions and the heartbeat's lease renewals)."""
    return session.client("dynamodb", config=client_config(DYNAMODB_CLIENT))
