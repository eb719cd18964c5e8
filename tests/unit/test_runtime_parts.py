"""Unit tests for the runtime's parts: slots, the in-flight table, the timing knobs, DLQ send parameters, configuration (no network)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import threading
from typing import Any

import pytest

from consumer.contract import WorkerContract
from consumer.errors import ContractDriftError, ContractError
from consumer.exit_codes import ExitCode
from consumer.limits import DLQ_REASON_HEADROOM_BYTES, SOURCE_MAX_MESSAGE_BYTES, SQS_MAX_MESSAGE_BYTES
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE, Attempt, Message
from consumer.runtime import consumer as runtime
from consumer.runtime.config import check_declaration, load_config
from consumer.runtime.consumer import Collaborators, Consumer, task_role_id_from_env
from consumer.runtime.dead_letter import (
    MAX_REASON_RECORD_BYTES,
    ORIGINAL_ATTRIBUTES,
    REASON_ATTRIBUTE,
    can_carry_receives,
    read_reason,
    requeue_parameters,
    send_parameters,
)
from consumer.runtime.heartbeat import lease_extension
from consumer.runtime.inflight import Admission, InFlight, InFlightTable, LogContext, State
from consumer.runtime.observability import Metrics
from consumer.runtime.polling import Slots
from consumer.sources import Sources
from consumer.testing import sns_envelope

HANDLER = "tests.integration.handlers:slow"


def test_slots_reserve_only_what_is_free() -> None:
    """A poller asking for 10 with 3 free gets 3; then nothing until a slot is released."""
    slots, stop = Slots(3), threading.Event()
    assert slots.reserve_up_to(10, stop) == 3
    slots.release(1)
    assert slots.reserve_up_to(10, stop) == 1


def test_slots_reserve_waits_to_fill_a_batch_when_busy() -> None:
    """With 1 of 10 free, a poller allowed to wait gets the 9 released meanwhile: one receive for 10."""
    slots, stop = Slots(10), threading.Event()
    assert slots.reserve_up_to(10, stop) == 10
    slots.release(1)
    threading.Timer(0.1, slots.release, args=(9,)).start()
    assert slots.reserve_up_to(10, stop, fill_seconds=5) == 10


def test_slots_reserve_takes_what_is_free_when_the_fill_wait_ends() -> None:
    """Nothing else frees up within the fill wait: the poller goes on with what it has."""
    slots, stop = Slots(10), threading.Event()
    slots.reserve_up_to(10, stop)
    slots.release(2)
    assert slots.reserve_up_to(10, stop, fill_seconds=0.1) == 2


def test_slots_reserve_never_waits_for_more_than_the_pool_holds() -> None:
    """Concurrency 3 asking for 10 with all 3 free takes them at once (a wait would end in stop: 0)."""
    slots, stop = Slots(3), threading.Event()
    threading.Timer(2, stop.set).start()
    assert slots.reserve_up_to(10, stop, fill_seconds=30) == 3


def test_slots_reserve_returns_zero_once_stopping() -> None:
    """A poller blocked on a full pool wakes up with nothing when shutdown starts."""
    slots, stop = Slots(1), threading.Event()
    slots.reserve_up_to(1, stop)
    threading.Timer(0.2, stop.set).start()
    assert slots.reserve_up_to(1, stop) == 0


class OneReceive:
    """An SQS client stand-in: records the first receive's arguments, stops ``consumer`` and answers no message."""

    def __init__(self) -> None:
        self.receives: list[dict[str, Any]] = []
        self.consumer: Consumer | None = None

    def receive_message(self, **arguments: Any) -> dict[str, Any]:
        self.receives.append(arguments)
        assert self.consumer is not None
        self.consumer.stop()
        return {"Messages": []}


def consumer_with(client: OneReceive | FullThenShort) -> Consumer:
    contract = WorkerContract(max_duration_seconds=3, concurrency=1)
    client.consumer = Consumer(
        client,  # type: ignore[arg-type]
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/orders",
        dlq_url=None,
        contract=contract,
        handler=lambda _: None,
        collaborators=Collaborators(metrics=Metrics(stream=io.StringIO())),
    )
    return client.consumer


def test_consumer_long_polls_as_long_as_the_consumer_module_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """LONG_POLL_SECONDS set on consumer.runtime.consumer (where the CLI reads it too) is the poller's wait."""
    monkeypatch.setattr(runtime, "LONG_POLL_SECONDS", 3)
    client = OneReceive()
    assert consumer_with(client).run() == ExitCode.OK
    assert [r["WaitTimeSeconds"] for r in client.receives] == [3]


