"""The scenario harness the demo and the chaos suite share: accounting, settle loop, batches, quiet time, CHAOS.md."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bench import chaos
from bench.chaos_accounting import ChaosResult
from bench.chaos_report import sections, write_markdown
from consumer import Message, worker
from consumer.declaration import contract_of
from consumer.errors import ContractError
from consumer.local import accounting, demo
from consumer.local.accounting import DEAD_LETTERED, DELIVERED, extra_deliveries, places
from consumer.local.harness import (
    IDEMPOTENCY_ATTRIBUTE,
    QUIET,
    TIMED_OUT,
    ConsumerProcess,
    Fleet,
    Planned,
    Tick,
    batch_entries,
    batches,
    quiet_seconds,
    settle,
    task_volume_paths,
)
from consumer.runtime.liveness import LIVENESS_FILE_ENV, Liveness

ROOT = Path(__file__).resolve().parents[2]
REASON = {"kind": "poison", "reason": "body is not JSON"}


def test_places_an_event_nowhere_is_lost() -> None:
    """Neither delivered nor in the DLQ: lost, and nothing else."""
    found = places([("a", DELIVERED)], set(), {})
    assert (found.lost, found.misplaced, found.in_two_places) == (["a"], [], [])


def test_places_an_event_in_both_places_is_in_two_places_not_misplaced() -> None:
    """Delivered and in the DLQ (even without a reason): in two places, not counted as misplaced."""
    found = places([("a", DELIVERED)], {"a"}, {"a": [None]})
    assert (found.in_two_places, found.misplaced, found.without_reason) == (["a"], [], ["a"])


def test_places_delivered_when_the_dlq_was_expected_is_misplaced() -> None:
    """A poison event delivered downstream is in the wrong place."""
    found = places([("a", DEAD_LETTERED)], {"a"}, {})
    assert (found.delivered_unexpectedly, found.misplaced) == (["a"], ["a"])


def test_places_dead_lettered_when_delivery_was_expected_is_told_apart() -> None:
    """A good event in the DLQ with a reason: the demo counts it misplaced, chaos as faults' casualty."""
    found = places([("a", DELIVERED)], set(), {"a": [REASON]})
    assert (found.dead_lettered_unexpectedly, found.misplaced, found.without_reason) == (["a"], ["a"], [])


def test_places_a_dlq_copy_without_a_reason_is_misplaced() -> None:
    """An expected DLQ event with one reasonless copy (SQS's silent redrive) fails as misplaced."""
    found = places([("a", DEAD_LETTERED)], set(), {"a": [REASON, None]})
    assert (found.without_reason, found.misplaced) == (["a"], ["a"])


def test_places_events_in_their_own_place_are_clean() -> None:
    """Delivered as expected and dead-lettered with a reason as expected: every list empty, plan order kept."""
    found = places([("a", DELIVERED), ("b", DEAD_LETTERED)], {"a"}, {"b": [REASON]})
    assert found == accounting.Places([], [], [], [], [], [])


def test_extra_deliveries_counts_successes_beyond_the_first() -> None:
    """Three successes for one event and one for another: two extra side effects."""
    assert extra_deliveries({"a": 3, "b": 1, "c": 0}) == 2


def test_quiet_seconds_is_the_lease_plus_the_longest_backoff_plus_margin() -> None:
    """A declaration's 30 s lease and 8 s maximum backoff, with 2 s of slack: 40 s."""

    @worker(
        max_duration=timedelta(seconds=60),
        max_lease=timedelta(seconds=30),
        retry_backoff_base=1,
        retry_backoff_max=8,
    )
    def handle(message: Message) -> None: ...

    assert quiet_seconds(contract_of(handle), margin_seconds=2.0) == 30 + 8 + 2.0


def test_quiet_seconds_of_both_scenarios_follow_the_demo_contract() -> None:
    """Chaos waits 16 s and the demo 20 s: the demo contract's 10 s lease and 4 s backoff, plus their slack."""
    assert (chaos.QUIET_SECONDS, demo.QUIET_SECONDS) == (16.0, 20.0)


def test_batches_are_sqs_sized_and_entries_carry_the_event_id() -> None:
    """25 events make batches of 10, 10, 5; each entry carries its event id in the idempotency-key attribute."""
    plan = [Planned(f"e{i}", "good", "{}") for i in range(25)]
    sends = batches(plan)
    (entry,) = batch_entries({"0": plan[3]})
    assert [len(b) for b in sends] == [10, 10, 5]
    assert entry == {
        "Id": "0",
        "MessageBody": "{}",
        "MessageAttributes": {IDEMPOTENCY_ATTRIBUTE: {"DataType": "String", "StringValue": "e3"}},
    }


