"""The botocore configuration of every AWS client ``python -m consumer run`` builds, from one place.

The timeouts and attempts are :data:`consumer.limits.SQS_CLIENT` and :data:`consumer.limits.DYNAMODB_CLIENT`,
the numbers the liveness allowances are derived from (``poll_stall_seconds``, ``heartbeat_stall_seconds``):
a client left on botocore's defaults (60 s connect, 60 s read) could wait longer than its loop's allowance,
and one slow AWS answer, seen by every task at once, would have ECS replace them all together.

Each client sends a User-Agent fixed when it is built (:func:`user_agent`), through botocore's ``user_agent``
setting: left to itself botocore composes the header twice for every request (before signing, and again "right
before the request is sent" to add the features the call used), among the costliest things a call does in Python
(docs/runtime.md, "The SDK's own cost per call").
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING

from botocore.config import Config

from consumer.limits import ASYNC_EXECUTOR_THREADS, DYNAMODB_CLIENT, RENEWAL_THREADS, SQS_CLIENT, ClientTimeouts

if TYPE_CHECKING:  # the stubs are a development dependency: the image does not carry them
    import boto3
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from consumer.contract import WorkerContract

__all__ = [
    "client_config",
    "dynamodb_client",
    "dynamodb_connections",
    "renewal_threads",
    "sqs_client",
    "sqs_connections",
]

#: Threads beyond the handler threads and pollers that may call a client at once: the acknowledger's two (its loop's
#: visibility changes and flushes; its background thread's due deletes and the completions batched with them) and the
#: main thread's start-up calls.
OTHER_CALLING_THREADS = 3


#: The SDKs' variable for an application id, which botocore's User-Agent carries as ``app/<id>`` (the chaos suite
#: labels its consumers with it): https://docs.aws.amazon.com/sdkref/latest/guide/feature-appid.html
APP_ID_ENV = "AWS_SDK_UA_APP_ID"


def user_agent(environ: Mapping[str, str] = os.environ) -> str:
    """The User-Agent every client of a run sends, in the SDKs' format (https://docs.aws.amazon.com/sdkref/latest/guide/feature-user-agent.html):
    this consumer, the language and the retry mode, then ``app/<id>`` when ``AWS_SDK_UA_APP_ID`` names one (boto3
    appends ``Botocore/<version>`` to it).

    >>> user_agent({"AWS_SDK_UA_APP_ID": "c1"}).split()[-1]
    'app/c1'
    """
    parts = [
        "sqs-worker-consumer",
        "ua/2.1",
        f"os/{platform.system().lower()}",
        f"lang/python#{platform.python_version()}",
        "cfg/retry-mode#standard",
    ]
    app_id = environ.get(APP_ID_ENV, "").strip()
    if app_id:
        parts.append(f"app/{app_id}")
    return " ".join(parts)


def client_config(timeouts: ClientTimeouts, max_connections: int | None = None) -> Config:
    """botocore's ``Config`` for ``timeouts``: standard retry mode, bounded connect and read timeouts, a User-Agent
    fixed once (:func:`user_agent`) and a connection pool of ``max_connections`` (botocore's default of 10 when
    None).

    ``total_max_attempts``, not ``max_attempts``: botocore reads the latter as retries after the first attempt
    (``max_attempts=3`` makes 4 attempts), which the worst case would then undercount.
    """
    config = Config(
        retries={"mode": "standard", "total_max_attempts": timeouts.max_attempts},
        connect_timeout=timeouts.connect_seconds,
        read_timeout=timeouts.read_seconds,
        user_agent=user_agent(),
    )
    return config if max_connections is None else config.merge(Config(max_pool_connections=max_connections))


def sqs_connections(contract: WorkerContract) -> int:
    """The SQS client's pool: one connection per thread that may call it at once. Each poller long-polls on its
    own; each handler thread may send a batch of deletes (the one it filled), a hand-back or a DLQ move; and the
    others.

    A pool smaller than that makes urllib3 discard a connection each time one more thread finishes a call ("Connection
    pool is full, discarding connection") and open a new one (TCP and, on AWS, TLS) for the next."""
    return calling_threads(contract) + contract.pollers + OTHER_CALLING_THREADS


def dynamodb_connections(contract: WorkerContract) -> int:
    """The idempotency store's pool: a claim per handler thread, the completions of a batch of deletes on the thread
    sending it (a handler thread, or the acknowledger), the lease renewals' threads and the others."""
    return calling_threads(contract) + renewal_threads(contract) + OTHER_CALLING_THREADS


def renewal_threads(contract: WorkerContract) -> int:
    """The threads renewing idempotency leases (consumer/runtime/heartbeat.py, ``Renewals``): no more than the
    messages that may be held."""
    return min(RENEWAL_THREADS, contract.messages_in_flight)


def calling_threads(contract: WorkerContract) -> int:
    """The threads that run handlers' AWS calls: one per handler thread; an async handler's coroutines hand theirs
    to the event loop's executor (consumer/runtime/coroutines.py)."""
    return min(contract.concurrency, ASYNC_EXECUTOR_THREADS) if contract.asynchronous else contract.concurrency


def sqs_client(session: boto3.Session, contract: WorkerContract) -> SQSClient:
    """The SQS client of a run: receives (long polls), deletes, visibility changes, DLQ moves."""
    return session.client("sqs", config=client_config(SQS_CLIENT, sqs_connections(contract)))


def dynamodb_client(session: boto3.Session, contract: WorkerContract) -> DynamoDBClient:
    """The idempotency store's client (claims, completions and the heartbeat's lease renewals)."""
    return session.client("dynamodb", config=client_config(DYNAMODB_CLIENT, dynamodb_connections(contract)))
