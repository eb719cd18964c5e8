"""The scheduler's watch for a wait outside the simulated clock: it reports a run whose baton stopped moving, never a
run that is only long in real seconds (a loaded machine). These two tests wait for real (about 2 s each): the watch
is on real time, and its window (half a second here) is ten times a step, so a loaded machine does not fake a stall."""

from __future__ import annotations

import time

from bench.sim.scheduler import Simulation


def test_a_long_run_that_moves_is_not_reported_as_stalled() -> None:
    """Forty virtual steps, each taking real time: the run lasts four times the watch's window, and is not stalled."""
    sim = Simulation(1, switch_probability=0.0)

    def main() -> None:
        for _ in range(40):
            time.sleep(0.05)
            sim.sleep(1.0)

    sim.run(main, real_timeout=0.5)
    sim.close()
    assert (sim.errors, sim.now) == ([], 40.0)


def test_a_wait_outside_the_clock_is_reported_with_where_it_waits() -> None:
    """A thread that sleeps on the real clock while holding the baton: the run is reported as stalled, naming it."""
    sim = Simulation(1, switch_probability=0.0)

    def main() -> None:
        sim.sleep(1.0)
        time.sleep(1.5)

    sim.run(main, real_timeout=0.5)
    sim.close()
    assert len(sim.errors) == 1 and sim.errors[0].startswith("stalled: main held the baton"), sim.errors
    assert "time.sleep(1.5)" in sim.errors[0]
