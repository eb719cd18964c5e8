"""Idempotency stores: the same behaviour tests against InMemoryStore and DynamoDBStore on moto in-process;
and the runtime with a store (the heartbeat renewing a running handler's lease in DynamoDB, completions written
before their deletes) on the simulated clock (tests/integration/virtual.py)."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from moto import mock_aws

from consumer.message import Message
from consumer.runtime import acknowledger
from consumer.runtime.idempotency import (
    MAX_PLAIN_KEY_BYTES,
    Claim,
    DynamoDBStore,
    IdempotencyStore,
    IdempotencyStoreError,
    InMemoryStore,
    idempotency_key,
)
from consumer.testing import depth
from tests.integration.conftest import REGION, create_pair
from tests.integration.support import consumer_of, create_table, fast_contract, holds_nothing
from tests.integration.virtual import Virtual

LEASE = 30
KEEP = 3600
KEY = "sha256:" + "ab" * 32


class FakeClock:
    """A clock the test moves by hand; starts in the future so moto never sees a stale TTL."""

    def __init__(self, now: float = 2_000_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def dynamodb(aws_credentials: None) -> Iterator[Any]:
    """A boto3 DynamoDB client against moto in-process."""
    with mock_aws():
        yield boto3.client("dynamodb", region_name=REGION)


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest, clock: FakeClock) -> IdempotencyStore:
    """Each store under test, on the shared fake clock."""
    if request.param == "memory":
        return InMemoryStore(clock=clock)
    client = request.getfixturevalue("dynamodb")
    return DynamoDBStore(create_table(client), client=client, clock=clock)


def message(body: str = '{"order": 1}', **fields: Any) -> Message:
    return Message(body=body, message_id=str(uuid.uuid4()), receipt_handle="rh", **fields)


# --- store behaviour (both stores) ---


def test_claim_first_is_acquired(store: IdempotencyStore) -> None:
    """The first claim on a key acquires the lease."""
    assert store.claim(KEY, owner="a", lease_seconds=LEASE) is Claim.ACQUIRED


def test_claim_while_lease_live_is_in_progress(store: IdempotencyStore, clock: FakeClock) -> None:
    """Another owner sees IN_PROGRESS while the holder's lease is live, up to its last second."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    clock.advance(LEASE)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.IN_PROGRESS


def test_claim_same_owner_while_lease_live_is_acquired(store: IdempotencyStore) -> None:
    """A claim sent again by its own owner acquires: owners are unique per attempt, so a live record of one's own is
    this claim's (written, its answer lost, sent again by botocore); another owner still sees IN_PROGRESS."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    assert store.claim(KEY, owner="a", lease_seconds=LEASE) is Claim.ACQUIRED
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.IN_PROGRESS


def test_claim_after_lease_expiry_is_acquired(store: IdempotencyStore, clock: FakeClock) -> None:
    """A crashed holder (no renewals) blocks others only until its lease lapses."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.ACQUIRED


def test_claim_other_keys_are_independent(store: IdempotencyStore) -> None:
    """A held key does not block a different key."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    assert store.claim("attr:other", owner="b", lease_seconds=LEASE) is Claim.ACQUIRED


def test_renew_extends_lease(store: IdempotencyStore, clock: FakeClock) -> None:
    """After a renewal, another owner is still IN_PROGRESS past the original expiry."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    clock.advance(LEASE - 5)
    assert store.renew(KEY, owner="a", lease_seconds=LEASE) is True
    clock.advance(10)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.IN_PROGRESS


def test_renew_by_non_holder_is_false(store: IdempotencyStore) -> None:
    """Only the holder can renew; the holder's lease is untouched."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    assert store.renew(KEY, owner="b", lease_seconds=LEASE) is False
    assert store.renew(KEY, owner="a", lease_seconds=LEASE) is True


def test_renew_after_takeover_is_false(store: IdempotencyStore, clock: FakeClock) -> None:
    """A holder whose lease lapsed and was taken over learns it from renew."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    store.claim(KEY, owner="b", lease_seconds=LEASE)
    assert store.renew(KEY, owner="a", lease_seconds=LEASE) is False


def test_renew_missing_key_is_false(store: IdempotencyStore) -> None:
    """Renewing a key nobody claimed returns False."""
    assert store.renew(KEY, owner="a", lease_seconds=LEASE) is False


