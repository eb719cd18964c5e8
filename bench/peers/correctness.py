"""The correctness cells that tell the subjects apart (the bare loop has no handler and sits them out).

Both send a fixed set of messages, each carrying its key ``n``, in the subject's own envelope, to a fresh queue
whose attributes are ours' contract for the cell's handler (so every subject sees the same queue), and read what
the handlers recorded (``BENCH_RECORD``: a ``start`` and an ``end`` line per handler run, :mod:`bench.peers.work`).

``lease``: a handler outliving its lease. 8 messages, concurrency 16, an 8 s handler (``slow8``) on a queue whose
visibility timeout is 5 s (ours declares ``max_lease`` 5 s and extends it with its heartbeat). With free handlers
waiting, a message whose visibility lapses while its handler runs is received again and started again: each extra
start is a duplicate. Watched until every message was handled and the queue is empty, or :data:`LEASE_WATCH`
seconds after the first start.

``kill``: a worker killed mid-handler. 16 messages, concurrency 16, a 3 s handler (``kill3``); the whole process
group gets SIGKILL :data:`KILL_AFTER` seconds after the first start. Then the queue is watched (up to
:data:`KILL_WATCH` s) for when the messages the dead worker held are visible again, the same subject is started
again and left to finish (up to :data:`FINISH_WATCH` s). Reported: the handlers cut off; messages *lost* (neither
handled to completion nor left in the queue: deleted without a completed handler); messages *duplicated* (handled
to completion twice); and *invisible until*: measured where the queue's visibility brings them back within the
watch, else computed from the visibility the subject sets (dramatiq-sqs: 12 hours).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import rig
from bench.peers import envs, handlers
from bench.peers.subjects import Context, Subject, bodies, create_table, drop_table
from consumer.declaration import contract_of
from consumer.testing import QueueDepth, depth

CELLS = ("lease", "kill")
LEASE_KIND, LEASE_CONCURRENCY, LEASE_MESSAGES = "slow8", 16, 8
LEASE_WATCH = 40.0
KILL_KIND, KILL_CONCURRENCY, KILL_MESSAGES = "kill3", 16, 16
KILL_AFTER = 1.5
KILL_WATCH = 30.0
FINISH_WATCH = 40.0
#: The finish watch also ends once nothing is visible, no handler runs and nothing was recorded for this long.
QUIET = 6.0
START_TIMEOUT = 90.0
#: SQS's visibility timeout for a queue that sets none (ours' contracts always set one).
DEFAULT_VISIBILITY = 30


@dataclass(frozen=True)
class Event:
    event: str
    key: int
    time: float
    pid: int


def parse(text: str) -> list[Event]:
    """The record's lines (``<event> <key> <unix time> <pid>``); a torn last line is left out."""
    events = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        try:
            events.append(Event(parts[0], int(parts[1]), float(parts[2]), int(parts[3])))
        except ValueError:
            continue
    return events


def read(path: Path) -> list[Event]:
    return parse(path.read_text()) if path.exists() else []


def lease_figures(events: Sequence[Event], messages: int) -> dict[str, Any]:
    """Duplicate starts (every start of a key after its first) and how many keys were handled to completion."""
    starts: dict[int, int] = {}
    for e in events:
        if e.event == "start":
            starts[e.key] = starts.get(e.key, 0) + 1
    ended = {e.key for e in events if e.event == "end"}
    return {
        "messages": messages,
        "starts": sum(starts.values()),
        "duplicate_starts": sum(n - 1 for n in starts.values()),
        "keys_started": len(starts),
        "keys_completed": len(ended),
    }


