"""``python -m bench.simulate``: run the simulated world over many seeds (or one, with its event log).

Each seed draws a plan (bench/sim/world.py: the handler's shape, standard or FIFO, the guard or none, faults,
SIGKILLs, SIGTERMs, a second consumer) and runs the real consumer on the virtual clock; the run's invariants
(bench/sim/invariants.py) must hold. A failing seed prints its plan, what broke, and the one command that replays it
with its event log::

    python -m bench.simulate --seeds 100000          # a night's exploration
    python -m bench.simulate --seed 4711 --log       # one seed, its event log
    python -m bench.simulate --scenario twelve_hour_budget --log   # a named scenario (bench/sim/scenarios.py)
    python -m bench.simulate --target lambda --seeds 1000   # Lambda plans: the worker behind an event source mapping

``--target lambda`` draws each seed's plan with :meth:`Plan.draw_lambda` (bench/sim/functions.py runs it): the same
invariants over Lambda's execution environments, throttles, timeouts and cold starts.

Exit 0 when every seed held, 1 otherwise.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import typer

from bench.sim.functions import simulate as simulate_lambda
from bench.sim.invariants import Violation, check
from bench.sim.plan import TARGETS, Plan
from bench.sim.run import Run
from bench.sim.scenarios import BY_NAME
from bench.sim.world import simulate

app = typer.Typer(add_completion=False)


def replay_command(seed: int, target: str = "container") -> str:
    flag = "" if target == "container" else f" --target {target}"
    return f"python -m bench.simulate{flag} --seed {seed} --log"


def draw(seed: int, target: str = "container") -> Plan:
    """Seed ``seed``'s plan on ``target`` (one of TARGETS)."""
    return Plan.draw_lambda(seed) if target == "lambda" else Plan.draw(seed)


def simulate_plan(plan: Plan) -> Run:
    """``plan`` run on its target's world (bench/sim/world.py, or bench/sim/functions.py for Lambda)."""
    return simulate_lambda(plan) if plan.target == "lambda" else simulate(plan)


def run_seed(seed: int, target: str = "container") -> tuple[Run, list[Violation]]:
    """One seed's run and what it broke."""
    run = simulate_plan(draw(seed, target))
    return run, check(run)


def report(seed: int, run: Run, violations: list[Violation], *, log: bool) -> str:
    """What a failing seed says: its plan, each violation, the replay command and (``log``) the event log."""
    lines = [f"seed {seed}: {run.plan.describe()}"]
    lines += [f"  {violation}" for violation in violations]
    lines.append(f"  replay: {replay_command(seed, run.plan.target)}")
    if log:
        lines += ["  event log:", *(f"    {line}" for line in run.events)]
    return "\n".join(lines)


def run_scenario(name: str, *, log: bool) -> int:
    """One named scenario: what it pins, what it broke, its event log (``log``); 0 when it held, else 1."""
    if name not in BY_NAME:
        print(f"--scenario: no scenario named {name!r}; one of: {', '.join(sorted(BY_NAME))}", file=sys.stderr)
        return 2
    chosen = BY_NAME[name]
    run = simulate_plan(chosen.plan)
    violations = check(run)
    print(f"scenario {name}: {chosen.what}")
    print(f"  {chosen.plan.describe()}")
    print(*(f"  {violation}" for violation in violations or ["held every invariant"]), sep="\n")
    if log:
        print("  event log:", *(f"    {line}" for line in run.events), sep="\n")
    return 1 if violations else 0


@app.command()
def main(
    seeds: int = typer.Option(100, help="How many seeds to run, from --start."),
    start: int = typer.Option(0, help="The first seed."),
    seed: int | None = typer.Option(None, help="Run this one seed only."),
    log: bool = typer.Option(False, help="Print the event log of each seed run (of a failing one without --seed)."),
    stop_at: int = typer.Option(0, help="Stop after this many failing seeds (0: run them all)."),
    scenario: str | None = typer.Option(None, help="Run this named scenario only (bench/sim/scenarios.py)."),
    target: str = typer.Option(
        "container",
        help="Where each seed's worker runs: container (ECS processes) or lambda (an event source mapping).",
    ),
) -> None:
    """Run seeds of the simulated world; print each failing one with its replay command."""
    if target not in TARGETS:
        print(f'"--target" must be one of {", ".join(TARGETS)}: {target}', file=sys.stderr)
        sys.exit(2)
    if scenario is not None:
        sys.exit(run_scenario(scenario, log=log))
    chosen = [seed] if seed is not None else list(range(start, start + seeds))
    failed: list[int] = []
    rules: Counter[str] = Counter()
    began = time.monotonic()
    for number in chosen:
        run, violations = run_seed(number, target)
        if violations or seed is not None:
            print(report(number, run, violations, log=log or seed is None and bool(violations) and len(chosen) == 1))
        if violations:
            failed.append(number)
            rules.update(v.rule for v in violations)
            if stop_at and len(failed) >= stop_at:
                break
    took = time.monotonic() - began
    summary = ", ".join(f"{rule} {count}" for rule, count in sorted(rules.items())) or "none"
    print(f"{len(chosen)} seeds in {took:.0f} s: {len(failed)} failed ({summary})")
    if failed:
        print("failing seeds: " + " ".join(str(n) for n in failed[:50]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    app()
