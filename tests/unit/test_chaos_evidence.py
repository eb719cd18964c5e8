"""The chaos suite's causes of a repeat delivery or an event in two places, from what a run recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.chaos_accounting import dlq_copies, stream_failures
from bench.chaos_evidence import (
    ENDPOINT,
    LEASE_LAPSED,
    SIGKILL,
    UNEXPLAINED,
    Ack,
    ConsumerLogs,
    Delivery,
    ReceiveLog,
    Run,
    classify_repeats,
    double_hand_outs,
    trace,
    two_places_by_endpoint,
    two_places_by_sigkill,
)
from bench.proxy import Exchange
from tests.unit.support import KEY, receive_answer

LEASE = 10.0
BACKSTOP = 5  # the demo contract's max_receive_count 3 + 2


def visibility_change(message_id: str, count: int, at: float, seconds: int | None = None) -> Exchange:
    entry: dict[str, Any] = {"Id": "0", "ReceiptHandle": f"handle-{message_id}-{count}"}
    if seconds is not None:
        entry["VisibilityTimeout"] = seconds
    body = json.dumps({"Entries": [entry]}).encode()
    return Exchange("ChangeMessageVisibilityBatch", "", body, 200, b"{}", at, at + 0.01, True)


def delete(message_id: str, count: int, at: float, *, refused: bool = False, status: int | None = 200) -> Exchange:
    """A DeleteMessageBatch of one receive's handle, with the other entry a batch carries; ``refused``: moto's
    answer lists the entry as failed (a stale handle); ``status`` None: the forward failed."""
    entries = [
        {"Id": "0", "ReceiptHandle": "handle-other-1"},
        {"Id": "1", "ReceiptHandle": f"handle-{message_id}-{count}"},
    ]
    failed = [{"Id": "1", "SenderFault": True, "Code": "ReceiptHandleIsInvalid"}] if refused else []
    answer = json.dumps({"Successful": [{"Id": "0"}], "Failed": failed}).encode()
    return Exchange("DeleteMessageBatch", "", json.dumps({"Entries": entries}).encode(), status, answer, at, at, True)


def logs(tmp_path: Path, lines: dict[str, list[dict[str, Any]]]) -> ConsumerLogs:
    """Each consumer's JSON log lines, written as the consumer writes them, read back."""
    paths = []
    for label, entries in lines.items():
        path = tmp_path / f"{label}.log"
        path.write_text("".join(json.dumps({"timestamp": "2026-11-26T17:22:06.662Z", **e}) + "\n" for e in entries))
        paths.append((label, path))
    return ConsumerLogs(paths)


def run_of(receives: ReceiveLog, consumer_logs: ConsumerLogs, killed: dict[str, float] | None = None) -> Run:
    return Run(killed or {}, receives, consumer_logs, LEASE, started=0.0, redrive_max_receive_count=BACKSTOP)


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


# --------------------------------------------------------------------------- applied, then SQS's silent redrive


def redriven_run(tmp_path: Path, *extra: Exchange, killed: dict[str, float] | None = None) -> tuple[Run, Any]:
    """The shape of the flake (the chaos page): m1 applied by c1 at receive 1, then every holder gone before a delete
    for it was applied: c1, c4 and c8 SIGKILLed about a second after logging it processed (their deletes batched),
    receive 4 answered to the long poll SIGKILLed c10 left at moto, receive 5's answer lost by the proxy; after it
    SQS's redrive moved m1 to the DLQ without a reason. ``extra``: more records; ``killed``: other kill times."""
    receives = recorded(
        receive_answer("c1", "m1", 1, at=5.0),
        receive_answer("c4", "m1", 2, at=15.4),
        receive_answer("c8", "m1", 3, at=25.8),
        delete("m1", 3, at=26.9, status=None),  # forwarded while moto was unreachable: not applied
        receive_answer("c10", "m1", 4, at=37.0, passed_on=False),
        receive_answer("c11", "m1", 5, at=47.2, passed_on=False),
        *extra,
    )
    done = {"event": "message_processed", "message_id": "m1"}
    skipped = {"event": "duplicate_skipped", "message_id": "m1"}
    consumer_logs = logs(
        tmp_path,
        {
            "c1": [done | {"receive_count": 1}],
            "c4": [skipped | {"receive_count": 2}],
            "c8": [skipped | {"receive_count": 3}],
        },
    )
    kills = {"c1": 6.3, "c4": 16.2, "c8": 27.5, "c10": 35.0} | (killed or {})
    return run_of(receives, consumer_logs, kills), {KEY: [Delivery("c1", 5.2, 200)]}