def test_renew_after_complete_is_false(store: IdempotencyStore) -> None:
    """A completed record is no longer a lease to renew."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    store.complete(KEY, owner="a", keep_seconds=KEEP)
    assert store.renew(KEY, owner="a", lease_seconds=LEASE) is False


def test_complete_then_claim_is_completed(store: IdempotencyStore, clock: FakeClock) -> None:
    """After completion every later claim is COMPLETED, long after the lease would have lapsed."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    store.complete(KEY, owner="a", keep_seconds=KEEP)
    clock.advance(KEEP - 1)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.COMPLETED


def test_complete_record_expires_after_keep_seconds(store: IdempotencyStore, clock: FakeClock) -> None:
    """Once keep_seconds have passed the key can be claimed again."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    store.complete(KEY, owner="a", keep_seconds=KEEP)
    clock.advance(KEEP + 1)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.ACQUIRED


def test_complete_by_a_lapsed_holder_marks_the_work_done(store: IdempotencyStore, clock: FakeClock) -> None:
    """A holder whose lease lapsed and whose handler then returned completes the key anyway (the work is done,
    whoever holds the lease now): a later claim is COMPLETED, and the new holder's release leaves it so."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.ACQUIRED
    store.complete(KEY, owner="a", keep_seconds=KEEP)
    store.release(KEY, owner="b")
    assert store.claim(KEY, owner="c", lease_seconds=LEASE) is Claim.COMPLETED
    assert store.renew(KEY, owner="b", lease_seconds=LEASE) is False


def test_complete_many_completes_each_key_once_in_batches(store: IdempotencyStore) -> None:
    """60 completions (more than one BatchWriteItem's 25), one key twice: each key is COMPLETED afterwards."""
    keys = [f"sha256:{n:04d}" for n in range(60)]
    for key in keys:
        store.claim(key, owner="a", lease_seconds=LEASE)
    store.complete_many([(key, "a") for key in keys] + [(keys[0], "a")], keep_seconds=KEEP)
    assert {store.claim(key, owner="b", lease_seconds=LEASE) for key in keys} == {Claim.COMPLETED}


def test_release_lets_another_owner_claim_at_once(store: IdempotencyStore) -> None:
    """After a failed handler releases, a retry claims without waiting for the lease."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    store.release(KEY, owner="a")
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.ACQUIRED


def test_release_by_non_holder_is_noop(store: IdempotencyStore) -> None:
    """A release by someone else neither raises nor frees the holder's lease."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    store.release(KEY, owner="b")
    assert store.claim(KEY, owner="c", lease_seconds=LEASE) is Claim.IN_PROGRESS


def test_release_after_complete_is_noop(store: IdempotencyStore) -> None:
    """Releasing a completed key does not undo the completion."""
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    store.complete(KEY, owner="a", keep_seconds=KEEP)
    store.release(KEY, owner="a")
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.COMPLETED


def test_release_missing_key_is_noop(store: IdempotencyStore) -> None:
    """Releasing a key nobody claimed does nothing."""
    store.release(KEY, owner="a")
    assert store.claim(KEY, owner="a", lease_seconds=LEASE) is Claim.ACQUIRED


@pytest.mark.parametrize(
    ("key", "owner", "seconds"),
    [("", "a", LEASE), (KEY, "", LEASE), (KEY, "a", 0)],
    ids=["empty-key", "empty-owner", "zero-lease"],
)
def test_claim_bad_arguments_raise_value_error(store: IdempotencyStore, key: str, owner: str, seconds: int) -> None:
    """Empty keys or owners and non-positive leases are rejected before reaching the store."""
    with pytest.raises(ValueError):
        store.claim(key, owner=owner, lease_seconds=seconds)


# --- DynamoDBStore specifics ---


def test_dynamodb_store_items_match_schema(dynamodb: Any, clock: FakeClock) -> None:
    """Items carry pk, status, owner, lease_expires_at and a whole-second TTL expires_at."""
    table = create_table(dynamodb)
    store = DynamoDBStore(table, client=dynamodb, clock=clock)
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": KEY}}, ConsistentRead=True)["Item"]
    assert item == {
        "pk": {"S": KEY},
        "status": {"S": "IN_PROGRESS"},
        "owner": {"S": "a"},
        "lease_expires_at": {"N": str(int(clock.now) + LEASE)},
        "expires_at": {"N": str(int(clock.now) + LEASE + 86400)},
    }


