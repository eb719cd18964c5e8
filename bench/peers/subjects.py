"""Who is measured and how each one is started: ours (two variants), the peers, and the two yardsticks.

A :class:`Subject` turns (kind, concurrency) into the command that runs it at that concurrency, the way its users
run it, in its own environment (:mod:`bench.peers.envs`), signing every request as ``rig.SUBJECT_KEY`` so the
counting endpoint counts it alone. Each says what message body its framework expects (``envelope``) and, in
``shape``, what "concurrency N" means for it (processes, threads, instances), which the report prints beside its
figures.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench import rig
from bench.peers import envs, handlers

ROOT = envs.ROOT
PEERS_DIR = envs.HERE
#: What a ``json`` body carries: the message's key, nothing else (ours, the loops, sqs-workers, sqs-consumer).
JSON = "json"
#: Bodies made by a framework's own producer in its own environment (``python <peer>.py bodies KIND COUNT FIRST``).
ENVELOPES = {"celery": ("celery", "celery_peer.py"), "dramatiq": ("dramatiq", "dramatiq_peer.py")}
#: Celery's and Dramatiq's throughput bodies come from a pool of this many (distinct task and message ids), cycled.
POOL = 4000
#: The threads of one dramatiq process (dramatiq's default), and the batch of one sqs-consumer instance.
DRAMATIQ_THREADS = 8
SQS_CONSUMER_BATCH = 8
#: dramatiq-sqs sets this visibility on every receive (its broker's default ``visibility_timeout``: 12 hours).
DRAMATIQ_VISIBILITY_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Context:
    """Where a subject runs: the endpoint, its queue, the installed environments, ours' table, the record file."""

    endpoint: str
    queue_url: str
    envs: Mapping[str, Path]
    table: str | None = None
    record: Path | None = None

    @property
    def queue_name(self) -> str:
        return self.queue_url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Launch:
    """One process of a subject: its command line, environment additions and working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path = ROOT

    def command(self, context: Context, *, stop_signal: int = 9) -> rig.Command:
        return rig.Command(self.argv, {**base_env(context), **self.env}, self.cwd, stop_signal)


@dataclass(frozen=True)
class Subject:
    name: str
    label: str
    #: (context, kind, concurrency) -> the process to start.
    launch: Callable[[Context, str, int], Launch]
    #: (concurrency) -> what concurrency N means for it, for the report ("16 threads", "2 processes x 8 threads").
    shape: Callable[[int], str]
    envelope: str = JSON
    #: Kinds it runs (None: all); for the others the report prints "-" and ``skip_reason``.
    kinds: frozenset[str] | None = None
    skip_reason: str = ""
    #: Ours as deployed by default: a DynamoDB idempotency table of its own for each run.
    uses_table: bool = False
    #: (queue visibility) -> how long a message it received stays invisible if it dies holding it.
    visibility: Callable[[int], int] = field(default=lambda queue_visibility: queue_visibility)
    #: A yardstick (the bare loop, the minimal loop), not a peer: no "why" note is asked of ours against it.
    yardstick: bool = False
    #: Ours (either variant).
    ours: bool = False

    def runs(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds


def base_env(context: Context) -> dict[str, str]:
    """The inherited environment less anything AWS, consumer or Python-path related, plus the subject's signing
    credentials, the endpoint and the queue (and the record file, in the correctness cells)."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "CONSUMER_", "CELERY_", "BENCH_")) and k not in ("PYTHONPATH", "QUEUE_URL")
    }
    env = {
        **inherited,
        **rig.credentials(rig.SUBJECT_KEY),
        "AWS_ENDPOINT_URL": context.endpoint,
        "QUEUE_URL": context.queue_url,
        "QUEUE_NAME": context.queue_name,
    }
    if context.record is not None:
        env["BENCH_RECORD"] = str(context.record)
    return env


# --------------------------------------------------------------------------- ours


