"""The local demo's pure parts: each worker's producer mix and the accounting that decides its exit code."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from consumer.examples.notifications import parse
from consumer.local.demo import REDRIVE_ROUNDS, Demo
from consumer.local.demo_lane import (
    DEAD_LETTERED,
    DELIVERED,
    Accounting,
    DemoResult,
    Lane,
    RecordingDownstream,
    account,
)
from consumer.local.demo_notifications import KINDS, MIX, Downstream, build_mix
from consumer.local.harness import QUIET, Planned
from consumer.message import PoisonMessage
from consumer.ops.queues import fingerprint
from tests.unit.support import lane_of

#: What a lane reads of its worker's task environment.
TASK = {"QUEUE_URL": "https://sqs.local/q", "DLQ_URL": "d", "CONSUMER_STOP_TIMEOUT_SECONDS": "35"}
POISON = {"kind": "poison", "reason": "body is not JSON: Expecting value: line 1 column 1 (char 0)"}


def plan_of(*kinds: str) -> list[Planned]:
    return [Planned(f"evt-{i}", kind, "{}") for i, kind in enumerate(kinds)]


def test_build_mix_follows_the_shares_with_every_kind() -> None:
    """120 events split 54/18/6/18/6/18 by kind, each id unique, the same mix on every run."""
    mix = build_mix(120)
    assert Counter(p.kind for p in mix) == {
        "good": 54,
        "flaky": 18,
        "slow": 6,
        "malformed": 18,
        "rejected": 6,
        "outage": 18,
    }
    assert len({p.event_id for p in mix}) == 120
    assert mix == build_mix(120)


def test_build_mix_smallest_has_one_of_each_kind() -> None:
    """Six events: one of each kind, so every path runs even in the shortest form."""
    assert sorted(p.kind for p in build_mix(6)) == sorted(KINDS)


def test_build_mix_rejects_fewer_events_than_kinds() -> None:
    """Five events cannot cover six kinds: the error names the parameter, the rule and the value."""
    with pytest.raises(ValueError, match=r'"messages" must be at least 6 \(one of each kind\): 5'):
        build_mix(5)


def test_build_mix_malformed_bodies_are_poison_to_the_example_handler() -> None:
    """Every malformed variant fails the example's parse as PoisonMessage, nine distinct causes; the rest parse."""
    mix = build_mix(120)
    reasons = set()
    for planned in (p for p in mix if p.kind == "malformed"):
        with pytest.raises(PoisonMessage) as raised:
            parse(planned.body)
        reasons.add(fingerprint({"kind": "poison", "reason": raised.value.reason}))
    assert len(reasons) == 9
    for planned in mix:
        if planned.kind != "malformed":
            assert parse(planned.body)["event_id"] == planned.event_id


def test_build_mix_one_noisy_tenant_sends_most_events_and_three_quiet_ones_the_rest() -> None:
    """Every event has a tenant (its MessageGroupId): the noisy one sends about 70 %, three quiet ones the rest."""
    tenants = Counter(p.tenant for p in build_mix(120))
    assert set(tenants) == {"tenant-noisy", "tenant-a", "tenant-b", "tenant-c"}
    assert tenants["tenant-noisy"] > 0.6 * 120
    assert all(0 < n < 0.2 * 120 for tenant, n in tenants.items() if tenant != "tenant-noisy")


def test_build_mix_flaky_events_fail_once_or_twice() -> None:
    """Flaky events carry 1 or 2 transient failures; no other kind has any."""
    mix = build_mix(120)
    assert {p.transient_failures for p in mix if p.kind == "flaky"} == {1, 2}
    assert {p.transient_failures for p in mix if p.kind != "flaky"} == {0}


def test_account_balances_when_every_event_is_in_its_place() -> None:
    """Delivered kinds delivered once, poison kinds in the DLQ with a reason: balanced."""
    plan = plan_of("good", "flaky", "slow", "outage", "malformed", "rejected")
    result = account(
        plan, KINDS, {"evt-0": 1, "evt-1": 1, "evt-2": 1, "evt-3": 1}, {"evt-4": POISON, "evt-5": POISON}, 0
    )
    assert (result.balanced, result.delivered, result.dead_lettered) == (True, 4, {"malformed": 1, "rejected": 1})
    assert result.dlq_reasons == {"poison: body is not JSON: Expecting value: line <n> column <n> (char <n>)": 2}


def test_account_reports_an_event_in_neither_place_as_lost() -> None:
    """An event neither delivered nor in the DLQ is lost and the accounting does not balance."""
    result = account(plan_of("good", "good"), KINDS, {"evt-0": 1}, {}, 0)
    assert (result.lost, result.balanced) == (["evt-1"], False)