def test_dynamodb_store_claim_without_returned_item_reads_it(dynamodb: Any) -> None:
    """If the endpoint omits the failed item, claim falls back to a consistent read."""
    store = DynamoDBStore(create_table(dynamodb), client=dynamodb)

    def drop_item(http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
        parsed.pop("Item", None)

    dynamodb.meta.events.register("after-call.dynamodb.PutItem", drop_item)
    store.claim(KEY, owner="a", lease_seconds=LEASE)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.IN_PROGRESS
    store.complete(KEY, owner="a", keep_seconds=KEEP)
    assert store.claim(KEY, owner="b", lease_seconds=LEASE) is Claim.COMPLETED


def test_dynamodb_store_missing_table_raises_store_error(dynamodb: Any) -> None:
    """An AWS error other than a failed condition is wrapped, naming the operation and the table."""
    store = DynamoDBStore("no-such-table", client=dynamodb)
    with pytest.raises(IdempotencyStoreError, match=r"claim on DynamoDB table 'no-such-table'.*ResourceNotFound"):
        store.claim(KEY, owner="a", lease_seconds=LEASE)


def test_dynamodb_store_default_client_created_in_init(aws_credentials: None) -> None:
    """Without a client the store builds a boto3 DynamoDB client in the default region."""
    store = DynamoDBStore("t")
    assert store._client.meta.region_name == REGION


# --- idempotency_key ---


def test_idempotency_key_prefers_message_attribute() -> None:
    """The sender's idempotency-key attribute wins over the dedup id and the body."""
    msg = message(
        attributes={"MessageDeduplicationId": "d-1"},
        message_attributes={"idempotency-key": {"DataType": "String", "StringValue": "abc"}},
    )
    assert idempotency_key(msg) == "attr:abc"


def test_idempotency_key_uses_fifo_dedup_id() -> None:
    """Without the attribute, a FIFO MessageDeduplicationId is the key."""
    msg = message(attributes={"MessageDeduplicationId": "d-1", "ApproximateReceiveCount": "2"})
    assert idempotency_key(msg) == "dedup:d-1"


def test_idempotency_key_falls_back_to_body_hash() -> None:
    """Without attribute or dedup id, the key is the SHA-256 of the UTF-8 body."""
    body = '{"order": "ünïcode"}'
    assert idempotency_key(message(body)) == "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def test_idempotency_key_ignores_message_id() -> None:
    """Two deliveries with different MessageIds (e.g. a DLQ redrive) and the same body share a key."""
    first, second = message("same"), message("same")
    assert first.message_id != second.message_id
    assert idempotency_key(first) == idempotency_key(second)


def test_idempotency_key_ignores_other_message_attributes() -> None:
    """Unrelated sender attributes do not change the key."""
    msg = message("same", message_attributes={"trace": {"DataType": "String", "StringValue": "t-1"}})
    assert idempotency_key(msg) == idempotency_key(message("same"))


def test_idempotency_key_from_sqs_message_via_moto(sqs: Any) -> None:
    """A real FIFO receive through boto3 exposes the dedup id the key uses."""
    url = sqs.create_queue(QueueName=f"k-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d-42")
    raw = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])
    assert idempotency_key(Message.from_sqs(raw["Messages"][0])) == "dedup:d-42"


def test_in_memory_store_concurrent_claims_acquire_once(clock: FakeClock) -> None:
    """Many threads racing on one key: exactly one ACQUIRED (the runtime calls the store from several threads)."""
    store = InMemoryStore(clock=clock)
    barrier = threading.Barrier(16)

    def race(owner: int) -> Claim:
        barrier.wait()
        return store.claim(KEY, owner=f"w{owner}", lease_seconds=LEASE)

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(race, range(16)))
    assert results.count(Claim.ACQUIRED) == 1
    assert results.count(Claim.IN_PROGRESS) == 15


