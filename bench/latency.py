"""Benchmarks 3, 4 and 5: pickup latency, shutdown, and duplicates under heavy-tailed durations, ours vs naive."""

from __future__ import annotations

import math
import random
import signal
import time
from typing import Any

from bench.common import IMPLS, Subject, client, event, make_queues, percentile, send
from bench.endpoint import local_endpoint
from consumer.contract import WorkerContract
from consumer.testing import depth, poll_until

LATENCY_SAMPLES = 120


def _starts(subject: Subject) -> list[dict[str, Any]]:
    return [r for r in subject.records() if r["e"] == "start"]


def pickup_latency(endpoint: str, impl: str, samples: int = LATENCY_SAMPLES, seed: int = 3) -> dict[str, Any]:
    """An idle queue; one message at a time at random gaps (0.1-0.4 s); send-to-handler-start per message."""
    sqs = client(endpoint)
    source, dlq = make_queues(sqs, visibility_seconds=60)
    subject = Subject(endpoint, impl, source, dlq_url=dlq, concurrency=4, window_seconds=0, record=True)
    rng = random.Random(seed)
    try:
        subject.ready()
        for _ in range(samples):
            time.sleep(rng.uniform(0.1, 0.4))
            send(sqs, source, [event()])
        poll_until(lambda: len(_starts(subject)) >= samples, 30, interval=0.2)
        latencies = [r["t"] - r["sent"] for r in _starts(subject)]
    finally:
        subject.process.send_signal(signal.SIGTERM)
        subject.wait(60)
        subject.close()
    return {
        "impl": impl,
        "samples": len(latencies),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p90_ms": percentile(latencies, 90) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "max_ms": max(latencies) * 1000,
        "latencies_ms": [x * 1000 for x in latencies],
    }


def shutdown(endpoint: str, impl: str, busy: bool) -> dict[str, Any]:
    """SIGTERM an idle consumer, or one running 8 handlers of 3 s each; time to exit and where messages are.

    Visibility 30 s. After the exit: ``interrupted`` = handlers started and never
    finished (a half-done side effect that will run again); ``stranded`` = messages
    still invisible (nobody works on them until their visibility timeout ends);
    ``lost`` = produced - finished - (visible + invisible): a message nowhere.
    """
    sqs = client(endpoint)
    source, dlq = make_queues(sqs, visibility_seconds=30)
    produced = 24 if busy else 0
    subject = Subject(
        endpoint, impl, source, dlq_url=dlq, concurrency=8, window_seconds=0, record=True, max_duration=5, sleep=3
    )
    try:
        subject.ready()
        if busy:
            send(sqs, source, [event() for _ in range(produced)])
            poll_until(lambda: len(_starts(subject)) >= 8, 30, interval=0.05)
            time.sleep(0.5)
        else:
            time.sleep(2)
        signalled, signalled_wall = time.monotonic(), time.time()
        subject.process.send_signal(signal.SIGTERM)
        code = subject.wait(120)
        exit_seconds = time.monotonic() - signalled
        time.sleep(0.3)  # let the endpoint settle its counters
        visible, invisible = depth(sqs, source)
        records = subject.records()
    finally:
        subject.close()
    started = {r["id"] for r in records if r["e"] == "start"}
    finished = {r["id"] for r in records if r["e"] == "end"}
    running = {r["id"] for r in records if r["e"] == "start" and r["t"] <= signalled_wall} - {
        r["id"] for r in records if r["e"] == "end" and r["t"] <= signalled_wall
    }
    return {
        "impl": impl,
        "state": "busy" if busy else "idle",
        "exit_code": code,
        "exit_seconds": exit_seconds,
        "produced": produced,
        "handlers_running_at_sigterm": len(running),
        "finished": len(finished),
        "interrupted": len(started - finished),
        "released_visible": visible,
        "stranded_invisible": invisible,
        "lost": produced - len(finished) - visible - invisible,
    }


