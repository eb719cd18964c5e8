"""Benchmarks 1, 2 and 6: throughput and SQS requests per message at saturation, and RSS, ours vs naive.

``python -m bench throughput``: for each handler (no-op, 50 ms I/O) and each
concurrency (1..64), one consumer process of each implementation drains a queue
the producer keeps topped up (so it never waits for work: saturation), over a
measurement window after a warm-up. Reports messages/s, SQS requests per
deleted message, process CPU milliseconds per deleted message, and the
process's resident memory at idle and at the end of the window.

Ours' CPU per message against the bare loop, counted from outside the process, is
``python -m bench peers``'s (section 10); here ours and the naive loop count their
own requests with botocore hooks, both alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import IMPLS, Producer, Subject, client, event, make_queues
from consumer.limits import SQS_MAX_MESSAGE_BYTES

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
HANDLERS = {"noop": 0.0, "io50ms": 0.05}
#: Ours again with one of its choices changed, beside its default run at the same handler and concurrency:
#: (label, subject options, (handler, concurrency) cases). What each choice buys, measured, not argued.
ABLATIONS: tuple[tuple[str, dict[str, Any], tuple[tuple[str, int], ...]], ...] = (
    ("no lookahead", {"lookahead": 0.0}, (("noop", 16), ("io50ms", 8), ("io50ms", 16), ("io50ms", 64))),
    (
        "no lookahead, no fill",
        {"lookahead": 0.0, "batch_fill": 0.0},
        (("noop", 16), ("io50ms", 8), ("io50ms", 16), ("io50ms", 64)),
    ),
    ("per-message lines on (DEBUG)", {"log_level": "DEBUG"}, (("noop", 16),)),
)
QUEUE_TARGET_DEPTH = 300
#: Message bodies for the billed-requests table: the usual small event, SQS's old limit, its limit since 2025.
BODY_SIZES = {"1 KiB": 1024, "256 KiB": 256 * 1024, "1 MiB": SQS_MAX_MESSAGE_BYTES}
BODY_CONCURRENCY = 16
#: Bodies the producer keeps visible at most: 300 bodies of 1 MiB would hold 300 MiB in the endpoint.
QUEUE_TARGET_BYTES = 64 * 1024 * 1024
#: Never fewer visible than this many receives of 10 for a consumer of BODY_CONCURRENCY, so it still never waits.
QUEUE_MIN_DEPTH = 40


def target_for(target_depth: int, body_bytes: int | None) -> int:
    """The producer's target depth for ``body_bytes`` bodies: ``target_depth``, or fewer where memory says so."""
    if body_bytes is None:
        return target_depth
    return min(target_depth, max(QUEUE_MIN_DEPTH, QUEUE_TARGET_BYTES // body_bytes))


def measure(
    endpoint: str,
    impl: str,
    concurrency: int,
    sleep: float,
    *,
    warmup: float = 2.0,
    window: float = 8.0,
    target_depth: int = QUEUE_TARGET_DEPTH,
    body_bytes: int | None = None,
    observe: Callable[[int], None] | None = None,
    source_tree: Path | None = None,
    **options: Any,
) -> dict[str, Any]:
    """One consumer process at saturation; returns its figures for the window.

    ``body_bytes`` pads every message body to that size; the queue then accepts SQS's largest message (1 MiB)
    and the producer keeps fewer of them visible (:func:`target_for`). ``observe`` is called with the subject's
    process id once it is ready and the producer runs (``python -m bench profile`` attaches py-spy there).
    ``source_tree`` runs the subject from another tree, e.g. an older commit's (:func:`bench.common.tree_at`).
    ``options`` are the subject's own (``batch_fill``, ``lookahead``, ``log_level``: ours only; see ABLATIONS).
    """
    sqs = client(endpoint)
    source, dlq = make_queues(
        sqs, visibility_seconds=60, max_message_bytes=None if body_bytes is None else SQS_MAX_MESSAGE_BYTES
    )
    subject = Subject(
        endpoint,
        impl,
        source,
        dlq_url=dlq,
        concurrency=concurrency,
        sleep=sleep,
        warmup_seconds=warmup,
        window_seconds=window,
        source_tree=source_tree,
        **options,
    )
    try:
        subject.ready()
        with Producer(endpoint, source, target_for(target_depth, body_bytes), event, body_bytes):
            if observe is not None:
                observe(subject.process.pid)
            subject.wait(warmup + window + 120)
        result = subject.result()
    finally:
        subject.close()
        sqs.delete_queue(QueueUrl=source)
        sqs.delete_queue(QueueUrl=dlq)
    window_figures = result["window"]
    deleted = window_figures["deleted"]
    return {
        "impl": impl,
        "concurrency": concurrency,
        "handler_seconds": sleep,
        "messages_per_second": deleted / result["seconds"],
        "requests_per_message": window_figures["requests"] / deleted if deleted else None,
        # What a Fargate bill scales with: the process's CPU (every thread) per message it got deleted.
        "cpu_ms_per_message": 1000 * result["cpu_seconds"] / deleted if deleted else None,
        "deleted": deleted,
        "requests": window_figures["requests"],
        "billed_requests": window_figures["billed_requests"],
        "billed_requests_per_message": window_figures["billed_requests"] / deleted if deleted else None,
        "body_bytes": body_bytes,
        "rss_idle_kib": result["idle"]["rss_kib"],
        "rss_load_kib": result["load"]["rss_kib"],
        "duplicate_starts": sum(n - 1 for n in result["starts"].values()),
        # None from a subject that does not count them (an older commit's).
        "opentelemetry_modules": result.get("opentelemetry_modules"),
        # Whole-run counts (start-up and stop included), for bounds that hold by construction.
        "total_deleted": result["total"]["deleted"],
        "total_requests_by_operation": result["requests_by_operation"],
    }


def run(endpoint: str, concurrency: tuple[int, ...] = CONCURRENCY, window: float = 8.0) -> dict[str, Any]:
    rows = []
    for handler, sleep in HANDLERS.items():
        for level in concurrency:
            for impl in IMPLS:
                row = measure(endpoint, impl, level, sleep, window=window)
                row["handler"] = handler
                rows.append(row)
                print(
                    f"{handler:7} c={level:<3} {impl:6} {row['messages_per_second']:8.1f} msg/s"
                    f"  {row['requests_per_message'] or 0:.3f} req/msg  {row['cpu_ms_per_message'] or 0:.3f} CPU ms/msg"
                    f"  rss {row['rss_load_kib'] / 1024:.0f} MiB",
                    flush=True,
                )
    # What SQS bills with bigger bodies: each 64 KiB of a call's payload is one billed request.
    bodies = []
    for label, size in BODY_SIZES.items():
        for impl in IMPLS:
            row = measure(endpoint, impl, BODY_CONCURRENCY, HANDLERS["noop"], window=window, body_bytes=size)
            row.update(handler="noop", body=label)
            bodies.append(row)
            print(
                f"noop    c={BODY_CONCURRENCY:<3} {impl:6} body {label:7} {row['messages_per_second']:8.1f} msg/s"
                f"  {row['requests_per_message'] or 0:.3f} req/msg  {row['billed_requests_per_message'] or 0:.3f} billed/msg",
                flush=True,
            )
    # What the lookahead, the batch fill and the per-message log lines each cost or save: ours with one off.
    ablation = []
    for label, options, cases in ABLATIONS:
        for handler, level in cases:
            row = measure(endpoint, "ours", level, HANDLERS[handler], window=window, **options)
            row.update(handler=handler, variant=label)
            ablation.append(row)
            print(
                f"{handler:7} c={level:<3} ours, {label}: {row['messages_per_second']:8.1f} msg/s"
                f"  {row['requests_per_message'] or 0:.3f} req/msg  {row['cpu_ms_per_message'] or 0:.3f} CPU ms/msg",
                flush=True,
            )
    return {
        "rows": rows,
        "bodies": bodies,
        "ablation": ablation,
        "queue_target_depth": QUEUE_TARGET_DEPTH,
        "window_seconds": window,
    }
