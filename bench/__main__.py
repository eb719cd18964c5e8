"""``python -m bench <benchmark>``: run one benchmark (or ``all``), save its JSON, regenerate the benchmarks page.

Each benchmark runs ours and the naive baseline side by side in one session
against the same local endpoint; results land in ``docs/evidence/bench/<name>.json`` and
the report (docs/evidence/BENCHMARKS.md, tables and PNG plots) is rebuilt from every saved result.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from collections.abc import Callable
from typing import Any

import typer

from bench import build, latency, profile, throughput
from bench.common import ROOT, write_result
from bench.coroutines.harness import STEADY_SECONDS
from bench.endpoint import ENDPOINTS, local_endpoint
from consumer.local.image import ContainerToolingUnavailable

app = typer.Typer(add_completion=False, no_args_is_help=True)
ENDPOINT_OPTION = typer.Option("ministack", help=f"local SQS endpoint: {' | '.join(ENDPOINTS)}")


def _meta(endpoint: str) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "date": datetime.date.today().isoformat(),
        "endpoint": endpoint,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "commit": commit.stdout.strip(),
    }


def _save(name: str, endpoint: str, payload: dict[str, Any]) -> None:
    path = write_result(name, {"meta": _meta(endpoint), **payload})
    print(f"wrote {path.relative_to(ROOT)}")
    from bench import report

    report.write()


def _with_endpoint(name: str, endpoint: str, bench: Callable[[str], dict[str, Any]]) -> None:
    with local_endpoint(endpoint) as url:
        payload = bench(url)
    _save(name, endpoint, payload)


@app.command("throughput")
def throughput_command(endpoint: str = ENDPOINT_OPTION, window: float = typer.Option(8.0, help="seconds")) -> None:
    """1, 2, 6: messages/s, SQS requests per message at saturation and RSS, concurrency 1-64, two handlers."""
    _with_endpoint("throughput", endpoint, lambda url: throughput.run(url, window=window))


@app.command("profile")
def profile_command(
    endpoint: str = ENDPOINT_OPTION,
    concurrency: int = typer.Option(16, min=1, help="ours' slots"),
    window: float = typer.Option(8.0, help="seconds sampled"),
    save_as: str = typer.Option("", help="save as profile-NAME.json (e.g. before), not profile.json"),
    commit: str = typer.Option("", help="the commit to record: an older consumer/ checked out over HEAD (before)"),
) -> None:
    """Where the CPU goes: ours with the no-op handler at saturation, sampled by py-spy."""

    def run(url: str) -> dict[str, Any]:
        result = profile.run(url, concurrency=concurrency, window=window)
        # _save records HEAD; a profile of another commit's consumer/ says which one instead.
        return {**result, "meta": {**_meta(endpoint), "commit": commit}} if commit else result

    _with_endpoint(f"profile-{save_as}" if save_as else "profile", endpoint, run)


@app.command("latency")
def latency_command(endpoint: str = ENDPOINT_OPTION) -> None:
    """3: pickup latency p50/p99 on an idle queue (send to handler start)."""
    _with_endpoint("latency", endpoint, lambda url: latency.run_latency(url, endpoint))


@app.command("shutdown")
def shutdown_command(endpoint: str = ENDPOINT_OPTION) -> None:
    """4: SIGTERM to exit, idle and busy; messages interrupted, stranded and lost."""
    _with_endpoint("shutdown", endpoint, latency.run_shutdown)


@app.command("duplicates")
def duplicates_command(endpoint: str = ENDPOINT_OPTION) -> None:
    """5: duplicate handler starts with heavy-tailed durations past the visibility timeout."""
    _with_endpoint("duplicates", endpoint, latency.run_duplicates)


@app.command("build")
def build_command(suite: bool = typer.Option(True, help="also time the test suite per tier")) -> None:
    """7: synth time against the aws-ecs-patterns baseline, and the test suite's time."""
    _save("build", "none", build.run(suite=suite))


@app.command("container")
def container_command(runs: int = typer.Option(5, min=1, help="start/stop cycles per implementation")) -> None:
    """8: the container as ECS runs it vs the process: image size, start-to-ready, SIGTERM-to-exit."""
    from bench import container

    _save("container", "moto", container.run(runs=runs))


