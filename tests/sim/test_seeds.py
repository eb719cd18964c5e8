"""Seeded runs of the simulated world: every invariant holds for each of SEEDS seeds (bench/sim/invariants.py).

Each seed draws its own plan (the handler's shape, standard or FIFO, the guard or none, faults, SIGKILLs, SIGTERMs,
crashes, a second consumer) and runs the real consumer on the virtual clock. The seeds run in chunks, so the test
workers share them. A failing seed is named with the one command that replays it with its event log; a night's
exploration beyond these is ``python -m bench.simulate --seeds 100000`` (docs/testing.md).
"""

from __future__ import annotations

import pytest

from bench.simulate import report, run_seed

#: How many seeds make test runs, and how many each test takes.
SEEDS = 520
CHUNK = 10


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK), ids=lambda first: f"seeds-{first}-{first + CHUNK - 1}")
def test_seeds_hold_every_invariant(first: int) -> None:
    """Each seed of the chunk breaks no invariant; a failure prints each failing seed's plan, what broke and its
    replay command."""
    failures = []
    for seed in range(first, first + CHUNK):
        run, violations = run_seed(seed)
        if violations:
            failures.append(report(seed, run, violations, log=False))
    assert not failures, "\n\n".join(failures)
