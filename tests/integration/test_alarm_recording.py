"""The lab's alarm recorder (``python -m bench.alarm_recording``): its proxy's translation of real SQS calls against
moto's server, the redrive-policy moves it detects inside moto, the EMF lines it reads, and the files it writes.

The full recordings take minutes and are made by the command; here every run is a few seconds long. The recordings
it made are the evaluator's data: tests/alarms/test_recordings.py reads them back.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.alarm_recording import handlers
from bench.alarm_recording.record import SCENARIOS, Scenario, emf_points, record_scenario
from bench.alarm_recording.recording_proxy import Clock, QueueInfo, RecordingProxy, double_hand_outs, translate
from bench.proxy import Exchange
from consumer.local.stack import LOCAL_REGION, local_client, start_server
from consumer.runtime.observability import Metrics
from infra.alarms.catalogue import RECORDINGS
from infra.alarms.events import REDRIVE, SqsEvent
from tests.alarms.recordings import check_document


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    server, endpoint = start_server()
    yield endpoint
    server.stop()


class Recorded:
    """A source queue and its DLQ on moto, and a recording proxy in front of them with a client on it."""

    def __init__(self, moto: str, max_receive_count: int = 5) -> None:
        admin = local_client("sqs", moto)
        name = f"rec-{uuid.uuid4().hex[:10]}"
        self.dlq_url = admin.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        arn = admin.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive_count})
        attributes = {"VisibilityTimeout": "12", "RedrivePolicy": policy}
        self.queue_url = admin.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        self.source, self.dlq = name, f"{name}-dlq"
        queues = {
            self.source: QueueInfo(self.source, False, 345600, 12),
            self.dlq: QueueInfo(self.dlq, False, 1209600, 30),
        }
        self.proxy = RecordingProxy(moto, Clock.now(), queues)
        self.proxy.start()
        self.proxy.watch_redrive(self.dlq_url, LOCAL_REGION)
        self.sqs = local_client("sqs", self.proxy.url)

    def events(self) -> list[SqsEvent]:
        self.proxy.settle()
        return self.proxy.events()


@pytest.fixture
def recorded(moto: str) -> Iterator[Recorded]:
    one = Recorded(moto)
    yield one
    one.proxy.stop()


def shape(events: list[SqsEvent]) -> list[tuple[str, str, str | None, float | None]]:
    return [(e.queue, e.op, e.message_id, e.visibility) for e in events]


def test_every_operation_becomes_its_events_with_the_message_ids_moto_gave(recorded: Recorded) -> None:
    """Sends (single and batch), receives (asked and default visibility), visibility changes and deletes (single
    and batch, a failed entry left out), an empty receive, another call and a purge, in order."""
    sqs, url, q = recorded.sqs, recorded.queue_url, recorded.source
    first = sqs.send_message(QueueUrl=url, MessageBody="a")["MessageId"]
    batch = sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "b"}, {"Id": "c", "MessageBody": "c"}]
    )
    second, third = (entry["MessageId"] for entry in batch["Successful"])
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=7)["Messages"]
    handle = {m["MessageId"]: m["ReceiptHandle"] for m in received}
    assert set(handle) == {first, second, third}
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle[first], VisibilityTimeout=0)
    sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "1", "ReceiptHandle": handle[second], "VisibilityTimeout": 5}]
    )
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle[third])
    (again,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]  # the queue's 12 s
    assert again["MessageId"] == first
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "ReceiptHandle": again["ReceiptHandle"]}, {"Id": "bad", "ReceiptHandle": "not-a-handle"}],
    )
    assert [f["Id"] for f in deleted["Failed"]] == ["bad"]
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages") is None
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    sqs.purge_queue(QueueUrl=url)

    events = recorded.events()

    assert shape(events) == [
        (q, "send", first, None),
        (q, "send", second, None),
        (q, "send", third, None),
        *[(q, "receive", m["MessageId"], 7.0) for m in received],
        (q, "change_visibility", first, 0.0),
        (q, "change_visibility", second, 5.0),
        (q, "delete", third, None),
        (q, "receive", first, 12.0),
        (q, "delete", first, None),
        (q, "call", None, None),
        (q, "call", None, None),
        (q, "purge", None, None),
    ]
    assert all(0 <= a.t <= b.t for a, b in zip(events, events[1:], strict=False))
    assert recorded.proxy.unreadable == 0


def test_a_call_on_a_queue_outside_the_recording_is_left_out(recorded: Recorded, moto: str) -> None:
    other = local_client("sqs", moto).create_queue(QueueName=f"other-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    recorded.sqs.send_message(QueueUrl=other, MessageBody="x")
    recorded.sqs.list_queues()
    assert recorded.events() == []


def exchange(operation: str, request: dict[str, Any], answer: dict[str, Any], at: float) -> Exchange:
    body, reply = json.dumps(request).encode(), json.dumps(answer).encode()
    return Exchange(operation, "botocore", body, 200, reply, sent_at=at, answered_at=at, passed_on=True)


def test_receipt_handles_map_back_to_message_ids_whatever_order_the_proxy_observed_them_in() -> None:
    """The proxy reports an exchange after its client has the answer, so a delete can be observed before the receive
    whose handle it names; a handle no recorded receive gave is a call (its message is unknown)."""
    url = "http://127.0.0.1:1/123456789012/orders"
    clock = Clock(wall=1000.0, monotonic=50.0)
    receive = exchange(
        "ReceiveMessage",
        {"QueueUrl": url},
        {"Messages": [{"MessageId": "m1", "ReceiptHandle": "h1"}, {"MessageId": "m2", "ReceiptHandle": "h2"}]},
        51.0,
    )
    delete = exchange("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": "h2"}, {}, 52.5)
    change = exchange(
        "ChangeMessageVisibility", {"QueueUrl": url, "ReceiptHandle": "h1", "VisibilityTimeout": 9}, {}, 52
    )
    stranger = exchange("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": "from-before"}, {}, 53)

    events = translate([stranger, delete, change, receive], clock, {"orders": QueueInfo("orders", False, 60, 30)})

    assert [(e.t, e.op, e.message_id, e.visibility) for e in events] == [
        (1.0, "receive", "m1", 30.0),
        (1.0, "receive", "m2", 30.0),
        (2.0, "change_visibility", "m1", 9.0),
        (2.5, "delete", "m2", None),
        (3.0, "call", None, None),
    ]


def test_a_move_by_the_redrive_policy_is_a_send_on_the_dlq_by_redrive_with_the_original_enqueue_time(
    moto: str,
) -> None:
    """moto moves a message received maxReceiveCount times at the next receive on the source, returning nothing:
    the recorder sees it arrive in the DLQ; a caller's send to the DLQ stays a caller's."""
    recorded = Recorded(moto, max_receive_count=1)
    try:
        sqs = recorded.sqs
        message_id = sqs.send_message(QueueUrl=recorded.queue_url, MessageBody="doomed")["MessageId"]
        assert sqs.receive_message(QueueUrl=recorded.queue_url, VisibilityTimeout=0)["Messages"]
        assert sqs.receive_message(QueueUrl=recorded.queue_url, VisibilityTimeout=0).get("Messages") is None
        sent_by_hand = sqs.send_message(QueueUrl=recorded.dlq_url, MessageBody="by hand")["MessageId"]
        events = recorded.events()
    finally:
        recorded.proxy.stop()

    sent = next(e for e in events if e.op == "send" and e.queue == recorded.source)
    moved = [e for e in events if e.queue == recorded.dlq and e.op == "send"]
    assert [(e.message_id, e.by) for e in moved] == [(message_id, REDRIVE), (sent_by_hand, "caller")]
    assert moved[0].enqueued == sent.t
    (receive,) = [e for e in events if e.op == "receive"]
    assert receive.t <= moved[0].t
    assert [e.op for e in events if e.queue == recorded.source] == ["send", "receive", "call"]


def test_a_second_hand_out_of_a_held_message_is_found_and_a_receive_after_the_lease_is_not() -> None:
    events = [
        SqsEvent(0.0, "orders", "send", "m"),
        SqsEvent(1.0, "orders", "receive", "m", visibility=15),
        SqsEvent(1.01, "orders", "receive", "m", visibility=15),  # moto's race: two long polls took it
        SqsEvent(15.5, "orders", "receive", "m", visibility=15),  # 0.5 s early: within the answer's way back
        SqsEvent(16.0, "orders", "change_visibility", "m", visibility=0),
        SqsEvent(16.2, "orders", "receive", "m", visibility=15),
        SqsEvent(17.0, "orders", "delete", "m"),
    ]
    assert double_hand_outs(events) == [events[2]]


def test_emf_lines_become_raw_datapoints_stamped_by_their_own_timestamp() -> None:
    """Counts are one point each, a timing array one point per value; logs, other queues and half lines are not
    metrics of the recording."""
    out = io.StringIO()
    metrics = Metrics(dimensions={"Queue": "orders"}, stream=out, clock=lambda: 1_000_065.5)
    metrics.count("processed", 3)
    metrics.count("circuit_opens")
    metrics.timing("duration", 12.25)
    metrics.timing("duration", 40.0)
    metrics.flush()
    other = Metrics(dimensions={"Queue": "elsewhere"}, stream=out, clock=lambda: 1_000_070.0)
    other.count("failed")
    other.flush()
    lines = [
        '{"timestamp":"2026-01-01T00:00:00.000Z","level":"INFO","event":"message_processed"}',
        *out.getvalue().splitlines(),
        '{"_aws": {"Timestamp": 1000',
    ]

    points = emf_points(lines, "orders", Clock(wall=1_000_000.0, monotonic=0.0))

    assert points == [
        [65.5, "circuit_opens", 1],
        [65.5, "duration", 12.25],
        [65.5, "duration", 40.0],
        [65.5, "processed", 3],
    ]


def test_the_handler_fault_holds_only_within_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(handlers.FAULT_ENV, "downstream")
    monkeypatch.setenv(handlers.FAULT_FROM_ENV, "100")
    monkeypatch.setenv(handlers.FAULT_UNTIL_ENV, "220")
    assert [handlers.active_fault(t) for t in (99.9, 100, 219.9, 220)] == [None, "downstream", "downstream", None]
    monkeypatch.delenv(handlers.FAULT_ENV)
    assert handlers.active_fault(150) is None


@pytest.mark.lab  # real time: a poison message at 3 s must reach the DLQ before 7 s, which a loaded machine can miss
def test_a_short_recording_is_written_whole_and_round_trips_through_sqs_event(tmp_path: Path) -> None:
    """A real run of a few seconds (one consumer, a poison message): the file's events read back as SqsEvent, the
    consumer's move of the poison message is a caller's send on the DLQ, its shutdown flush is in the EMF points."""
    scenario = Scenario("a short run", onset=3, end=7, poison_at=(3,))

    path = record_scenario("short", scenario, tmp_path)

    assert path == tmp_path / "short.json"
    assert len(path.read_text().splitlines()) == 1
    events = check_document(json.loads(path.read_text()), "short")
    document = json.loads(path.read_text())
    dlq_sends = [e for e in events if e.queue == "orders-dlq" and e.op == "send"]
    assert len(dlq_sends) == 1 and dlq_sends[0].by == "caller" and dlq_sends[0].t >= 3
    metrics = {metric for _, metric, _ in document["emf"]["points"]}
    assert {"poisoned", "processed", "received"} <= metrics
    assert [row[1:] for row in document["tasks"]] == [[0, 1], [1, 1], [1, 0], [0, 0]]


def test_every_scenario_of_the_recorder_has_its_recording() -> None:
    """Each recording the evaluator reads can be made again by the command, under its own name."""
    assert sorted(p.stem for p in RECORDINGS.glob("*.json")) == sorted(SCENARIOS)
