"""Each named scenario of the simulated world holds every invariant: one or more per race (bench/sim/scenarios.py).

Each scenario is written out so that its race, unfixed, breaks an invariant: its test fails with the fix reverted.
"""

from __future__ import annotations

import pytest

from bench.sim.invariants import check
from bench.sim.scenarios import SCENARIOS, Scenario
from bench.simulate import simulate_plan

#: Scenarios whose race is not fixed yet: each must fail (strict), until its fix lands and takes it off.
UNFIXED = {}


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, marks=pytest.mark.xfail(strict=True, reason="its race is not fixed yet"))
        if s.name in UNFIXED
        else s
        for s in SCENARIOS
    ],
    ids=lambda s: s.name,
)
def test_scenario_holds_every_invariant(scenario: Scenario) -> None:
    """The scenario's run breaks no invariant (its docstring: bench/sim/scenarios.py)."""
    run = simulate_plan(scenario.plan)
    assert [str(v) for v in check(run)] == [], scenario.what
