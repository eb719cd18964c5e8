"""The runtime's timing behaviours on the virtual clock: a lease kept by the heartbeat, a handler given up on past
max_duration, every slot stuck, the retry backoff and the DLQ, a batch's window, an async handler cancelled at its
deadline. On a real clock each waits for real (seconds to a minute each, twice: in process and over HTTP); here a
run's minutes pass in a fraction of a second, and what each asserts is read from the run (bench/sim/run.py), exactly.
"""

from __future__ import annotations

import re

from bench.sim.invariants import check
from bench.sim.plan import Plan
from bench.sim.run import Run
from bench.sim.world import simulate


def run_of(**values: object) -> Run:
    """A quiet run (no faults, no chaos, every event of ``kinds`` in turn) that breaks no invariant."""
    quiet: dict[str, object] = {"chaos_until": 5.0, "send_over": 0.0, "cycle_kinds": True, "consumers_from": 1.0}
    plan = Plan(seed=7, **(quiet | values))  # type: ignore[arg-type]
    run = simulate(plan)
    assert [str(v) for v in check(run)] == []
    return run


def logged(run: Run, event: str) -> list[float]:
    """When the runtime logged ``event``, in virtual seconds."""
    return [float(line.split()[0]) for line in run.events if re.search(rf" log {event}\b", line)]


def calls(run: Run, operation: str) -> list[float]:
    return [c.at for c in run.ledger.calls if c.operation == operation and c.caller != "world"]


def test_the_heartbeat_keeps_a_long_handler_invisible() -> None:
    """A 30 s handler on a 4 s lease: its lease is extended as it runs (about once a heartbeat interval, 1 s here),
    so it is received once and done once."""
    run = run_of(messages=1, duration=(30.0, 30.0), max_duration=60, max_lease=4)
    assert [(a.receive_count, a.outcome) for a in run.attempts] == [(1, "applied")]
    extensions = calls(run, "ChangeMessageVisibilityBatch")
    assert 10 <= len(extensions) <= 31 and max(b - a for a, b in zip(extensions, extensions[1:], strict=False)) < 4


def test_a_handler_past_max_duration_is_given_up_on_and_its_message_runs_again() -> None:
    """A handler that hangs: given up on at max_duration (10 s), extended no more, so its message comes back after its
    lease (max_duration and the margin) to a free slot and is done there."""
    run = run_of(messages=1, kinds=("hang",), max_duration=10, concurrency=2)
    first, second = run.attempts
    assert (first.receive_count, second.receive_count, second.outcome) == (1, 2, "applied")
    [timed_out] = logged(run, "handler_timed_out")
    assert 10 < timed_out - first.started <= 10.6  # the heartbeat's tick after max_duration
    assert second.started - first.started >= run.contract.attempt_timeout_seconds


def test_every_slot_stuck_past_its_lease_ends_the_process_with_exit_3() -> None:
    """One slot, a handler that hangs: past its attempt's end (max_duration and the margin, 20 s) the slot is stuck,
    the process exits 3 (ECS replaces it), and the new one does the message."""
    run = run_of(messages=1, kinds=("hang",), max_duration=10, concurrency=1)
    stuck = run.processes[0]
    assert stuck.exit_code == 3
    assert 20 < stuck.exited - run.attempts[0].started <= 21  # type: ignore[operator]
    assert [a.outcome for a in run.attempts[1:]] == ["applied"]


def test_a_failing_message_backs_off_then_the_dlq_takes_it_with_its_reason() -> None:
    """Three receives allowed, a handler that always fails: a jittered backoff after each failure ([cap/2, cap] with
    cap 1 s then 2 s here, plus its lease's expiry), a warning one receive before the DLQ, then the DLQ with the last
    error as reason."""
    run = run_of(messages=1, kinds=("failing",), max_receive_count=3, max_duration=5)
    attempts = run.attempts
    assert [a.receive_count for a in attempts] == [1, 2, 3]
    gaps = [b.started - a.ended for a, b in zip(attempts, attempts[1:], strict=False)]  # type: ignore[operator]
    assert 0.5 <= gaps[0] <= 1.6 and 1.0 <= gaps[1] <= 2.6
    assert len(logged(run, "message_one_receive_from_dlq")) == 1
    [moved] = run.dlq
    assert moved["reason"]["kind"] == "exhausted"
    assert moved["reason"]["reason"] == "failed 3 times; last error: Transient: simulated failure"


def test_a_batch_is_collected_across_receives_up_to_max_batch_then_the_window() -> None:
    """25 events waiting, max_batch 20 (two receives of 10 at least), one thread, a 4 s window: a full call of 20 at
    once, then the 5 left once the window after the first of them has passed."""
    run = run_of(shape="batch", messages=25, max_batch=20, batch_window=4, concurrency=1)
    calls: dict[float, int] = {}
    for attempt in run.attempts:
        calls[attempt.started] = calls.get(attempt.started, 0) + 1
    first, second = sorted(calls)
    assert (calls[first], calls[second]) == (20, 5)
    assert second - first >= 4.0


def test_an_async_handler_past_max_duration_is_cancelled_and_its_slot_freed() -> None:
    """One coroutine slot and a handler that hangs: cancelled at max_duration (its work never done), its slot free at
    once (the next event is done meanwhile, before the hung one comes back), and its message back after its lease and
    done once; the process never counts as stuck."""
    run = run_of(shape="async", messages=2, kinds=("hang", "ok"), max_duration=10, concurrency=1)
    hung, *rest = sorted(run.attempts, key=lambda a: a.started)
    assert (hung.event, hung.ended) == ("e000", None)  # cancelled: its work never done
    assert [(a.event, a.receive_count) for a in rest] == [("e001", 1), ("e000", 2)]
    assert rest[0].started - hung.started < 12  # the slot freed at the cancel (10 s), not after the lease
    assert {p.exit_code for p in run.processes} == {0}
    assert len(run.effects["e000"]) == 1


def test_messages_waiting_for_a_free_thread_keep_their_lease() -> None:
    """A 4 s lease, one thread, calls of 8 s: the messages received while a call runs wait for the thread, and the
    heartbeat extends their leases as it does running ones', so each starts on its first receive (none handed back
    with its lease run down, none received again)."""
    run = run_of(
        shape="batch",
        messages=5,
        max_batch=10,
        concurrency=1,
        max_duration=20,
        max_lease=4,
        duration=(8.0, 8.0),
        send_over=6.0,
        consumers_from=0.0,
    )
    assert sorted(a.event for a in run.attempts) == [f"e00{n}" for n in range(5)]
    assert {a.receive_count for a in run.attempts} == {1}
    assert logged(run, "message_released") == []


def test_a_batch_handler_costs_the_floor_in_sqs_requests() -> None:
    """300 events waiting, batches of 100, two threads: about one receive and one delete call per 10 messages (the
    floor, 0.2 SQS requests a message), at most 0.25 with the receives that come back short at the end. Counted at
    the endpoint: every request the consumer made until its last delete (after it, an idle consumer's long polls)."""
    run = run_of(
        shape="batch", messages=300, max_batch=100, batch_window=1, concurrency=2, max_duration=30, consumers_from=20.0
    )
    assert len({a.event for a in run.attempts}) == 300
    made = [c for c in run.ledger.calls if c.caller != "world" and c.service == "sqs"]
    last_delete = max(c.at for c in made if c.operation == "DeleteMessageBatch")
    assert len([c for c in made if c.at <= last_delete]) / 300 <= 0.25