def test_entries_are_the_producers_with_the_events_tenant() -> None:
    """The harness builds entries with consumer.producer (its checks included): a tenant becomes the MessageGroupId,
    and a tenant SQS would refuse is refused before anything is sent, naming it."""
    (entry,) = batch_entries({"7": Planned("e1", "good", "{}", tenant="acme")})
    assert (entry["Id"], entry["MessageGroupId"]) == ("7", "acme")
    with pytest.raises(ContractError, match=r'"messages\[0\]\.tenant"'):
        batch_entries({"0": Planned("e2", "good", "{}", tenant="has space")})


def wait(ticks: list[Tick], done_at: int | None = None, quiet: float | None = 0.0) -> str | None:
    """settle() over scripted looks (the last repeated), on a clock that moves 0.5 s per reading, never sleeping."""
    looks = itertools.chain(ticks, itertools.repeat(ticks[-1]))
    seen = itertools.count()
    number = -1

    def look() -> Tick:
        nonlocal number
        number = next(seen)
        return next(looks)

    clock = itertools.count()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("consumer.local.harness.time.monotonic", lambda: next(clock) * 0.5)
        patch.setattr("consumer.local.harness.time.sleep", lambda _: None)
        return settle(
            look,
            lambda: done_at is not None and number >= done_at,
            deadline=60.0,
            poll_seconds=0.5,
            quiet_seconds=quiet,
        )


def test_settle_returns_none_once_done() -> None:
    """done() true at the third look: None, even while work still moves."""
    assert wait([Tick(1, True), Tick(2, True), Tick(3, True)], done_at=2) is None


def test_settle_is_quiet_when_nothing_moves_and_nothing_is_busy() -> None:
    """The same state, not busy, for longer than the quiet time: QUIET."""
    assert wait([Tick("same", False)], quiet=3.0) == QUIET


def test_settle_is_never_quiet_while_busy() -> None:
    """The same state while busy (the producer still running): it waits until the deadline."""
    assert wait([Tick("same", True)], quiet=3.0) == TIMED_OUT


def test_settle_without_a_quiet_time_waits_for_done_or_the_deadline() -> None:
    """quiet_seconds None: a quiet run is not an answer; the deadline is."""
    assert wait([Tick("same", False)], quiet=None) == TIMED_OUT


def test_settle_stops_at_once_with_the_look_s_reason() -> None:
    """A look that reports a dead consumer ends the wait with its reason, before done() is asked."""
    assert wait([Tick(1, True, stop="a consumer exited on its own")], done_at=0) == "a consumer exited on its own"


def test_chaos_markdown_is_the_template_filled_from_the_stored_results(tmp_path: Path) -> None:
    """docs/evidence/CHAOS.md is what bench/CHAOS.template.md makes of the stored chaos.json, every placeholder
    filled."""
    stored = ChaosResult.from_json(json.loads((ROOT / "docs" / "evidence" / "bench" / "chaos.json").read_text()))
    write_markdown(stored, tmp_path / "CHAOS.md")
    text = (tmp_path / "CHAOS.md").read_text()
    assert "{{" not in text
    assert text == (ROOT / "docs" / "evidence" / "CHAOS.md").read_text()