class FullThenShort:
    """An SQS client stand-in: the first receive brings all it asks for, the second none, the third stops ``consumer``."""

    def __init__(self) -> None:
        self.receives = 0
        self.consumer: Consumer | None = None

    def receive_message(self, **arguments: Any) -> dict[str, Any]:
        self.receives += 1
        if self.receives == 1:
            asked = arguments["MaxNumberOfMessages"]
            return {"Messages": [{"MessageId": f"m{i}", "ReceiptHandle": f"r{i}", "Body": "{}"} for i in range(asked)]}
        if self.receives == 3:
            assert self.consumer is not None
            self.consumer.stop()
        return {"Messages": []}

    def delete_message_batch(self, **arguments: Any) -> dict[str, Any]:
        return {"Successful": [{"Id": e["Id"]} for e in arguments["Entries"]], "Failed": []}


def test_consumer_fills_batches_as_long_as_the_consumer_module_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """BATCH_FILL_SECONDS set on consumer.runtime.consumer (as bench/subject.py's ablation does) is the fill wait,
    and a poller waits it only after a receive that came back full (a backlog): after a receive that brought less
    than it asked for, the queue is all but empty, and it receives with what is free at once."""
    monkeypatch.setattr(runtime, "BATCH_FILL_SECONDS", 0.25)
    fills: list[float] = []
    reserve = Slots.reserve_up_to

    def recorded(
        slots: Slots, wanted: int, stop: threading.Event, fill_seconds: float = 0.0, on_wait: Any = None
    ) -> int:
        fills.append(fill_seconds)
        return reserve(slots, wanted, stop, fill_seconds, on_wait)

    monkeypatch.setattr(Slots, "reserve_up_to", recorded)
    assert consumer_with(FullThenShort()).run() == ExitCode.OK  # type: ignore[arg-type]
    assert fills[:3] == [0.0, 0.25, 0.0]


class CountingProtection:
    """A ScaleInProtection stand-in that counts the heartbeat's once-a-tick reconciliations."""

    def __init__(self) -> None:
        self.idle_calls = 0

    def busy(self) -> None: ...

    def idle(self) -> None:
        self.idle_calls += 1

    def refresh(self) -> None: ...

    def close(self) -> None: ...


class QuietQueue:
    """An SQS client stand-in whose long polls wait 0.2 s and answer no message."""

    def receive_message(self, **arguments: Any) -> dict[str, Any]:
        threading.Event().wait(0.2)
        return {"Messages": []}


def test_consumer_ticks_as_often_as_the_consumer_module_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """TICK_SECONDS set on consumer.runtime.consumer paces the heartbeat (test_protection holds it off that way)."""
    monkeypatch.setattr(runtime, "TICK_SECONDS", 0.02)
    protection = CountingProtection()
    consumer = Consumer(
        QuietQueue(),  # type: ignore[arg-type]
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/orders",
        dlq_url=None,
        contract=WorkerContract(max_duration_seconds=3, concurrency=1),
        handler=lambda _: None,
        collaborators=Collaborators(
            protection=protection,  # type: ignore[arg-type]
            metrics=Metrics(stream=io.StringIO()),
        ),
    )
    threading.Timer(0.5, consumer.stop).start()
    assert consumer.run() == ExitCode.OK
    assert protection.idle_calls >= 10  # about 25 ticks in 0.5 s; the default 0.5 s tick gives 1 or 2


def in_flight(message_id: str = "m-1") -> InFlight:
    received = Message(body="payload", message_id=message_id, receipt_handle=f"rh-{message_id}")
    return InFlight(received, 0.0, 30.0, LogContext.of(received, "https://sqs.example/q"))


def test_in_flight_table_admits_the_first_receive_as_first_and_none_once_closed() -> None:
    """The first receive makes the task busy; one answered after close() is late and not admitted."""
    table = InFlightTable()
    assert (table.admit([in_flight("a")]), table.admit([in_flight("b")])) == (Admission.FIRST, Admission.MORE)
    assert table.close() == 2  # both pollers still dispatching
    assert (table.admit([in_flight("c")]), len(table)) == (Admission.LATE, 2)


def test_in_flight_table_starts_only_a_waiting_message() -> None:
    """A message handed back before its worker reached it does not start."""
    table, item = InFlightTable(), in_flight()
    table.admit([item])
    assert table.release_waiting(item) and table.is_idle()
    assert not table.start(item, key="k", owner="o")
    assert (item.state, item.started_at) == (State.RELEASED, None)


