"""The chaos suite's causes of a repeat delivery or an event in two places, from what a run recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.chaos_accounting import stream_failures
from bench.chaos_evidence import (
    ENDPOINT,
    LEASE_LAPSED,
    SIGKILL,
    UNEXPLAINED,
    ConsumerLogs,
    Delivery,
    ReceiveLog,
    Run,
    classify_repeats,
    double_hand_outs,
    two_places_by_endpoint,
)
from bench.proxy import Exchange

LEASE = 10.0
KEY = "evt-chaos-00061"


def receive_answer(sender: str, message_id: str, count: int, at: float, *, passed_on: bool = True) -> Exchange:
    """A ReceiveMessage answer as moto gives it (JSON protocol), from a consumer labelled ``sender``."""
    answer = {
        "Messages": [
            {
                "MessageId": message_id,
                "ReceiptHandle": f"handle-{message_id}-{count}",
                "Attributes": {"ApproximateReceiveCount": str(count)},
                "MessageAttributes": {"idempotency-key": {"StringValue": KEY, "DataType": "String"}},
            }
        ]
    }
    agent = f"Boto3/1.44.5 md/Botocore#1.44.5 cfg/retry-mode#standard app/{sender} Botocore/1.44.5"
    return Exchange("ReceiveMessage", agent, b"{}", 200, json.dumps(answer).encode(), at - 0.5, at, passed_on)


def visibility_change(message_id: str, count: int, at: float) -> Exchange:
    body = json.dumps({"Entries": [{"Id": "0", "ReceiptHandle": f"handle-{message_id}-{count}"}]}).encode()
    return Exchange("ChangeMessageVisibilityBatch", "", body, 200, b"{}", at, at + 0.01, True)


def logs(tmp_path: Path, lines: dict[str, list[dict[str, Any]]]) -> ConsumerLogs:
    """Each consumer's JSON log lines, written as the consumer writes them, read back."""
    paths = []
    for label, entries in lines.items():
        path = tmp_path / f"{label}.log"
        path.write_text("".join(json.dumps({"timestamp": "2026-11-26T17:22:06.662Z", **e}) + "\n" for e in entries))
        paths.append((label, path))
    return ConsumerLogs(paths)


def run_of(receives: ReceiveLog, consumer_logs: ConsumerLogs, killed: dict[str, float] | None = None) -> Run:
    return Run(killed or {}, receives, consumer_logs, LEASE, started=0.0)


def recorded(*exchanges: Exchange) -> ReceiveLog:
    log = ReceiveLog()
    for exchange in exchanges:
        log(exchange)
    return log


def test_a_repeat_after_the_earlier_sender_was_sigkilled_is_explained_even_if_stamped_after_the_kill(
    tmp_path: Path,
) -> None:
    """The flake: c3 received the event, delivered, was SIGKILLed before logging it processed; the downstream's busy
    thread stamped c3's delivery 0.1 s after the kill. c2's repeat after the lease is the SIGKILL's, not a duplicate
    the consumer caused (comparing the kill with c3's stamped arrival called it unexplained)."""
    receives = recorded(receive_answer("c3", "m1", 1, at=5.0), receive_answer("c2", "m1", 2, at=16.0))
    found = classify_repeats(
        {KEY: [Delivery("c3", 6.1, 200), Delivery("c2", 16.2, 200)]},
        run_of(receives, logs(tmp_path, {"c3": [], "c2": []}), killed={"c3": 6.0}),
    )
    assert [(r["cause"], r["senders"]) for r in found["repeats"]] == [(SIGKILL, ["c3", "c2"])]
    assert (found["explained_by_sigkill"], found["unexplained"]) == (1, [])
    assert found["repeats"][0]["evidence"][0] == (
        "c3 delivered (read by the downstream at +6.10 s) and was SIGKILLed at +6.00 s before logging it processed;"
        " c2 delivered again at +16.20 s"
    )


def test_a_repeat_after_a_sigkill_whose_sender_had_logged_the_message_processed_is_unexplained(
    tmp_path: Path,
) -> None:
    """c3 recorded completion (message_processed is logged after it) before it was killed: its kill explains
    nothing, the repeat's claim should have found the event done."""
    receives = recorded(receive_answer("c3", "m1", 1, at=5.0))
    processed = [{"event": "message_processed", "message_id": "m1", "receive_count": 1}]
    found = classify_repeats(
        {KEY: [Delivery("c3", 6.0, 200), Delivery("c2", 30.0, 200)]},
        run_of(receives, logs(tmp_path, {"c3": processed}), killed={"c3": 7.0}),
    )
    assert [r["cause"] for r in found["unexplained"]] == [UNEXPLAINED]


def test_a_repeat_while_the_earlier_sender_lived_past_its_lease_is_a_lapsed_lease_and_fails(tmp_path: Path) -> None:
    """c1 was alive and the repeat came more than a lease after c1 received the event: c1 held it past its lease
    (a stalled heartbeat); the store's warning is part of the evidence, and the run fails naming the cause."""
    receives = recorded(receive_answer("c1", "m1", 1, at=5.0), receive_answer("c2", "m1", 2, at=16.0))
    warning = {"event": f"idempotency: host:1:2:3 finished attr:{KEY} but no longer held its lease; the work ..."}
    found = classify_repeats(
        {KEY: [Delivery("c1", 6.0, 200), Delivery("c2", 16.5, 200)]},
        run_of(receives, logs(tmp_path, {"c1": [warning]})),
    )
    assert [r["cause"] for r in found["unexplained"]] == [LEASE_LAPSED]
    assert any("no longer held its lease" in line for line in found["unexplained"][0]["evidence"])
    assert stream_failures(empty_stream(), found) == [
        f"1 repeat deliveries explained neither by a SIGKILL nor by the endpoint ({KEY} by c1, c2: lease_lapsed)"
    ]


