"""The peers benchmark: ``python -m bench peers`` (docs/evidence/BENCHMARKS.md, "Peers").

Every subject (:mod:`bench.peers.subjects`) runs in turn against one counting endpoint (ministack behind
:mod:`bench.counting_endpoint`), on a fresh queue of its own per measurement, kept shallow by a
:class:`~bench.rig.Feeder`; within a round the subjects are interleaved (bare, ours, the peers, then the next
round), so a change in the machine's load touches every subject alike. Figures come from outside the subject:
deletes and requests counted at the endpoint for the subject's access key, CPU (user + system) of its whole
process tree from /proc, and the machine's load average beside each figure (:func:`bench.rig.measure`).

Cells:

- throughput at saturation: ``noop`` at concurrency 16 and 64, ``io50`` at 16 and 64, ``io200`` at 256
  (:data:`THROUGHPUT`);
- the CPU-bound cell ``cpu5_c8``: ours as one process and as two processes on the same queue (figures summed over
  both), beside the bare loop (:data:`CPU_CELL`);
- the correctness cells ``lease`` and ``kill`` (:mod:`bench.peers.correctness`).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import rig
from bench.peers import correctness, envs, handlers, summary
from bench.peers.subjects import SUBJECTS, BodySource, Context, Subject, create_table, drop_table
from consumer.declaration import contract_of
from consumer.queue_attributes import QueueAttributes
from consumer.testing import depth


@dataclass(frozen=True)
class CellSpec:
    name: str
    kind: str
    concurrency: int

    def attributes(self) -> Any:
        """The source queue's attributes every subject of the cell gets: ours' contract for this handler's."""
        return contract_of(getattr(handlers, handlers.name(self.kind, self.concurrency))).queue_attributes().source


THROUGHPUT = tuple(
    CellSpec(f"{kind}_c{c}", kind, c)
    for kind, c in (("noop", 16), ("noop", 64), ("io50", 16), ("io50", 64), ("io200", 256))
)
CPU_CELL = CellSpec("cpu5_c8", "cpu5", 8)
#: The cell whose per-round CPU ratio (ours to the bare loop) is the headline figure.
HEADLINE = summary.HEADLINE_CELL
CELLS = (*(c.name for c in THROUGHPUT), CPU_CELL.name, *correctness.CELLS)
#: ours' variants in the CPU-bound cell, each as 1 and as 2 processes, beside the bare loop.
CPU_SUBJECTS = ("bare", "ours-idempotent", "ours")
LOGS = envs.HOME / "logs"
#: urllib3's warning when more threads call a client at once than its pool holds connections.
POOL_FULL = re.compile(rb"Connection pool is full")


@dataclass(frozen=True)
class Settings:
    rounds: int = 5  # of the headline cell
    other_rounds: int = 2  # of every other throughput cell and the CPU-bound cell
    warmup: float = 3.0
    window: float = 8.0
    #: Messages the feeder keeps visible (a test on moto keeps fewer: its receive slows with the queue's depth).
    feed_depth: int = rig.FEED_DEPTH
    #: Seconds at most to wait after the warm-up for the subject to hold a steady number of messages (0: not at all;
    #: :func:`bench.rig.wait_steady`).
    steady: float = 0.0

    def rounds_of(self, cell: str) -> int:
        return self.rounds if cell == HEADLINE else self.other_rounds


class Progress:
    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self, text: str) -> None:
        elapsed = int(time.monotonic() - self.began)
        print(f"[{elapsed // 60:2d}:{elapsed % 60:02d}] {text}", flush=True)


