"""Which queues a ``dlq`` command works on, the clients it talks to them with, and what the DLQ holds.

The clients come from a :class:`ClientFactory` the command layer chooses (:func:`make_client` unless a
caller passes another) and hands to every function here that calls AWS; nothing here reaches for a client
of its own. So does the clock, with it in :class:`Tools`. No typer, no rich: the commands render what these
functions return.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Protocol

from consumer.limits import SQS_MAX_BATCH
from consumer.ops.passes import (
    CONNECT_TIMEOUT_SECONDS,
    MAX_ATTEMPTS,
    READ_TIMEOUT_SECONDS,
    Lease,
    UsageError,
    aws,
)
from consumer.ops.records import message_record
from consumer.runtime.clock import SYSTEM, Clock
from consumer.stack_outputs import WORKER_NAMES_OUTPUT, output_prefix

_STACK_OUTPUT = {"queue": "QueueUrl", "dlq": "DeadLetterQueueUrl"}
_HOW_TO_NAME_QUEUES = (
    "pass --queue-url/--dlq-url, set QUEUE_URL/DLQ_URL, or pass --stack NAME [--worker NAME]"
    " (reads the stack's QueueUrl/DeadLetterQueueUrl outputs, or the worker's)"
)
DEPTH_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


# --- clients ------------------------------------------------------------------------


class ClientFactory(Protocol):
    """Makes the boto3 client for ``service``; ``queue_url`` names the queue it is for (its region may be the
    one to use)."""

    def __call__(self, service: str, queue_url: str | None = None) -> Any: ...


def make_client(service: str, queue_url: str | None = None) -> Any:
    """A boto3 client for ``service`` that fails fast; credentials and endpoint from the environment.

    The region is the one ``consumer run`` would use (:func:`consumer.runtime.config.resolve_region`):
    ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the config file, else the one ``queue_url`` names; none
    of them is a :class:`UsageError` naming the variable.
    """
    import boto3
    from botocore.config import Config

    from consumer.errors import ConfigurationError
    from consumer.runtime.config import resolve_region

    try:
        region, _ = resolve_region(os.environ, queue_url or "", configured=boto3.Session().region_name)
    except ConfigurationError as error:
        raise UsageError(str(error)) from None
    return boto3.client(
        service,
        region_name=region,
        config=Config(
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        ),
    )


class Tools(NamedTuple):
    """What a command works with: the factory of its clients and the clock it reads the time from and waits on
    (the runtime's :class:`~consumer.runtime.clock.Clock`). The defaults are the machine's; a caller may pass
    others as the typer context's ``obj`` (tests: hooked clients, a simulated clock)."""

    clients: ClientFactory = make_client
    clock: Clock = SYSTEM


# --- finding the queues ---------------------------------------------------------------


@dataclass(frozen=True)
class Queues:
    dlq_url: str | None
    queue_url: str | None

    @property
    def dlq(self) -> str:
        assert self.dlq_url is not None  # resolve_queues(need_dlq=True) raises otherwise
        return self.dlq_url

    @property
    def source(self) -> str:
        assert self.queue_url is not None  # resolve_queues(need_source=True) raises otherwise
        return self.queue_url


def resolve_queues(
    queue_url: str | None,
    dlq_url: str | None,
    stack: str | None,
    *,
    worker: str | None = None,
    clients: ClientFactory,
    need_source: bool,
    need_dlq: bool = True,
) -> Queues:
    """The queues from flags, then the environment (typer reads both), then the outputs of the stack's ``worker``
    (default its first); else :class:`UsageError` saying how to name them."""
    if worker is not None and not stack:
        raise UsageError(f'"--worker" must come with "--stack STACK" (it picks that stack\'s worker): {worker!r}')
    if stack and ((need_dlq and not dlq_url) or (need_source and not queue_url)):
        outputs = _stack_outputs(clients, stack)
        prefix = worker_output_prefix(outputs, stack, worker)
        dlq_url = dlq_url or outputs.get(prefix + _STACK_OUTPUT["dlq"])
        queue_url = queue_url or outputs.get(prefix + _STACK_OUTPUT["queue"])
    wanted = [("DLQ", dlq_url, need_dlq), ("source queue", queue_url, need_source)]
    missing = [name for name, url, needed in wanted if needed and not url]
    if missing:
        where = f" (stack {stack} has no such output)" if stack else ""
        raise UsageError(f"cannot tell which {' and '.join(missing)} to use{where}: {_HOW_TO_NAME_QUEUES}")
    return Queues(dlq_url=dlq_url, queue_url=queue_url)


def worker_output_prefix(outputs: Mapping[str, str], stack: str, worker: str | None) -> str:
    """The prefix of ``worker``'s (default: the first listed) outputs in ``stack``'s ``outputs``: its name in
    PascalCase, or none for the worker holding the stack's unprefixed resources (and on a stack from before workers);
    :class:`UsageError` naming the workers there are when ``worker`` is not one of them."""
    workers = [name for name in outputs.get(WORKER_NAMES_OUTPUT, "").split(",") if name]
    if worker is None:
        worker = workers[0] if workers else None
    elif worker not in workers:
        there = ", ".join(workers) if workers else f"none listed: no {WORKER_NAMES_OUTPUT} output, leave --worker out"
        raise UsageError(f'"--worker" must be one of the workers of {stack} ({there}): {worker!r}')
    prefix = output_prefix(worker)
    return prefix if prefix + _STACK_OUTPUT["queue"] in outputs else ""


def _stack_outputs(clients: ClientFactory, stack: str) -> dict[str, str]:
    response = aws(clients("cloudformation"), "DescribeStacks", f"stack {stack}", StackName=stack)
    return {
        output["OutputKey"]: output["OutputValue"]
        for found in response.get("Stacks", [])[:1]
        for output in found.get("Outputs", [])
    }


def is_fifo(url: str) -> bool:
    return url.endswith(".fifo")


def queue_attributes(client: Any, url: str, names: Iterable[str]) -> dict[str, str]:
    return aws(client, "GetQueueAttributes", url, QueueUrl=url, AttributeNames=list(names))["Attributes"]


def depth(attributes: Mapping[str, str]) -> tuple[int, int, int]:
    """(visible, in flight, delayed) from a GetQueueAttributes answer holding :data:`DEPTH_ATTRIBUTES`."""
    return (
        int(attributes.get("ApproximateNumberOfMessages", 0)),
        int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


def depth_of(sqs: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed) messages in ``url``, approximate as SQS counts them."""
    return depth(queue_attributes(sqs, url, DEPTH_ATTRIBUTES))


def purge(sqs: Any, url: str) -> None:
    """Delete every message in ``url`` (SQS finishes within 60 s); nothing can bring them back."""
    aws(sqs, "PurgeQueue", url, QueueUrl=url)


# --- what the DLQ holds -----------------------------------------------------------------


@dataclass(frozen=True)
class DlqStats:
    """The DLQ's depth and its oldest message's age and expiry, from up to 10 sampled messages (see ``stats``)."""

    dlq_url: str
    visible: int
    in_flight: int
    delayed: int
    retention_seconds: int
    oldest_age_seconds: int | None
    oldest_expires_in_seconds: int | None
    sampled_messages: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def dlq_stats(sqs: Any, dlq_url: str, clock: Clock = SYSTEM) -> DlqStats:
    """Depth from the queue's attributes; age from the SentTimestamp of up to 10 peeked (and released) messages,
    against ``clock``'s time."""
    attributes = queue_attributes(sqs, dlq_url, [*DEPTH_ATTRIBUTES, "MessageRetentionPeriod"])
    visible, in_flight, delayed = depth(attributes)
    retention = int(attributes.get("MessageRetentionPeriod", 0))
    sent: list[int] = []
    if visible:
        with Lease(sqs, dlq_url, visibility=30, clock=clock) as lease:
            sample = lease.receive(SQS_MAX_BATCH) or []
        sent = [int(m["Attributes"]["SentTimestamp"]) for m in sample if "SentTimestamp" in m.get("Attributes", {})]
    age = max(0, int(clock.time() - min(sent) / 1000)) if sent else None
    return DlqStats(
        dlq_url=dlq_url,
        visible=visible,
        in_flight=in_flight,
        delayed=delayed,
        retention_seconds=retention,
        oldest_age_seconds=age,
        oldest_expires_in_seconds=None if age is None else retention - age,
        sampled_messages=len(sent),
    )


def peek(sqs: Any, dlq_url: str, *, max_messages: int, visibility: int, clock: Clock = SYSTEM) -> list[dict[str, Any]]:
    """Up to ``max_messages`` DLQ messages as records (``records.message_record``), hidden while read and
    released right after: every message stays."""
    messages: list[dict[str, Any]] = []
    with Lease(sqs, dlq_url, visibility=visibility, clock=clock) as lease:
        while len(messages) < max_messages:
            batch = lease.receive(max_messages - len(messages))
            if batch is None:
                break
            messages.extend(batch)
    return [message_record(m) for m in messages]


_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b(?:0x[0-9a-f]+|(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,})\b", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
NO_REASON_KIND = "redrive"
NO_REASON_TEXT = "(no reason: moved by SQS after maxReceiveCount receives)"


def fingerprint(reason: Mapping[str, Any] | None) -> tuple[str, str]:
    """(kind, reason with uuids, hex ids and numbers replaced by placeholders): one row per failure cause."""
    if reason is None:
        return NO_REASON_KIND, NO_REASON_TEXT
    text = str(reason.get("reason", ""))
    text = _DIGITS.sub("<n>", _HEX.sub("<hex>", _UUID.sub("<uuid>", text)))
    return str(reason.get("kind", "unknown")), text


def by_fingerprint(records: Iterable[dict[str, Any]]) -> list[tuple[tuple[str, str], list[dict[str, Any]]]]:
    """``records`` grouped by their reason's :func:`fingerprint`, the largest group first."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(fingerprint(record["reason"]), []).append(record)
    return sorted(groups.items(), key=lambda item: -len(item[1]))
