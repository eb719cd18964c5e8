"""Send messages the consumer understands: batches of 10, each with its idempotency key, trace header and tenant.

The runtime reads three message attributes and one system field a producer sets; this module sets them the
way the runtime reads them, so a team's producer does not hand-build SendMessageBatch entries:

* ``idempotency-key`` (a String attribute): the key :func:`consumer.runtime.idempotency.idempotency_key` uses,
  so a retried send or a redriven copy is one piece of work. Default: a fresh UUID per message; give your
  own (an event id) when the same job may be sent twice.
* ``traceparent`` (a String attribute, W3C Trace Context): the trace the consumer puts in its log lines
  (:func:`consumer.runtime.observability.trace_context`).
* ``MessageGroupId``: the tenant. On a standard queue SQS fair queues serve quiet tenants first and the
  consumer logs it as ``message_group_id``. On a FIFO queue the group id is the order key, not a tenant:
  :func:`send` refuses a tenant there (pass ``group_id`` on the record to mean order, explicitly).
* ``DelaySeconds``: 0 to 900 per message (standard queues; a FIFO queue delays only per queue).

Failed entries of a batch are retried (``retries`` more times, with a short backoff); what still fails is
returned, each with its entry and SQS's error, never dropped: the caller decides. botocore's ``standard``
retry mode already retries the call itself (throttling, 5xx, connection errors).

Example::

    import boto3
    from botocore.config import Config
    from consumer.producer import Outgoing, send

    sqs = boto3.client("sqs", config=Config(retries={"mode": "standard"}))
    outgoing = [Outgoing(body=json.dumps(e), idempotency_key=e["event_id"], tenant=e["customer"]) for e in events]
    result = send(sqs, queue_url, outgoing)
    if result.failed:
        raise RuntimeError(result.failed)

The standard library, botocore's exceptions and the injected client only: it ships in the image beside the runtime.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.errors import ContractError
from consumer.limits import (
    SQS_MAX_BATCH,
    SQS_MAX_BATCH_BYTES,
    SQS_MAX_DELAY_SECONDS,
    SQS_MAX_MESSAGE_ATTRIBUTES,
    SQS_MAX_MESSAGE_BYTES,
)
from consumer.runtime.idempotency import IDEMPOTENCY_KEY_ATTRIBUTE

__all__ = ["Failure", "Outgoing", "SendResult", "TRACEPARENT_ATTRIBUTE", "entries", "send"]

#: The W3C trace header attribute the consumer reads into its log lines.
TRACEPARENT_ATTRIBUTE = "traceparent"
#: SQS's limit on a MessageGroupId: 1 to 128 characters of alphanumerics and punctuation.
MAX_GROUP_ID_CHARS = 128
#: Retries of a batch's failed entries beyond the first send.
DEFAULT_RETRIES = 3
#: Message attributes a message may carry: SQS's 10 less the one the consumer adds to a copy it hands back
#: (``x-prior-receives``, the receives it spent): with all 10 taken, its retry budget would restart on every hand-back.
MAX_ATTRIBUTES = SQS_MAX_MESSAGE_ATTRIBUTES - 1
#: What SQS allows in a MessageGroupId: alphanumerics and punctuation (ASCII 33-126).
_ASCII_PRINTABLE = frozenset(chr(c) for c in range(33, 127))


@dataclass(frozen=True, kw_only=True)
class Outgoing:
    """One message to send.

    ``body``: the message body. ``idempotency_key``: the ``idempotency-key`` attribute (default a fresh UUID:
    pass an event id when one job may be sent twice). ``tenant``: the MessageGroupId on a standard queue (SQS
    fair queues; the consumer logs it). ``group_id``: the MessageGroupId on a FIFO queue (the order key), with
    ``deduplication_id``. ``delay_seconds``: 0..900, standard queues only. ``traceparent``: a W3C trace header.
    ``attributes``: more String attributes.
    """

    body: str
    idempotency_key: str | None = None
    tenant: str | None = None
    delay_seconds: int = 0
    traceparent: str | None = None
    group_id: str | None = None
    deduplication_id: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    """An entry SQS did not take after every retry: the message, its batch entry and SQS's error."""

    message: Outgoing
    entry: Mapping[str, Any]
    code: str
    error: str
    sender_fault: bool
    #: The exception of a SendMessageBatch call that failed as a whole (after botocore's retries), if that was why.
    exception: BaseException | None = None


