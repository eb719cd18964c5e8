"""The Lambda world's own behaviours (bench/sim/functions.py), each on a quiet plan read back exactly: a throttled
invocation calls nothing, an invocation past the function's timeout is stopped with its environment, and an
environment is frozen between invocations, so a handler given up on resumes only with the next one.
"""

from __future__ import annotations

from bench.sim.functions import simulate
from bench.sim.invariants import check
from bench.sim.plan import Plan
from bench.sim.run import Attempt, Run

#: How the mapping reports an invocation Lambda stopped (consumer/local/mapping.py's whole-batch failure).
TIMED_OUT = "function error: FunctionTimedOut: Task timed out after"


def lambda_run(**values: object) -> Run:
    """A quiet Lambda run (Lambda's faults only until 5 s, every event of ``kinds`` in turn) that breaks no
    invariant."""
    quiet: dict[str, object] = {
        "target": "lambda",
        "chaos_until": 5.0,
        "send_over": 0.0,
        "cycle_kinds": True,
        "consumers_from": 1.0,
        "switch_probability": 0.0,
    }
    run = simulate(Plan(seed=7, **(quiet | values)))  # type: ignore[arg-type]
    assert [str(v) for v in check(run)] == []
    return run


def attempts_of(run: Run, event: str) -> list[Attempt]:
    return [a for a in run.attempts if a.event == event]


def logged(run: Run, text: str) -> list[float]:
    """When the world recorded a line containing ``text``, in virtual seconds."""
    return [float(line.split()[0]) for line in run.events if text in line]


def test_a_throttled_invocation_runs_nothing_and_spends_a_receive() -> None:
    """Every invocation throttled until 5 s: the first batch is not run, and each message runs on its second receive,
    once the queue's visibility has passed (its first receive spent unseen)."""
    run = lambda_run(messages=2, throttled=1.0)
    visibility = run.plan.lambda_target().queue_visibility_seconds
    assert run.unseen == ["e000", "e001"]
    assert [(a.event, a.receive_count) for a in run.attempts] == [("e000", 2), ("e001", 2)]
    assert min(a.started for a in run.attempts) > visibility


def test_an_invocation_past_its_timeout_is_stopped_with_its_environment() -> None:
    """An environment stalled mid-handler for longer than the function's timeout: Lambda stops it at the timeout, its
    handler never returns, nothing is deleted, and the message runs on its next receive in a new environment."""
    run = lambda_run(messages=1, stalled=1.0, duration=(3.0, 3.0))
    timeout = run.plan.lambda_target().function_timeout_seconds
    first, second = attempts_of(run, "e000")
    stopped = run.processes[0]
    assert (first.process, first.ended, round(stopped.killed or 0, 3)) == (
        "fn0",
        None,
        logged(run, "at its timeout")[0],
    )
    assert round((stopped.killed or 0) - timeout, 3) == logged(run, "fn0 cold start")[0]  # the invocation's start
    assert run.invocations[0].endswith(f"1 records, 0 deleted, 1 left; {TIMED_OUT} {timeout:.2f} seconds")
    assert (second.process != first.process, second.receive_count, second.outcome) == (True, 2, "applied")


def test_a_handler_given_up_on_resumes_only_with_its_environments_next_invocation() -> None:
    """A 60 s handler given up on at max_duration (3 s): the invocation answers, the environment is frozen, and the
    handler returns only as the same environment is invoked again (the message's next receive, after the queue's
    visibility), its work done once."""
    run = lambda_run(messages=2, kinds=("hang", "ok"), max_duration=3, send_over=20.0)
    (hang,) = attempts_of(run, "e000")
    thawed = logged(run, f"environment {hang.process} thawed with work under way")
    assert (len(thawed), hang.outcome, len(run.effects["e000"])) == (1, "applied", 1)
    assert (
        round(hang.ended or 0, 3) == thawed[0] > hang.started + 60 + run.plan.lambda_target().function_timeout_seconds
    )
