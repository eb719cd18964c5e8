"""Liveness: the progress file the loops write and the check `python -m consumer health` makes of it."""

from __future__ import annotations

import concurrent.futures
import json
import math
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest

from consumer import limits
from consumer.contract import WorkerContract
from consumer.limits import DYNAMODB_CLIENT, MAX_CONCURRENCY, SQS_CLIENT, SQS_MAX_WAIT_SECONDS, ClientTimeouts
from consumer.runtime.clients import dynamodb_client, sqs_client
from consumer.runtime.heartbeat import Heartbeat, Renewals
from consumer.runtime.inflight import State
from consumer.runtime.liveness import DEFAULT_LIVENESS_FILE, Liveness, check, liveness_path
from consumer.runtime.polling import Slots
from consumer.runtime.wiring import Shared


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def started(path: Path, clock: Clock) -> Liveness:
    liveness = Liveness(path, clock=clock)
    liveness.start({"poller-0": 30, "heartbeat": 13})
    return liveness


def test_check_passes_when_every_loop_progressed_within_its_allowance(tmp_path: Path) -> None:
    """Just started: every loop counts as having progressed at the start."""
    path, clock = tmp_path / "live.json", Clock()
    started(path, clock)
    assert check(path, clock.now + 13) == (True, "healthy: heartbeat 13 s ago, poller-0 13 s ago")


def test_check_names_the_stalled_loop_and_since_when(tmp_path: Path) -> None:
    """The heartbeat keeps beating; the poller's last progress is 31 s old: only the poller is named."""
    path, clock = tmp_path / "live.json", Clock()
    liveness = started(path, clock)
    clock.now += 31
    liveness.beat("heartbeat")
    assert check(path, clock.now) == (
        False,
        "unhealthy: poller-0 stalled: no progress since 2027-01-15T08:00:00+00:00 (31 s ago, 30 s allowed)",
    )


def test_a_beat_keeps_the_loop_healthy(tmp_path: Path) -> None:
    """A poller that returns from a receive every 20 s stays healthy long past its 30 s allowance."""
    path, clock = tmp_path / "live.json", Clock()
    liveness = started(path, clock)
    for _ in range(5):
        clock.now += 20
        liveness.beat("poller-0")
        liveness.beat("heartbeat")
    assert check(path, clock.now + 1)[0] is True


def test_beats_reach_the_file_at_most_once_a_second_per_loop(tmp_path: Path) -> None:
    """A busy poller (many receives a second) writes the file once a second, not per receive."""
    path, clock = tmp_path / "live.json", Clock()
    liveness = started(path, clock)
    clock.now += 0.5
    liveness.beat("poller-0")
    assert json.loads(path.read_text())["loops"]["poller-0"]["at"] == clock.now - 0.5
    clock.now += 0.5
    liveness.beat("poller-0")
    assert json.loads(path.read_text())["loops"]["poller-0"]["at"] == clock.now


def test_check_fails_without_a_progress_file(tmp_path: Path) -> None:
    """Before the consumer starts its loops (ECS's start period covers that) the check fails, saying why."""
    path = tmp_path / "absent.json"
    assert check(path, 0.0) == (
        False,
        f"unhealthy: no progress file at {path} (the consumer has not started its loops)",
    )


def test_check_fails_on_a_file_it_cannot_read(tmp_path: Path) -> None:
    """Garbage is a failure with the reason, never a crash."""
    path = tmp_path / "live.json"
    path.write_text("{not json")
    healthy, line = check(path, 0.0)
    assert not healthy and line.startswith(f"unhealthy: cannot read the progress file {path}: JSONDecodeError(")


def test_stopping_checks_only_the_heartbeat(tmp_path: Path) -> None:
    """Draining: the pollers stopped receiving on purpose; the heartbeat (which runs to the end) is still checked."""
    path, clock = tmp_path / "live.json", Clock()
    liveness = started(path, clock)
    liveness.stopping()
    clock.now += 40
    assert check(path, clock.now)[1].startswith("unhealthy: heartbeat stalled")
    liveness.beat("heartbeat")
    assert check(path, clock.now) == (True, "healthy (stopping): heartbeat 0 s ago")


def test_a_failed_write_never_stops_the_consumer(tmp_path: Path) -> None:
    """An unwritable location is logged; beats go on (the check then reports the missing file)."""
    liveness = Liveness(tmp_path / "missing-dir" / "live.json")
    liveness.start({"heartbeat": 13})
    liveness.beat("heartbeat")