def test_account_reports_a_good_event_in_the_dlq_as_misplaced() -> None:
    """A deliverable event that ended in the DLQ is misplaced, not balanced."""
    result = account(plan_of("good"), KINDS, {}, {"evt-0": POISON}, 0)
    assert (result.misplaced, result.lost, result.balanced) == (["evt-0"], [], False)


def test_account_reports_a_dlq_message_without_reason_as_misplaced() -> None:
    """A poison event in the DLQ without the consumer's reason record does not count as in its place."""
    result = account(plan_of("malformed"), KINDS, {}, {"evt-0": None}, 0)
    assert (result.misplaced, result.balanced) == (["evt-0"], False)


def test_account_reports_an_event_in_both_places() -> None:
    """Delivered and also in the DLQ: in two places, not balanced."""
    result = account(plan_of("good"), KINDS, {"evt-0": 1}, {"evt-0": POISON}, 0)
    assert (result.in_two_places, result.balanced) == (["evt-0"], False)


def test_account_reports_messages_left_in_the_source() -> None:
    """Anything still in the source queue at the end keeps the accounting open."""
    result = account(plan_of("good"), KINDS, {"evt-0": 1}, {}, 1)
    assert (result.left_in_source, result.balanced) == (1, False)


def test_account_reports_unknown_dlq_messages() -> None:
    """A DLQ message that was never produced by this run is reported and unbalances."""
    result = account(plan_of("good"), KINDS, {"evt-0": 1}, {"stranger": POISON}, 0)
    assert (result.unknown_in_dlq, result.balanced) == (["stranger"], False)


def test_account_counts_extra_deliveries_as_duplicates() -> None:
    """Three 200s for one event are two duplicates; the run is then not ok even though places balance."""
    accounting = account(plan_of("good"), KINDS, {"evt-0": 3}, {}, 0)
    assert (accounting.duplicates, accounting.balanced) == (2, True)
    assert result_of(accounting).ok is False


def test_demo_result_ok_needs_every_consumer_to_exit_zero() -> None:
    """A balanced run whose consumer exited 1 on SIGTERM is not ok."""
    accounting = account(plan_of("good"), KINDS, {"evt-0": 1}, {}, 0)
    assert result_of(accounting).ok is True
    assert result_of(accounting, exit_code=1).ok is False


def test_demo_result_ok_needs_every_event_sent() -> None:
    """A balanced run whose producer could not send an event (consumer.producer gave up on it) is not ok."""
    lane = lane_of(account(plan_of("good"), KINDS, {"evt-0": 1}, {}, 0))
    lane.unsent = ["evt-1: InternalError: boom"]
    assert lane.ok is False


class RefusingSqs:
    """SendMessageBatch that takes every entry but the ones whose idempotency key is in ``refused``."""

    def __init__(self, refused: set[str]) -> None:
        self.refused, self.calls = refused, 0

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        self.calls += 1
        key = {e["Id"]: e["MessageAttributes"]["idempotency-key"]["StringValue"] for e in Entries}
        return {
            "Successful": [{"Id": i, "MessageId": f"m-{k}"} for i, k in key.items() if k not in self.refused],
            "Failed": [
                {"Id": i, "Code": "InvalidMessageContents", "Message": "no", "SenderFault": True}
                for i, k in key.items()
                if k in self.refused
            ],
        }


def test_lane_producer_sends_through_consumer_producer_and_names_what_it_could_not_send(tmp_path: Path) -> None:
    """The lane's producer sends with consumer.producer.send; an event SQS refused is named in ``unsent``, not dropped."""
    plan = build_mix(12)
    sqs = RefusingSqs({plan[3].event_id})
    downstream = RecordingDownstream()
    lane = Lane("notifications", MIX, plan, downstream, TASK, sqs, tmp_path)
    lane._produce(0.0, None)
    downstream.stop()
    assert (lane.produced, sqs.calls) == (11, 2)
    assert lane.unsent == [f"{plan[3].event_id}: InvalidMessageContents: no"]


def test_demo_result_ok_needs_every_running_consumer_healthy() -> None:
    """A balanced run in which a running consumer answered python -m consumer health unhealthy is not ok."""
    lane = lane_of(account(plan_of("good"), KINDS, {"evt-0": 1}, {}, 0))
    lane.unhealthy = ["#1 (before the stop): unhealthy: poller-0 stalled"]
    assert lane.ok is False