def test_an_event_applied_then_redriven_after_every_later_holder_was_sigkilled_is_excused_with_its_evidence(
    tmp_path: Path,
) -> None:
    """Each receive from the one the effect was applied in on ended with nobody holding m1: its holder SIGKILLed
    before a delete for it was applied, or its answer never reaching a consumer. The event is reported with the
    evidence, and neither "in two places" nor "in the DLQ without a reason" fails the run."""
    run, deliveries = redriven_run(tmp_path)
    traced = trace(deliveries, {"in_two_places": [KEY]}, run, {KEY: [("m1", None)]})
    assert (list(traced.by_sigkill), traced.unexplained, traced.by_endpoint) == ([KEY], {}, {})
    assert traced.by_sigkill[KEY] == [
        f"c1 applied {KEY} (read by the downstream at +5.20 s) holding message m1 from receive 1 at +5.00 s",
        "receive 1 of m1 at +5.00 s by c1: c1 SIGKILLed at +6.30 s (1.30 s after the receive, its lease ran to"
        " +15.00 s) before a delete for it was applied; none sent",
        "receive 2 of m1 at +15.40 s by c4: c4 SIGKILLed at +16.20 s (0.80 s after the receive, its lease ran to"
        " +25.40 s) before a delete for it was applied; none sent",
        "receive 3 of m1 at +25.80 s by c8: c8 SIGKILLed at +27.50 s (1.70 s after the receive, its lease ran to"
        " +35.80 s) before a delete for it was applied; deletes sent, none applied, at +26.90 s",
        "receive 4 of m1 at +37.00 s by c10: answered after c10 was SIGKILLed at +35.00 s: nobody held it",
        "receive 5 of m1 at +47.20 s by c11: the answer never reached c11 (lost by the proxy or its restart): nobody held it",
        "message m1 then moved to the DLQ by SQS's redrive, without a reason",
        "17:22:06.662 c1 message_processed (receive 1)",
        "17:22:06.662 c4 duplicate_skipped (receive 2)",
        "17:22:06.662 c8 duplicate_skipped (receive 3)",
    ]
    stream = empty_stream() | {"in_two_places": [KEY], "dlq_without_reason": [KEY]} | traced.accounting()
    assert stream_failures(stream, {"unexplained": []}) == []


def test_a_redriven_event_whose_holder_lived_past_its_lease_without_a_delete_fails_naming_it(tmp_path: Path) -> None:
    """c8 was never SIGKILLed: alive, it held m1 to the end of its lease without a delete applied (the consumer's
    fault). The event stays in two places and in the DLQ without a reason, and the failure says why."""
    run, deliveries = redriven_run(tmp_path, killed={"c8": 99.0})
    excused, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, run)
    assert (excused, list(refused)) == ({}, [KEY])
    reason = (
        "receive 3 of m1 at +25.80 s by c8: c8 was alive at the end of its lease at +35.80 s (SIGKILLed only at"
        " +99.00 s) and no delete for it was applied; deletes sent, none applied, at +26.90 s: the consumer's"
    )
    assert refused[KEY][0] == reason
    stream = empty_stream() | {
        "in_two_places": [KEY],
        "dlq_without_reason": [KEY],
        "in_two_places_unexplained": refused,
    }
    assert stream_failures(stream, {"unexplained": []}) == [
        f"1 events in two places: ['{KEY}']",
        f"1 events in the DLQ without a reason (SQS's silent redrive): ['{KEY}']",
        f"{KEY}: SIGKILLs do not explain it: {reason}",
    ]


