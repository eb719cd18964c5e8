"""The yardstick's rig: a subject process at saturation, measured from outside it.

Nothing runs inside the measured process but the subject itself: requests and deletes are counted at the
endpoint (:mod:`bench.counting_endpoint`, per access key: the subject signs with ``SUBJECT_KEY``, the feeder with
``FEEDER_KEY``), CPU is read from ``/proc`` for the subject's whole process tree (user + system of every thread
and every child process: Celery's and Dramatiq's worker processes count), and the machine's load is read beside
each figure. A :class:`Feeder` keeps the queue shallow (about ``FEED_DEPTH`` visible, topped up by 4 threads in
batches of 10): ministack's receive and ``DeleteMessageBatch`` scan the whole queue, so a deep queue measures the
endpoint, not the subject.

Example::

    with local_endpoint("ministack", counting=True) as url:
        queue = fresh_queue(url, QueueAttributes(visibility_timeout_seconds=60))
        with Feeder(url, queue, noop_event):
            cell = measure(Command(["python", "bare.py"], env), url, warmup=3, window=10)
        cell.messages_per_second, cell.cpu_ms_per_message, cell.sqs_requests_per_message
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import boto3
from botocore.config import Config

from bench.counting_endpoint import COUNTS_PATH
from consumer.producer import batches
from consumer.queue_attributes import QueueAttributes
from consumer.testing import depth

ROOT = Path(__file__).resolve().parents[1]
REGION = "eu-west-1"
SUBJECT_KEY = "subject"
FEEDER_KEY = "feeder"
#: What the feeder keeps visible: a few receives of 10 ahead of any subject, never a deep queue.
FEED_DEPTH = 300
FEED_THREADS = 4
#: How long a feeder thread waits after finding the queue full before it looks again. Each look is a
#: GetQueueAttributes the endpoint answers by scanning the queue: at 0.02 s the 4 threads asked 200 times a second,
#: a share of the 2 cores the subject then lacked; at 0.05 s they ask 80 times, every 12 ms on average, still well
#: within the 300 messages' worth of time at the fastest subject's rate.
FULL_WAIT_SECONDS = 0.05
#: The clock ticks /proc reports CPU times in.
_TICKS = os.sysconf("SC_CLK_TCK")
#: A subject that deleted nothing for this long after its start is reported as not starting.
START_TIMEOUT_SECONDS = 90
#: How often the rig counts the subject's threads during the window (the most it saw is reported).
THREAD_SAMPLE_SECONDS = 0.5
#: :func:`wait_steady`: a subject whose held messages grew by at most STEADY_SLACK over STEADY_STEP_SECONDS is
#: steady (a receive of 10 or a delete batch of 10 either side of a look is noise, not growth).
STEADY_STEP_SECONDS = 2.0
STEADY_SLACK = 20


def credentials(key: str) -> dict[str, str]:
    """The environment of a process that signs its requests with access key ``key`` on the local endpoint."""
    return {
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def client(endpoint: str, service: Literal["sqs", "dynamodb"] = "sqs", key: str = FEEDER_KEY, pool: int = 10) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=key,
        config=Config(retries={"mode": "standard"}, max_pool_connections=pool),
    )


def counts(endpoint: str) -> dict[str, Any]:
    """The endpoint's counts per caller (:mod:`bench.counting_endpoint`)."""
    with urllib.request.urlopen(endpoint + COUNTS_PATH, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


def caller_counts(endpoint: str, key: str = SUBJECT_KEY) -> dict[str, Any]:
    found: dict[str, Any] = counts(endpoint).get(key, {"requests": {}, "deleted": 0, "received": 0})
    return found


def fresh_queue(endpoint: str, attributes: QueueAttributes, *, fifo: bool = False) -> tuple[str, str]:
    """A new source queue with ``attributes`` and its DLQ (unique names); returns (source URL, DLQ URL)."""
    sqs = client(endpoint)
    name = f"rig-{uuid.uuid4().hex[:10]}"
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source = sqs.create_queue(QueueName=name, Attributes=attributes.to_sqs(dead_letter_target_arn=arn))["QueueUrl"]
    return source, dlq


class Feeder:
    """Keeps about ``target`` messages visible in ``queue_url`` with ``threads`` threads sending batches of 10.

    ``body()`` makes each message body. ``sent`` counts what was sent. Since :meth:`reset_low`: ``low`` is the fewest
    visible messages a thread saw, and ``starved`` the share of its looks that found fewer than 10 (a subject that
    often finds the queue empty measures the feeder, and the machine's CPU the feeder shares with it). As a context
    manager it runs for the block.
    """

    def __init__(
        self,
        endpoint: str,
        queue_url: str,
        body: Callable[[], str],
        *,
        target: int = FEED_DEPTH,
        threads: int = FEED_THREADS,
    ) -> None:
        self._sqs = client(endpoint, pool=threads + 2)
        self.queue_url, self.target, self._body = queue_url, target, body
        self.sent = 0
        self.low: int | None = None
        self._looks = self._empty_looks = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                visible = depth(self._sqs, self.queue_url).visible
            except Exception:  # noqa: BLE001 (the endpoint restarting under a chaos cell: try again)
                self._stop.wait(0.1)
                continue
            with self._lock:
                self.low = visible if self.low is None else min(self.low, visible)
                self._looks += 1
                self._empty_looks += visible < 10
            if visible >= self.target - 10:
                self._stop.wait(FULL_WAIT_SECONDS)
                continue
            # Far below the target (a fast subject): this thread's share of the gap, up to 5 batches, before it
            # looks again, so the looks do not take the time the sends need.
            count = max(1, min(5, (self.target - visible) // (10 * len(self._threads))))
            entries = [{"Id": str(i), "MessageBody": self._body()} for i in range(10 * count)]
            for call in batches(entries):
                try:
                    self._sqs.send_message_batch(QueueUrl=self.queue_url, Entries=call)
                except Exception:  # noqa: BLE001
                    continue
                with self._lock:
                    self.sent += len(call)

    @property
    def starved(self) -> float | None:
        with self._lock:
            return self._empty_looks / self._looks if self._looks else None

    def reset_low(self) -> None:
        with self._lock:
            self.low = None
            self._looks = self._empty_looks = 0

    def __enter__(self) -> Feeder:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


def fill(endpoint: str, queue_url: str, bodies: Sequence[str]) -> None:
    """Send ``bodies`` once (a correctness cell's fixed set of messages)."""
    sqs = client(endpoint)
    entries = [{"Id": str(i), "MessageBody": body} for i, body in enumerate(bodies)]
    for call in batches(entries):
        sqs.send_message_batch(QueueUrl=queue_url, Entries=call)


# --------------------------------------------------------------------------- the process, from outside


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it, now."""
    tree, stack = [], [pid]
    while stack:
        current = stack.pop()
        tree.append(current)
        stack += _children(current)
    return tree


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid``'s tree so far: every thread of every live process, plus what its
    reaped children spent (``cutime``/``cstime``)."""
    user = system = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # After the command's closing parenthesis: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
        user += int(fields[11]) + int(fields[13])
        system += int(fields[12]) + int(fields[14])
    return user / _TICKS, system / _TICKS


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid``'s tree so far (:func:`cpu_times`)."""
    return sum(cpu_times(pid))


def busy_times() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core (``/proc/stat``'s first line)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return (total - idle) / _TICKS, total / _TICKS


def load_average() -> float:
    """The machine's one-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass(frozen=True)
class Command:
    """How to start one subject: its argument list, its environment and its working directory."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path = ROOT
    #: Signal to stop it at the end (SIGTERM: ours drains; most peers stop on it too).
    stop_signal: int = 15


@dataclass
class Cell:
    """One subject's figures over one window."""

    seconds: float
    cpu_seconds: float
    deleted: int
    received: int
    requests: dict[str, int]
    load: float
    started_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def messages_per_second(self) -> float:
        return self.deleted / self.seconds

    @property
    def cpu_ms_per_message(self) -> float | None:
        return 1000 * self.cpu_seconds / self.deleted if self.deleted else None

    def requests_per_message(self, service: str) -> float | None:
        total = sum(n for op, n in self.requests.items() if op.startswith(service + "."))
        return total / self.deleted if self.deleted else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "deleted": self.deleted,
            "received": self.received,
            "requests": self.requests,
            "load": self.load,
            "started_seconds": self.started_seconds,
            "messages_per_second": self.messages_per_second,
            "cpu_ms_per_message": self.cpu_ms_per_message,
            "sqs_requests_per_message": self.requests_per_message("sqs"),
            "dynamodb_requests_per_message": self.requests_per_message("dynamodb"),
            **self.extra,
        }


def _held(now: Mapping[str, Any], base: Mapping[str, Any]) -> int:
    """Messages received and not deleted since ``base`` (the subject's counts before it started)."""
    return int((now["received"] - base["received"]) - (now["deleted"] - base["deleted"]))


def _delta(after: Mapping[str, Any], before: Mapping[str, Any]) -> tuple[int, int, dict[str, int]]:
    ops = set(after["requests"]) | set(before["requests"])
    requests = {op: after["requests"].get(op, 0) - before["requests"].get(op, 0) for op in sorted(ops)}
    return after["deleted"] - before["deleted"], after["received"] - before["received"], requests


def start(command: Command, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own process group (its children are stopped with it); output to ``log``."""
    out = log.open("wb") if log else subprocess.DEVNULL
    return subprocess.Popen(
        list(command.argv),
        env=dict(command.env),
        cwd=command.cwd,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes], signal_number: int = 15, timeout: float = 60) -> int:
    """Send ``signal_number`` to the process group, then SIGKILL it after ``timeout``; the exit code."""
    try:
        os.killpg(process.pid, signal_number)
        return process.wait(timeout)
    except ProcessLookupError:
        return process.wait()
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        return process.wait()


def wait_consuming(
    endpoint: str,
    process: subprocess.Popen[bytes] | Sequence[subprocess.Popen[bytes]],
    timeout: float = START_TIMEOUT_SECONDS,
) -> float:
    """Seconds until the subject's first delete; raises if it (any of its processes) exits or deletes nothing within
    ``timeout``."""
    processes = [process] if isinstance(process, subprocess.Popen) else list(process)
    began = time.monotonic()
    before = caller_counts(endpoint)["deleted"]
    while time.monotonic() - began < timeout:
        for member in processes:
            if member.poll() is not None:
                raise RuntimeError(f"the subject exited with {member.returncode} before deleting anything")
        if caller_counts(endpoint)["deleted"] > before:
            return time.monotonic() - began
        time.sleep(0.05)
    raise RuntimeError(f"the subject deleted nothing within {timeout:.0f} s")


def wait_steady(
    endpoint: str, timeout: float, *, step: float = STEADY_STEP_SECONDS, slack: int = STEADY_SLACK
) -> float:
    """Until the subject holds (received less deleted, at the endpoint) at most ``slack`` messages more than ``step``
    seconds before: its slots are full, or it deletes as fast as it receives. The seconds waited, ``timeout`` at most
    (then it was still filling: the window says so in ``held_at_start`` and ``held_at_end``)."""

    def held() -> int:
        found = caller_counts(endpoint)
        return int(found["received"] - found["deleted"])

    began, last = time.monotonic(), held()
    while time.monotonic() - began < timeout:
        time.sleep(step)
        now = held()
        if now - last <= slack:
            break
        last = now
    return time.monotonic() - began


def _logs(log: Path | None, count: int) -> list[Path | None]:
    """One log per process: ``log`` itself for one, ``<stem>.<i><suffix>`` beside it for several."""
    if log is None or count == 1:
        return [log] * count
    return [log.with_name(f"{log.stem}.{i}{log.suffix}") for i in range(count)]


def measure(
    command: Command | Sequence[Command],
    endpoint: str,
    *,
    warmup: float = 3.0,
    window: float = 10.0,
    log: Path | None = None,
    window_started: Callable[[], object] | None = None,
    steady: float = 0.0,
) -> Cell:
    """Start ``command``, wait for its first delete, warm up, then count one window; stop it.

    ``steady`` (seconds, 0 for none): after the warm-up, wait up to that long more until the subject holds no more
    messages than a moment before (:func:`wait_steady`): a subject with many slots and a low rate takes longer than
    any fixed warm-up to fill them, and a window while it fills counts receives and claims of messages it deletes
    only later.

    ``command`` may be several commands: one subject of several processes on the same queue (all signing as the
    subject), started together; its deletes and requests are counted together at the endpoint and its CPU is summed
    over every process tree.

    The queue must be fed (a :class:`Feeder`) for the whole call: at saturation the subject never waits for work.
    ``window_started`` is called as the counted window begins (e.g. the feeder's :meth:`Feeder.reset_low`).
    """
    commands = [command] if isinstance(command, Command) else list(command)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        base = caller_counts(endpoint)  # what earlier subjects on this endpoint left held is not this one's
        for each, each_log in zip(commands, _logs(log, len(commands)), strict=True):
            processes.append(start(each, each_log))
        started = wait_consuming(endpoint, processes)
        time.sleep(warmup)
        settled = wait_steady(endpoint, steady) if steady else None
        if window_started is not None:
            window_started()
        before, cpu0, t0, machine0 = caller_counts(endpoint), _tree_times(processes), time.monotonic(), busy_times()
        most_threads = _most_threads(processes, window)
        after, cpu1, t1, machine1 = caller_counts(endpoint), _tree_times(processes), time.monotonic(), busy_times()
        load = load_average()
        members = [member for process in processes for member in process_tree(process.pid)]
        threads = sum(_threads(member) for member in members)
        memory_kib = sum(_proc_kib(member, "smaps_rollup", "Pss") for member in members)
        peak_kib = sum(_proc_kib(member, "status", "VmHWM") for member in members)
    finally:
        for process, each in zip(processes, commands, strict=False):
            stop(process, each.stop_signal)
    deleted, received, requests = _delta(after, before)
    user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    extra = {
        "system_cpu_seconds": system,
        "processes": len(commands),
        # What the subject ran as at the end of the window: is it the concurrency it claims? (Celery's prefork
        # children, dramatiq's worker processes and threads, sqs-workers' processes.)
        "tree_processes": len(members),
        "tree_threads": threads,
        # Messages the subject held (received, not yet deleted: counted at the endpoint) as the window began and
        # ended, and how long after the warm-up it took to stop growing (``steady``; None: not waited for).
        "held_at_start": _held(before, base),
        "held_at_end": _held(after, base),
        "steady_after_seconds": settled,
        # The most threads the tree held at any of the window's samples (every THREAD_SAMPLE_SECONDS): a pool that
        # grows on demand (an executor's) is counted at its largest, not where it stood at the end.
        "tree_threads_max": max(most_threads, threads),  # the end's count is a sample too (an executor may grow after)
        # Proportional set size summed over the tree (shared pages split between the processes sharing them, so
        # forked workers are not counted N times): the memory the subject needs at that concurrency.
        "tree_pss_mib": memory_kib / 1024,
        # The largest resident set each process of the tree had had so far (VmHWM: start-up and warm-up included),
        # summed over the tree: for one process, its peak RSS.
        "tree_peak_rss_mib": peak_kib / 1024,
        # The whole machine over the window (every process, the endpoint and the feeder included): busy share of
        # all cores, and what the subject's own CPU left to everything else.
        "machine_busy": (machine1[0] - machine0[0]) / max(machine1[1] - machine0[1], 1e-9),
        "others_cpu_seconds": max(0.0, (machine1[0] - machine0[0]) - (user + system)),
    }
    return Cell(t1 - t0, user + system, deleted, received, requests, load, started, extra)


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _most_threads(processes: Sequence[subprocess.Popen[bytes]], seconds: float) -> int:
    """Waits ``seconds``, counting the threads of ``processes``' trees every THREAD_SAMPLE_SECONDS: the most seen."""
    end, most = time.monotonic() + seconds, 0
    while True:
        most = max(most, sum(_threads(m) for process in processes for m in process_tree(process.pid)))
        left = end - time.monotonic()
        if left <= 0:
            return most
        time.sleep(min(THREAD_SAMPLE_SECONDS, left))


def _proc_kib(pid: int, file: str, field_name: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/<file>`` (``status``'s ``VmHWM``, ``smaps_rollup``'s ``Pss``), 0 if the process
    is gone."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree_times(processes: Sequence[subprocess.Popen[bytes]]) -> tuple[float, float]:
    """(user, system) CPU seconds summed over the trees of ``processes``."""
    times = [cpu_times(process.pid) for process in processes]
    return sum(t[0] for t in times), sum(t[1] for t in times)


def drop_queues(endpoint: str, *queue_urls: str) -> None:
    """Delete queues a cell is done with (ministack keeps every queue in memory; best effort)."""
    sqs = client(endpoint)
    for url in queue_urls:
        try:
            sqs.delete_queue(QueueUrl=url)
        except Exception:  # noqa: BLE001 (already gone, or the endpoint is stopping: nothing to keep)
            continue