def heavy_tailed_durations(count: int, seed: int = 11) -> list[float]:
    """Log-normal handler durations, median 1.5 s, sigma 1.2, capped at 15 s: about 1 in 5 exceeds 4 s."""
    rng = random.Random(seed)
    return [min(15.0, 1.5 * math.exp(rng.gauss(0, 1.2))) for _ in range(count)]


def duplicates(endpoint: str, impl: str, count: int = 120, timeout: float = 300) -> dict[str, Any]:
    """Heavy-tailed durations against a 4 s visibility: how many handler starts were a second start.

    Ends when every message has finished and the queue is empty, or after ``timeout``
    (the naive baseline can keep re-running the same messages for many minutes).
    """
    contract = WorkerContract(max_duration_seconds=20, concurrency=8, max_lease_seconds=4)
    visibility = contract.visibility_timeout_seconds
    sqs = client(endpoint)
    source, dlq = make_queues(sqs, visibility_seconds=visibility)
    durations = heavy_tailed_durations(count)
    subject = Subject(
        endpoint, impl, source, dlq_url=dlq, concurrency=8, window_seconds=0, record=True, max_duration=20, max_lease=4
    )
    began = time.monotonic()
    try:
        subject.ready()
        events = [event(sleep=d) for d in durations]
        send(sqs, source, events)
        ids = {e["id"] for e in events}

        def done() -> bool:
            finished = {r["id"] for r in subject.records() if r["e"] == "end"}
            return ids <= finished and depth(sqs, source) == (0, 0)

        drained = poll_until(done, timeout, interval=0.5)
        elapsed = time.monotonic() - began
        subject.process.send_signal(signal.SIGTERM)
        subject.wait(60)
        records = subject.records()
    finally:
        subject.close()
    starts = [r["id"] for r in records if r["e"] == "start"]
    finished = {r["id"] for r in records if r["e"] == "end"}
    return {
        "impl": impl,
        "messages": count,
        "visibility_seconds": visibility,
        "over_visibility": sum(1 for d in durations if d > visibility),
        "handler_starts": len(starts),
        "duplicate_starts": len(starts) - len(set(starts)),
        "messages_started_twice_or_more": sum(1 for i in set(starts) if starts.count(i) > 1),
        "finished": len(finished),
        "never_started": count - len(set(starts)),
        "drained": drained,
        "seconds": elapsed,
    }


def run_latency(endpoint: str, kind: str = "ministack") -> dict[str, Any]:
    """Pickup latency on ``endpoint`` (a ``kind`` endpoint), and on moto's server too unless that is ``kind``.

    ministack re-checks a waiting receive every 100 ms, so its figure is mostly that wait; moto's server wakes a
    waiting receive when a message is sent, as SQS answers a long poll as soon as a message is there, so its
    figure is what the consumer itself adds.
    """
    rows = [{**pickup_latency(endpoint, impl), "endpoint": kind} for impl in IMPLS]
    if kind != "moto":
        with local_endpoint("moto") as moto:
            rows += [{**pickup_latency(moto, impl), "endpoint": "moto"} for impl in IMPLS]
    for row in rows:
        print(
            f"latency {row['endpoint']:9} {row['impl']:6} p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms",
            flush=True,
        )
    return {"rows": rows}


def run_shutdown(endpoint: str) -> dict[str, Any]:
    rows = [shutdown(endpoint, impl, busy) for busy in (False, True) for impl in IMPLS]
    for row in rows:
        print(
            f"shutdown {row['state']:4} {row['impl']:6} exit {row['exit_code']:>3} in {row['exit_seconds']:5.2f} s"
            f"  interrupted {row['interrupted']}  stranded {row['stranded_invisible']}  lost {row['lost']}",
            flush=True,
        )
    return {"rows": rows}


def run_duplicates(endpoint: str) -> dict[str, Any]:
    rows = [duplicates(endpoint, impl) for impl in IMPLS]
    for row in rows:
        print(
            f"duplicates {row['impl']:6} {row['duplicate_starts']} duplicate starts of {row['messages']}"
            f" ({row['over_visibility']} ran past the {row['visibility_seconds']} s visibility)",
            flush=True,
        )
    return {"rows": rows}