def test_a_holder_that_handed_the_message_back_before_its_sigkill_is_the_consumers(tmp_path: Path) -> None:
    """c8 released m1 (visibility 0) at +26.0 s instead of deleting it and was SIGKILLed later: its lease ended alive
    at the release, so the receive it cost is the consumer's doing."""
    run, deliveries = redriven_run(tmp_path, visibility_change("m1", 3, at=26.0, seconds=0))
    _, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, run)
    assert refused[KEY][0].startswith(
        "receive 3 of m1 at +25.80 s by c8: c8 was alive at the end of its lease at +26.00 s"
    )


def test_a_redriven_event_with_a_delete_applied_or_a_receive_unrecorded_is_not_excused(tmp_path: Path) -> None:
    """A delete for m1 applied, yet SQS moved it later; or receive 4 missing from the records (a receive nobody can
    vouch for), or the receives ending before the redrive backstop: no excuse."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    applied, deliveries = redriven_run(tmp_path / "a", delete("m1", 2, at=15.9))
    _, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, applied)
    assert (
        refused[KEY][0]
        == "receive 2 of m1 at +15.40 s by c4: a delete for it was applied, yet SQS moved the message later"
    )
    run, _ = redriven_run(tmp_path / "b")
    run.receives.receives[:] = [r for r in run.receives.receives if r.receive_count != 4]
    _, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, run)
    assert refused[KEY][0] == "message m1: receives [1, 2, 3, 5] recorded after the effect was applied: one missing"
    run.receives.receives[:] = [r for r in run.receives.receives if r.receive_count != 5]
    _, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, run)
    assert refused[KEY][0] == "message m1: last receive recorded 3, redrive after 5: one missing"


def test_receives_before_the_effect_was_applied_are_not_held_against_a_redriven_event(tmp_path: Path) -> None:
    """A flaky event: c3 received m1 at receive 1, the downstream answered 503 and c3, alive, backed off; c1 applied
    it at receive 2, then every holder was gone. c3's backoff was a retry, not a missing delete: excused."""
    receives = recorded(
        receive_answer("c3", "m1", 1, at=1.0),
        visibility_change("m1", 1, at=1.3, seconds=3),
        receive_answer("c1", "m1", 2, at=5.0),
        receive_answer("c4", "m1", 3, at=15.4),
        receive_answer("c8", "m1", 4, at=25.8),
        receive_answer("c10", "m1", 5, at=37.0, passed_on=False),
    )
    run = run_of(receives, logs(tmp_path, {}), {"c1": 6.3, "c4": 16.2, "c8": 27.5, "c10": 35.0})
    deliveries = {KEY: [Delivery("c3", 1.2, 503), Delivery("c1", 5.2, 200)]}
    excused, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, run)
    assert (list(excused), refused) == ([KEY], {})
    assert excused[KEY][1].startswith("receive 2 of m1 at +5.00 s by c1: c1 SIGKILLed at +6.30 s")


def test_a_holder_that_gave_up_its_delete_while_alive_is_the_consumers(tmp_path: Path) -> None:
    """c4 logged delete_failed for m1 (its tries spent while the endpoint was down) and was SIGKILLed only later:
    the kill did not orphan m1, giving up did."""
    run, deliveries = redriven_run(tmp_path)
    gave_up = tmp_path / "c4-more.log"
    gave_up.write_text(
        json.dumps({"timestamp": "2026-11-26T17:22:07.000Z", "event": "delete_failed", "message_id": "m1"})
    )
    run = Run(run.killed, run.receives, ConsumerLogs([("c4", gave_up)]), LEASE, 0.0, BACKSTOP)
    _, refused = two_places_by_sigkill([KEY], {KEY: [("m1", None)]}, deliveries, run)
    assert refused[KEY][0] == (
        "receive 2 of m1 at +15.40 s by c4: c4 gave up its delete (delete_failed) while alive: the consumer's"
    )


def dead_lettered(message_id: str, count: int) -> dict[str, Any]:
    """The reason record a consumer's DLQ copy carries (consumer/runtime/dead_letter.py)."""
    reason = "failed 3 times; last error: WebhookUnavailable: webhook answered HTTP 503"
    return {"kind": "exhausted", "reason": reason, "original_message_id": message_id, "receive_count": count}