def test_idempotency_key_hashes_an_attribute_longer_than_the_plain_limit() -> None:
    """A 4 KiB idempotency-key attribute becomes "attr-sha256:" + its hash, not a key DynamoDB refuses."""
    value = "k" * 4096
    msg = message(message_attributes={"idempotency-key": {"DataType": "String", "StringValue": value}})
    assert idempotency_key(msg) == "attr-sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()


def test_idempotency_key_keeps_an_attribute_at_the_plain_limit() -> None:
    """An attribute of exactly MAX_PLAIN_KEY_BYTES UTF-8 bytes is used as it is."""
    value = "k" * MAX_PLAIN_KEY_BYTES
    msg = message(message_attributes={"idempotency-key": {"DataType": "String", "StringValue": value}})
    assert idempotency_key(msg) == "attr:" + value


def test_dynamodb_store_claims_the_key_of_a_huge_attribute(dynamodb: Any) -> None:
    """The key of a 4 KiB attribute is claimable in DynamoDB (the raw value exceeds its 2,048-byte key limit)."""
    store = DynamoDBStore(create_table(dynamodb), client=dynamodb)
    msg = message(message_attributes={"idempotency-key": {"DataType": "String", "StringValue": "k" * 4096}})
    assert store.claim(idempotency_key(msg), owner="a", lease_seconds=LEASE) is Claim.ACQUIRED


def test_heartbeat_renews_the_idempotency_lease_of_a_long_handler(virtual: Virtual) -> None:
    """A handler running past its 4 s lease: the heartbeat pushes the DynamoDB record's lease forward with the
    message's visibility, so nobody can claim the work while it still runs. On the virtual clock."""
    contract = fast_contract(max_duration_seconds=8, concurrency=1, max_lease_seconds=4)
    assert contract.visibility_timeout_seconds == 4 and contract.uses_heartbeat_lease
    key = idempotency_key(message("slow"))
    leases: list[float] = []

    def body() -> None:
        sqs, dynamodb = virtual.sqs, virtual.dynamodb
        table = create_table(dynamodb)
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="slow")

        def lease_expires_at() -> float:
            item = dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)["Item"]
            return float(item["lease_expires_at"]["N"])

        def slow(_: Message) -> None:
            claimed = lease_expires_at()
            pushed = claimed
            for _ in range(30):  # up to 6 s, within max_duration: the first extension comes about 2 s in
                if pushed >= claimed + 1:
                    break
                virtual.sim.sleep(0.2)
                pushed = lease_expires_at()
            leases.extend((claimed, pushed))

        worker = virtual.consumer_of(pair, contract, slow, idempotency=virtual.dynamodb_store(table))
        with virtual.running(worker):
            virtual.wait_until(lambda: len(leases) == 2 and holds_nothing(sqs, pair.queue_url), timeout=20)
        claimed, pushed = leases
        assert pushed >= claimed + 1, leases

    virtual.run(body)


def test_heartbeat_logs_a_renewal_the_store_refuses_as_a_lost_lease(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """While the handler runs past its 4 s lease, another attempt completes the key: the heartbeat's next renewal
    is refused, and the consumer says the work may run twice, naming the key (the chaos suite reads that line).
    On the virtual clock."""
    contract = fast_contract(max_duration_seconds=8, concurrency=1, max_lease_seconds=4)
    store = InMemoryStore(clock=virtual.sim.time)
    key = idempotency_key(message("slow"))

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="slow")
        done = virtual.sim.event()

        def slow(_: Message) -> None:
            store.complete(key, owner="another-attempt", keep_seconds=KEEP)
            done.wait(6)  # past the first extension, about 2 s in

        worker = virtual.consumer_of(pair, contract, slow, idempotency=store)
        with caplog.at_level("WARNING", logger="consumer.runtime.idempotency"), virtual.running(worker):
            virtual.wait_until(lambda: "no longer held its lease" in caplog.text, timeout=10)
            done.set()
        assert f"no longer held its lease on {key} ;" in caplog.text

    virtual.run(body)


