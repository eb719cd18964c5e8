"""The scheduler's watch for a wait outside the simulated clock: it reports a run whose baton stopped moving, never a
run that is only long in real seconds (a loaded machine). These two tests wait for real (about 2 s each): the watch
is on real time, and its window (half a second here) is ten times a step, so a loaded machine does not fake a stall.
And a group of threads frozen (a Lambda execution environment between invocations): virtual time only."""

from __future__ import annotations

import time

from bench.sim.scheduler import SimThread, Simulation, freeze


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


def frozen_sleeper(sleep: float, frozen_from: float, frozen_for: float) -> list[tuple[str, float]]:
    """A thread of group "env" that sleeps ``sleep`` s, the group frozen from ``frozen_from`` for ``frozen_for`` s by
    the main thread: what happened when, in virtual seconds."""
    sim = Simulation(1, switch_probability=0.0)
    seen: list[tuple[str, float]] = []

    def sleeper() -> None:
        sim.sleep(sleep)
        seen.append(("woke", sim.now))

    def main() -> None:
        SimThread(sim, sleeper, "sleeper", "env").start()
        sim.sleep(frozen_from)
        freeze(sim, "env")
        sim.sleep(frozen_for)
        seen.append(("thawed", sim.now))
        freeze(sim, "env", frozen=False)
        sim.sleep(100.0)

    sim.run(main)
    sim.close()
    assert sim.errors == []
    return seen


def test_a_frozen_thread_wakes_only_once_thawed() -> None:
    """A 10 s sleep frozen at 2 s for 30 s: it does not wake at 10 s, but as its group is thawed, at 32 s."""
    assert frozen_sleeper(10.0, 2.0, 30.0) == [("thawed", 32.0), ("woke", 32.0)]


def test_a_thawed_thread_sleeps_out_what_is_left() -> None:
    """A 10 s sleep frozen at 2 s for 5 s: thawed at 7 s, it wakes at its deadline, 10 s, as a frozen process's clock
    goes on."""
    assert frozen_sleeper(10.0, 2.0, 5.0) == [("thawed", 7.0), ("woke", 10.0)]