def test_an_event_dead_lettered_then_applied_after_its_holder_was_sigkilled_before_the_delete_is_excused(
    tmp_path: Path,
) -> None:
    """The other shape SIGKILLs leave (a reproduction under load): a flaky event's receives 1 and 2 went to the polls
    of SIGKILLed consumers, c8 got a 503 at receive 3 (its last allowed), moved m1 to the DLQ with the reason and was
    SIGKILLed 0.25 s later, before its (batched) delete; m1 came back and c10 applied it at receive 4. The consumer
    sends the DLQ copy before deleting, so a kill in between leaves two places, never none: excused. A copy
    dead-lettered after the effect was applied is the consumer's: not excused."""
    receives = recorded(
        receive_answer("c3", "m1", 1, at=26.5, passed_on=False),
        receive_answer("c2", "m1", 2, at=36.9, passed_on=False),
        receive_answer("c8", "m1", 3, at=46.8),
        receive_answer("c10", "m1", 4, at=59.1),
        delete("m1", 4, at=60.2),
    )
    moved = [{"event": "message_moved_to_dlq", "message_id": "m1", "receive_count": 3}]
    run = run_of(receives, logs(tmp_path, {"c8": moved}), {"c3": 26.4, "c2": 36.1, "c8": 48.7})
    deliveries = {KEY: [Delivery("c8", 47.2, 503), Delivery("c10", 59.2, 200)]}
    copies = {KEY: [("dlq-1", dead_lettered("m1", 3))]}
    excused, refused = two_places_by_sigkill([KEY], copies, deliveries, run)
    assert (list(excused), refused) == ([KEY], {})
    assert excused[KEY] == [
        f"c10 applied {KEY} (read by the downstream at +59.20 s) holding message m1 from receive 4 at +59.10 s",
        "c8 dead-lettered m1 at receive 3 (exhausted), before the effect was applied",
        "receive 3 of m1 at +46.80 s by c8: c8 SIGKILLed at +48.70 s (1.90 s after the receive, its lease ran to"
        " +56.80 s) before a delete for it was applied; none sent",
        "17:22:06.662 c8 message_moved_to_dlq (receive 3)",
    ]
    copies = {KEY: [("dlq-1", dead_lettered("m1", 4))]}
    _, refused = two_places_by_sigkill([KEY], copies, deliveries, run)
    assert refused[KEY][0] == (
        "c10 dead-lettered m1 at receive 4 (exhausted), not before the receive the effect was applied in:"
        " the consumer dead-lettered it after"
    )
    _, refused = two_places_by_sigkill(
        [KEY],
        copies | {KEY: [("dlq-1", dead_lettered("m1", 3))]},
        deliveries,
        run_of(receives, logs(tmp_path, {}), {"c3": 26.4, "c2": 36.1}),
    )
    assert refused[KEY][0].startswith("receive 3 of m1 at +46.80 s by c8: c8 was alive at the end of its lease")


def test_the_receive_log_records_each_delete_and_visibility_change_by_handle_and_whether_moto_applied_it() -> None:
    """A batch entry moto lists as failed was not applied; a forward that failed is unknown, so not applied; a
    visibility change keeps its new timeout. Handles of messages nobody received here are left out."""
    log = recorded(
        receive_answer("c1", "m1", 1, at=1.0),
        delete("m1", 1, at=2.0, refused=True),
        delete("m1", 1, at=3.0, status=None),
        visibility_change("m1", 1, at=4.0, seconds=7),
        delete("m1", 1, at=5.0),
    )
    assert log.acks["handle-m1-1"] == [
        Ack("delete", 2.0, applied=False),
        Ack("delete", 3.0, applied=False),
        Ack("visibility", 4.0, applied=True, seconds=7.0),
        Ack("delete", 5.0, applied=True),
    ]
    assert list(log.acks) == ["handle-m1-1"]


