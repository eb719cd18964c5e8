"""``python -m bench async``: a 200 ms I/O handler as threads and as coroutines, on the peers' rig.

Cells (:data:`SHAPES`): the ``def`` handler at concurrency 256 (a thread per slot, the runtime's most), the
``async def`` handler at 256 and at 1,024 (coroutines on one event loop), each run as ``python -m consumer run``
runs it in a task, with the DynamoDB idempotency guard (a fresh table on the endpoint's DynamoDB, as the stack
deploys it) and without (the handler declared ``idempotent=True``). Each measurement is the peers' (a fresh queue
with the handler's contract attributes, kept about 300 deep by :class:`bench.rig.Feeder`; requests and deletes
counted at the endpoint, CPU, threads and memory of the process read from /proc: :func:`bench.rig.measure`). The
cells are interleaved within each round (threads, then the two coroutine cells, each guard in turn), so the
machine's load touches all alike, and every figure is compared with the threaded cell of the same round and guard.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from bench import rig
from bench.coroutines import handlers, report
from bench.peers import envs, summary
from bench.peers.harness import Progress, Settings, measure_fed
from bench.peers.subjects import ours_launch
from consumer.declaration import contract_of
from consumer.limits import ASYNC_EXECUTOR_THREADS

LOGS = envs.ROOT / ".bench" / "coroutines" / "logs"
SHAPES = tuple(handlers.SHAPES)
#: After the warm-up, how long at most each measurement waits for the process to hold a steady number of messages:
#: 1,024 slots under the guard at under 100 msg/s on a busy machine take 10 to 20 s to fill (bench.rig.wait_steady).
STEADY_SECONDS = 60.0
GUARDS = report.GUARDS


def run(
    endpoint: str,
    *,
    settings: Settings = Settings(rounds=5, warmup=3.0, steady=STEADY_SECONDS),
    shapes: Sequence[str] = SHAPES,
    guards: Sequence[str] = tuple(GUARDS),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every shape under every guard, ``settings.rounds`` interleaved rounds, against ``endpoint`` (a counting one)."""
    unknown = (set(shapes) - set(SHAPES)) | (set(guards) - set(GUARDS))
    if unknown:
        raise ValueError(f"unknown shapes or guards {sorted(unknown)}: {', '.join((*SHAPES, *GUARDS))}")
    say = progress or Progress()
    rows: list[dict[str, Any]] = []
    for round_number in range(settings.rounds):
        for guard in guards:
            for shape in shapes:
                row = {**head(shape, guard, round_number), **_measure(endpoint, shape, guard, settings)}
                rows.append(row)
                say(f"round {round_number + 1} {guard:<10} {shape:<12} {report.describe(row)}")
            for shape in shapes:
                ratio = report.round_ratio(rows, round_number, shape, guard, "messages_per_second")
                if shape != report.BASELINE and ratio is not None:
                    say(f"round {round_number + 1} {guard:<10} {shape:<12} msg/s / {report.BASELINE}'s: {ratio:.2f}")
    return {
        "settings": {
            "rounds": settings.rounds,
            "warmup_seconds": settings.warmup,
            "steady_seconds": settings.steady,
            "window_seconds": settings.window,
            "feed_depth": settings.feed_depth,
            "handler_seconds": handlers.SECONDS,
            "async_executor_threads": ASYNC_EXECUTOR_THREADS,
            "thread_sample_seconds": rig.THREAD_SAMPLE_SECONDS,
            "shapes": list(shapes),
            "guards": list(guards),
        },
        "rows": rows,
    }


def head(shape: str, guard: str, round_number: int) -> dict[str, Any]:
    """What every row starts with: which cell, which guard, which round, and the cell's ideal rate."""
    asynchronous, concurrency = handlers.SHAPES[shape]
    return {
        "cell": shape,
        "handler": "async def" if asynchronous else "def",
        "concurrency": concurrency,
        "guard": guard,
        "round": round_number,
        "ideal": summary.ideal("io200", concurrency),
    }


def _measure(endpoint: str, shape: str, guard: str, settings: Settings) -> dict[str, Any]:
    guarded = guard == "dynamodb"
    handler = handlers.name(shape, idempotent=not guarded)
    attributes = contract_of(getattr(handlers, handler)).queue_attributes().source
    counter = itertools.count()  # unique bodies: the guard keys a message on its body's hash

    def body() -> str:
        return json.dumps({"n": next(counter)})

    return measure_fed(
        endpoint,
        attributes,
        lambda context: [ours_launch(context, f"{handlers.__name__}:{handler}", table=guarded).command(context)],
        lambda context: body,
        settings=settings,
        log=LOGS / f"{shape}-{guard}.log",
        table=guarded,
    )