def test_liveness_path_default_and_override() -> None:
    """The consumer and the check share the default; CONSUMER_LIVENESS_FILE moves both."""
    assert liveness_path({}) == Path(DEFAULT_LIVENESS_FILE) == Path("/tmp/consumer-liveness.json")
    assert liveness_path({"CONSUMER_LIVENESS_FILE": "/x/y.json"}) == Path("/x/y.json")


def test_slots_waiting_for_a_free_slot_counts_as_progress() -> None:
    """A poller blocked on busy handlers is alive: reserve_up_to calls on_wait while it waits."""
    slots, stop, waits = Slots(1, tick_seconds=0.01), threading.Event(), []
    slots.reserve_up_to(1, stop)
    threading.Timer(0.1, slots.release).start()
    assert slots.reserve_up_to(1, stop, on_wait=lambda: waits.append(1)) == 1
    assert len(waits) >= 2


def test_contract_derives_the_liveness_allowances_and_the_check_timing() -> None:
    """Poll: a receive's worst case (3 x (5 + 30) s + 13 s of backoff) + 10 s; heartbeat: its interval + 4 agent
    calls of 2 s + 10 s (no DynamoDB call: its renewals have threads of their own); ECS checks every half of the
    shorter."""
    short = WorkerContract(max_duration_seconds=5)  # visibility 15 s: heartbeat every 3 s
    assert (short.poll_stall_seconds, short.heartbeat_stall_seconds, short.health_check_interval_seconds) == (
        128,
        21,
        10,
    )
    tiny = WorkerContract(max_duration_seconds=1, max_lease_seconds=4)  # heartbeat every 1 s
    assert (tiny.heartbeat_stall_seconds, tiny.health_check_interval_seconds) == (19, 9)
    long = WorkerContract(max_duration_seconds=3600)  # heartbeat capped at 60 s
    assert (
        long.heartbeat_stall_seconds,
        long.health_check_interval_seconds,
        long.health_check_start_period_seconds,
    ) == (78, 39, 60)


def test_client_worst_case_counts_every_attempt_and_botocores_longest_backoff() -> None:
    """3 attempts of 5 s connect + 30 s read, and the two retries' longest waits (1 s + 5 s, 2 s + 5 s)."""
    assert ClientTimeouts(connect_seconds=5, read_seconds=30, max_attempts=3).worst_case_seconds() == 118
    assert ClientTimeouts(connect_seconds=1, read_seconds=1, max_attempts=1).worst_case_seconds() == 2
    # The 7th retry's wait is capped at botocore's 20 s (2 ** 6 = 64): 1+2+4+8+16+20+20 + 7 x 5 s.
    assert ClientTimeouts(connect_seconds=0, read_seconds=0, max_attempts=8).worst_case_seconds() == 106