def run(
    endpoint: str,
    *,
    settings: Settings = Settings(),
    cells: Sequence[str] = CELLS,
    subjects: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every requested cell against ``endpoint`` (a counting ministack); the result ``python -m bench peers`` saves."""
    say = progress or Progress()
    unknown = set(cells) - set(CELLS)
    if unknown:
        raise ValueError(f"unknown cells {sorted(unknown)}: choose from {', '.join(CELLS)}")
    chosen = [s for s in SUBJECTS if subjects is None or s.name in subjects]
    installed = envs.install_all()
    offsets = itertools.count(0, 10_000_000)  # every measurement's keys are distinct: ours' guard never skips one
    rows: list[dict[str, Any]] = []
    for spec in THROUGHPUT:
        if spec.name in cells:
            rows += _throughput_cell(endpoint, spec, chosen, installed, settings, offsets, say)
    if CPU_CELL.name in cells:
        cpu_subjects = [s for s in chosen if s.name in CPU_SUBJECTS]
        rows += _cpu_cell(endpoint, cpu_subjects, installed, settings, offsets, say)
    checks = correctness.run(endpoint, [s for s in chosen if s.name != "bare"], installed, cells, say)
    return {
        "settings": {
            "rounds": settings.rounds,
            "other_rounds": settings.other_rounds,
            "warmup_seconds": settings.warmup,
            "window_seconds": settings.window,
            "feed_depth": settings.feed_depth,
            "cells": list(cells),
        },
        "subjects": [
            {"name": s.name, "label": s.label, "ours": s.ours, "yardstick": s.yardstick, "skip_reason": s.skip_reason}
            for s in chosen
        ],
        "rows": rows,
        "correctness": checks,
    }


def _row_head(spec: CellSpec, round_number: int, subject: str, shape: str) -> dict[str, Any]:
    """What every row of a measurement starts with: where and what was measured."""
    return {
        "cell": spec.name,
        "kind": spec.kind,
        "concurrency": spec.concurrency,
        "round": round_number,
        "subject": subject,
        "shape": shape,
    }


def _throughput_cell(
    endpoint: str,
    spec: CellSpec,
    subjects: Sequence[Subject],
    installed: Mapping[str, Path],
    settings: Settings,
    offsets: Iterable[int],
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    offset = iter(offsets)
    for round_number in range(settings.rounds_of(spec.name)):
        for subject in subjects:
            base = _row_head(spec, round_number, subject.name, subject.shape(spec.concurrency))
            if not subject.runs(spec.kind):
                if round_number == 0:
                    rows.append({**base, "skipped": subject.skip_reason})
                continue
            row = {**base, **_measure(endpoint, spec, subject, installed, settings, next(offset), 1)}
            rows.append(row)
            say(f"{spec.name} round {round_number + 1}: {subject.name:<16} {summary.describe(row)}")
        if spec.name == HEADLINE:
            ratio = summary.round_ratio(rows, spec.name, round_number, "ours-idempotent", "bare")
            if ratio is not None:
                say(f"{spec.name} round {round_number + 1}: CPU per message, ours-idempotent / bare = {ratio:.2f}")
    return rows


def _cpu_cell(
    endpoint: str,
    subjects: Sequence[Subject],
    installed: Mapping[str, Path],
    settings: Settings,
    offsets: Iterable[int],
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    spec, rows = CPU_CELL, []
    offset = iter(offsets)
    for round_number in range(settings.rounds_of(spec.name)):
        for subject in subjects:
            for processes in (1,) if subject.name == "bare" else (1, 2):
                shape = (
                    subject.shape(spec.concurrency) if processes == 1 else f"2 processes, {spec.concurrency} slots each"
                )
                base = _row_head(spec, round_number, subject.name, shape)
                # The bare loop runs the no-op (it has no handler): its figure is the floor of receiving and deleting.
                kind = "noop" if subject.name == "bare" else spec.kind
                measured = _measure(endpoint, spec, subject, installed, settings, next(offset), processes, kind=kind)
                row = {**base, **measured}
                rows.append(row)
                say(f"{spec.name} round {round_number + 1}: {subject.name} x{processes:<10} {summary.describe(row)}")
    return rows


def _measure(
    endpoint: str,
    spec: CellSpec,
    subject: Subject,
    installed: Mapping[str, Path],
    settings: Settings,
    first: int,
    processes: int,
    *,
    kind: str | None = None,
) -> dict[str, Any]:
    """One subject (``processes`` copies of it) on a fresh fed queue: its :class:`rig.Cell` as a dict, or an error."""
    run = kind or spec.kind
    return measure_fed(
        endpoint,
        spec.attributes(),
        lambda context: [subject.launch(context, run, spec.concurrency).command(context) for _ in range(processes)],
        lambda context: BodySource(subject, context, run, first),
        settings=settings,
        log=LOGS / f"{spec.name}-{subject.name}-x{processes}.log",
        installed=installed,
        table=subject.uses_table,
    )


def measure_fed(
    endpoint: str,
    attributes: QueueAttributes,
    commands: Callable[[Context], Sequence[rig.Command]],
    body: Callable[[Context], Callable[[], str]],
    *,
    settings: Settings,
    log: Path,
    installed: Mapping[str, Path] | None = None,
    table: bool = False,
) -> dict[str, Any]:
    """``commands`` (one subject, one process per command) on a fresh queue with ``attributes``, fed with ``body()``
    and, with ``table``, a fresh idempotency table: its :class:`rig.Cell` as a dict, or an error (never raises)."""
    queue_url, dlq_url = rig.fresh_queue(endpoint, attributes)
    table_name = create_table(endpoint) if table else None
    context = Context(endpoint, queue_url, installed or {}, table=table_name)
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        launched = list(commands(context))
        with rig.Feeder(endpoint, queue_url, body(context), target=settings.feed_depth) as feeder:
            _wait_fed(endpoint, queue_url, settings.feed_depth)
            cell = rig.measure(
                launched,
                endpoint,
                warmup=settings.warmup,
                window=settings.window,
                log=log,
                window_started=feeder.reset_low,
                steady=settings.steady,
            )
            low, starved = feeder.low, feeder.starved
        result = cell.as_dict()
        result["feed_low"] = low  # the fewest visible messages the feeder saw in the window
        result["feed_starved"] = starved  # the share of its looks that found fewer than 10
        result["pool_warnings"] = _pool_warnings(log, len(launched))
        result["log"] = str(log.relative_to(envs.ROOT))
        return result
    except Exception as error:  # noqa: BLE001 (one subject failing must not end the run: the table says so)
        return {"error": f"{type(error).__name__}: {error}", "log": str(log.relative_to(envs.ROOT))}
    finally:
        rig.drop_queues(endpoint, queue_url, dlq_url)
        if table_name:
            drop_table(endpoint, table_name)


def _wait_fed(endpoint: str, queue_url: str, target: int, timeout: float = 10.0) -> None:
    """Until the feeder has the queue at its depth (a subject never starts on a half-filled queue)."""
    sqs = rig.client(endpoint)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if depth(sqs, queue_url).visible >= target - 10:
            return
        time.sleep(0.1)


def _pool_warnings(log: Path, processes: int) -> int:
    paths = [log] if processes == 1 else [log.with_name(f"{log.stem}.{i}{log.suffix}") for i in range(processes)]
    return sum(len(POOL_FULL.findall(path.read_bytes())) for path in paths if path.exists())