@dataclass(frozen=True)
class SendResult:
    """``sent``: (message, SQS MessageId) in order of acceptance; ``failed``: what SQS never took."""

    sent: list[tuple[Outgoing, str]]
    failed: list[Failure]


def _check_group_id(parameter: str, value: str) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_GROUP_ID_CHARS or not set(value) <= _ASCII_PRINTABLE:
        raise ContractError(
            parameter, f"must be 1 to {MAX_GROUP_ID_CHARS} printable ASCII characters (SQS's MessageGroupId)", value
        )


def entries(messages: Sequence[Outgoing], *, fifo: bool = False, first_id: int = 0) -> list[dict[str, Any]]:
    """SendMessageBatch entries for ``messages`` (ids ``first_id``, ``first_id + 1``, ...), every value checked.

    >>> entries([Outgoing(body="{}", idempotency_key="evt-1", tenant="acme")])[0]["MessageGroupId"]
    'acme'
    """
    built = []
    for n, message in enumerate(messages, start=first_id):
        where = f"messages[{n}]"
        if not isinstance(message.body, str) or not message.body:
            raise ContractError(f"{where}.body", "must be a non-empty string", message.body)
        if isinstance(message.delay_seconds, bool) or not isinstance(message.delay_seconds, int):
            raise ContractError(f"{where}.delay_seconds", "must be a whole number", message.delay_seconds)
        if not 0 <= message.delay_seconds <= SQS_MAX_DELAY_SECONDS:
            raise ContractError(
                f"{where}.delay_seconds", f"must be between 0 and {SQS_MAX_DELAY_SECONDS}", message.delay_seconds
            )
        entry: dict[str, Any] = {"Id": str(n), "MessageBody": message.body}
        key = message.idempotency_key if message.idempotency_key is not None else str(uuid.uuid4())
        if not isinstance(key, str) or not key:
            raise ContractError(f"{where}.idempotency_key", "must be a non-empty string or None", key)
        attributes = {IDEMPOTENCY_KEY_ATTRIBUTE: key, **dict(message.attributes)}
        if message.traceparent is not None:
            attributes[TRACEPARENT_ATTRIBUTE] = message.traceparent
        if len(attributes) > MAX_ATTRIBUTES:
            raise ContractError(
                f"{where}.attributes",
                f"must leave the message at most {MAX_ATTRIBUTES} attributes with the idempotency key and trace header"
                f" (SQS allows {SQS_MAX_MESSAGE_ATTRIBUTES}; the consumer needs one for the receives a handed-back copy"
                " carries)",
                sorted(attributes),
            )
        entry["MessageAttributes"] = {name: {"DataType": "String", "StringValue": v} for name, v in attributes.items()}
        if entry_bytes(entry) > SQS_MAX_MESSAGE_BYTES:
            raise ContractError(
                f"{where}.body",
                f"must be at most {SQS_MAX_MESSAGE_BYTES} bytes with its attributes (SQS's message size limit)",
                f"{entry_bytes(entry)} bytes",
            )
        if fifo:
            if message.tenant is not None:
                # On FIFO the group id orders messages: a tenant would serialise each tenant's work, which is not
                # what "tenant" means on a fair queue. Say group_id to mean order.
                raise ContractError(
                    f"{where}.tenant",
                    "is only for standard queues (fair queues); on a FIFO queue set group_id (the order key)",
                    message.tenant,
                )
            if message.delay_seconds:
                raise ContractError(
                    f"{where}.delay_seconds",
                    "must be 0 on a FIFO queue (SQS delays FIFO per queue)",
                    message.delay_seconds,
                )
            if message.group_id is None:
                raise ContractError(f"{where}.group_id", "must be set on a FIFO queue (its order key)", None)
            _check_group_id(f"{where}.group_id", message.group_id)
            entry["MessageGroupId"] = message.group_id
            if message.deduplication_id is not None:
                entry["MessageDeduplicationId"] = message.deduplication_id
        else:
            if message.group_id is not None or message.deduplication_id is not None:
                name = "group_id" if message.group_id is not None else "deduplication_id"
                raise ContractError(
                    f"{where}.{name}",
                    "is only for FIFO queues; on a standard queue a tenant is `tenant`",
                    getattr(message, name),
                )
            if message.tenant is not None:
                _check_group_id(f"{where}.tenant", message.tenant)
                entry["MessageGroupId"] = message.tenant
            if message.delay_seconds:
                entry["DelaySeconds"] = message.delay_seconds
        built.append(entry)
    return built


