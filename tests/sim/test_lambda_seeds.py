"""Seeded runs of the simulated world's Lambda target: every invariant holds for each seed of LAMBDA_SEEDS.

Each seed draws its own Lambda plan (:meth:`bench.sim.plan.Plan.draw_lambda`: the handler's shape, standard or FIFO,
the guard or none, the function's faults, and Lambda's own: throttled invocations, environments stalled past the
function's timeout, environments discarded) and runs the real :class:`~consumer.runtime.invocation.LambdaWorker`
behind the world's event source mapping (bench/sim/functions.py), checked by the container's invariants
(bench/sim/invariants.py). LAMBDA_SEEDS is a fixed sample of the first 200 seeds: between them each handler shape on
each queue type with and without the guard, and each of Lambda's faults met in a run (a throttle, an invocation
stopped at its timeout, a handler resumed in its environment's next invocation, an environment discarded with a
handler in it, a cold start after a discard, a record too late to start), 64 among them a seed that found a race
in the Lambda runtime (each such race is a named scenario of bench/sim/scenarios.py, tests/sim/test_scenarios.py).
The whole sweep: ``python -m bench.simulate --target lambda --seeds N`` (docs/testing.md).
"""

from __future__ import annotations

import functools

import pytest

from bench.sim.invariants import Violation
from bench.sim.plan import Plan
from bench.sim.run import Run
from bench.simulate import report, run_seed

#: The sample make test runs (see the module docstring).
LAMBDA_SEEDS = (41, 64, 92, 93, 97, 121, 132, 165, 184, 189, 199)
#: What the sample's runs meet, each at least once: a line of the run's event log (bench/sim/functions.py records
#: Lambda's faults; the runtime logs the rest).
MET = {
    "a throttled invocation": "throttled:",
    "an invocation stopped at its timeout": "stopped at its timeout",
    "an environment stalled": "stalls for",
    "a handler resumed with its environment's next invocation": "thawed with work under way",
    "an environment discarded with a handler in it": "discarded with work under way",
    "a record too late to start, handed back": "why=invocation_ending",
    "a handler's late success": "handler_succeeded_late",
}


@functools.cache
def lambda_run(seed: int) -> tuple[Run, tuple[Violation, ...]]:
    run, violations = run_seed(seed, "lambda")
    return run, tuple(violations)


@pytest.mark.parametrize("seed", LAMBDA_SEEDS, ids=lambda seed: f"lambda-seed-{seed}")
def test_lambda_seed_holds_every_invariant(seed: int) -> None:
    """The seed's run breaks no invariant; a failure prints its plan, what broke and its replay command."""
    run, violations = lambda_run(seed)
    assert not violations, report(seed, run, list(violations), log=False)


def drawn(plan: Plan) -> set[tuple[str, object]]:
    """What a Lambda plan draws that a race needs: its handler's shape with its queue type and guard, and whether
    each of Lambda's faults is on, several environments at once (more than the least, 2), handlers that outlast an
    invocation."""
    return {
        ("shape", (plan.shape, plan.fifo, plan.guard)),
        ("throttled", plan.throttled > 0),
        ("stalled", plan.stalled > 0),
        ("recycled", plan.recycled > 0),
        ("environments > 2", (plan.lambda_target().maximum_concurrency or 0) > 2),
        ("hang", "hang" in plan.kinds),
    }


def test_the_lambda_sample_draws_what_the_first_200_seeds_draw() -> None:
    """LAMBDA_SEEDS, drawn (not run), draw every shape, queue type and guard, and each of Lambda's faults on and off,
    as the first 200 seeds do: a change to Plan.draw_lambda that moves what a seed draws fails here."""
    wanted = set().union(*(drawn(Plan.draw_lambda(seed)) for seed in range(200)))
    sampled = set().union(*(drawn(Plan.draw_lambda(seed)) for seed in LAMBDA_SEEDS))
    assert sorted(map(str, wanted - sampled)) == []


def test_the_lambda_sample_meets_each_of_lambdas_faults() -> None:
    """The sample's runs (those of the tests above, run once) meet each fault of MET: a runtime change that moves a
    seed's run off one fails here; pick another seed of the first 200 that meets it."""
    events = [line for seed in LAMBDA_SEEDS for line in lambda_run(seed)[0].events]
    assert [what for what, line in MET.items() if not any(line in event for event in events)] == []
