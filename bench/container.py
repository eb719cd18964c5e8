"""Benchmark 8: the consumer as ECS runs it (the container) against the same consumer as a process.

The image is built from the synthesized demo environment's container asset and run with its task
definition's settings (:mod:`consumer.local.task`): read-only root, uid 10001, no capabilities, the task's
CPU and memory. The baseline is ``python -m consumer run`` with the same environment, in the same
session, against the same local stack (moto's server, provisioned from the same template).

Per run: start-to-ready (start to the ``consumer_started`` log line) and SIGTERM-to-exit with a
delivery in flight (the webhook answers after ``HOLD_SECONDS``), with the exit code. Plus the
image's size and build time (cached layers after the first build).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from consumer.local.harness import LoopbackWebhook, sample_event
from consumer.local.image import find_engine
from consumer.local.stack import LocalStack, local_client, provision_fresh, start_server
from consumer.local.task import LoggedProcess, TaskContainer, TaskRun
from consumer.testing import poll_until
from infra.toolchain import use_pinned_node

RUNS = 5
HOLD_SECONDS = 2.0
STACK = "SqsWorker-demo"


class HeldWebhook(LoopbackWebhook):
    """Answers 200 after HOLD_SECONDS; ``started`` counts requests begun."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    def respond(self, key: str, path: str) -> int:
        self.started += 1
        time.sleep(HOLD_SECONDS)
        return 200


def _cycle(run: LoggedProcess, stack: LocalStack, webhook: HeldWebhook) -> dict[str, Any]:
    """Start, wait until ready, put one delivery in flight, SIGTERM; what ECS would see."""
    run.start()
    try:
        ready = run.wait_for("consumer_started")
        before = webhook.started
        event_id = f"bench-{time.monotonic_ns()}"
        local_client("sqs", stack.endpoint).send_message(
            QueueUrl=stack.task_environment["QUEUE_URL"], MessageBody=json.dumps(sample_event(event_id))
        )
        # The stop time means "with a delivery in flight" only if one is: a run without one is recorded as such
        # and left out of the SIGTERM-to-exit median.
        in_flight = poll_until(lambda: webhook.started != before, 30, interval=0.01)
        code, stop = run.stop()
        return {"ready_seconds": ready, "sigterm_to_exit_seconds": stop, "exit_code": code, "in_flight": in_flight}
    finally:
        run.remove()


def run(runs: int = RUNS) -> dict[str, Any]:
    use_pinned_node()  # as make does; before jsii loads
    from infra.app import build_app  # the CDK loads only when the benchmark runs, not when _medians is tested

    engine = find_engine()
    with tempfile.TemporaryDirectory(prefix="bench-container-") as scratch:
        outdir = Path(scratch) / "cdk.out"
        app, _ = build_app(outdir=str(outdir), context={"env": "demo"})
        app.synth()
        task = TaskContainer.from_assembly(outdir, STACK, "notifications")  # the demo stack's first worker
        image = task.build(engine)
        server, endpoint = start_server()
        webhook = HeldWebhook()
        webhook.start()
        rows: list[dict[str, Any]] = []
        try:
            for number in range(runs):
                for impl in ("container", "process"):
                    stack = provision_fresh(endpoint, outdir / f"{STACK}.template.json")
                    environment = {**stack.process_environment(), "NOTIFY_WEBHOOK_URL": webhook.url}
                    log = Path(scratch) / f"{impl}-{number}.log"
                    if impl == "container":
                        subject: LoggedProcess = TaskRun(
                            engine, task, log, name=f"bench-consumer-{number}", environment=environment,
                            volumes=task.volume_directories(engine, Path(scratch) / f"volumes-{number}"),
                        )  # fmt: skip
                    else:
                        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_"))}
                        subject = LoggedProcess([sys.executable, "-m", "consumer", "run"], log, {**env, **environment})
                    row = {"impl": impl, "run": number, **_cycle(subject, stack, webhook)}
                    print(
                        f"{impl:9} ready {row['ready_seconds']:5.2f} s  SIGTERM to exit "
                        f"{row['sigterm_to_exit_seconds']:5.2f} s  exit {row['exit_code']}"
                        + ("" if row["in_flight"] else "  (no delivery in flight: stop time not counted)"),
                        flush=True,
                    )
                    rows.append(row)
        finally:
            webhook.stop()
            server.stop()
    summary = {impl: _medians([r for r in rows if r["impl"] == impl]) for impl in ("container", "process")}
    return {
        "engine": engine.name,
        "image": {"size_bytes": image.size_bytes, "base": image.base, "build_seconds": image.seconds},
        "stop_timeout_seconds": task.stop_timeout,
        "hold_seconds": HOLD_SECONDS,
        "rows": rows,
        "median": summary,
    }


def _medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median start-to-ready over every run; SIGTERM-to-exit over the runs that had a delivery in flight."""
    stopped = [r["sigterm_to_exit_seconds"] for r in rows if r["in_flight"]]
    if not stopped:
        raise RuntimeError(f"no {rows[0]['impl']} run had a delivery in flight within 30 s of being ready")
    return {
        "ready_seconds": statistics.median(r["ready_seconds"] for r in rows),
        "sigterm_to_exit_seconds": statistics.median(stopped),
    }