def entry_bytes(entry: Mapping[str, Any]) -> int:
    """What SQS counts of an entry toward its size limits: the body and each attribute's name, type and value."""
    attributes = entry.get("MessageAttributes", {})
    return len(entry["MessageBody"].encode()) + sum(
        len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
        for name, value in attributes.items()
    )


def batches(built: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """``built`` in order, in batches of at most 10 entries and :data:`SQS_MAX_BATCH_BYTES` together."""
    result: list[list[Mapping[str, Any]]] = []
    size = 0
    for entry in built:
        if not result or len(result[-1]) == SQS_MAX_BATCH or size + entry_bytes(entry) > SQS_MAX_BATCH_BYTES:
            result.append([])
            size = 0
        result[-1].append(entry)
        size += entry_bytes(entry)
    return result


def send(
    client: Any,
    queue_url: str,
    messages: Iterable[Outgoing],
    *,
    retries: int = DEFAULT_RETRIES,
    backoff_seconds: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> SendResult:
    """Send ``messages`` to ``queue_url`` in batches (10 entries, 1 MiB); retry the entries a batch failed; report
    the rest. A call that fails as a whole (after botocore's own retries) ends the send: that batch and the later
    ones are reported failed (the later ones as ``NotSent``), beside what was sent before it.

    Every message is checked before the first call (a bad one raises :class:`ContractError` naming it, and
    nothing is sent). A queue whose URL ends in ``.fifo`` is a FIFO queue (SQS's naming rule).
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ContractError("retries", "must be a whole number, 0 or more", retries)
    pending = list(messages)
    fifo = queue_url.endswith(".fifo")
    built = entries(pending, fifo=fifo)
    sent: list[tuple[Outgoing, str]] = []
    failed: list[Failure] = []
    groups = batches(built)
    for number, group in enumerate(groups):
        batch = {entry["Id"]: (pending[int(entry["Id"])], entry) for entry in group}
        for attempt in range(retries + 1):
            try:
                response = client.send_message_batch(QueueUrl=queue_url, Entries=[e for _, e in batch.values()])
            except (ClientError, BotoCoreError) as error:
                # The call failed as a whole (botocore already retried it): report this batch and every later one,
                # with what was sent before, so the caller knows exactly which messages to send again.
                code = error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""
                failed += [
                    Failure(message, entry, code or type(error).__name__, str(error), False, error)
                    for message, entry in batch.values()
                ]
                failed += [
                    Failure(
                        pending[int(entry["Id"])], entry, "NotSent", "an earlier SendMessageBatch call failed", False
                    )
                    for later in groups[number + 1 :]
                    for entry in later
                ]
                return SendResult(sent, failed)
            for ok in response.get("Successful", []):
                message, _ = batch.pop(ok["Id"])
                sent.append((message, ok["MessageId"]))
            errors = {e["Id"]: e for e in response.get("Failed", [])}
            # A sender fault (a bad entry) fails the same way every time: report it now, retry only the rest.
            for entry_id, refusal in list(errors.items()):
                if refusal.get("SenderFault") or attempt == retries:
                    message, entry = batch.pop(entry_id)
                    failed.append(
                        Failure(
                            message,
                            entry,
                            refusal.get("Code", ""),
                            refusal.get("Message", ""),
                            bool(refusal.get("SenderFault")),
                        )
                    )
            if not batch:
                break
            sleep(backoff_seconds * 2**attempt)
        for message, entry in batch.values():  # SQS answered for none of them: never silently dropped
            failed.append(
                Failure(message, entry, "NoAnswer", "SendMessageBatch returned no result for this entry", False)
            )
    return SendResult(sent, failed)