def test_in_flight_table_finishes_only_a_running_message() -> None:
    """A handler returning after it was given up on finds TIMED_OUT, and its result does not count."""
    table, item = InFlightTable(), in_flight()
    table.admit([item])
    assert table.start(item, key="k", owner="o")
    assert table.time_out_overruns(now=10.0, timeout_seconds=5.0) == ([], 0)  # claiming: its handler not called yet
    item.started_at = 0.0
    assert table.time_out_overruns(now=10.0, timeout_seconds=5.0) == ([item], 1)
    assert (table.finish(item), item.state) == (State.TIMED_OUT, State.TIMED_OUT)


def test_in_flight_table_counts_a_handler_stuck_only_past_its_lease() -> None:
    """Timed out at max_duration, but stuck (toward every slot stuck) only past stuck_seconds, its attempt's end: a
    handler returning just past max_duration is settled before the process would exit for it."""
    table, item = InFlightTable(), in_flight()
    table.admit([item])
    table.start(item, key="k", owner="o")
    item.started_at = 0.0
    assert table.time_out_overruns(now=6.0, timeout_seconds=5.0, stuck_seconds=15.0) == ([item], 0)
    assert table.time_out_overruns(now=15.0, timeout_seconds=5.0, stuck_seconds=15.0) == ([], 0)
    assert table.time_out_overruns(now=15.1, timeout_seconds=5.0, stuck_seconds=15.0) == ([], 1)


def test_in_flight_table_releases_the_unfinished_with_whether_they_were_attempted() -> None:
    """At the drain timeout a running message counts its attempt, a waiting one does not; done ones stay."""
    table = InFlightTable()
    running, waiting, done = in_flight("r"), in_flight("w"), in_flight("d")
    table.admit([running, waiting, done])
    table.start(running, key="r", owner="o")
    table.start(done, key="d", owner="o")
    assert table.finish(done) is State.RUNNING
    assert table.release_unfinished() == [(running, True), (waiting, False)]
    assert (running.state, waiting.state, done.state) == (State.RELEASED, State.RELEASED, State.DONE)


def message(**overrides: object) -> Message:
    values: dict[str, object] = {"body": "payload", "message_id": "m-1", "receipt_handle": "rh", "receive_count": 2}
    values.update(overrides)
    return Message(**values)  # type: ignore[arg-type]


def test_dlq_parameters_keep_body_attributes_and_add_reason() -> None:
    """Body and attributes are copied as SendMessage takes them; the reason is one JSON attribute."""
    original = message(
        message_attributes={
            "tenant": {"DataType": "String", "StringValue": "acme", "StringListValues": [], "BinaryListValues": []}
        }
    )
    params = send_parameters(original, dlq_url="dlq", reason="bad schema", kind="poison", source_queue_url="src")
    assert params["MessageBody"] == "payload" and params["QueueUrl"] == "dlq"
    assert params["MessageAttributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    reason = read_reason(params["MessageAttributes"])
    assert reason is not None
    assert (reason["kind"], reason["reason"], reason["original_message_id"], reason["receive_count"]) == (
        "poison",
        "bad schema",
        "m-1",
        2,
    )
    assert "MessageGroupId" not in params


def test_dlq_parameters_keep_fifo_group_and_dedup_on_this_delivery() -> None:
    """A FIFO message keeps its group; the DLQ send deduplicates on this delivery's MessageId.

    Reusing the original dedup id would make SQS silently drop a second move within 5 min
    (a message redriven and failing again), and the consumer would then delete it: lost.
    """
    fifo = message(attributes={"MessageGroupId": "g-7", "MessageDeduplicationId": "d-9"})
    params = send_parameters(fifo, dlq_url="dlq.fifo", reason="r", kind="poison", source_queue_url="src.fifo")
    assert (params["MessageGroupId"], params["MessageDeduplicationId"]) == ("g-7", "m-1")
    assert read_reason(params["MessageAttributes"])["original_deduplication_id"] == "d-9"


def test_dlq_parameters_fold_ten_attributes_to_make_room_for_the_reason() -> None:
    """SQS allows 10 attributes: with 10 already, all are kept inside one JSON attribute."""
    attributes = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(10)}
    params = send_parameters(
        message(message_attributes=attributes), dlq_url="d", reason="r", kind="poison", source_queue_url="s"
    )
    assert set(params["MessageAttributes"]) == {ORIGINAL_ATTRIBUTES, REASON_ATTRIBUTE}
    folded = json.loads(params["MessageAttributes"][ORIGINAL_ATTRIBUTES]["StringValue"])
    assert folded["a9"] == {"DataType": "String", "StringValue": "9"}


