"""Run a handler's side effect once per message, even when SQS delivers it again.

SQS delivers at least once: a message comes back after a visibility timeout,
after a task is SIGKILLed mid-handler, or after a DLQ redrive. The consumer
guards each handler call with a stable key (:func:`idempotency_key`) and a
store record:

1. ``claim`` -> ``ACQUIRED``: run the handler, ``renew`` the lease while it
   runs (heartbeat), then ``complete`` on success or ``release`` on failure.
   The runtime completes in batches (:meth:`IdempotencyStore.complete_many`),
   each written before the deletes of its messages are sent.
2. ``claim`` -> ``COMPLETED``: the work was done before; delete the message.
3. ``claim`` -> ``IN_PROGRESS``: a live holder has it; leave the message for a
   later retry.

Unlike AWS Powertools idempotency, an in-progress record is a *lease*: it
lapses when its holder stops renewing, so a crashed task blocks retries for
at most ``lease_seconds`` rather than for the whole record lifetime.

``owner`` must be unique per attempt (for instance ``f"{consumer_id}:{uuid4()}"``).
A claim that finds a live in-progress record of its own owner acquires it: that
is the same claim sent again (botocore retries a PutItem whose answer was lost,
after it was written), never another attempt's.

A completion is unconditional: once a handler has returned, "this key's work is
done" is true whoever holds the lease now, so it never waits on a condition and
batches (DynamoDB's ``BatchWriteItem`` takes no conditions). A holder that lost
its lease finds out when its heartbeat's ``renew`` returns False (the runtime
logs it, :func:`warn_lost_lease`); a later holder's ``release`` then leaves
the completed record alone.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from consumer.message import Message
from consumer.runtime.aws_errors import error_code

if TYPE_CHECKING:  # the stubs are a development dependency; the image never carries them
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, WriteRequestTypeDef

logger = logging.getLogger(__name__)

# An abandoned IN_PROGRESS record (holder crashed, nobody retried) is dead once
# its lease lapses; keep it one more day for forensics, then let TTL clean it.
IN_PROGRESS_GRACE_SECONDS = 24 * 60 * 60

IDEMPOTENCY_KEY_ATTRIBUTE = "idempotency-key"
#: Longer attribute values are hashed: DynamoDB partition keys stop at 2,048 bytes (with room for a prefix).
MAX_PLAIN_KEY_BYTES = 1024

#: BatchWriteItem's limit of put and delete requests per call.
BATCH_WRITE_MAX_ITEMS = 25
#: Tries of a batch's unprocessed items (the first and two more), backing off from BATCH_WRITE_BACKOFF_SECONDS.
BATCH_WRITE_TRIES = 3
BATCH_WRITE_BACKOFF_SECONDS = 0.05

_IN_PROGRESS = "IN_PROGRESS"
_COMPLETED = "COMPLETED"
_CONDITION_FAILED = "ConditionalCheckFailedException"


class Claim(enum.Enum):
    """What :meth:`IdempotencyStore.claim` found; tells the caller what to do with the message."""

    ACQUIRED = "acquired"  # caller holds the lease and must run the handler
    COMPLETED = "completed"  # already done before: caller must NOT run the handler (just delete the message)
    IN_PROGRESS = "in_progress"  # another live holder has it: caller must retry later


class IdempotencyStoreError(Exception):
    """The store could not be reached or refused a call for a reason other than a failed condition."""


class IdempotencyStore(Protocol):
    """Where claims live. Implementations are safe to call from several threads.

    Example::

        claim = store.claim(key, owner=owner, lease_seconds=60)
        if claim is Claim.ACQUIRED:
            try:
                handle(message)  # a heartbeat calls store.renew(key, owner=owner, lease_seconds=60)
            except Exception:
                store.release(key, owner=owner)
                raise
            store.complete(key, owner=owner, keep_seconds=7 * 24 * 3600)
    """

    def claim(self, key: str, *, owner: str, lease_seconds: int) -> Claim:
        """Take the lease on ``key`` unless it is completed or held by a live lease."""
        ...

    def renew(self, key: str, *, owner: str, lease_seconds: int) -> bool:
        """Push the lease to now + ``lease_seconds``; False if ``owner`` no longer holds it."""
        ...

    def complete(self, key: str, *, owner: str, keep_seconds: int) -> None:
        """Mark done; later claims see COMPLETED until now + ``keep_seconds`` (whoever holds the lease now)."""
        ...

    def complete_many(self, done: Sequence[tuple[str, str]], *, keep_seconds: int) -> None:
        """:meth:`complete` each ``(key, owner)`` of ``done``, in as few calls as the store allows."""
        ...

    def release(self, key: str, *, owner: str) -> None:
        """Give up the lease (the handler failed) so a retry can claim at once; no-op if not the holder."""
        ...

    def lease_left(self, key: str) -> float | None:
        """Seconds left of the holder's lease, as the last claim of ``key`` that found it IN_PROGRESS read it (its
        answer carries the record: no call); None when unknown. Read once: it is forgotten as it is read."""
        ...


def idempotency_key(message: Message) -> str:
    """The stable key for ``message``: the first rule that applies wins.

    1. The sender's message attribute ``idempotency-key`` (a String):
       ``"attr:" + value``, or ``"attr-sha256:" + hex SHA-256 of the value``
       when the value is longer than ``MAX_PLAIN_KEY_BYTES`` in UTF-8 (a
       DynamoDB partition key holds at most 2,048 bytes). Senders that may
       legitimately send the same body twice as two distinct jobs must set it.
       Of a message unwrapped from an SNS envelope, the published attribute.
    2. A message unwrapped from a declared topic's SNS envelope (``message.sns``):
       ``"sns:" + the SNS MessageId``, the same on each delivery of one publish, where
       the inner body's hash would make two publishes of the same body one piece of work.
    3. An EventBridge event (``message.event``): ``"event:" + its id``.
    4. The FIFO ``MessageDeduplicationId`` system attribute (explicit, or the
       body hash SQS computes for content-based deduplication):
       ``"dedup:" + value``.
    5. Otherwise ``"sha256:" + hex SHA-256 of the UTF-8 body``, so two messages
       with the same body are one piece of work.

    Never the ``MessageId``: SQS assigns a new one when a message is redriven
    from the DLQ, or when a producer retries a send, so it would let the same
    work run twice.

    Example::

        idempotency_key(Message(body="{}", message_id="m-1", receipt_handle="r"))
        # 'sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a'
    """
    attribute = message.message_attributes.get(IDEMPOTENCY_KEY_ATTRIBUTE)
    if isinstance(attribute, Mapping) and attribute.get("StringValue"):
        value = str(attribute["StringValue"])
        if len(value.encode("utf-8")) > MAX_PLAIN_KEY_BYTES:
            # A DynamoDB partition key stops at 2,048 bytes and an attribute can hold far more: past
            # the limit every claim would fail and the message would be retried into the DLQ untried.
            return "attr-sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()
        return "attr:" + value
    if message.sns is not None:
        return _bounded("sns", message.sns.message_id)  # a forged envelope's id may be of any length
    if message.event is not None:
        return _bounded("event", message.event.id)
    dedup_id = message.attributes.get("MessageDeduplicationId")
    if dedup_id:
        return "dedup:" + dedup_id
    return "sha256:" + hashlib.sha256(message.body.encode("utf-8")).hexdigest()


def _bounded(prefix: str, value: str) -> str:
    """``prefix:value``, or ``prefix-sha256:<hex>`` past ``MAX_PLAIN_KEY_BYTES`` (a DynamoDB key's room)."""
    encoded = value.encode("utf-8")
    if len(encoded) > MAX_PLAIN_KEY_BYTES:
        return f"{prefix}-sha256:{hashlib.sha256(encoded).hexdigest()}"
    return f"{prefix}:{value}"


def _check_arguments(key: str, owner: str, **seconds: int) -> None:
    # The same checks in both stores, so a bad call fails the same way locally and on AWS.
    if not key:
        raise ValueError(f'"key" must be a non-empty string: {key!r}')
    if not owner:
        raise ValueError(f'"owner" must be a non-empty string: {owner!r}')
    for name, value in seconds.items():
        if value <= 0:
            raise ValueError(f'"{name}" must be positive: {value!r}')


def _lease_times(now: float, lease_seconds: int) -> tuple[float, int]:
    """(lease_expires_at, expires_at) for an IN_PROGRESS record."""
    lease_expires_at = now + lease_seconds
    # TTL wants whole epoch seconds; round up so a record never goes earlier than promised.
    return lease_expires_at, math.ceil(lease_expires_at) + IN_PROGRESS_GRACE_SECONDS


@dataclass
class _Record:
    status: str
    owner: str
    lease_expires_at: float
    expires_at: int


class InMemoryStore:
    """A process-local store with the same semantics as :class:`DynamoDBStore`, for local runs and tests.

    Records past ``expires_at`` are treated as gone, as if DynamoDB's TTL had
    deleted them. Nothing is shared between processes.

    Example::

        store = InMemoryStore()
        store.claim("sha256:ab12", owner="w1:1", lease_seconds=30)  # Claim.ACQUIRED
        store.claim("sha256:ab12", owner="w2:1", lease_seconds=30)  # Claim.IN_PROGRESS
    """

    # Completed records would otherwise pile up in a long local run; sweep now and then.
    _SWEEP_EVERY = 1024

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._held: dict[str, float] = {}  # key -> the holder's lease left, as a claim found it (lease_left)
        self._claims_since_sweep = 0

    def _get(self, key: str, now: float) -> _Record | None:
        record = self._records.get(key)
        if record is not None and record.expires_at < now:
            del self._records[key]
            return None
        return record

    def _sweep(self, now: float) -> None:
        self._claims_since_sweep += 1
        if self._claims_since_sweep >= self._SWEEP_EVERY:
            self._claims_since_sweep = 0
            for key in [k for k, r in self._records.items() if r.expires_at < now]:
                del self._records[key]

    def claim(self, key: str, *, owner: str, lease_seconds: int) -> Claim:
        """See :meth:`IdempotencyStore.claim`."""
        _check_arguments(key, owner, lease_seconds=lease_seconds)
        with self._lock:
            now = self._clock()
            self._sweep(now)
            record = self._get(key, now)
            if record is not None:
                if record.status == _COMPLETED:
                    return Claim.COMPLETED
                if record.lease_expires_at >= now and record.owner != owner:  # its own: the same claim again
                    self._held[key] = record.lease_expires_at - now
                    return Claim.IN_PROGRESS
            # No record, or an IN_PROGRESS one whose holder stopped renewing: take it over.
            lease_expires_at, expires_at = _lease_times(now, lease_seconds)
            self._records[key] = _Record(_IN_PROGRESS, owner, lease_expires_at, expires_at)
            return Claim.ACQUIRED

    def lease_left(self, key: str) -> float | None:
        """See :meth:`IdempotencyStore.lease_left`."""
        return self._held.pop(key, None)

    def renew(self, key: str, *, owner: str, lease_seconds: int) -> bool:
        """See :meth:`IdempotencyStore.renew`."""
        _check_arguments(key, owner, lease_seconds=lease_seconds)
        with self._lock:
            now = self._clock()
            record = self._get(key, now)
            if record is None or record.owner != owner or record.status != _IN_PROGRESS:
                return False
            record.lease_expires_at, record.expires_at = _lease_times(now, lease_seconds)
            return True

    def complete(self, key: str, *, owner: str, keep_seconds: int) -> None:
        """See :meth:`IdempotencyStore.complete`."""
        self.complete_many([(key, owner)], keep_seconds=keep_seconds)

    def complete_many(self, done: Sequence[tuple[str, str]], *, keep_seconds: int) -> None:
        """See :meth:`IdempotencyStore.complete_many`."""
        for key, owner in done:
            _check_arguments(key, owner, keep_seconds=keep_seconds)
        with self._lock:
            now = self._clock()
            for key, owner in done:
                self._records[key] = _Record(_COMPLETED, owner, now, math.ceil(now + keep_seconds))

    def release(self, key: str, *, owner: str) -> None:
        """See :meth:`IdempotencyStore.release`."""
        _check_arguments(key, owner)
        with self._lock:
            record = self._get(key, self._clock())
            if record is not None and record.owner == owner and record.status == _IN_PROGRESS:
                del self._records[key]


def warn_lost_lease(key: str, owner: str) -> None:
    """Log that ``owner`` found its lease on ``key`` gone while its handler ran (a renewal refused)."""
    # The handler may still succeed and complete the key; but another owner may be running it too, which means
    # lease_seconds is too short for the handler or the heartbeat stalled.
    logger.warning(
        "idempotency: %s no longer held its lease on %s ; the work may run twice "
        "(lease_seconds too short, or the heartbeat stalled)",
        owner,
        key,
    )


def _number(value: float) -> AttributeValueTypeDef:
    return {"N": str(int(value)) if float(value).is_integer() else repr(float(value))}


class DynamoDBStore:
    """Claims in a DynamoDB table, shared by every task of the worker, with conditional writes.

    The table needs a string partition key ``pk`` and TTL on ``expires_at``.
    Items: ``pk``, ``status`` (``IN_PROGRESS`` | ``COMPLETED``), ``owner``,
    ``lease_expires_at`` and ``expires_at`` (epoch seconds). TTL deletes items
    up to days late, so every condition also treats ``expires_at < now`` as gone.

    Needs ``dynamodb:PutItem``, ``UpdateItem``, ``DeleteItem``, ``GetItem`` and ``BatchWriteItem`` on the table.

    Example::

        store = DynamoDBStore("orders-worker-idempotency")
        if store.claim(key, owner=owner, lease_seconds=60) is Claim.ACQUIRED:
            ...
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table_name = table_name
        # Created here, never at import: importing the consumer must not need credentials or a region.
        self._client = client if client is not None else boto3.client("dynamodb")
        self._clock = clock
        self._sleep = sleep  # the consumer's clock's (runtime/clock.py): the backoff before unprocessed items again
        self._held: dict[str, float] = {}  # key -> the holder's lease left, as a claim's answer showed it

    def claim(self, key: str, *, owner: str, lease_seconds: int) -> Claim:
        """See :meth:`IdempotencyStore.claim`."""
        _check_arguments(key, owner, lease_seconds=lease_seconds)
        now = self._clock()
        lease_expires_at, expires_at = _lease_times(now, lease_seconds)
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item={
                    "pk": {"S": key},
                    "status": {"S": _IN_PROGRESS},
                    "owner": {"S": owner},
                    "lease_expires_at": _number(lease_expires_at),
                    "expires_at": _number(expires_at),
                },
                ConditionExpression=(
                    "attribute_not_exists(pk) OR (#s = :in_progress AND lease_expires_at < :now) OR expires_at < :now"
                ),
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":in_progress": {"S": _IN_PROGRESS}, ":now": _number(now)},
                # The item that failed the check comes back with the error, read atomically with it.
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return Claim.ACQUIRED
        except ClientError as error:
            if error_code(error) != _CONDITION_FAILED:
                raise self._wrap("claim", error) from error
            # botocore-stubs' error response declares no "Item" (ReturnValuesOnConditionCheckFailure's old item).
            response: Mapping[str, Any] = error.response
            item: Mapping[str, Any] | None = response.get("Item")
        except BotoCoreError as error:
            raise self._wrap("claim", error) from error
        if item is None:
            # An endpoint that ignores ReturnValuesOnConditionCheckFailure: read it instead.
            item = self._get_item(key)
        if item is None:
            # Deleted (released) between the write and the read: the holder just gave it up,
            # so a retry will claim it; do not loop here.
            return Claim.IN_PROGRESS
        if item.get("status", {}).get("S") == _COMPLETED:
            return Claim.COMPLETED
        if item.get("owner", {}).get("S") == owner:
            # Our own record: this claim was written, its answer lost, and botocore sent it again. Deferring to it
            # would leave the message waiting out a lease nobody renews (and, on FIFO, spend its receives).
            return Claim.ACQUIRED
        lease = item.get("lease_expires_at", {}).get("N")
        if lease is not None:
            self._held[key] = float(lease) - now
        return Claim.IN_PROGRESS

    def lease_left(self, key: str) -> float | None:
        """See :meth:`IdempotencyStore.lease_left`."""
        return self._held.pop(key, None)

    def renew(self, key: str, *, owner: str, lease_seconds: int) -> bool:
        """See :meth:`IdempotencyStore.renew`."""
        _check_arguments(key, owner, lease_seconds=lease_seconds)
        lease_expires_at, expires_at = _lease_times(self._clock(), lease_seconds)
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"pk": {"S": key}},
                UpdateExpression="SET lease_expires_at = :lease, expires_at = :expires",
                ConditionExpression="#o = :owner AND #s = :in_progress",
                ExpressionAttributeNames={"#o": "owner", "#s": "status"},
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":in_progress": {"S": _IN_PROGRESS},
                    ":lease": _number(lease_expires_at),
                    ":expires": _number(expires_at),
                },
            )
            return True
        except ClientError as error:
            if error_code(error) == _CONDITION_FAILED:
                return False
            raise self._wrap("renew", error) from error
        except BotoCoreError as error:
            raise self._wrap("renew", error) from error

    def complete(self, key: str, *, owner: str, keep_seconds: int) -> None:
        """See :meth:`IdempotencyStore.complete`."""
        self.complete_many([(key, owner)], keep_seconds=keep_seconds)

    def complete_many(self, done: Sequence[tuple[str, str]], *, keep_seconds: int) -> None:
        """See :meth:`IdempotencyStore.complete_many`: ``BatchWriteItem``, 25 puts a call; what DynamoDB leaves
        unprocessed (throttling) is sent again, up to :data:`BATCH_WRITE_TRIES` tries in all, then raised."""
        for key, owner in done:
            _check_arguments(key, owner, keep_seconds=keep_seconds)
        expires = _number(math.ceil(self._clock() + keep_seconds))
        puts: list[WriteRequestTypeDef] = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": key},
                        "status": {"S": _COMPLETED},
                        "owner": {"S": owner},
                        "expires_at": expires,
                    }
                }
            }
            for key, owner in dict(done).items()  # one put per key: BatchWriteItem refuses a key twice in a call
        ]
        for start in range(0, len(puts), BATCH_WRITE_MAX_ITEMS):
            self._batch_write(puts[start : start + BATCH_WRITE_MAX_ITEMS])

    def _batch_write(self, puts: list[WriteRequestTypeDef]) -> None:
        for attempt in range(BATCH_WRITE_TRIES):
            try:
                response = self._client.batch_write_item(RequestItems={self.table_name: puts})
            except (ClientError, BotoCoreError) as error:
                raise self._wrap("complete", error) from error
            # The unprocessed requests, as DynamoDB returned them (the output shape of the same request).
            puts = list(response.get("UnprocessedItems", {}).get(self.table_name, []))  # type: ignore[arg-type]
            if not puts:
                return
            # Unprocessed items are DynamoDB's way to throttle a batch: back off before sending them again
            # (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html).
            self._sleep(BATCH_WRITE_BACKOFF_SECONDS * 2**attempt)
        raise IdempotencyStoreError(
            f"idempotency complete on DynamoDB table {self.table_name!r} failed: {len(puts)} items left unprocessed"
            f" after {BATCH_WRITE_TRIES} tries"
        )

    def release(self, key: str, *, owner: str) -> None:
        """See :meth:`IdempotencyStore.release`."""
        _check_arguments(key, owner)
        try:
            self._client.delete_item(
                TableName=self.table_name,
                Key={"pk": {"S": key}},
                ConditionExpression="#o = :owner AND #s = :in_progress",
                ExpressionAttributeNames={"#o": "owner", "#s": "status"},
                ExpressionAttributeValues={":owner": {"S": owner}, ":in_progress": {"S": _IN_PROGRESS}},
            )
        except ClientError as error:
            # A failed condition means someone else holds it, or it is done: nothing of ours to give up.
            if error_code(error) != _CONDITION_FAILED:
                raise self._wrap("release", error) from error
        except BotoCoreError as error:
            raise self._wrap("release", error) from error

    def _get_item(self, key: str) -> Mapping[str, Any] | None:
        try:
            response = self._client.get_item(TableName=self.table_name, Key={"pk": {"S": key}}, ConsistentRead=True)
        except (ClientError, BotoCoreError) as error:
            raise self._wrap("claim", error) from error
        return response.get("Item")

    def _wrap(self, operation: str, error: Exception) -> IdempotencyStoreError:
        detail = f"{error_code(error)}: {error}" if isinstance(error, ClientError) else str(error)
        hint = ""
        if isinstance(error, ClientError) and error_code(error) == "ResourceNotFoundException":
            hint = " (does the table exist in this account and region?)"
        return IdempotencyStoreError(
            f"idempotency {operation} on DynamoDB table {self.table_name!r} failed{hint}: {detail}"
        )