def test_completions_are_batched_and_each_lands_before_its_delete(virtual: Virtual) -> None:
    """30 messages through the runtime on DynamoDB: a claim (PutItem) each and the completions in BatchWriteItems,
    no UpdateItem, fewer than 2 DynamoDB requests a message; and every message's completion is written before the
    DeleteMessageBatch holding it is sent (a task killed in between finds the work done on the redelivery). On the
    virtual clock."""
    contract = fast_contract(concurrency=10)
    bodies = [f"order-{n}" for n in range(30)]
    operations: Counter[str] = Counter()
    completed: set[str] = set()
    key_of: dict[str, str] = {}  # receipt handle -> idempotency key
    deleted_before_completed: list[str] = []
    lock = threading.Lock()

    def body() -> None:
        sqs, dynamodb = virtual.sqs, virtual.dynamodb
        table = create_table(dynamodb)
        pair = create_pair(sqs, contract)
        for start in range(0, 30, 10):
            entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
            sqs.send_message_batch(QueueUrl=pair.queue_url, Entries=entries)

        def on_call(operation: str) -> Callable[..., None]:
            def record(params: dict[str, Any], **_: Any) -> None:
                with lock:
                    operations[operation] += 1
                    if operation == "BatchWriteItem":
                        completed.update(r["PutRequest"]["Item"]["pk"]["S"] for r in params["RequestItems"][table])
                    elif operation == "DeleteMessageBatch":
                        keys = [key_of[e["ReceiptHandle"]] for e in params["Entries"]]
                        deleted_before_completed.extend(k for k in keys if k not in completed)

            return record

        def on_receive(parsed: dict[str, Any], **_: Any) -> None:
            with lock:
                for raw in parsed.get("Messages", []):
                    key_of[raw["ReceiptHandle"]] = idempotency_key(Message.from_sqs(raw))

        # The consumer's own clients, watched: its DynamoDB requests and its receives and deletes.
        consumer_ddb = virtual.aws.client("dynamodb", caller="consumer", faults=False)
        consumer_sqs = virtual.aws.client("sqs", caller="consumer", faults=False)
        for operation in ("PutItem", "UpdateItem", "BatchWriteItem"):
            consumer_ddb.meta.events.register(f"before-parameter-build.dynamodb.{operation}", on_call(operation))
        consumer_sqs.meta.events.register(
            "before-parameter-build.sqs.DeleteMessageBatch", on_call("DeleteMessageBatch")
        )
        consumer_sqs.meta.events.register("after-call.sqs.ReceiveMessage", on_receive)
        store = virtual.dynamodb_store(table, client=consumer_ddb)
        worker = consumer_of(consumer_sqs, pair, contract, lambda _: None, clock=virtual.sim, idempotency=store)
        with virtual.running(worker):
            virtual.wait_until(lambda: holds_nothing(sqs, pair.queue_url), timeout=20)
        assert (operations["PutItem"], operations["UpdateItem"], deleted_before_completed) == (30, 0, [])
        assert 1 <= operations["BatchWriteItem"] <= 10
        assert (30 + operations["BatchWriteItem"]) / 30 < 2
        statuses = [item["status"]["S"] for item in dynamodb.scan(TableName=table)["Items"]]
        assert statuses == ["COMPLETED"] * 30

    virtual.run(body)


def test_a_completion_does_not_wait_for_its_delete(virtual: Virtual, monkeypatch: pytest.MonkeyPatch) -> None:
    """One message, its delete held back (a batch of one waits for nine more, here for 60 s): its completion is
    written anyway, within the completion batch's short wait, so a task killed while the delete waits finds the work
    done when the message comes back. On the virtual clock."""
    monkeypatch.setattr(acknowledger, "DELETE_FLUSH_SECONDS", 60.0)
    contract = fast_contract(concurrency=1)
    store = InMemoryStore(clock=virtual.sim.time)
    key = idempotency_key(message("alone"))

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        sqs.send_message(QueueUrl=pair.queue_url, MessageBody="alone")
        ran = virtual.sim.event()
        worker = virtual.consumer_of(pair, contract, lambda _: ran.set(), idempotency=store)
        with virtual.running(worker):
            virtual.wait_until(ran.is_set, timeout=10)  # claimed and run: a probe's claim can no longer take the key
            virtual.wait_until(
                lambda: store.claim(key, owner="probe", lease_seconds=LEASE) is Claim.COMPLETED, timeout=10
            )
            assert depth(sqs, pair.queue_url).in_flight == 1  # its delete still waits

    virtual.run(body)