def test_config_requires_queue_url_and_handler() -> None:
    """Missing bindings name the variable."""
    with pytest.raises(ContractError, match='"QUEUE_URL" must be set'):
        load_config({"CONSUMER_HANDLER": HANDLER})
    with pytest.raises(ContractError, match='"CONSUMER_HANDLER" must be set'):
        load_config({"QUEUE_URL": "https://q"})
    with pytest.raises(ContractError, match='"CONSUMER_HANDLER" names a module that cannot be imported'):
        load_config({"QUEUE_URL": "https://q", "CONSUMER_HANDLER": "nope:handle"})


def test_config_local_run_uses_the_handler_declaration() -> None:
    """Without the stack's CONSUMER_* variables the declaration is the contract."""
    config = load_config({"QUEUE_URL": "https://q", "CONSUMER_HANDLER": HANDLER})
    assert config.from_stack is False and config.contract.max_duration_seconds == 5
    assert config.dlq_url is None and config.idempotency_table is None


def test_config_stack_run_reads_the_stack_contract_and_bindings() -> None:
    """With the stack's environment, its contract (retention included) and bindings are used."""
    local = load_config({"QUEUE_URL": "https://q", "CONSUMER_HANDLER": HANDLER}).contract
    deployed = WorkerContract(
        **{**local.declared(), "source_retention_seconds": 86_400, "dlq_retention_seconds": 604_800}
    )
    environ = {
        "QUEUE_URL": "https://q",
        "CONSUMER_HANDLER": HANDLER,
        "DLQ_URL": "https://d",
        "CONSUMER_IDEMPOTENCY_TABLE": "t",
        **deployed.to_env(),
    }
    config = load_config(environ)
    assert config.from_stack and config.contract == deployed
    assert (config.dlq_url, config.idempotency_table) == ("https://d", "t")


def test_check_declaration_ignores_environment_fields_only() -> None:
    """Retention may differ (cdk.json sets it); any handler-declared field may not."""
    declared = WorkerContract(max_duration_seconds=90)
    check_declaration(
        declared,
        WorkerContract(max_duration_seconds=90, source_retention_seconds=86_400, dlq_retention_seconds=604_800),
    )
    with pytest.raises(ContractDriftError) as raised:
        check_declaration(declared, WorkerContract(max_duration_seconds=90, concurrency=4))
    assert raised.value.parameter == "CONSUMER_CONCURRENCY"
    assert "concurrency: stack 4, handler 1" in str(raised.value)


def test_lease_extension_not_needed_while_visibility_covers_the_attempt() -> None:
    """Short handlers: the queue's visibility covers the attempt, so the heartbeat never extends."""
    contract = WorkerContract(max_duration_seconds=90)
    for now in (0.0, 60.0, 95.0):
        assert lease_extension(contract, now=now, received_at=0, started_at=0, visible_until=100) is None


def test_lease_extension_renews_the_lease_up_to_the_attempt_end() -> None:
    """Lease mode: extend by the 900 s lease near expiry, never past max_duration + margin."""
    contract = WorkerContract(max_duration_seconds=7_200)
    assert lease_extension(contract, now=800, received_at=0, started_at=0, visible_until=900) == 900
    assert lease_extension(contract, now=700, received_at=0, started_at=0, visible_until=900) is None
    assert lease_extension(contract, now=7_000, received_at=0, started_at=0, visible_until=7_100) == 500
    assert lease_extension(contract, now=7_450, received_at=0, started_at=0, visible_until=7_500) is None


def test_lease_extension_respects_the_twelve_hour_budget() -> None:
    """Extensions never reach past 12 h after the receive (SQS rejects it)."""
    contract = WorkerContract(max_duration_seconds=42_900, max_receive_count=2)
    received = 0.0
    assert lease_extension(contract, now=42_800, received_at=received, started_at=300, visible_until=42_850) == 399
    assert lease_extension(contract, now=43_150, received_at=received, started_at=300, visible_until=43_190) == 49
    assert lease_extension(contract, now=43_190, received_at=received, started_at=300, visible_until=43_199) is None