def ours_launch(context: Context, handler: str, *, table: bool) -> Launch:
    """``python -m consumer run`` as the container runs it, with ``handler`` (``module:function``); ``table``: on the
    context's DynamoDB idempotency table (a guarded handler without one keeps the in-memory store of local runs)."""
    liveness = Path(tempfile.gettempdir()) / f"peers-liveness-{os.getpid()}-{next(_liveness)}.json"
    env = {"CONSUMER_HANDLER": handler, "CONSUMER_LIVENESS_FILE": str(liveness), "PYTHONPATH": str(ROOT)}
    if context.table and table:
        env["CONSUMER_IDEMPOTENCY_TABLE"] = context.table
    return Launch([sys.executable, "-m", "consumer", "run"], env)


def _ours(idempotent: bool, table: bool = True) -> Callable[[Context, str, int], Launch]:
    """Ours as the container runs it; ``table`` False leaves a guarded handler on the in-memory store (local runs)."""

    def launch(context: Context, kind: str, concurrency: int) -> Launch:
        handler = f"bench.peers.handlers:{handlers.name(kind, concurrency, idempotent=idempotent)}"
        return ours_launch(context, handler, table=table and not idempotent)

    return launch


_liveness = itertools.count()


# --------------------------------------------------------------------------- the yardsticks


def _bare(context: Context, kind: str, concurrency: int) -> Launch:
    return Launch([sys.executable, str(PEERS_DIR / "bare.py")], {})


def _minimal(context: Context, kind: str, concurrency: int) -> Launch:
    return Launch([sys.executable, "-m", "bench.peers.minimal", kind, str(concurrency)], {"PYTHONPATH": str(ROOT)})


# --------------------------------------------------------------------------- the peers


def _celery(setting: str) -> Callable[[Context, str, int], Launch]:
    def launch(context: Context, kind: str, concurrency: int) -> Launch:
        argv = [
            str(context.envs["celery"] / "celery"),
            "-A",
            "celery_peer",
            "worker",
            "--concurrency",
            str(concurrency),
        ]
        if setting == "tuned":
            argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        env = {"PYTHONPATH": str(PEERS_DIR), "CELERY_SETTING": setting}
        return Launch(argv, env, PEERS_DIR)

    return launch


def dramatiq_processes(concurrency: int) -> int:
    return max(1, math.ceil(concurrency / DRAMATIQ_THREADS))


def _dramatiq(context: Context, kind: str, concurrency: int) -> Launch:
    threads = min(DRAMATIQ_THREADS, concurrency)
    argv = [str(context.envs["dramatiq"] / "dramatiq"), "dramatiq_peer"]
    argv += ["--processes", str(dramatiq_processes(concurrency)), "--threads", str(threads)]
    return Launch(argv, {"PYTHONPATH": str(PEERS_DIR)}, PEERS_DIR)


def _sqs_workers(context: Context, kind: str, concurrency: int) -> Launch:
    argv = [str(context.envs["sqs-workers"] / "python"), "sqs_workers_peer.py", kind, str(concurrency)]
    return Launch(argv, {}, PEERS_DIR)


def _sqs_consumer(context: Context, kind: str, concurrency: int) -> Launch:
    folder = context.envs["sqs-consumer"]
    return Launch([str(envs.NODE), str(folder / "peer.mjs"), kind, str(concurrency)], {}, folder)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("s") else "s")


