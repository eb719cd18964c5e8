"""The SQS publishing model, one test per documented rule (each goes red if its rule is taken out of the model).

Every rule test is registered with :func:`covers`; the last test checks that every rule of the table has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from infra.alarms.definitions import Series, metric_key
from infra.alarms.events import REDRIVE, SqsEvent
from infra.alarms.sqs_model import (
    AGE,
    DELAYED,
    DELETED,
    IDLE_SECONDS,
    METRICS,
    NOT_VISIBLE,
    RECEIVED,
    RULES,
    RULES_BY_ID,
    SENT,
    VISIBLE,
    QueueSpec,
    rule,
    rules_markdown,
    sqs_series,
)

F = TypeVar("F", bound=Callable[..., object])
#: Rule id -> the tests that pin it (filled at import by :func:`covers`).
COVERED: dict[str, list[str]] = {}
SRC, DLQ = "work", "work-dlq"
DAY = 86400


def covers(*rule_ids: str) -> Callable[[F], F]:
    def register(test: F) -> F:
        for rule_id in rule_ids:
            rule(rule_id)  # an unknown id fails at import
            COVERED.setdefault(rule_id, []).append(test.__name__)
        return test

    return register


def send(t: float, message_id: str, queue: str = SRC, **extra: object) -> SqsEvent:
    return SqsEvent(t=t, queue=queue, op="send", message_id=message_id, **extra)  # type: ignore[arg-type]


def receive(t: float, message_id: str, visibility: float = 30, queue: str = SRC) -> SqsEvent:
    return SqsEvent(t=t, queue=queue, op="receive", message_id=message_id, visibility=visibility)


def delete(t: float, message_id: str, queue: str = SRC) -> SqsEvent:
    return SqsEvent(t=t, queue=queue, op="delete", message_id=message_id)


def change(t: float, message_id: str, visibility: float, queue: str = SRC) -> SqsEvent:
    return SqsEvent(t=t, queue=queue, op="change_visibility", message_id=message_id, visibility=visibility)


def call(t: float, queue: str = SRC) -> SqsEvent:
    return SqsEvent(t=t, queue=queue, op="call")


def points(series: Series, metric: str, queue: str = SRC) -> dict[float, float]:
    return dict(series.get(metric_key("AWS/SQS", metric, {"QueueName": queue})))


def model(
    events: list[SqsEvent], queues: list[QueueSpec] | None = None, *, end: float = 600, **options: object
) -> tuple[Series, set[str]]:
    applied: set[str] = set()
    series = sqs_series(
        events,
        queues or [QueueSpec(SRC), QueueSpec(DLQ)],
        start=0,
        end=end,
        applied=applied,
        **options,  # type: ignore[arg-type]
    )
    return series, applied


# --- one test per rule ----------------------------------------------------------------------------------------


@covers("sqs-per-minute")
def test_one_datapoint_per_minute_per_metric_with_queue_name_only() -> None:
    series, applied = model([send(10, "a"), receive(20, "a"), delete(30, "a")], [QueueSpec(SRC)], end=300)
    minutes = [0.0, 60.0, 120.0, 180.0, 240.0]
    for metric in (VISIBLE, NOT_VISIBLE, DELAYED, SENT, RECEIVED, DELETED):
        assert list(points(series, metric)) == minutes, metric
    assert {key[2] for key in series.points} == {(("QueueName", SRC),)}
    assert {key[0] for key in series.points} == {"AWS/SQS"}
    assert {key[1] for key in series.points} <= set(METRICS)
    assert "sqs-per-minute" in applied


@covers("sqs-idle")
def test_a_queue_without_messages_or_calls_for_six_hours_stops_publishing() -> None:
    series, applied = model([call(100)], [QueueSpec(SRC)], end=8 * 3600)
    visible = points(series, VISIBLE)
    assert max(visible) == 6 * 3600 + 60  # the minute holding 100 + 6 h still overlaps the active time
    assert min(visible) == 0 and len(visible) == 6 * 60 + 2
    assert "sqs-idle" in applied
    # A queue that holds a message stays active however long nobody calls it.
    held, _ = model([send(100, "a")], [QueueSpec(SRC)], end=8 * 3600)
    assert len(points(held, VISIBLE)) == 8 * 60
    # Already idle for days before the start: nothing at all.
    idle, _ = model([], [QueueSpec(SRC)], end=3600, idle_since={SRC: -3 * DAY})
    assert idle.points[metric_key("AWS/SQS", VISIBLE, {"QueueName": SRC})] == []


@covers("sqs-wake-delay")
def test_a_woken_queue_publishes_after_the_wake_delay() -> None:
    events = [send(0, "a"), send(1000, "a", queue=DLQ, by=REDRIVE, enqueued=0)]
    series, applied = model(events, end=3600, idle_since={DLQ: -3 * DAY})
    dlq = points(series, VISIBLE, DLQ)
    assert min(dlq) == 1860  # the first minute that reaches past 1000 + 900
    assert dlq[1860] == 1 and points(series, AGE, DLQ)[1860] == 1920 - 1000
    assert "sqs-wake-delay" in applied
    # The source was active (no idle_since): no delay; and no delay at all with wake_delay_seconds=0.
    assert min(points(series, VISIBLE)) == 0
    at_once, _ = model(events, end=3600, idle_since={DLQ: -3 * DAY}, wake_delay_seconds=0)
    assert min(points(at_once, VISIBLE, DLQ)) == 960


@covers("sqs-visibility")
def test_received_messages_are_not_visible_until_their_visibility_ends_or_changes() -> None:
    events = [
        send(10, "a"),
        receive(70, "a", visibility=100),  # in flight until 170
        receive(185, "a", visibility=300),
        change(190, "a", 0),  # released: visible at once
        receive(250, "a", visibility=30),
        change(260, "a", 600),  # extended to 860
    ]
    series, applied = model(events, [QueueSpec(SRC)], end=900)
    visible, hidden = points(series, VISIBLE), points(series, NOT_VISIBLE)
    assert (visible[60], hidden[60]) == (0, 1)  # sampled at 120
    assert (visible[120], hidden[120]) == (1, 0)  # 180: the visibility ended at 170
    assert (visible[180], hidden[180]) == (1, 0)  # 240: released at 190
    assert (visible[240], hidden[240]) == (0, 1)  # 300: extended past 290
    assert (visible[780], hidden[780]) == (0, 1) and (visible[840], hidden[840]) == (1, 0)
    assert "sqs-visibility" in applied


@covers("sqs-delayed-zero")
def test_delayed_is_zero_every_published_minute() -> None:
    series, _ = model([send(10, "a")], [QueueSpec(SRC)], end=300)
    assert points(series, DELAYED) == {t: 0.0 for t in (0.0, 60.0, 120.0, 180.0, 240.0)}


@covers("sqs-age-held")
def test_age_is_published_only_while_the_queue_holds_a_message_in_flight_or_not() -> None:
    series, _ = model([send(10, "a"), receive(20, "a", visibility=600), delete(200, "a")], [QueueSpec(SRC)], end=600)
    age = points(series, AGE)
    assert age == {0.0: 50.0, 60.0: 110.0, 120.0: 170.0}  # in flight from 20 on, still counted
    assert len(points(series, VISIBLE)) == 10


@covers("sqs-age-receives")
def test_a_standard_queue_leaves_out_messages_received_three_times_fifo_does_not() -> None:
    events = [send(0, "a"), send(30, "b"), receive(40, "a", 1), receive(70, "a", 1), receive(130, "a", 1)]
    series, applied = model(events, [QueueSpec(SRC)], end=300)
    age = points(series, AGE)
    assert age[60] == 120 - 0  # two receives: still the oldest
    assert age[120] == 180 - 30  # the third receive moves it back: the next message's age
    assert "sqs-age-receives" in applied
    fifo, _ = model(events, [QueueSpec(SRC, fifo=True)], end=300)
    assert points(fifo, AGE)[120] == 180


@covers("sqs-age-dlq-move", "sqs-sent")
def test_a_redrive_move_counts_age_from_the_move_and_is_not_a_send() -> None:
    events = [
        send(0, "a"),
        receive(10, "a"),
        send(3600, "a", queue=DLQ, by=REDRIVE, enqueued=0),
        send(3610, "c", queue=DLQ),
    ]
    series, applied = model(events, end=3720)
    assert points(series, AGE, DLQ)[3600] == 3660 - 3600  # not 3660: the age restarts at the move
    assert points(series, SENT, DLQ)[3600] == 1  # the caller's send only
    assert sum(points(series, SENT).values()) == 1
    assert points(series, VISIBLE)[3600] == 0 and points(series, VISIBLE, DLQ)[3600] == 2  # moved out of the source
    assert {"sqs-age-dlq-move", "sqs-sent"} <= applied


@covers("sqs-age-all-excluded")
def test_when_every_held_message_is_left_out_the_age_reading_is_chosen() -> None:
    assert RULES_BY_ID["sqs-age-all-excluded"].reading
    events = [send(0, "a"), receive(10, "a", 1), receive(20, "a", 1), receive(30, "a", 1)]
    series, applied = model(events, [QueueSpec(SRC)], end=180)
    assert points(series, AGE) == {} and points(series, VISIBLE)[60] == 1
    assert "sqs-age-all-excluded" in applied
    zero, _ = model(events, [QueueSpec(SRC)], end=180, excluded_age="zero")
    assert points(zero, AGE) == {0.0: 0.0, 60.0: 0.0, 120.0: 0.0}


@covers("sqs-retention")
def test_retention_deletes_a_message_from_its_enqueue_time_without_a_delete() -> None:
    series, applied = model([send(0, "a")], [QueueSpec(SRC, retention_seconds=600)], end=900)
    visible = points(series, VISIBLE)
    assert visible[480] == 1 and visible[540] == 0  # gone at 600, the end of minute 540
    assert max(points(series, AGE)) == 480
    assert sum(points(series, DELETED).values()) == 0
    assert "sqs-retention" in applied


@covers("sqs-retention-move")
def test_a_standard_dlq_keeps_the_enqueue_time_for_expiry_a_fifo_one_resets_it() -> None:
    events = [send(0, "a"), send(3600, "a", queue=DLQ, by=REDRIVE, enqueued=0)]
    standard = [QueueSpec(SRC), QueueSpec(DLQ, retention_seconds=7200)]
    series, applied = model(events, standard, end=12000)
    dlq = points(series, VISIBLE, DLQ)
    assert dlq[7080] == 1 and dlq[7140] == 0  # expired at 0 + 7200
    assert "sqs-retention-move" in applied
    fifo = [QueueSpec(SRC, fifo=True), QueueSpec(DLQ, fifo=True, retention_seconds=7200)]
    reset, _ = model(events, fifo, end=12000)
    dlq = points(reset, VISIBLE, DLQ)
    assert dlq[7140] == 1 and dlq[10680] == 1 and dlq[10740] == 0  # expired at 3600 + 7200


@covers("sqs-received-deleted")
def test_received_and_deleted_count_calls_per_minute_duplicates_but_not_purges() -> None:
    events = [
        send(1, "a"),
        send(2, "b"),
        receive(3, "a"),
        receive(4, "b"),
        delete(61, "a"),
        delete(62, "a"),  # a duplicate delete is counted
        SqsEvent(t=130, queue=SRC, op="purge"),
    ]
    series, applied = model(events, [QueueSpec(SRC)], end=240)
    assert points(series, RECEIVED) == {0.0: 2, 60.0: 0, 120.0: 0, 180.0: 0}
    assert points(series, DELETED) == {0.0: 0, 60.0: 2, 120.0: 0, 180.0: 0}
    assert points(series, VISIBLE)[120] == 0  # purged, not deleted
    assert "sqs-received-deleted" in applied


@covers("sqs-sample-instant")
def test_gauges_describe_the_end_of_the_minute() -> None:
    assert RULES_BY_ID["sqs-sample-instant"].reading
    series, _ = model([send(10, "a"), delete(50, "a"), send(70, "b")], [QueueSpec(SRC)], end=180)
    assert points(series, VISIBLE) == {0.0: 0, 60.0: 1, 120.0: 1}
    assert points(series, SENT)[0] == 1 and points(series, DELETED)[0] == 1


# --- the model around the rules -------------------------------------------------------------------------------


def test_events_on_unknown_queues_and_bad_readings_are_refused() -> None:
    with pytest.raises(ValueError, match="'other'"):
        model([call(10, "other")])
    with pytest.raises(ValueError, match="'other'"):
        model([call(10_000, "other")])  # after the last minute too
    with pytest.raises(ValueError, match="excluded_age"):
        model([], excluded_age="none")
    with pytest.raises(ValueError, match="idle_since"):
        model([], idle_since={"other": 0})


def test_idle_since_within_six_hours_keeps_the_queue_active_until_they_are_over() -> None:
    series, applied = model([], [QueueSpec(SRC)], end=3 * 3600, idle_since={SRC: -IDLE_SECONDS + 3600})
    assert max(points(series, VISIBLE)) == 3600 - 60
    assert "sqs-idle" in applied and "sqs-wake-delay" not in applied


def test_events_need_not_be_sorted_and_the_input_is_left_alone() -> None:
    events = [delete(50, "a"), send(10, "a"), receive(20, "a")]
    copy = list(events)
    series, _ = model(events, [QueueSpec(SRC)], end=120)
    assert events == copy and points(series, DELETED)[0] == 1 and points(series, VISIBLE)[0] == 0


def test_every_rule_has_an_id_one_line_a_documentation_link_and_a_test() -> None:
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        assert r.text and "\n" not in r.text, r.id
        assert r.url.startswith("https://docs.aws.amazon.com/"), r.id
        if r.reading:
            assert r.text.startswith("Docs silent"), r.id
    sqs_ids = {r.id for r in RULES if r.id.startswith("sqs-")}
    assert sqs_ids <= set(COVERED), sorted(sqs_ids - set(COVERED))


def test_rule_lookup_refuses_unknown_ids_and_the_docs_table_has_every_rule() -> None:
    assert rule("sqs-idle").url.endswith("sqs-monitoring-using-cloudwatch.html")
    with pytest.raises(KeyError, match="sqs-idel"):
        rule("sqs-idel")
    table = rules_markdown().splitlines()
    assert len(table) == 2 + len(RULES)
    assert all(f"`{r.id}`" in line for r, line in zip(RULES, table[2:], strict=True))