def test_dlq_reason_attribute_fits_the_source_queues_headroom() -> None:
    """A reason of 1,000 astral characters (12 escaped bytes each) is shortened to fit the headroom."""
    params = send_parameters(
        message(), dlq_url="dlq", reason="\U0001f4a5" * 5000, kind="poison", source_queue_url="src"
    )
    value = params["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"]
    assert len(value.encode("utf-8")) <= MAX_REASON_RECORD_BYTES
    assert read_reason(params["MessageAttributes"])["reason"].endswith(" [truncated]")


def test_dlq_reason_attribute_headroom_covers_name_type_and_value() -> None:
    """Name + type + the longest value stay inside what the source queue keeps free below SQS's limit."""
    overhead = len(REASON_ATTRIBUTE) + len("String")
    assert MAX_REASON_RECORD_BYTES + overhead <= DLQ_REASON_HEADROOM_BYTES
    assert SOURCE_MAX_MESSAGE_BYTES + DLQ_REASON_HEADROOM_BYTES == SQS_MAX_MESSAGE_BYTES


#: The task role's RoleId in these tests; SQS writes a role session's SenderId as "<RoleId>:<session name>".
OWN_ROLE_ID = "AROAEXAMPLEOWNROLE01"


def received(
    receive_count: str, sender_id: str | None = f"{OWN_ROLE_ID}:task-1", **attributes: dict[str, str]
) -> Message:
    """A message as the consumer receives it; by default a copy a task of its own role sent."""
    system = {"ApproximateReceiveCount": receive_count} | ({"SenderId": sender_id} if sender_id else {})
    raw = {"MessageId": "m-1", "ReceiptHandle": "rh", "Body": "b", "Attributes": system}
    return Message.from_sqs({**raw, "MessageAttributes": attributes}, own_role_id=OWN_ROLE_ID)