def test_dlq_copies_name_each_events_messages_and_whether_they_carry_a_reason() -> None:
    """SQS's redrive keeps the MessageId, so a copy without a reason names the source message it moved."""

    def message(message_id: str, key: str) -> dict[str, Any]:
        return {"MessageId": message_id, "MessageAttributes": {"idempotency-key": {"StringValue": key}}}

    dlq = [(message("m1", KEY), None), (message("m2", KEY), {"reason": "x"}), (message("m3", "evt-canary-1"), None)]
    assert dlq_copies(dlq, "evt-chaos-") == {KEY: [("m1", None), ("m2", {"reason": "x"})]}


def test_a_poison_event_dead_lettered_then_left_to_sqss_redrive_by_sigkills_is_excused(tmp_path: Path) -> None:
    """A reproduction under load: a malformed event's holders at receives 2, 3 and 4 each moved it to the DLQ with
    its reason and were SIGKILLed before their delete; receive 5 went to a SIGKILLed consumer's poll, and SQS's
    redrive then added a copy without a reason. Its place (the DLQ, with a reason) is right; the reasonless copy is
    the SIGKILLs': excused. So is an event in the DLQ only without a reason, never decided by a consumer, when each of
    its receives from the first ended so (a batch handler's consumer holds a batch's worth when it is SIGKILLed);
    not when a holder lived past its lease."""
    receives_of_m1 = (
        receive_answer("c3", "m1", 1, at=27.0),
        receive_answer("c4", "m1", 2, at=39.1),
        receive_answer("c7", "m1", 3, at=50.8),
        receive_answer("c10", "m1", 4, at=62.8),
        receive_answer("c11", "m1", 5, at=72.6, passed_on=False),
    )
    receives = recorded(*receives_of_m1)
    run = run_of(receives, logs(tmp_path, {}), {"c3": 29.2, "c4": 43.8, "c7": 52.1, "c10": 63.6, "c11": 72.1})
    poison = {"kind": "poison", "reason": "schema check failed at properties/channel", "original_message_id": "m1"}
    copies = {KEY: [(f"dlq-{n}", poison | {"receive_count": n}) for n in (2, 3, 4)] + [("m1", None)]}
    traced = trace({}, {"dlq_without_reason": [KEY]}, run, copies)
    assert (list(traced.redriven_by_sigkill), traced.redriven_unexplained, traced.by_sigkill) == ([KEY], {}, {})
    assert traced.redriven_by_sigkill[KEY][:2] == [
        f"c4 dead-lettered {KEY} with its reason, holding message m1 from receive 2 at +39.10 s",
        "receive 2 of m1 at +39.10 s by c4: c4 SIGKILLed at +43.80 s (4.70 s after the receive, its lease ran to"
        " +49.10 s) before a delete for it was applied; none sent",
    ]
    stream = empty_stream() | {"dlq_without_reason": [KEY]} | traced.accounting()
    assert stream_failures(stream, {"unexplained": []}) == []
    traced = trace({}, {"dlq_without_reason": [KEY]}, run, {KEY: [("m1", None)]})
    assert (list(traced.redriven_by_sigkill), traced.redriven_unexplained) == ([KEY], {})
    assert traced.redriven_by_sigkill[KEY][:2] == [
        f"nobody applied or dead-lettered {KEY}: each receive of its message ended with nobody holding it",
        "receive 1 of m1 at +27.00 s by c3: c3 SIGKILLed at +29.20 s (2.20 s after the receive, its lease ran to"
        " +37.00 s) before a delete for it was applied; none sent",
    ]
    alive = run_of(receives, logs(tmp_path, {}), {"c3": 29.2, "c4": 43.8, "c10": 63.6, "c11": 72.1})  # c7 lived
    traced = trace({}, {"dlq_without_reason": [KEY]}, alive, {KEY: [("m1", None)]})
    assert list(traced.redriven_unexplained) == [KEY]
    stream = empty_stream() | {"dlq_without_reason": [KEY]} | traced.accounting()
    assert stream_failures(stream, {"unexplained": []})[-1].startswith(
        f"{KEY}: SIGKILLs do not explain it: receive 3 of m1 at +50.80 s by c7: c7 was alive at the end of its lease"
    )
    missing = run_of(recorded(*receives_of_m1[1:]), logs(tmp_path, {}), dict(run.killed))  # receive 1 not recorded
    traced = trace({}, {"dlq_without_reason": [KEY]}, missing, {KEY: [("m1", None)]})
    assert traced.redriven_unexplained[KEY][0] == "message m1: its first receive recorded is 2: one missing"


