"""The same seed gives the same run, event for event: in one process, and in another with another hash seed (the
replay command a failing seed prints runs in a new process)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from bench.sim.functions import simulate as simulate_lambda
from bench.sim.plan import Plan
from bench.sim.world import simulate

ROOT = Path(__file__).resolve().parents[2]
#: Seeds whose plans between them run every shape, FIFO and standard, the guard and none, kills and SIGTERMs, each
#: among the cheapest to run that do: 1 (batch, standard, the guard, two SIGKILLs), 8 (one, standard, no guard, two
#: SIGKILLs and a SIGTERM), 15 (async, FIFO, no guard, a SIGKILL).
SEEDS = (1, 8, 15)


def digest(events: list[str]) -> str:
    return hashlib.sha256("\n".join(events).encode()).hexdigest()


def test_a_seed_replays_event_for_event_in_one_process() -> None:
    """Two runs of each seed in this process: identical event logs (virtual times, threads, calls, log lines)."""
    for seed in SEEDS:
        first, second = simulate(Plan.draw(seed)), simulate(Plan.draw(seed))
        assert first.events == second.events, f"seed {seed} ran differently the second time"
        assert len(first.events) > 20


def test_a_seed_replays_event_for_event_in_another_process() -> None:
    """A seed run in a new process, with another PYTHONHASHSEED (so no set's order can steer it), gives the event log
    this process gives."""
    code = (
        "import hashlib, sys; from bench.sim.plan import Plan; from bench.sim.world import simulate;"
        " print(hashlib.sha256('\\n'.join(simulate(Plan.draw(int(sys.argv[1]))).events).encode()).hexdigest())"
    )
    for seed, hash_seed in ((SEEDS[0], "7"), (SEEDS[-1], "12345")):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", code, str(seed)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == digest(simulate(Plan.draw(seed)).events), f"seed {seed} in another process"


def test_a_lambda_seed_replays_event_for_event() -> None:
    """A Lambda seed (41: a batch handler without the guard, its environment discarded and started cold again) run
    twice: identical event logs, frozen environments, cold starts and Lambda's drawn faults included."""
    first, second = simulate_lambda(Plan.draw_lambda(41)), simulate_lambda(Plan.draw_lambda(41))
    assert first.events == second.events
    assert sum("cold start" in line for line in first.events) > 1