def test_kinds_expect_a_place_each() -> None:
    """Every kind names one of the two final places, and the shares add up to the whole mix."""
    assert {place for _, place, _ in KINDS.values()} == {DELIVERED, DEAD_LETTERED}
    assert sum(share for share, _, _ in KINDS.values()) == pytest.approx(1.0)


def result_of(accounting: Accounting, exit_code: int = 0) -> DemoResult:
    return DemoResult(workers=[lane_of(accounting, exit_code)], elapsed_seconds=1.0)


def test_demo_result_ok_needs_every_worker_balanced() -> None:
    """The notifications worker balanced and the reports worker not: the run is not ok (exit 1)."""
    good = lane_of(account(plan_of("good"), KINDS, {"evt-0": 1}, {}, 0))
    lost = lane_of(account([Planned("rpt-0", "good", "{}")], KINDS, {}, {}, 0), worker="reports")
    assert DemoResult(workers=[good], elapsed_seconds=1.0).ok is True
    assert DemoResult(workers=[good, lost], elapsed_seconds=1.0).ok is False


def test_demo_result_json_keeps_the_first_worker_on_top_and_every_worker_by_name() -> None:
    """--report: the first worker's keys at the top (as a single-worker demo has them), each worker under "workers",
    the run's "ok"."""
    good = lane_of(account(plan_of("good"), KINDS, {"evt-0": 1}, {}, 0))
    lost = lane_of(account([Planned("rpt-0", "good", "{}")], KINDS, {}, {}, 0), worker="reports")
    data = DemoResult(workers=[good, lost], elapsed_seconds=1.0).to_json()
    assert (data["worker"], data["accounting"]["balanced"], data["ok"]) == ("notifications", True, False)
    assert sorted(data["workers"]) == ["notifications", "reports"]
    assert data["workers"]["reports"]["accounting"]["lost"] == ["rpt-0"]


class RecoveringLane:
    """What :meth:`Demo._recover` reads of the notifications lane: its downstream, depths and redrive record."""

    def __init__(self) -> None:
        self.downstream = Downstream([], slow_seconds=0)
        self.depths = (0, 0, 5)  # one flaky event in the DLQ beside the 4 expected
        self.expected_dlq = 4
        self.redrive: dict[str, Any] = {}

    def settled(self) -> bool:  # what the waits are told to wait for (the fake waits answer for it)
        return self.depths == (0, 0, self.expected_dlq)

    def late_arrivals(self) -> int:  # the DLQ's surplus, every other event delivered (the fake's premise)
        return self.depths[2] - self.expected_dlq


#: A wait's answer in :func:`recovering`: the wait ended (None) on a late arrival, the DLQ still one over.
LATE = "late"


def recovering(waits: list[str | None]) -> tuple[Demo, RecoveringLane, list[str]]:
    """A demo whose settle waits answer ``waits`` in turn (quiet with the DLQ one over, :data:`LATE`, until None:
    settled) and whose redrives move one message each; the steps taken, in order."""
    demo = Demo.__new__(Demo)
    demo.phase = ""
    lane, steps, answers = RecoveringLane(), [], iter(waits)

    def wait(*_: Any) -> str | None:
        steps.append("wait")
        answer = next(answers)
        if answer is LATE:
            return None
        if answer is None:
            lane.depths = (0, 0, 4)
        return answer

    def redrive(_: Any) -> dict[str, Any]:
        steps.append("redrive")
        return {"command": "redrive", "exit_code": 0, "moved": 1, "output": []}

    demo._wait = wait  # type: ignore[method-assign]
    demo._redrive = redrive  # type: ignore[method-assign]
    return demo, lane, steps


QUIET_SHORT = f"{QUIET} for 20 s short of the expected places"


def test_recover_waits_for_what_its_last_redrive_moved() -> None:
    """Every redrive is followed by a wait: the recovery ends settled (None) when the third redrive's message is
    delivered, rather than handing the closing report a message still on its way with a stale 'quiet'."""
    demo, lane, steps = recovering([QUIET_SHORT, QUIET_SHORT, QUIET_SHORT, None])
    assert demo._recover(lane, deadline=0.0, refresh=lambda: None) is None  # type: ignore[arg-type]
    assert steps == ["wait", "redrive", "wait", "redrive", "wait", "redrive", "wait"]
    assert lane.redrive["rounds"] == REDRIVE_ROUNDS and lane.redrive["moved"] == REDRIVE_ROUNDS
    assert not lane.downstream.outage.is_set()  # the outage ended first