def test_a_repeated_send_of_an_applied_event_redriven_after_its_holders_were_sigkilled_is_excused(
    tmp_path: Path,
) -> None:
    """The producer sent the event twice (a lost answer): m1 applied by c1, the other copy m2 received five times,
    each receive ending with nobody holding it (holders SIGKILLed, an answer lost), before m1 was even received, then
    redriven by SQS without a reason. Every receive of m2 counts, not only those after the effect; with one holder of
    m2 alive past its lease, or m2's first receive missing from the records, it is not excused."""

    def run_with(killed: dict[str, float], first: int = 1) -> Run:
        receives = recorded(
            *(receive_answer(f"c{n + 1}", "m2", n, at=10.0 * n) for n in range(first, 5)),
            receive_answer("c9", "m2", 5, at=50.0, passed_on=False),
            receive_answer("c1", "m1", 1, at=60.0),
        )
        return run_of(receives, logs(tmp_path, {}), killed)

    kills = {"c2": 12.0, "c3": 23.0, "c4": 31.0, "c5": 44.0}
    deliveries = {KEY: [Delivery("c1", 60.5, 200)]}
    copies = {KEY: [("m2", None)]}
    places = {"in_two_places": [KEY]}
    traced = trace(deliveries, places, run_with(kills), copies)
    assert (list(traced.by_sigkill), traced.unexplained) == ([KEY], {})
    assert traced.by_sigkill[KEY][1].startswith("receive 1 of m2 at +10.00 s by c2: c2 SIGKILLed at +12.00 s")
    alive = trace(deliveries, places, run_with(kills | {"c3": 99.0}), copies)
    assert alive.unexplained[KEY][0].startswith(
        "receive 2 of m2 at +20.00 s by c3: c3 was alive at the end of its lease"
    )
    missing = trace(deliveries, places, run_with(kills, first=2), copies)
    assert missing.unexplained[KEY][0] == "message m2: its first receive recorded is 2: one missing"


def test_an_event_in_two_places_after_the_endpoint_handed_out_a_deleted_message_is_the_endpoints(
    tmp_path: Path,
) -> None:
    """c6 dead-lettered m1 at receive 3 (retries spent) and its delete was applied; moto still handed m1 out at
    receive 4, and c7 applied it: the endpoint kept a message it answered as deleted (reproduced with plain boto3
    in docs/evidence/CHAOS.md). Reported as the endpoint's; without the applied delete the event stays a failure."""
    exhausted = {"kind": "exhausted", "reason": "failed 3 times", "original_message_id": "m1", "receive_count": 3}

    def run_with(*acks: Exchange) -> Run:
        receives = recorded(receive_answer("c6", "m1", 3, at=10.0), *acks, receive_answer("c7", "m1", 4, at=21.5))
        return run_of(receives, logs(tmp_path, {}), {"c6": 40.0})

    places = {"in_two_places": [KEY]}
    deliveries = {KEY: [Delivery("c7", 22.0, 200)]}
    traced = trace(deliveries, places, run_with(delete("m1", 3, at=12.0)), {KEY: [("dlq-1", exhausted)]})
    assert (list(traced.by_endpoint), traced.unexplained) == ([KEY], {})
    assert traced.by_endpoint[KEY][0] == (
        "message m1: a delete with receive 3's handle by c6, sent at +12.00 s, was applied; receive 4 by c7 at"
        " +21.50 s handed it out again"
    )
    refused = trace(deliveries, places, run_with(delete("m1", 3, at=12.0, refused=True)), {KEY: [("dlq-1", exhausted)]})
    assert (refused.by_endpoint, list(refused.unexplained)) == ({}, [KEY])