@app.command("peers")
def peers_command(
    rounds: int = typer.Option(5, min=1, help="rounds of the headline cell (noop, concurrency 16)"),
    other_rounds: int = typer.Option(2, min=1, help="rounds of every other throughput cell and the CPU-bound cell"),
    cells: list[str] = typer.Option(
        [],
        "--cells",
        help="cells to run (repeat the option; default all): noop_c16 noop_c64 io50_c16 io50_c64"
        " io200_c256 cpu5_c8 lease kill",
    ),
    subjects: list[str] = typer.Option([], "--subjects", help="subjects to run (repeat; default all)"),
    window: float = typer.Option(8.0, help="seconds counted per measurement"),
    warmup: float = typer.Option(3.0, help="seconds after the first delete before counting"),
) -> None:
    """The peers (Celery, Dramatiq, sqs-workers, sqs-consumer) beside ours and two yardsticks (about 38 min)."""
    import signal
    import sys

    from bench.peers import harness

    # SIGTERM (a CI timeout, `kill`) ends the run through its finally blocks: every subject and the endpoint stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = harness.Settings(rounds=rounds, other_rounds=other_rounds, warmup=warmup, window=window)
    with local_endpoint("ministack", counting=True) as url:
        payload = harness.run(url, settings=settings, cells=cells or harness.CELLS, subjects=subjects or None)
    _save("peers", "ministack", payload)


@app.command("async")
def async_command(
    rounds: int = typer.Option(5, min=1, help="interleaved rounds of every cell"),
    shapes: list[str] = typer.Option(
        [], "--shapes", help="cells to run (repeat; default all): thread_c256 async_c256 async_c1024"
    ),
    guards: list[str] = typer.Option(
        [], "--guards", help="guards to run under (repeat; default both): idempotent dynamodb"
    ),
    window: float = typer.Option(8.0, help="seconds counted per measurement"),
    warmup: float = typer.Option(3.0, help="seconds after the first delete before counting"),
    steady: float = typer.Option(
        STEADY_SECONDS, help="then at most this many seconds more until the process holds a steady number of messages"
    ),
) -> None:
    """Async handlers beside the threaded one: 200 ms I/O, def at 256 threads, async def at 256 and 1,024 (~12 min)."""
    import signal
    import sys

    from bench.coroutines import harness
    from bench.peers.harness import Settings

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # as peers: the subject and the endpoint stopped
    settings = Settings(rounds=rounds, warmup=warmup, window=window, steady=steady)
    with local_endpoint("ministack", counting=True) as url:
        payload = harness.run(
            url, settings=settings, shapes=shapes or harness.SHAPES, guards=guards or tuple(harness.GUARDS)
        )
    _save("async", "ministack", payload)


@app.command("tracing")
def tracing_command(
    endpoint: str = ENDPOINT_OPTION,
    rounds: int = typer.Option(3, min=1, help="rounds of every cell, in turn"),
    window: float = typer.Option(8.0, help="seconds counted per measurement"),
    warmup: float = typer.Option(2.0, help="seconds before counting"),
) -> None:
    """A span per attempt: the runtime before tracing existed, tracing off (opentelemetry importable, then not) and
    on (the SDK dropping spans, and OTLP/HTTP to a local sink): msg/s, CPU per message, as ratios against before in
    the same round (about 2 min a round)."""
    from bench.tracing import harness

    _with_endpoint("tracing", endpoint, lambda url: harness.run(url, rounds=rounds, window=window, warmup=warmup))


@app.command("all")
def all_command(endpoint: str = ENDPOINT_OPTION, suite: bool = typer.Option(True)) -> None:
    """Every benchmark in turn (about 28 minutes on 2 cores, with the suite)."""
    with local_endpoint(endpoint) as url:
        for name, bench in (
            ("throughput", throughput.run),
            ("latency", lambda url: latency.run_latency(url, endpoint)),
            ("shutdown", latency.run_shutdown),
            ("duplicates", latency.run_duplicates),
            ("profile", profile.run),
        ):
            try:
                write_result(name, {"meta": _meta(endpoint), **bench(url)})
            except profile.ProfilerUnavailable as why:  # py-spy needs ptrace: root, or kernel.yama.ptrace_scope=0
                print(f"profile skipped: {why}")
    _save("build", "none", build.run(suite=suite))
    from bench import container

    try:
        _save("container", "moto", container.run())
    except ContainerToolingUnavailable as why:
        print(f"container benchmark skipped: {why}")


@app.command("report")
def report_command() -> None:
    """Rebuild docs/evidence/BENCHMARKS.md and the plots from the saved results, without running anything."""
    from bench import report

    print(f"wrote {report.write().relative_to(ROOT)}")


if __name__ == "__main__":
    app()