def test_recover_stops_redriving_when_a_redrive_moves_nothing() -> None:
    """The DLQ over its count with nothing the filter moves (a second copy of a poison event): one redrive, then the
    quiet reason is the answer, not two more rounds of waiting for nothing."""
    demo, lane, steps = recovering([QUIET_SHORT, QUIET_SHORT])
    demo._redrive = lambda _: steps.append("redrive") or {"command": "r", "exit_code": 0, "moved": 0, "output": []}  # type: ignore[method-assign]
    assert demo._recover(lane, deadline=0.0, refresh=lambda: None) == QUIET_SHORT  # type: ignore[arg-type]
    assert steps == ["wait", "redrive"]


def test_recover_redrives_a_late_arrival_as_soon_as_it_is_all_that_is_amiss() -> None:
    """The wait ends on a late arrival (the source empty, the DLQ one over, that event undelivered): one redrive at
    once, then a wait until it is delivered, with no quiet wait first (20 s of the demo's lease and backoff)."""
    demo, lane, steps = recovering([LATE, None])
    assert demo._recover(lane, deadline=0.0, refresh=lambda: None) is None  # type: ignore[arg-type]
    assert steps == ["wait", "redrive", "wait"] and lane.redrive["moved"] == 1


def test_recover_waits_quiet_when_late_arrivals_outlast_the_redrives() -> None:
    """Still a late arrival after every round: a last wait, for the settled places alone, says what is short."""
    demo, lane, steps = recovering([LATE, LATE, LATE, LATE, QUIET_SHORT])
    assert demo._recover(lane, deadline=0.0, refresh=lambda: None) == QUIET_SHORT  # type: ignore[arg-type]
    assert steps == ["wait", "redrive", "wait", "redrive", "wait", "redrive", "wait", "wait"]


def test_a_lane_counts_late_arrivals_only_once_nothing_else_can_move(tmp_path: Path) -> None:
    """An event to deliver, not delivered, with the source empty and the DLQ one over its count: one late arrival.
    Nothing while the source still holds a message (in flight: it may yet be delivered), nor while the DLQ's surplus
    is not the undelivered count (a lost event beside a second DLQ copy is no late arrival)."""
    plan = plan_of("good", "flaky", "malformed")
    downstream = RecordingDownstream()
    lane = Lane("notifications", MIX, plan, downstream, TASK, RefusingSqs(set()), tmp_path)
    downstream.successes["evt-0"] = 1
    lane.depths = (0, 0, 2)
    assert lane.late_arrivals() == 1
    lane.depths = (0, 1, 2)
    assert lane.late_arrivals() == 0
    lane.depths = (0, 0, 1)
    assert lane.late_arrivals() == 0
    downstream.successes["evt-1"] = 1
    lane.depths = (0, 0, 2)
    assert lane.late_arrivals() == 0
    downstream.stop()


def test_recover_redrives_only_a_dlq_over_its_expected_count() -> None:
    """Settled at once: no redrive. Quiet with the DLQ at its expected count: no redrive either (what is short is
    not in the DLQ), and the quiet reason is the answer."""
    demo, lane, steps = recovering([None])
    assert demo._recover(lane, deadline=0.0, refresh=lambda: None) is None  # type: ignore[arg-type]
    assert steps == ["wait"] and lane.redrive == {}
    demo, lane, steps = recovering([QUIET_SHORT])
    lane.depths = (0, 0, 4)
    assert demo._recover(lane, deadline=0.0, refresh=lambda: None) == QUIET_SHORT  # type: ignore[arg-type]
    assert steps == ["wait"]


def test_a_lane_names_what_it_is_short_of(tmp_path: Path) -> None:
    """A wait that ended short says where: the source's depths, the DLQ's against its expected count, and which
    events that must be delivered are not."""
    plan = plan_of("good", "good", "malformed")
    downstream = RecordingDownstream()
    lane = Lane("notifications", MIX, plan, downstream, TASK, RefusingSqs(set()), tmp_path)
    downstream.successes["evt-0"] = 1
    lane.depths = (0, 1, 0)
    assert lane.shortfall() == (
        "source 0 visible, 1 in flight or delayed; DLQ 0 of 1 expected; 1 to deliver not delivered: evt-1"
    )
    downstream.stop()


def test_account_reports_an_event_dead_lettered_twice() -> None:
    """Two DLQ copies of one poison event: in its place, yet the DLQ holds more messages than events, which a run
    must not call balanced (a dict by event id would count the copies once)."""
    a = account(plan_of("malformed", "good"), KINDS, {"evt-1": 1}, {"evt-0": POISON}, 0, {"evt-0": 2})
    assert (a.dead_lettered_twice, a.misplaced, a.balanced) == (["evt-0"], [], False)
    assert account(plan_of("malformed"), KINDS, {}, {"evt-0": POISON}, 0, {"evt-0": 1}).balanced is True