SUBJECTS: tuple[Subject, ...] = (
    Subject(
        "bare",
        "bare loop",
        _bare,
        lambda c: "1 thread",
        kinds=frozenset({"noop"}),
        skip_reason="no handler: it only receives and deletes",
        yardstick=True,
    ),
    # The two variants of ours differ in one place: _ours(idempotent), which picks the `_idempotent` handler
    # (declared @worker(idempotent=True): no guard) and leaves the table out.
    Subject(
        "ours-idempotent",
        "ours, idempotent handler",
        _ours(idempotent=True),
        lambda c: f"1 process, {c} slots",
        ours=True,
    ),
    Subject(
        "ours",
        "ours (DynamoDB idempotency)",
        _ours(idempotent=False),
        lambda c: f"1 process, {c} slots",
        uses_table=True,
        ours=True,
    ),
    # Not a deployed configuration: the guard on its in-memory store, as a local run has it; the cells the
    # benchmarks before the table-on ones measured, beside them.
    Subject(
        "ours-memory",
        "ours (in-memory guard, local runs)",
        _ours(idempotent=False, table=False),
        lambda c: f"1 process, {c} slots",
        ours=True,
    ),
    Subject(
        "minimal",
        "minimal threaded loop",
        _minimal,
        lambda c: f"4 receivers, {c} handler threads",
        yardstick=True,
    ),
    Subject(
        "celery",
        "Celery (default)",
        _celery("default"),
        lambda c: f"prefork, {_plural(c, 'process')}",
        envelope="celery",
    ),
    Subject(
        "celery-tuned",
        "Celery (tuned)",
        _celery("tuned"),
        lambda c: f"{c} threads, acks late, prefetch 1",
        envelope="celery",
    ),
    Subject(
        "dramatiq",
        "Dramatiq + dramatiq-sqs",
        _dramatiq,
        lambda c: f"{_plural(dramatiq_processes(c), 'process')} x {min(DRAMATIQ_THREADS, c)} threads",
        envelope="dramatiq",
        visibility=lambda queue_visibility: DRAMATIQ_VISIBILITY_SECONDS,
    ),
    Subject(
        "sqs-workers",
        "sqs-workers",
        _sqs_workers,
        lambda c: f"{_plural(c, 'process')}, 1 handler each",
    ),
    Subject(
        "sqs-consumer",
        "sqs-consumer (Node)",
        _sqs_consumer,
        lambda c: f"1 process, {_plural(max(1, math.ceil(c / SQS_CONSUMER_BATCH)), 'instance')} of batch "
        f"{min(SQS_CONSUMER_BATCH, c)}",
    ),
)
BY_NAME = {subject.name: subject for subject in SUBJECTS}


# --------------------------------------------------------------------------- message bodies


def bodies(subject: Subject, context: Context, kind: str, count: int, first: int) -> list[str]:
    """``count`` bodies for ``subject`` with keys ``first``... (each body carries its key ``n``)."""
    if subject.envelope == JSON:
        return [json.dumps({"n": n}) for n in range(first, first + count)]
    env_name, script = ENVELOPES[subject.envelope]
    python = context.envs[env_name] / "python"
    argv = [str(python), script, "bodies", kind, str(count), str(first)]
    result = subprocess.run(argv, cwd=PEERS_DIR, env=base_env(context), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{subject.name}: making bodies failed: {result.stderr[-1500:]}")
    made = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if len(made) != count:
        raise RuntimeError(f"{subject.name}: asked for {count} bodies, got {len(made)}")
    return made


class BodySource:
    """The feeder's ``body()``: unique JSON bodies from a counter, or a framework's pool of bodies, cycled."""

    def __init__(self, subject: Subject, context: Context, kind: str, first: int) -> None:
        self._first = first
        self._pool: list[str] = []
        if subject.envelope != JSON:
            self._pool = bodies(subject, context, kind, POOL, first)
        self._next = itertools.count()

    def __call__(self) -> str:
        n = next(self._next)  # itertools.count is safe to share between the feeder's threads
        if self._pool:
            return self._pool[n % len(self._pool)]
        return json.dumps({"n": self._first + n})


# --------------------------------------------------------------------------- ours' idempotency table


def create_table(endpoint: str) -> str:
    """A fresh idempotency table for ours (partition key ``pk``, on demand), as the stack creates one."""
    dynamodb = rig.client(endpoint, "dynamodb")
    name = f"peers-{uuid.uuid4().hex[:10]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def drop_table(endpoint: str, name: str) -> None:
    try:
        rig.client(endpoint, "dynamodb").delete_table(TableName=name)
    except Exception:  # noqa: BLE001 (best effort: the endpoint goes away with the run)
        return