def test_a_repeat_inside_the_earlier_holders_lease_is_the_endpoints_and_does_not_fail(tmp_path: Path) -> None:
    """c2 delivered 3 s after c1 received the event: c1's claim was live, so the store admitted two claims at once
    (moto's race), even though c1 was SIGKILLed in between (a kill never shortens a lease)."""
    receives = recorded(receive_answer("c1", "m1", 1, at=5.0), receive_answer("c2", "m1", 1, at=5.01))
    found = classify_repeats(
        {KEY: [Delivery("c1", 5.2, 200), Delivery("c2", 8.0, 200)]},
        run_of(receives, logs(tmp_path, {}), killed={"c1": 6.0}),
    )
    assert [r["cause"] for r in found["repeats"]] == [ENDPOINT]
    assert (found["caused_by_endpoint"], found["unexplained"]) == (1, [])
    assert stream_failures(empty_stream(), found) == []


def test_a_repeat_without_any_recorded_receive_is_unexplained(tmp_path: Path) -> None:
    """No evidence is no excuse: a repeat the records cannot explain fails the run."""
    found = classify_repeats(
        {KEY: [Delivery("c1", 6.0, 200), Delivery("c2", 25.0, 200)]}, run_of(ReceiveLog(), logs(tmp_path, {}))
    )
    assert [r["cause"] for r in found["unexplained"]] == [UNEXPLAINED]


def test_repeats_count_only_successful_deliveries(tmp_path: Path) -> None:
    """A 503 then a 200 is a retry, not a repeat."""
    found = classify_repeats(
        {KEY: [Delivery("c1", 10.0, 503), Delivery("c1", 12.0, 200)]}, run_of(ReceiveLog(), logs(tmp_path, {}))
    )
    assert found["raw_repeat_deliveries"] == 0


def test_double_hand_outs_are_one_receive_count_twice_or_a_second_receive_inside_the_lease() -> None:
    """The endpoint handed m1 to two receives at one count (7 s apart), m2 to a second receive 0.01 s after the first; m3 came
    back after its lease, m4 after a visibility change (a hand-back): those two are SQS doing its job."""
    receives = recorded(
        receive_answer("c1", "m1", 2, at=1.0),
        receive_answer("c2", "m1", 2, at=8.0),
        receive_answer("c1", "m2", 1, at=1.0),
        receive_answer("c2", "m2", 2, at=1.01),
        receive_answer("c1", "m3", 1, at=1.0),
        receive_answer("c2", "m3", 2, at=12.0),
        receive_answer("c1", "m4", 1, at=1.0),
        visibility_change("m4", 1, at=1.5),
        receive_answer("c2", "m4", 2, at=2.0),
    )
    found = double_hand_outs(receives, LEASE)
    assert {m: [(r.sender, r.receive_count) for r in pair] for m, pair in found.items()} == {
        "m1": [("c1", 2), ("c2", 2)],
        "m2": [("c1", 1), ("c2", 2)],
    }


def test_a_lost_receive_answer_is_no_hold_but_still_a_receive() -> None:
    """A receive whose answer the proxy lost left the message in flight with nobody: not a hold of the event, and
    a receive at the same count right after it is still a double hand-out."""
    receives = recorded(receive_answer("c1", "m1", 1, at=1.0, passed_on=False), receive_answer("c2", "m1", 1, at=1.1))
    assert [r.sender for r in receives.holds()[KEY]] == ["c2"]
    assert list(double_hand_outs(receives, LEASE)) == ["m1"]


def test_an_event_in_two_places_fails_unless_the_endpoint_handed_its_message_to_two_receives(tmp_path: Path) -> None:
    """The event whose message went to c8 and c9 at receive 3 is the endpoint's, with both logs' lines; another
    event in two places, with no such evidence, still fails."""
    receives = recorded(receive_answer("c8", "m1", 3, at=1.0), receive_answer("c9", "m1", 3, at=1.05))
    consumer_logs = logs(
        tmp_path,
        {
            "c8": [{"event": "message_in_progress_elsewhere", "message_id": "m1", "receive_count": 3}],
            "c9": [{"event": "message_moved_to_dlq", "message_id": "m1", "receive_count": 3}],
        },
    )
    stream = empty_stream() | {"in_two_places": [KEY, "evt-chaos-00001"]}
    stream["in_two_places_by_endpoint"] = two_places_by_endpoint(
        stream["in_two_places"], double_hand_outs(receives, LEASE), consumer_logs
    )
    assert list(stream["in_two_places_by_endpoint"]) == [KEY]
    assert stream["in_two_places_by_endpoint"][KEY] == [
        "message m1 handed to c8 (receive 3) and to c9 (receive 3) 0.050 s apart",
        "17:22:06.662 c8 message_in_progress_elsewhere (receive 3)",
        "17:22:06.662 c9 message_moved_to_dlq (receive 3)",
    ]
    assert stream_failures(stream, {"unexplained": []}) == ["1 events in two places: ['evt-chaos-00001']"]


def empty_stream() -> dict[str, Any]:
    """An accounting with nothing wrong in it."""
    return {
        "lost": [],
        "misplaced": [],
        "in_two_places": [],
        "in_two_places_by_endpoint": {},
        "dlq_without_reason": [],
        "unsent": [],
        "left_in_source": 0,
    }