def kill_figures(
    events: Sequence[Event], messages: int, killed_at: float, left_in_queue: int, visible_again: float | None
) -> dict[str, Any]:
    """What the kill at ``killed_at`` (unix time) did, from the record and the queue's depth at the end."""
    before = [e for e in events if e.time < killed_at]
    after = [e for e in events if e.time >= killed_at]
    started = {e.key for e in before if e.event == "start"}
    finished = {e.key for e in before if e.event == "end"}
    cut_off = started - finished
    ends: dict[int, int] = {}
    for e in events:
        if e.event == "end":
            ends[e.key] = ends.get(e.key, 0) + 1
    back: dict[int, float] = {}
    for e in after:
        if e.event == "start" and e.key in cut_off and e.key not in back:
            back[e.key] = e.time - killed_at
    completed = len(ends)
    return {
        "messages": messages,
        "cut_off": len(cut_off),
        "completed": completed,
        "lost": max(0, messages - completed - left_in_queue),
        "duplicated": sum(1 for n in ends.values() if n > 1),
        "left_in_queue": left_in_queue,
        "cut_off_started_again": len(back),
        "cut_off_back_after_seconds": max(back.values()) if back else None,
        "visible_again_after_seconds": visible_again,
    }


def run(
    endpoint: str,
    subjects: Sequence[Subject],
    installed: Mapping[str, Path],
    cells: Sequence[str],
    say: Callable[[str], None],
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, check in (("lease", lease), ("kill", kill)):
        if name not in cells:
            continue
        out[name] = []
        for subject in subjects:
            try:
                result = {"subject": subject.name, **check(endpoint, subject, installed)}
            except Exception as error:  # noqa: BLE001 (one subject failing must not end the run)
                result = {"subject": subject.name, "error": f"{type(error).__name__}: {error}"}
            out[name].append(result)
            say(f"{name}: {subject.name:<16} {_describe(name, result)}")
    return out


def _describe(name: str, result: Mapping[str, Any]) -> str:
    if "error" in result:
        return f"ERROR {result['error']}"
    if name == "lease":
        return (
            f"{result['duplicate_starts']} duplicate starts, {result['keys_completed']}/{result['messages']} handled"
            f" in {result['watched_seconds']:.0f} s"
        )
    return (
        f"{result['cut_off']} cut off, {result['lost']} lost, {result['duplicated']} duplicated, invisible until"
        f" {result['invisible_until']}"
    )


class _Run:
    """One subject on a fresh queue holding the cell's messages, with its record file and its own table."""

    def __init__(self, endpoint: str, subject: Subject, installed: Mapping[str, Path], kind: str, concurrency: int):
        self.endpoint, self.subject, self.kind, self.concurrency = endpoint, subject, kind, concurrency
        contract = contract_of(getattr(handlers, handlers.name(kind, concurrency)))
        attributes = contract.queue_attributes().source
        self.queue_visibility = attributes.visibility_timeout_seconds or DEFAULT_VISIBILITY
        self.queue_url, self.dlq_url = rig.fresh_queue(endpoint, attributes)
        self.table = create_table(endpoint) if subject.uses_table else None
        handle, name = tempfile.mkstemp(prefix=f"peers-{subject.name}-", suffix=".record")
        os.close(handle)
        self.record = Path(name)
        self.context = Context(endpoint, self.queue_url, installed, table=self.table, record=self.record)
        self.sqs = rig.client(endpoint)
        self.processes: list[Any] = []

    def fill(self, count: int) -> None:
        rig.fill(self.endpoint, self.queue_url, bodies(self.subject, self.context, self.kind, count, 0))

    def start(self, label: str) -> Any:
        command = self.subject.launch(self.context, self.kind, self.concurrency).command(self.context)
        envs.HOME.joinpath("logs").mkdir(parents=True, exist_ok=True)
        process = rig.start(command, envs.HOME / "logs" / f"{label}-{self.subject.name}.log")
        self.processes.append(process)
        return process

    def first_start(self, process: Any, since: float = 0.0) -> float:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            starts = [e.time for e in read(self.record) if e.event == "start" and e.time >= since]
            if starts:
                return min(starts)
            if process.poll() is not None:
                raise RuntimeError(f"{self.subject.name} exited with {process.returncode} before starting a handler")
            time.sleep(0.1)
        raise RuntimeError(f"{self.subject.name} started no handler within {START_TIMEOUT:.0f} s")

    def depth(self) -> QueueDepth:
        return depth(self.sqs, self.queue_url)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                rig.stop(process, 9)
        rig.drop_queues(self.endpoint, self.queue_url, self.dlq_url)
        if self.table:
            drop_table(self.endpoint, self.table)
        self.record.unlink(missing_ok=True)


def lease(endpoint: str, subject: Subject, installed: Mapping[str, Path]) -> dict[str, Any]:
    run = _Run(endpoint, subject, installed, LEASE_KIND, LEASE_CONCURRENCY)
    try:
        run.fill(LEASE_MESSAGES)
        process = run.start("lease")
        began = time.time()
        first = run.first_start(process)
        while time.time() - first < LEASE_WATCH:
            events = read(run.record)
            ended = {e.key for e in events if e.event == "end"}
            if len(ended) == LEASE_MESSAGES and sum(run.depth()) == 0:
                break
            time.sleep(0.25)
        watched = time.time() - first
        figures = lease_figures(read(run.record), LEASE_MESSAGES)
        return {
            **figures,
            "concurrency": LEASE_CONCURRENCY,
            "handler_seconds": 8,
            "queue_visibility_seconds": run.queue_visibility,
            "subject_visibility_seconds": subject.visibility(run.queue_visibility),
            "watched_seconds": watched,
            "first_start_seconds": first - began,
        }
    finally:
        run.close()


def kill(endpoint: str, subject: Subject, installed: Mapping[str, Path]) -> dict[str, Any]:
    run = _Run(endpoint, subject, installed, KILL_KIND, KILL_CONCURRENCY)
    try:
        run.fill(KILL_MESSAGES)
        process = run.start("kill")
        first = run.first_start(process)
        time.sleep(max(0.0, first + KILL_AFTER - time.time()))
        rig.stop(process, 9)
        killed_at = time.time()
        held_at_kill = run.depth().in_flight
        # When is what the dead worker held visible again? (Polled before anything receives again.)
        visible_again = None
        while time.time() - killed_at < KILL_WATCH:
            if run.depth().in_flight == 0:
                visible_again = time.time() - killed_at
                break
            time.sleep(0.25)
        held_after_watch = run.depth().in_flight
        restart = run.start("kill-restart")
        restarted_at = time.time()
        last_change, seen = time.time(), 0
        while time.time() - restarted_at < FINISH_WATCH:
            events = read(run.record)
            ended = {e.key for e in events if e.event == "end"}
            if len(ended) == KILL_MESSAGES:
                break
            if len(events) != seen:
                seen, last_change = len(events), time.time()
            later = [e for e in events if e.time >= restarted_at]
            running = sum(1 for e in later if e.event == "start") - sum(1 for e in later if e.event == "end")
            if running <= 0 and run.depth().visible == 0 and time.time() - last_change > QUIET:
                break
            time.sleep(0.25)
        time.sleep(0.5)  # the last deletes
        rig.stop(restart, 9)
        depth = run.depth()
        figures = kill_figures(read(run.record), KILL_MESSAGES, killed_at, sum(depth), visible_again)
        subject_visibility = subject.visibility(run.queue_visibility)
        return {
            **figures,
            "concurrency": KILL_CONCURRENCY,
            "handler_seconds": 3,
            "queue_visibility_seconds": run.queue_visibility,
            "subject_visibility_seconds": subject_visibility,
            "held_at_kill": held_at_kill,
            "held_after_watch": held_after_watch,
            "invisible_until": invisible_until(visible_again, held_at_kill, held_after_watch, subject_visibility),
        }
    finally:
        run.close()


def invisible_until(
    visible_again: float | None, held_at_kill: int, held_after_watch: int, subject_visibility: int
) -> str:
    """Measured when everything held came back within the watch, else what the subject's visibility says."""
    if held_at_kill == 0:
        return "nothing held: what it had received was already deleted"
    if visible_again is not None and held_after_watch == 0:
        return f"{visible_again:.0f} s after the kill (measured)"
    return f"{_duration(subject_visibility)} after it was received (its visibility; not waited for)"


def _duration(seconds: int) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour" + ("" if hours == 1 else "s")
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"