def test_chaos_markdown_takes_the_set_up_timings_from_the_demo_contract() -> None:
    """The set-up's lease, receives, backstop and backoff are the demo contract's, not restated."""
    stored = ChaosResult.from_json(json.loads((ROOT / "docs" / "evidence" / "bench" / "chaos.json").read_text()))
    filled = sections(stored)
    assert [filled[k] for k in ("lease", "max_receives", "redrive_backstop", "backoff")] == ["10", "3", "5", "1-4"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A running process standing in for a consumer's (check_health only asks whether it runs)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_fleet_gives_each_consumer_its_own_liveness_file(tmp_path: Path) -> None:
    """Several consumers on one machine: each process's environment names its own liveness file in the log dir."""
    fleet = Fleet({"PATH": "/usr/bin", "CONSUMER_HANDLER": "no.such:handler"}, tmp_path)
    first, second = fleet.start(), fleet.start()
    for consumer in (first, second):
        consumer.process.wait(timeout=30)
    files = [consumer.environment[LIVENESS_FILE_ENV] for consumer in (first, second)]
    assert files == [str(tmp_path / "consumer-1.liveness.json"), str(tmp_path / "consumer-2.liveness.json")]


def test_fleet_gives_each_consumer_a_fresh_tmp_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ECS gives each task its own /tmp volume: a path of the task environment on /tmp (a handler's database file,
    say) is the same absolute path in the consumer's own directory (the log directory may be relative), empty at its
    start; every other value is left as it is, a path under /tmp of this machine's own environment included."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "consumer-1.tmp").mkdir()
    (tmp_path / "consumer-1.tmp" / "left-over.sqlite3").write_text("an earlier run's")
    task = {"DATABASE": "/tmp/audit.sqlite3", "CACHE": "/tmp", "NOT_ON_IT": "/tmpfs/x", "URL": "http://h/tmp/x"}
    assert task_volume_paths(task) == {"DATABASE": "/tmp/audit.sqlite3", "CACHE": "/tmp"}
    host = {"PATH": "/usr/bin", "CONSUMER_HANDLER": "no.such:handler", "RECORDS": "/tmp/pytest-of-x/records"}
    fleet = Fleet(host | task, Path("."), task_volume=task_volume_paths(task))
    first, second = fleet.start(), fleet.start()
    for consumer in (first, second):
        consumer.process.wait(timeout=30)
    databases = [consumer.environment["DATABASE"] for consumer in (first, second)]
    assert databases == [str(tmp_path / f"consumer-{n}.tmp" / "audit.sqlite3") for n in (1, 2)]
    assert first.environment["CACHE"] == str(tmp_path / "consumer-1.tmp")
    unchanged = ("PATH", "RECORDS", "NOT_ON_IT", "URL")
    assert [first.environment[key] for key in unchanged] == [
        "/usr/bin",
        "/tmp/pytest-of-x/records",
        "/tmpfs/x",
        "http://h/tmp/x",
    ]
    assert [list((tmp_path / f"consumer-{n}.tmp").iterdir()) for n in (1, 2)] == [[], []]


def test_check_health_runs_the_real_check_with_each_consumer_s_file(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """python -m consumer health, run with each process's own environment: a fresh file is healthy, a stalled
    poller is not (and is returned); a consumer not yet ready or asked to stop is not checked."""
    fleet = Fleet({}, tmp_path)
    for number, at in ((1, time.time()), (2, time.time() - 600)):
        path = tmp_path / f"consumer-{number}.liveness.json"
        Liveness(path, clock=lambda at=at: at).start({"poller-0": 30, "heartbeat": 13})
        env = {"PATH": "/usr/bin", LIVENESS_FILE_ENV: str(path)}
        fleet.processes.append(ConsumerProcess(number, sleeper, tmp_path / "x.log", env, ready=True))
    fleet.processes.append(ConsumerProcess(3, sleeper, tmp_path / "x.log", {}, ready=False))
    unhealthy = fleet.check_health("after producing")
    assert [c.number for c in unhealthy] == [2]
    ((healthy,), (stalled,), ()) = (c.health for c in fleet.processes)
    assert (healthy.phase, healthy.healthy, healthy.line.startswith("healthy: ")) == ("after producing", True, True)
    assert not stalled.healthy and "poller-0 stalled" in stalled.line


def test_check_health_starts_every_check_before_it_reads_an_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]
) -> None:
    """The checks run side by side, as ECS checks its tasks: every one is started before the first answer is read,
    so a round takes the slowest check's time, not the sum of them."""
    steps: list[str] = []

    class Check:
        def __init__(self, command: list[str], **_: object) -> None:
            self.returncode = 0
            steps.append("start")

        def communicate(self, timeout: float) -> tuple[str, None]:
            steps.append("read")
            return "healthy: every loop fresh\n", None

    monkeypatch.setattr(subprocess, "Popen", Check)
    fleet = Fleet({}, tmp_path)
    fleet.processes += [ConsumerProcess(n, sleeper, tmp_path / "x.log", {}, ready=True) for n in (1, 2, 3)]
    assert fleet.check_health("before the stop") == []
    assert steps == ["start"] * 3 + ["read"] * 3


def test_fleet_counts_each_tenant_s_processed_and_dead_lettered_messages_from_the_logs(tmp_path: Path) -> None:
    """The consumers log message_group_id on each message's lines: the fleet counts them per tenant (a duplicate the
    idempotency store skipped is logged as skipped and processed, so processed less skipped is the handler's work)."""
    fleet = Fleet({}, tmp_path)
    consumer = ConsumerProcess(1, None, tmp_path / "consumer-1.log", {})  # type: ignore[arg-type]
    lines = [
        {"event": "message_processed", "message_group_id": "tenant-a"},
        {"event": "duplicate_skipped", "message_group_id": "tenant-a"},
        {"event": "message_processed", "message_group_id": "tenant-a"},
        {"event": "message_moved_to_dlq", "kind": "poison", "message_group_id": "tenant-b"},
        {"event": "message_processed"},
        {"event": "message_backoff", "message_group_id": "tenant-a"},
    ]
    consumer.log_path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fleet.processes.append(consumer)
    fleet.read_logs()
    assert fleet.tenants == {
        "tenant-a": {"message_processed": 2, "duplicate_skipped": 1},
        "tenant-b": {"message_moved_to_dlq": 1},
    }