def test_the_runtimes_clients_are_built_with_the_timeouts_the_allowances_are_derived_from() -> None:
    """The SQS and DynamoDB clients the run builds carry exactly SQS_CLIENT's and DYNAMODB_CLIENT's numbers."""
    session = boto3.Session(region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    contract = WorkerContract(max_duration_seconds=5)
    clients = ((sqs_client(session, contract), SQS_CLIENT), (dynamodb_client(session, contract), DYNAMODB_CLIENT))
    for client, timeouts in clients:
        config = client.meta.config
        assert (config.connect_timeout, config.read_timeout, config.retries) == (
            timeouts.connect_seconds,
            timeouts.read_seconds,
            {"mode": "standard", "total_max_attempts": timeouts.max_attempts},
        )
    assert SQS_CLIENT.read_seconds > SQS_MAX_WAIT_SECONDS  # a long poll never times out on our side


@pytest.mark.parametrize("concurrency", [1, 16, MAX_CONCURRENCY])
def test_the_runtimes_clients_hold_a_connection_for_every_thread_that_calls_them(concurrency: int) -> None:
    """A pool smaller than the threads calling a client discards a connection whenever one more returns one: the
    SQS client's has one for each worker, each poller, the acknowledger's two threads and the main thread; DynamoDB's
    one for each worker, the acknowledger's two (completions), the main thread and each renewal thread."""
    session = boto3.Session(region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    contract = WorkerContract(max_duration_seconds=5, concurrency=concurrency)
    sqs, dynamodb = sqs_client(session, contract), dynamodb_client(session, contract)
    assert (sqs.meta.config.max_pool_connections, dynamodb.meta.config.max_pool_connections) == (
        concurrency + min(math.ceil(concurrency / 10), 4) + 3,
        concurrency + min(concurrency, 4) + 3,
    )


def test_allowances_move_with_the_clients_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lengthen the SQS client's read timeout: the pollers' allowance grows by the attempts times the change. A
    slower DynamoDB client moves no allowance: the heartbeat waits on no DynamoDB call (its renewals have threads of
    their own)."""
    contract = WorkerContract(max_duration_seconds=5)
    poll, heartbeat = contract.poll_stall_seconds, contract.heartbeat_stall_seconds
    monkeypatch.setattr(
        limits, "SQS_CLIENT", replace(limits.SQS_CLIENT, read_seconds=limits.SQS_CLIENT.read_seconds + 7)
    )
    monkeypatch.setattr(limits, "DYNAMODB_CLIENT", replace(limits.DYNAMODB_CLIENT, max_attempts=4))
    assert contract.poll_stall_seconds == poll + 3 * 7
    assert contract.heartbeat_stall_seconds == heartbeat


def test_the_heartbeat_waits_for_no_lease_renewal(tmp_path: Path) -> None:
    """Three running messages due for extension on a table that does not answer: the heartbeat queues all three SQS
    extensions and their renewals and returns, so a slow table never holds up the next message's extension nor the next
    beat; a message whose renewal is still out gets no second one."""
    path, clock = tmp_path / "live.json", Clock()
    liveness = Liveness(path, clock=clock, min_write_seconds=0)
    liveness.start({"heartbeat": 79})
    answer, renewed, extended = threading.Event(), [], []

    class SlowStore:
        def renew(self, key: str, *, owner: str, lease_seconds: int) -> bool:
            answer.wait(10)
            renewed.append(key)
            return True

    contract = WorkerContract(max_duration_seconds=5)
    items = [
        SimpleNamespace(
            ticket=index,
            started_at=0.0,
            received_at=0.0,
            visible_until=1.0,
            key=f"k{index}",
            owner="o",
            message=None,
            state=State.RUNNING,
        )
        for index in range(3)
    ]
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    shared = Shared(
        contract=contract,
        clock=SimpleNamespace(monotonic=lambda: 0.0),  # type: ignore[arg-type]
        stopping=SimpleNamespace(event=threading.Event(), closed=threading.Event()),  # type: ignore[arg-type]
        table=SimpleNamespace(running=lambda: items, settling=list),  # type: ignore[arg-type]
        metrics=SimpleNamespace(count=lambda _name: None),  # type: ignore[arg-type]
        protection=None,  # type: ignore[arg-type]
        liveness=liveness,
    )
    heartbeat = Heartbeat(
        shared,
        ack=SimpleNamespace(change_visibility=lambda ticket, *_a, **_k: extended.append(ticket)),  # type: ignore[arg-type]
        renewals=Renewals(SlowStore(), executor),  # type: ignore[arg-type]
        lookahead=None,
        on_stuck=lambda: None,
        tick_seconds=1,
    )
    heartbeat._extend_leases(0.0)
    heartbeat._extend_leases(0.0)  # the next beat, the renewals still out
    assert extended == [0, 1, 2, 0, 1, 2] and renewed == []
    answer.set()
    executor.shutdown(wait=True)
    assert renewed == ["k0", "k1", "k2"]


def test_an_idle_loop_is_healthy_however_long_it_sleeps(tmp_path: Path) -> None:
    """The acknowledger sleeps for want of work on purpose: idle, it is never stalled; once it beats again its allowance
    counts from then, and past it the check names it."""
    path, clock = tmp_path / "live.json", Clock()
    liveness = Liveness(path, clock=clock)
    liveness.start({"acknowledger": 128, "heartbeat": 13})
    liveness.idle("acknowledger")
    clock.now += 3600
    liveness.beat("heartbeat")
    assert check(path, clock.now) == (True, "healthy: acknowledger idle, heartbeat 0 s ago")
    liveness.beat("acknowledger")
    clock.now += 129
    liveness.beat("heartbeat")
    healthy, line = check(path, clock.now)
    assert not healthy and line.startswith("unhealthy: acknowledger stalled: no progress since ")
