"""Record real local runs as alarm scenarios: ``python -m bench.alarm_recording NAME`` (or ``--all``).

Why recordings: a modeled scenario says what its author believes the queues did; a recording says what the consumer,
a producer and the operator's tools really did against an SQS endpoint, so the alarms are evaluated on the runtime's
own behaviour (its retries, its DLQ moves, its circuit, its shutdown) and a change there shows up as a changed
recording. Each scenario (:data:`SCENARIOS`, declarative) runs for a few minutes of real time on 127.0.0.1:

* moto's server in this process, a source queue and its DLQ created with the attributes the handler's contract gives
  the stack's pair (redrive policy included);
* a :class:`~bench.alarm_recording.recording_proxy.RecordingProxy` between every client and moto: ``python -m consumer run``
  processes (the handler of :mod:`bench.alarm_recording.handlers`), a producer thread, and the operator's
  ``python -m consumer dlq`` commands all use it as ``AWS_ENDPOINT_URL``; it logs every SQS call on the two queues as
  :class:`~infra.alarms.events.SqsEvent` and the redrive policy's own moves as sends on the DLQ by ``redrive``;
* the consumers' EMF lines (namespace ``SqsWorker``, dimension ``Queue``), read from their logs, as raw datapoints
  stamped with the document's own ``_aws.Timestamp`` (the consumer's flush time);
* the number of consumer processes alive over time, as ECS's running and desired task counts.

The recording ends once the last consumer exited (or at its last event, when a long poll a stopped consumer left at
moto is answered later): the teardown (producer stopped, desired count 0, every consumer SIGTERMed as a scale-in
would) is part of it, so each consumer's shutdown flush of its metrics is in the file.
The file (``infra/alarms/recordings/NAME.json``, where the evaluator reads it: one compact JSON line)::

    {"scenario", "source": "recorded", "recorded_with", "queues": [{"name", "fifo", "retention_seconds",
     "visibility_timeout"}, ...], "events": [SqsEvent.to_json(), ...], "emf": {"queue", "points": [[t, metric,
     value], ...]}, "tasks": [[t, running, desired], ...], "onset", "end"}

``t`` is seconds since the recording started (the proxy's clock for events, the wall clock for EMF timestamps).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.alarm_recording import handlers
from bench.alarm_recording.recording_proxy import Clock, QueueInfo, RecordingProxy, double_hand_outs
from consumer.contract import METRICS_NAMESPACE, WorkerContract
from consumer.declaration import contract_of
from consumer.local.stack import LOCAL_CREDENTIALS, LOCAL_REGION, local_client, start_server
from consumer.producer import Outgoing, send
from consumer.runtime.liveness import LIVENESS_FILE_ENV
from infra.alarms.catalogue import RECORDINGS
from infra.alarms.events import SqsEvent

ROOT = Path(__file__).resolve().parents[2]
#: How the recordings are made, as each one says (``recorded_with``) and this command runs itself (``--jobs``).
COMMAND = "python -m bench.alarm_recording"
HANDLER = f"{handlers.__name__}:handle"
#: When the producer starts: after the consumers had a moment to start polling.
PRODUCE_FROM_SECONDS = 2.0
#: How often the task count is looked at (ECS's own RunningTaskCount is per minute; this is far finer).
TASK_POLL_SECONDS = 0.25
OPERATOR_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Scenario:
    """One recording, as data: traffic, consumers, and what happens at ``onset`` (seconds from the start).

    ``rate``: messages per second the producer sends from 2 s until ``end``. ``poison_at``: when it sends a message
    the handler refuses (body ``poison...``). ``fault``: the handler's fault from ``onset`` (``fail`` or
    ``downstream``, see :mod:`bench.alarm_recording.handlers`) for ``fault_seconds`` (None: to the end).
    ``deploy_new``: a rolling deploy, that many new consumers started at ``onset`` and the ``consumers`` first ones
    SIGTERMed ``deploy_overlap`` seconds later. ``operator``: ``python -m consumer dlq`` commands, each
    (seconds after ``onset``, its arguments; ``{export}`` is a file in the run's directory).
    """

    summary: str
    onset: float
    end: float
    rate: float = 2.0
    consumers: int = 1
    queue: str = "orders"
    poison_at: tuple[float, ...] = ()
    fault: str | None = None
    fault_seconds: float | None = None
    deploy_new: int = 0
    deploy_overlap: float = 20.0
    operator: tuple[tuple[float, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.onset < self.end:
            raise ValueError(f"Scenario: onset must be within (0, end), got onset={self.onset} end={self.end}")
        if self.fault is not None and self.fault not in handlers.FAULTS:
            raise ValueError(f"Scenario fault: must be one of {', '.join(handlers.FAULTS)} or None, got {self.fault!r}")


SCENARIOS: dict[str, Scenario] = {
    "poison-active-dlq": Scenario(
        "steady 2 msg/s; at onset one poison message, which the consumer moves to the DLQ with a reason",
        onset=150,
        end=300,
        poison_at=(150,),
    ),
    "handler-fails-all": Scenario(
        "steady 2 msg/s; from onset the handler fails every message: retries, then the DLQ at max_receive_count",
        onset=120,
        end=300,
        fault="fail",
    ),
    "downstream-blip": Scenario(
        "steady 2 msg/s; the handler raises DownstreamUnavailable for 2 minutes from onset (the circuit opens)",
        onset=120,
        end=330,
        fault="downstream",
        fault_seconds=120,
    ),
    "deploy-replaces-tasks": Scenario(
        "two consumers, steady 2 msg/s; at onset two new ones start, 20 s later the old ones are SIGTERMed",
        onset=150,
        end=300,
        consumers=2,
        deploy_new=2,
        deploy_overlap=20,
    ),
    "operator-works-dlq": Scenario(
        "1 msg/s and three poison messages early on; from onset the operator runs dlq stats, peek twice,"
        " export (no delete) and redrive --dry-run",
        onset=150,
        end=300,
        rate=1.0,
        poison_at=(20, 25, 30),
        operator=(
            (0, ("stats",)),
            (20, ("peek",)),
            (40, ("peek",)),
            (60, ("export", "--out", "{export}")),
            (80, ("redrive", "--dry-run")),
        ),
    ),
}


class RecordingError(RuntimeError):
    """The run did not go as its scenario says (a consumer crashed, an operator command failed...): no file."""


def emf_points(lines: Iterable[str | bytes], queue: str, clock: Clock) -> list[list[Any]]:
    """Raw datapoints ``[t, metric, value]`` of the EMF documents among ``lines`` for ``queue``, sorted by t.

    Only documents in the consumer's namespace whose ``Queue`` dimension is ``queue`` count; ``t`` is the
    document's ``_aws.Timestamp`` (epoch milliseconds) relative to the recording's start. A timing metric's array
    is one datapoint per value, as CloudWatch takes it (rounded to 3 decimals: microseconds of a duration in
    milliseconds); other lines (the JSON logs, half-written lines) are skipped.
    """
    points: list[list[Any]] = []
    for line in lines:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or not isinstance(document.get("_aws"), dict):
            continue
        if document.get("Queue") != queue:
            continue
        aws = document["_aws"]
        t = clock.since_epoch(float(aws["Timestamp"]) / 1000)
        for directive in aws.get("CloudWatchMetrics", []):
            if directive.get("Namespace") != METRICS_NAMESPACE:
                continue
            for metric in directive.get("Metrics", []):
                name = metric["Name"]
                value = document.get(name)
                for one in value if isinstance(value, list) else [value]:
                    if isinstance(one, int | float) and not isinstance(one, bool):
                        points.append([t, name, round(one, 3)])
    return sorted(points, key=lambda point: (point[0], point[1]))


@dataclass
class ConsumerProcess:
    """One ``python -m consumer run``: its log (stdout and stderr, JSON lines and EMF) and whether it was stopped."""

    number: int
    process: subprocess.Popen[bytes]
    log_path: Path
    asked_to_stop: bool = False

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class TaskCounts:
    """Running and desired task counts as ``[t, running, desired]`` each time either changes."""

    def __init__(self, clock: Clock, desired: int) -> None:
        self.clock = clock
        self.desired = desired
        self.rows: list[list[float | int]] = [[0.0, 0, desired]]
        self._lock = threading.Lock()

    def note(self, running: int, desired: int | None = None) -> None:
        with self._lock:
            if desired is not None:
                self.desired = desired
            if self.rows[-1][1:] != [running, self.desired]:
                self.rows.append([self.clock.elapsed(), running, self.desired])


class Run:
    """One scenario's run: start everything, play the scenario's steps on time, tear down, collect the recording."""

    def __init__(self, name: str, scenario: Scenario, workdir: Path) -> None:
        self.name = name
        self.scenario = scenario
        self.workdir = workdir
        self.contract: WorkerContract = contract_of(handlers.handle)
        self.problems: list[str] = []
        self.consumers: list[ConsumerProcess] = []
        self._environment: dict[str, str] = {}
        self._stop_producing = threading.Event()
        self._sent = 0

    def record(self) -> dict[str, Any]:
        server, moto = start_server()
        proxy: RecordingProxy | None = None
        try:
            queues, queue_url, dlq_url = self._create_queues(local_client("sqs", moto))
            clock = Clock.now()
            proxy = RecordingProxy(moto, clock, {q.name: q for q in queues})
            proxy.start()
            proxy.watch_redrive(dlq_url, LOCAL_REGION)
            self._environment = self._consumer_environment(proxy.url, queue_url, dlq_url, clock)
            tasks = TaskCounts(clock, self.scenario.consumers)
            watching = threading.Event()
            watcher = threading.Thread(target=self._watch_tasks, args=(tasks, watching), daemon=True)
            watcher.start()
            for _ in range(self.scenario.consumers):
                self._start_consumer()
            producer = threading.Thread(
                target=self._produce, args=(local_client("sqs", proxy.url), queue_url, clock), daemon=True
            )
            producer.start()
            self._play(self._steps(proxy.url, queue_url, dlq_url), clock)
            self._stop_producing.set()
            producer.join()
            self._say(clock, f"teardown: producer stopped after {self._sent} messages; SIGTERM to every consumer")
            tasks.note(self._running(), desired=0)
            self._terminate([c for c in self.consumers if c.alive])
            watching.set()
            watcher.join()
            tasks.note(self._running())
            stopped = clock.elapsed()
            proxy.settle()  # a long poll a stopped consumer left at moto is answered within 20 s
            events = proxy.events()
            self._check(proxy, events)
            return self._document(queues, events, clock, tasks, max([stopped, *(e.t for e in events)]))
        finally:
            for consumer in self.consumers:
                if consumer.alive:  # only after a failure: the teardown above stopped every one
                    consumer.process.kill()
                    consumer.process.wait()
            if proxy is not None:
                proxy.stop()
            server.stop()

    # --- set-up ---------------------------------------------------------------
    def _create_queues(self, sqs: Any) -> tuple[list[QueueInfo], str, str]:
        """The pair as the stack shapes it (the handler's contract), created straight at moto: not recorded."""
        suffix = ".fifo" if self.contract.fifo else ""
        pair = self.contract.queue_attributes()
        dlq_url = sqs.create_queue(QueueName=f"{self.scenario.queue}-dlq{suffix}", Attributes=pair.dead_letter.to_sqs())
        dlq_url = dlq_url["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        source = {k: v for k, v in pair.source.to_sqs(dead_letter_target_arn=dlq_arn).items() if v != ""}
        queue_url = sqs.create_queue(QueueName=f"{self.scenario.queue}{suffix}", Attributes=source)["QueueUrl"]
        queues = []
        for url in (queue_url, dlq_url):
            attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            queues.append(
                QueueInfo(
                    name=url.rsplit("/", 1)[-1],
                    fifo=attributes.get("FifoQueue") == "true",
                    retention_seconds=int(attributes["MessageRetentionPeriod"]),
                    visibility_timeout=int(attributes["VisibilityTimeout"]),
                )
            )
        return queues, queue_url, dlq_url

    def _client_environment(self, endpoint: str) -> dict[str, str]:
        """What every recorded client process needs to reach the endpoint through the proxy, and nothing inherited."""
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "CONSUMER_", "QUEUE_URL", "DLQ_URL", "ALARM_RECORDING_"))
        }
        return inherited | {
            **LOCAL_CREDENTIALS,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "AWS_REGION": LOCAL_REGION,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }

    def _consumer_environment(self, endpoint: str, queue_url: str, dlq_url: str, clock: Clock) -> dict[str, str]:
        """The task's environment as the stack writes it (binding and contract), with the scenario's fault window."""
        from moto.sqs.models import DEFAULT_SENDER_ID  # moto's one SenderId: the local task role (consumer.local)

        scenario = self.scenario
        fault: dict[str, str] = {}
        if scenario.fault is not None:
            fault[handlers.FAULT_ENV] = scenario.fault
            fault[handlers.FAULT_FROM_ENV] = f"{clock.wall + scenario.onset:.3f}"
            if scenario.fault_seconds is not None:
                fault[handlers.FAULT_UNTIL_ENV] = f"{clock.wall + scenario.onset + scenario.fault_seconds:.3f}"
        task = {
            "QUEUE_URL": queue_url,
            "DLQ_URL": dlq_url,
            "CONSUMER_HANDLER": HANDLER,
            "CONSUMER_TASK_ROLE_ID": DEFAULT_SENDER_ID,
            **self.contract.to_env(),
        }
        return self._client_environment(endpoint) | task | fault | {"PYTHONUNBUFFERED": "1"}

    def _start_consumer(self) -> ConsumerProcess:
        """A ``python -m consumer run`` logging to its own file, with its own liveness file (as its own task's /tmp)."""
        number = len(self.consumers) + 1
        log_path = self.workdir / f"consumer-{number}.log"
        environment = self._environment | {LIVENESS_FILE_ENV: str(self.workdir / f"consumer-{number}.liveness.json")}
        with log_path.open("wb") as log:
            command = [sys.executable, "-m", "consumer", "run"]
            process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
        consumer = ConsumerProcess(number, process, log_path)
        self.consumers.append(consumer)
        return consumer

    def _running(self) -> int:
        return sum(1 for consumer in list(self.consumers) if consumer.alive)

    # --- the scenario ----------------------------------------------------------
    def _steps(self, endpoint: str, queue_url: str, dlq_url: str) -> list[tuple[float, str, Callable[[], None]]]:
        """(t, what, action) for everything the scenario does besides the steady traffic, ending with its end."""
        scenario = self.scenario
        steps: list[tuple[float, str, Callable[[], None]]] = []
        poison_client = local_client("sqs", endpoint)
        for number, at in enumerate(scenario.poison_at, start=1):
            body = f"{handlers.POISON_PREFIX} #{number}: not an order"

            def poison(body: str = body) -> None:
                send(poison_client, queue_url, [Outgoing(body=body)])

            steps.append((at, f"poison message sent ({body!r})", poison))
        if scenario.fault is not None:
            steps.append((scenario.onset, f"handler fault {scenario.fault!r} starts", lambda: None))
            if scenario.fault_seconds is not None:
                steps.append((scenario.onset + scenario.fault_seconds, "handler fault ends", lambda: None))
        if scenario.deploy_new:
            old: list[ConsumerProcess] = []

            def start_new() -> None:
                old.extend(self.consumers)
                for _ in range(scenario.deploy_new):
                    self._start_consumer()

            steps.append((scenario.onset, f"deploy: {scenario.deploy_new} new consumers start", start_new))
            steps.append(
                (
                    scenario.onset + scenario.deploy_overlap,
                    "deploy: the old consumers get SIGTERM",
                    lambda: self._terminate(old, wait=False),
                )
            )
        for number, (after, arguments) in enumerate(scenario.operator, start=1):
            args = tuple(a.replace("{export}", str(self.workdir / f"export-{number}.jsonl")) for a in arguments)

            def operate(args: tuple[str, ...] = args, number: int = number) -> None:
                self._operate(endpoint, queue_url, dlq_url, args, number)

            steps.append((scenario.onset + after, f"operator: python -m consumer dlq {' '.join(arguments)}", operate))
        steps.append((scenario.end, "end of the scenario", lambda: None))
        return sorted(steps, key=lambda step: step[0])

    def _play(self, steps: Sequence[tuple[float, str, Callable[[], None]]], clock: Clock) -> None:
        for at, what, action in steps:
            time.sleep(max(0.0, at - clock.elapsed()))
            self._say(clock, what)
            action()

    def _produce(self, sqs: Any, queue_url: str, clock: Clock) -> None:
        """Steady traffic: one SendMessageBatch of one message every ``1 / rate`` seconds (on a fixed schedule)."""
        interval = 1 / self.scenario.rate
        while not self._stop_producing.wait(max(0.0, PRODUCE_FROM_SECONDS + self._sent * interval - clock.elapsed())):
            result = send(sqs, queue_url, [Outgoing(body=json.dumps({"order": self._sent}))])
            if result.failed:
                self.problems.append(f"producer: message {self._sent} not sent: {result.failed[0]}")
            self._sent += 1

    def _operate(self, endpoint: str, queue_url: str, dlq_url: str, arguments: Sequence[str], number: int) -> None:
        """One ``python -m consumer dlq`` command as the operator would run it, its output kept in the run's dir."""
        command = [sys.executable, "-m", "consumer", "dlq", *arguments, "--queue-url", queue_url, "--dlq-url", dlq_url]
        env = self._client_environment(endpoint) | {"COLUMNS": "200"}
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=OPERATOR_TIMEOUT_SECONDS, check=False
        )
        (self.workdir / f"operator-{number}.log").write_text(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            self.problems.append(
                f"operator command {' '.join(arguments)} exited {done.returncode}: {done.stderr[-500:]}"
            )

    def _terminate(self, processes: Sequence[ConsumerProcess], *, wait: bool = True) -> None:
        """SIGTERM ``processes`` at once (as ECS stops tasks); with ``wait``, SIGKILL those past the stop timeout."""
        for consumer in processes:
            consumer.asked_to_stop = True
            consumer.process.send_signal(signal.SIGTERM)
        if not wait:
            return
        deadline = time.monotonic() + (self.contract.stop_timeout_seconds or 0)
        for consumer in processes:
            try:
                consumer.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.problems.append(f"consumer {consumer.number} outlived its stop timeout: SIGKILL")
                consumer.process.kill()
                consumer.process.wait()

    def _watch_tasks(self, tasks: TaskCounts, done: threading.Event) -> None:
        while not done.wait(TASK_POLL_SECONDS):
            tasks.note(self._running())

    def _say(self, clock: Clock, what: str) -> None:
        print(f"  {self.name} t={clock.elapsed():6.1f} s  {what}", flush=True)

    # --- the result -----------------------------------------------------------
    def _check(self, proxy: RecordingProxy, events: Sequence[SqsEvent]) -> None:
        problems = list(self.problems)
        for consumer in self.consumers:
            code = consumer.process.returncode
            if code not in (0, None) or (code is not None and not consumer.asked_to_stop):
                problems.append(f"consumer {consumer.number} exited {code} (log {consumer.log_path})")
        if proxy.unreadable:
            problems.append(f"{proxy.unreadable} requests the proxy could not read (not the JSON protocol)")
        if not any(e.op == "send" for e in events):
            problems.append("no message was sent")
        if problems:
            raise RecordingError(f"{self.name}: " + "; ".join(problems) + f" (logs in {self.workdir})")
        for doubled in double_hand_outs(events):
            print(
                f"  warning: {self.name}: moto handed message {doubled.message_id} to a second receive at"
                f" t={doubled.t} while another held it (a moto artifact: consider recording again)",
                flush=True,
            )

    def _document(
        self,
        queues: Sequence[QueueInfo],
        events: Sequence[SqsEvent],
        clock: Clock,
        tasks: TaskCounts,
        end: float,
    ) -> dict[str, Any]:
        lines: list[bytes] = []
        for consumer in self.consumers:
            lines.extend(consumer.log_path.read_bytes().splitlines())
        return {
            "scenario": self.name,
            "source": "recorded",
            "recorded_with": f"{COMMAND} {self.name}",
            "queues": [q.to_json() for q in queues],
            "events": [e.to_json() for e in events],
            "emf": {"queue": queues[0].name, "points": emf_points(lines, queues[0].name, clock)},
            "tasks": tasks.rows,
            "onset": self.scenario.onset,
            "end": end,
        }


def write_recording(document: Mapping[str, Any], out: Path) -> Path:
    """One compact JSON line, written whole then renamed (a reader never sees half a recording)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    partial.replace(out)
    return out


def record_scenario(name: str, scenario: Scenario, out: Path, logs: Path | None = None) -> Path:
    """Run ``scenario`` and write its recording to ``out`` (a file, or a directory for ``NAME.json``).

    The consumers' logs and the operator's outputs go to ``logs`` when given, else to a directory removed after.
    """
    if out.is_dir():
        out = out / f"{name}.json"
    print(f"recording {name} ({scenario.end:.0f} s + teardown): {scenario.summary}", flush=True)
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        return write_recording(Run(name, scenario, logs).record(), out)
    with tempfile.TemporaryDirectory(prefix=f"alarm-recording-{name}-") as workdir:
        return write_recording(Run(name, scenario, Path(workdir)).record(), out)


def record(name: str, out: Path) -> Path:
    """Re-record the scenario ``name`` of :data:`SCENARIOS` to ``out`` (a file, or a directory for ``NAME.json``)."""
    if name not in SCENARIOS:
        raise KeyError(f"scenario must be one of {', '.join(SCENARIOS)}, got {name!r}")
    return record_scenario(name, SCENARIOS[name], out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"scenarios to record: {', '.join(SCENARIOS)}")
    parser.add_argument("--all", action="store_true", help="record every scenario")
    parser.add_argument("--out-dir", type=Path, default=RECORDINGS, help="where NAME.json goes (default: %(default)s)")
    parser.add_argument("--logs", type=Path, help="keep the consumers' logs and the operator's outputs in LOGS/NAME")
    parser.add_argument("--jobs", type=int, default=1, help="scenarios recorded at once, each in its own process")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    options = parser.parse_args(argv)
    if options.list:
        for name, scenario in SCENARIOS.items():
            print(f"{name}: {scenario.summary} (onset {scenario.onset:.0f} s, end {scenario.end:.0f} s)")
        return 0
    names = list(SCENARIOS) if options.all else options.names
    unknown = [n for n in names if n not in SCENARIOS]
    if not names or unknown:
        unknown_part = f" (unknown: {', '.join(unknown)})" if unknown else ""
        parser.error(f"name one or more of {', '.join(SCENARIOS)}, or --all{unknown_part}")
    began = time.monotonic()
    if options.jobs > 1 and len(names) > 1:
        failed = _record_in_parallel(names, options.out_dir, options.logs, options.jobs)
    else:
        failed = []
        for name in names:
            logs = None if options.logs is None else options.logs / name
            try:
                print(f"wrote {record_scenario(name, SCENARIOS[name], options.out_dir, logs)}", flush=True)
            except RecordingError as error:
                print(f"error: {error}", file=sys.stderr, flush=True)
                failed.append(name)
    print(f"{len(names) - len(failed)} of {len(names)} recorded in {time.monotonic() - began:.0f} s", flush=True)
    return 1 if failed else 0


def _record_in_parallel(names: Sequence[str], out_dir: Path, logs: Path | None, jobs: int) -> list[str]:
    """Each scenario in its own ``python -m bench.alarm_recording NAME`` (its own moto), ``jobs`` at a time."""
    pending, failed = list(names), []
    running: list[tuple[str, subprocess.Popen[bytes]]] = []
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            command = [sys.executable, "-m", "bench.alarm_recording", name, "--out-dir", str(out_dir)]
            if logs is not None:
                command += ["--logs", str(logs)]
            running.append((name, subprocess.Popen(command, cwd=ROOT)))
        time.sleep(1)
        for name, process in list(running):
            if process.poll() is not None:
                running.remove((name, process))
                if process.returncode != 0:
                    failed.append(name)
    return failed
