"""The scenario harness the local demo and the chaos suite share (dev only; never in the image).

The pieces of a run on 127.0.0.1 that do not depend on the scenario: a loopback webhook for the
example handler to call, a fleet of ``python -m consumer run`` processes with their log and EMF
reader, sample events, the producer's batches, the queue depths, the settle loop (wait until the
source is empty and nothing moves) and the read of the DLQ's final places. ``consumer.local.demo``
and ``bench.chaos`` each add their scenario on top; bench imports this module, never the demo.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

from consumer.contract import QUEUE_ARN_ENV, WorkerContract
from consumer.declaration import contract_of
from consumer.limits import SQS_MAX_BATCH
from consumer.producer import Outgoing, entries
from consumer.runtime.dead_letter import read_reason
from consumer.runtime.liveness import LIVENESS_FILE_ENV

#: The attribute the producers put the event id in (also the consumer's idempotency-key attribute).
IDEMPOTENCY_ATTRIBUTE = "idempotency-key"
#: How long one ``python -m consumer health`` may take (it starts in about 0.1 s; this is for a loaded machine).
HEALTH_TIMEOUT_SECONDS = 20.0
#: What :func:`settle` returns when nothing moved for its quiet time, and when its deadline passed.
QUIET, TIMED_OUT = "settled", "timed out"
#: The task's one writable volume (infra/service.py mounts it at /tmp): ECS gives each task its own.
TASK_VOLUME = "/tmp"


def demo_contract() -> WorkerContract:
    """The contract of the demo declaration (``consumer.examples.demo``), which both scenarios run."""
    from consumer.examples import demo

    return contract_of(demo.handle)


def quiet_seconds(contract: WorkerContract, margin_seconds: float) -> float:
    """How long nothing may move before a run counts as settled: past the lease plus the longest backoff.

    A message a SIGKILL, a lost answer or a failure left behind comes back within the lease (its
    visibility timeout) plus its retry backoff; once that much time passed with the source empty and
    the logs quiet, nothing else is coming. ``margin_seconds`` is the caller's slack on top.
    """
    return contract.visibility_timeout_seconds + contract.retry_backoff_max_seconds + margin_seconds


def sample_event(event_id: str, index: int = 0, **overrides: Any) -> dict[str, Any]:
    """A valid notification event (the notifications example's schema); None overrides drop a field."""
    event = {
        "event_id": event_id,
        "type": "notification.requested",
        "channel": ("email", "sms", "push")[index % 3],
        "recipient": f"user{index}@example.com",
        "template": ("welcome", "password_reset", "invoice.ready")[index % 3],
        "data": {"name": f"User {index}", "locale": ("en-GB", "de-DE", "ja-JP")[index % 3]},
        "occurred_at": "2026-11-22T10:00:00Z",
    }
    event.update(overrides)
    return {k: v for k, v in event.items() if v is not None}


@dataclass(frozen=True)
class Planned:
    """One event a producer sends: its id, kind and body (malformed bodies are not JSON events)."""

    event_id: str
    kind: str
    body: str
    transient_failures: int = 0
    tenant: str | None = None
    #: A W3C trace header to send it with (the consumer logs its trace id on every line about the message).
    traceparent: str | None = None


def batches(plan: Sequence[Planned]) -> list[Sequence[Planned]]:
    """The plan in SendMessageBatch-sized slices, in order."""
    return [plan[i : i + SQS_MAX_BATCH] for i in range(0, len(plan), SQS_MAX_BATCH)]


def outgoing(planned: Planned) -> Outgoing:
    """What :mod:`consumer.producer` sends for a planned event: its body, the event id as the idempotency key and
    its tenant (a MessageGroupId on a standard queue)."""
    return Outgoing(
        body=planned.body, idempotency_key=planned.event_id, tenant=planned.tenant, traceparent=planned.traceparent
    )


def batch_entries(pending: Mapping[str, Planned]) -> list[dict[str, Any]]:
    """SendMessageBatch entries (entry id -> event) as :func:`consumer.producer.entries` builds them, for a sender
    that handles a batch's result itself (bench's chaos suite retries per entry through a fault proxy)."""
    built = entries([outgoing(p) for p in pending.values()])
    return [entry | {"Id": entry_id} for entry_id, entry in zip(pending, built, strict=True)]


# --------------------------------------------------------------------------- the downstream


class LoopbackWebhook:
    """An HTTP server on 127.0.0.1 (``url`` ends in :attr:`PATH`) that answers every POST (and PUT) with an
    empty body and the status :meth:`respond` returns for its ``Idempotency-Key`` and path (with the headers it
    returns beside the status, if any)."""

    #: Where ``url`` points: the example handler POSTs there, an object store takes PUTs under it.
    PATH = "/notify"

    def __init__(self) -> None:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                answer = webhook.respond(self.headers.get("Idempotency-Key", ""), self.path)
                status, headers = answer if isinstance(answer, tuple) else (answer, {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_PUT = do_POST  # noqa: N815 (http.server's naming): an object store's upload (the demo's report store)

            def log_message(self, *_: object) -> None:  # keep the terminal for the progress display
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{self.PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="downstream", daemon=True)

    def respond(self, key: str, path: str) -> int | tuple[int, Mapping[str, str]]:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever(), forever if it never ran
            self._server.shutdown()
        self._server.server_close()


# --------------------------------------------------------------------------- consumer processes


def task_volume_paths(task: Mapping[str, str]) -> dict[str, str]:
    """The values of a task environment that name a path on the task's volume (``/tmp`` or under it), by key."""
    return {key: value for key, value in task.items() if value == TASK_VOLUME or value.startswith(f"{TASK_VOLUME}/")}


def on_own_volume(paths: Mapping[str, str], directory: Path) -> dict[str, str]:
    """``paths`` (each on the task's ``/tmp``, :func:`task_volume_paths`) as the same paths in ``directory``, absolute as
    they were (a handler may refuse a relative one; the demo's log directory is relative by default)."""
    return {key: str(directory.absolute() / value[len(TASK_VOLUME) :].lstrip("/")) for key, value in paths.items()}


def consumer_environment(task: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """A consumer process's environment: the task's (as ECS sets it) and ``extra`` over this process's own.

    This process's ``AWS_`` and ``CONSUMER_`` settings are left out, so none leaks into the
    consumer; its output is unbuffered, so the harness reads its log as it is written.
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_"))}
    return environment | dict(task) | {"PYTHONUNBUFFERED": "1"} | dict(extra)


@dataclass(frozen=True)
class HealthCheck:
    """One ``python -m consumer health`` run against a consumer's liveness file: when (``phase``) and its answer."""

    phase: str
    healthy: bool
    line: str


@dataclass
class ConsumerProcess:
    number: int
    process: subprocess.Popen[bytes]
    log_path: Path
    #: The process's own environment: the fleet's, with its own liveness file (several consumers share a machine).
    environment: Mapping[str, str]
    ready: bool = False  # logged consumer_started
    log_offset: int = 0  # bytes of its log already counted
    asked_to_stop: bool = False
    stopped_in_seconds: float | None = None
    exit_code: int | None = None
    health: list[HealthCheck] = field(default_factory=list)

    @property
    def final_exit_code(self) -> int | None:
        """The exit code :meth:`Fleet.stop` saw, else the process's own (None while it runs)."""
        return self.exit_code if self.exit_code is not None else self.process.returncode

    @property
    def stopped_in_rounded(self) -> float | None:
        return None if self.stopped_in_seconds is None else round(self.stopped_in_seconds, 2)


class Fleet:
    """``python -m consumer run`` processes, each logging to its own file (JSON lines and EMF); for a Lambda worker
    (its environment has ``QUEUE_ARN``, which the stack writes for a function only) ``python -m consumer local
    function`` processes, each an execution environment fed by a mapping of its own, with no health check (Lambda has
    none)."""

    def __init__(
        self, environment: Mapping[str, str], log_dir: Path, *, task_volume: Mapping[str, str] | None = None
    ) -> None:
        self.environment = dict(environment)
        self.function = QUEUE_ARN_ENV in self.environment
        self.command = ["local", "function"] if self.function else ["run"]
        #: What a process logs once it consumes: its loops started, or its mapping's.
        self.ready_event = "mapping_started" if self.function else "consumer_started"
        self.log_dir = log_dir
        #: The task environment's paths on its /tmp volume (:func:`task_volume_paths`): in ECS each task has its own
        #: /tmp, here every consumer shares the machine's, so each process gets them in a directory of its own, empty
        #: when it starts (a handler's file there, a database say, is never shared by the fleet or kept from a run).
        self.task_volume = dict(task_volume or {})
        self.processes: list[ConsumerProcess] = []
        self.events: Counter[str] = Counter()
        self.metrics: Counter[str] = Counter()
        #: The circuit_closed events' open_seconds: how long each consumer's circuit was open, per close.
        self.circuit_open_seconds: list[float] = []
        #: Per tenant (the message_group_id the consumers log on each message's lines): its message_processed and
        #: message_moved_to_dlq events.
        self.tenants: dict[str, Counter[str]] = {}
        #: The same per trace id (from the message's traceparent): what the consumers logged for each message a
        #: producer sent with a trace header of its own, whatever copy of it they held.
        self.traces: dict[str, Counter[str]] = {}

    def start(self) -> ConsumerProcess:
        number = len(self.processes) + 1
        log_path = self.log_dir / f"consumer-{number}.log"
        # Each process its own liveness file: in ECS a task has its own /tmp, here every consumer shares the
        # machine's, and with the default path they would overwrite each other's progress.
        environment = self.environment | {LIVENESS_FILE_ENV: str(self.log_dir / f"consumer-{number}.liveness.json")}
        if self.task_volume:  # the same for the task environment's paths on /tmp (task_volume)
            volume = self.log_dir / f"consumer-{number}.tmp"
            shutil.rmtree(volume, ignore_errors=True)  # a new task's volume is empty: nothing from an earlier run
            volume.mkdir(parents=True)
            environment |= on_own_volume(self.task_volume, volume)
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "consumer", *self.command],
                env=environment,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        started = ConsumerProcess(number, process, log_path, environment)
        self.processes.append(started)
        return started

    def check_health(self, phase: str) -> list[ConsumerProcess]:
        """Run ``python -m consumer health`` (ECS's container health check) for every running consumer that started
        its loops and was not asked to stop, with that process's environment; returns those that were unhealthy.

        The checks run side by side, each within :data:`HEALTH_TIMEOUT_SECONDS` of the first's start, as ECS checks
        its tasks independently. Each answer is kept on its process (``health``), named by ``phase``."""
        if self.function:
            return []  # a Lambda function has no container health check
        checked = [c for c in self.alive() if c.ready and not c.asked_to_stop]  # not started yet, or stopping
        command = [sys.executable, "-m", "consumer", "health"]
        running = [
            (
                c,
                subprocess.Popen(
                    command, env=dict(c.environment), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                ),
            )
            for c in checked
        ]
        deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
        unhealthy = []
        for consumer, check in running:
            try:
                output = check.communicate(timeout=max(0.0, deadline - time.monotonic()))[0].strip().splitlines()
                healthy = check.returncode == 0
                line = output[-1] if output else f"exit {check.returncode}, no output"
            except subprocess.TimeoutExpired:
                check.kill()
                check.communicate()
                healthy, line = False, f"unhealthy: python -m consumer health took over {HEALTH_TIMEOUT_SECONDS:.0f} s"
            consumer.health.append(HealthCheck(phase, healthy, line))
            if not healthy:
                unhealthy.append(consumer)
        return unhealthy

    def alive(self) -> list[ConsumerProcess]:
        return [p for p in self.processes if p.process.poll() is None]

    def crashed(self) -> list[ConsumerProcess]:
        """Processes that exited without being asked to."""
        return [p for p in self.processes if not p.asked_to_stop and p.process.poll() is not None]

    def stop(self, consumer: ConsumerProcess, timeout: float) -> None:
        """SIGTERM, as ECS sends on a deployment or scale-in; SIGKILL only past ``timeout`` (ECS's stop timeout)."""
        started = time.monotonic()
        consumer.asked_to_stop = True
        consumer.process.send_signal(signal.SIGTERM)
        try:
            consumer.exit_code = consumer.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            consumer.process.kill()
            consumer.exit_code = consumer.process.wait()
        consumer.stopped_in_seconds = time.monotonic() - started

    def stop_all(self, timeout: float) -> None:
        """SIGTERM every process still running, one after the other."""
        for consumer in self.alive():
            self.stop(consumer, timeout=timeout)

    def kill_all(self) -> None:
        """SIGKILL whatever still runs (the harness's own clean-up, never part of a scenario)."""
        for consumer in self.alive():
            consumer.process.kill()

    def read_logs(self) -> None:
        """Count the new log events and EMF metric values since the last call."""
        for consumer in self.processes:
            for line in _new_lines(consumer):
                self._count(consumer, line)

    def _count(self, consumer: ConsumerProcess, line: Any) -> None:
        if "_aws" in line:
            for metric in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
                value = line.get(metric["Name"])
                if metric["Unit"] == "Count" and isinstance(value, int | float):
                    self.metrics[metric["Name"]] += value
        elif "event" in line:
            self.events[line["event"]] += 1
            consumer.ready = consumer.ready or line["event"] == self.ready_event
            if line["event"] == "circuit_closed":
                self.circuit_open_seconds.append(float(line.get("open_seconds", 0)))
            if line["event"] == "message_moved_to_dlq":
                self.events[f"moved_to_dlq:{line.get('kind')}"] += 1
            if line["event"] in ("message_processed", "duplicate_skipped", "message_moved_to_dlq"):
                if "message_group_id" in line:
                    self.tenants.setdefault(str(line["message_group_id"]), Counter())[line["event"]] += 1
                if "trace_id" in line:
                    self.traces.setdefault(str(line["trace_id"]), Counter())[line["event"]] += 1


def _new_lines(consumer: ConsumerProcess) -> Iterator[Any]:
    """The complete JSON lines of the consumer's log since the last read (others are skipped)."""
    with consumer.log_path.open("rb") as log_file:
        log_file.seek(consumer.log_offset)
        chunk = log_file.read()
    complete = chunk.rfind(b"\n") + 1  # leave a half-written last line for the next call
    consumer.log_offset += complete
    for raw in chunk[:complete].splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        yield line


# --------------------------------------------------------------------------- queues


class Depth(NamedTuple):
    """A queue's approximate counts, as GetQueueAttributes reports them."""

    visible: int
    not_visible: int
    delayed: int


def queue_depth(sqs: Any, queue_url: str) -> Depth:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    return Depth(
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesNotVisible"]),
        int(attributes["ApproximateNumberOfMessagesDelayed"]),
    )


def read_dlq(sqs: Any, dlq_url: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every DLQ message with its reason record (None when it carries none).

    Each is held for 5 minutes and never deleted: this reads the final places, it does not consume.
    """
    out = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=dlq_url, MaxNumberOfMessages=SQS_MAX_BATCH, VisibilityTimeout=300, MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            return out
        out.extend((m, read_reason(m.get("MessageAttributes", {}))) for m in messages)


def event_id_of(message: Mapping[str, Any]) -> str | None:
    """The producer's event id (the idempotency-key attribute), None when the message has none."""
    return message.get("MessageAttributes", {}).get(IDEMPOTENCY_ATTRIBUTE, {}).get("StringValue")


# --------------------------------------------------------------------------- the settle loop


class Tick(NamedTuple):
    """One look at a run: ``state`` changes while work moves; ``busy`` while anything is still to come."""

    state: Hashable
    busy: bool
    stop: str | None = None  # a reason to stop waiting at once (a consumer died)


def settle(
    look: Callable[[], Tick],
    done: Callable[[], bool],
    *,
    deadline: float,
    poll_seconds: float,
    quiet_seconds: float | None,
) -> str | None:
    """Look every ``poll_seconds`` until ``done()`` (None), or say why the wait ended instead.

    The answer is ``look()``'s stop reason, :data:`QUIET` once nothing moved and nothing was busy
    for longer than ``quiet_seconds`` (never when it is None), or :data:`TIMED_OUT` at ``deadline``.
    """
    quiet_since, last = time.monotonic(), None
    while time.monotonic() < deadline:
        tick = look()
        if tick.stop is not None:
            return tick.stop
        if done():
            return None
        if tick.state != last or tick.busy:
            quiet_since, last = time.monotonic(), tick.state
        elif quiet_seconds is not None and time.monotonic() - quiet_since > quiet_seconds:
            return QUIET
        time.sleep(poll_seconds)
    return TIMED_OUT