def carrying(count: str) -> dict[str, dict[str, str]]:
    return {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": count}}


@pytest.mark.parametrize(
    ("carried", "expected"),
    [("2", (5, 2)), ("0", (3, 0)), ("abc", (3, 0)), ("-1", (3, 0)), ("\u00b2", (3, 0)), ("10001", (3, 0))],
)
def test_message_receive_count_adds_a_requeued_copys_carried_receives(carried: str, expected: tuple) -> None:
    """A copy's count goes on from its original's; a carried value we could not have written is ignored."""
    message = received("3", **carrying(carried))
    assert (message.receive_count, message.prior_receives) == expected


@pytest.mark.parametrize(
    "sender_id",
    [f"{OWN_ROLE_ID}:task-2", OWN_ROLE_ID],
    ids=["another-task-of-the-role", "role-id-alone"],
)
def test_message_trusts_a_carried_count_from_any_session_of_its_own_role(sender_id: str) -> None:
    """Each ECS task is its own session of the task role: only the RoleId part of the SenderId is compared."""
    assert received("1", sender_id, **carrying("2")).receive_count == 3


@pytest.mark.parametrize(
    "sender_id",
    ["AROAEXAMPLEOTHERROLE:producer", f"{OWN_ROLE_ID}X:task-1", f"X{OWN_ROLE_ID}:task-1", "AIDAEXAMPLEUSER0001", None],
    ids=["another-role", "longer-role-id", "role-id-inside", "an-iam-user", "no-sender-id"],
)
def test_message_ignores_a_carried_count_another_sender_set(sender_id: str | None) -> None:
    """A forged x-prior-receives (say 2, to dead-letter on the first failure) leaves SQS's own count."""
    message = received("1", sender_id, **carrying("2"))
    assert (message.receive_count, message.prior_receives) == (1, 0)


def test_message_without_its_own_role_id_trusts_no_carried_count() -> None:
    """A bare local run (no CONSUMER_TASK_ROLE_ID): every copy's count restarts, even an empty SenderId's."""
    for sender_id in (f"{OWN_ROLE_ID}:task-1", ""):
        raw = {
            "MessageId": "m-1",
            "ReceiptHandle": "rh",
            "Body": "b",
            "Attributes": {"ApproximateReceiveCount": "1", "SenderId": sender_id},
            "MessageAttributes": carrying("2"),
        }
        assert Message.from_sqs(raw).receive_count == 1
        assert Message.from_sqs(raw, own_role_id="").receive_count == 1


def test_message_from_sqs_sets_every_field_init_would() -> None:
    """from_sqs fills the frozen dataclass in one step rather than through __init__: it must set exactly its fields,
    to what __init__ would, and carry the attempt the consumer hands it (a field added later fails here)."""
    attempt = Attempt(deadline=9.0)
    message = Message.from_sqs(
        {"MessageId": "m-1", "ReceiptHandle": "rh", "Body": "b", "Attributes": {"ApproximateReceiveCount": "2"}},
        attempt=attempt,
    )
    built = Message(
        body="b", message_id="m-1", receipt_handle="rh", receive_count=2, attributes={"ApproximateReceiveCount": "2"}
    )
    assert set(vars(message)) == {f.name for f in dataclasses.fields(Message)}
    assert (message, message.attempt) == (built, attempt)
    assert Message.from_sqs({"MessageId": "m", "ReceiptHandle": "r"}).attempt.deadline == math.inf
    # A declared source's message (consumer/sources.py: an SNS envelope unwrapped) sets the same fields.
    topic = "arn:aws:sns:eu-west-1:123456789012:orders"
    envelope = {"MessageId": "m", "ReceiptHandle": "r", "Body": sns_envelope("b", topic_arn=topic)}
    unwrapped = Message.from_sqs(envelope, sources=Sources(sns_envelope_topics=frozenset({topic})))
    assert set(vars(unwrapped)) == set(vars(message)) and unwrapped.sns is not None


def test_task_role_id_from_env_reads_the_binding() -> None:
    """The stack's CONSUMER_TASK_ROLE_ID as is; unset or empty (a bare local run) is None."""
    assert task_role_id_from_env({"CONSUMER_TASK_ROLE_ID": OWN_ROLE_ID}) == OWN_ROLE_ID
    assert task_role_id_from_env({"CONSUMER_TASK_ROLE_ID": "A" * 16}) == "A" * 16
    assert task_role_id_from_env({"CONSUMER_TASK_ROLE_ID": "A" * 128}) == "A" * 128
    assert task_role_id_from_env({}) is None
    assert task_role_id_from_env({"CONSUMER_TASK_ROLE_ID": ""}) is None


@pytest.mark.parametrize("value", [f"{OWN_ROLE_ID}:task-1", "A" * 15, "A" * 129, "AROA EXAMPLE ROLE 01"])
def test_task_role_id_from_env_refuses_what_is_no_role_id(value: str) -> None:
    """A whole SenderId pasted in, or a value of the wrong length, would match nothing: refused, named."""
    with pytest.raises(ContractError) as raised:
        task_role_id_from_env({"CONSUMER_TASK_ROLE_ID": value})
    assert str(raised.value) == (
        f'"CONSUMER_TASK_ROLE_ID" must be the task role\'s RoleId (16 to 128 letters, digits or underscores): {value!r}'
    )


def test_requeue_parameters_carry_the_receives_spent_on_attempts() -> None:
    """Unattempted, this receive is not spent; attempted, it is. An existing carried count is replaced."""
    copy = received("2", **carrying("4"))
    assert copy.receive_count == 6
    for attempted, spent in ((False, "5"), (True, "6")):
        params = requeue_parameters(copy, queue_url="src", attempted=attempted)
        assert params["MessageAttributes"] == {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": spent}}


def test_requeue_parameters_keep_the_tenant() -> None:
    """A copy handed back on a standard (fair) queue keeps its MessageGroupId, the tenant it was sent under."""
    message = received("1")
    tenant = dataclasses.replace(message, attributes={**message.attributes, "MessageGroupId": "acme"})
    assert requeue_parameters(tenant, queue_url="src")["MessageGroupId"] == "acme"
    assert "MessageGroupId" not in requeue_parameters(message, queue_url="src")


def test_requeue_parameters_without_room_for_the_count_keep_the_ten_attributes() -> None:
    """Ten sender attributes leave no room: the copy keeps them all and its count restarts (documented)."""
    ten = {f"a{n}": {"DataType": "String", "StringValue": str(n)} for n in range(10)}
    message = received("2", **ten)
    assert not can_carry_receives(message)
    assert requeue_parameters(message, queue_url="src")["MessageAttributes"] == ten
    assert can_carry_receives(received("2", **dict(list(ten.items())[:9])))


def test_dlq_parameters_drop_the_carried_count_so_a_redrive_starts_afresh() -> None:
    """The DLQ copy's reason says how many receives were spent; the carried attribute itself is not kept."""
    message = received("1", **carrying("2"))
    params = send_parameters(message, dlq_url="dlq", reason="r", kind="exhausted", source_queue_url="src")
    assert set(params["MessageAttributes"]) == {"x-dlq-reason"}
    assert (read_reason(params["MessageAttributes"]) or {})["receive_count"] == 3
