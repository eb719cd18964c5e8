"""A lambda worker's scenario catalogue (infra/alarms/lambda_scenarios.py) on a synthesized template.

The template comes from the reference environments (tests/reference.py), the first worker Lambda can run switched to
``"target": "lambda"`` (as tests/infra/test_lambda_target.py does), so the tests hold for any valid cdk.json.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.alarms.__main__ import ROOT
from infra.alarms.catalogue import Outcome, _function_name, run_catalogue, subjects, worker_facts
from infra.alarms.lambda_scenarios import LAMBDA_CATALOGUE, NOTHING_DELETED_MINUTES, lambda_skipped
from infra.settings import load_environments
from infra.worker_settings import CONTEXT_KEY, WORKER_KEYS
from tests.infra.conftest import synthesize_once
from tests.infra.function_checks import lambda_ready, move_to_lambda
from tests.reference import ENVIRONMENTS

READY = lambda_ready(ENVIRONMENTS)
assert READY is not None, "no reference worker can run on Lambda"
ORIGINAL, WORKER = READY
CONTEXT = {CONTEXT_KEY: {"fn": move_to_lambda(copy.deepcopy(ENVIRONMENTS[ORIGINAL]), WORKER)}}
(ENVIRONMENT,) = load_environments(CONTEXT)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    synthesized = synthesize_once(tmp_path_factory, CONTEXT)["fn"]
    return synthesized.outdir / f"{ENVIRONMENT.stack_name}.template.json"


@pytest.fixture(scope="module")
def outcomes(template: Path) -> dict[str, Outcome]:
    return {o.scenario.name: o for o in run_catalogue(template, ENVIRONMENT)}


def _notified(outcome: Outcome) -> list[str]:
    return [outcome.short_names[c.alarm] for c, _ in outcome.notifications() if c.to_state == "ALARM"]


def test_lambda_catalogue_runs_every_scenario_on_a_lambda_worker(outcomes: dict[str, Outcome]) -> None:
    """A template whose worker is on Lambda runs the lambda catalogue, not the container's."""
    assert [s.name for s in LAMBDA_CATALOGUE] == list(outcomes)


@pytest.mark.parametrize("scenario", [s.name for s in LAMBDA_CATALOGUE])
def test_lambda_catalogue_meets_the_goals(outcomes: dict[str, Outcome], scenario: str) -> None:
    """Every lambda scenario's outcome is the intended one: what must page does within its bound, nothing else."""
    assert [] == outcomes[scenario].problems


def test_lambda_function_errors_pages_function_errors_within_two_minutes(outcomes: dict[str, Outcome]) -> None:
    """An invocation that fails for the function's own fault pages FunctionErrors first."""
    outcome = outcomes["lambda-function-errors"]
    first = next(c for c, _ in outcome.notifications() if c.to_state == "ALARM")
    assert ("FunctionErrors", True) == (outcome.short_names[first.alarm], first.t - outcome.timeline.onset <= 120)


def test_lambda_handler_failures_never_page_function_errors(outcomes: dict[str, Outcome]) -> None:
    """A handler failing every message is settled per message: the DLQ pages, FunctionErrors never does."""
    notified = _notified(outcomes["lambda-fails-all"])
    assert ("DlqDepth" in notified, "FunctionErrors" in notified) == (True, False)


def test_lambda_idle_queue_notifies_nothing_on_missing_function_data(outcomes: dict[str, Outcome]) -> None:
    """An idle queue invokes nothing: every function alarm reads only missing data, and none notifies."""
    outcome = outcomes["lambda-idle"]
    lambda_points = [key[1] for key, points in outcome.series.points.items() if key[0] == "AWS/Lambda" and points]
    assert ([], []) == (lambda_points, _notified(outcome))


def test_lambda_throttling_raises_a_ticket_not_a_function_error(outcomes: dict[str, Outcome]) -> None:
    """Throttling raises FunctionThrottles (a ticket) and never FunctionErrors."""
    outcome = outcomes["lambda-throttled"]
    routes = {outcome.short_names[c.alarm]: where for c, where in outcome.notifications() if c.to_state == "ALARM"}
    assert (routes.get("FunctionThrottles"), "FunctionErrors" in routes) == ("ticket", False)


def test_lambda_at_maximum_is_skipped_with_provisioned_pollers() -> None:
    """With provisioned pollers the mapping sets no MaximumConcurrency: lambda-at-maximum does not apply."""
    pollers = move_to_lambda(
        copy.deepcopy(ENVIRONMENTS[ORIGINAL]), WORKER, provisioned_pollers={"minimum": 2, "maximum": 5}
    )
    (environment,) = load_environments({CONTEXT_KEY: {"fn": pollers}})
    facts = worker_facts(environment)[0]
    at_maximum = next(s for s in LAMBDA_CATALOGUE if s.name == "lambda-at-maximum")
    assert "provisioned pollers" in (lambda_skipped(at_maximum, facts) or "")


def test_lambda_worker_facts_name_the_function_as_the_construct_does() -> None:
    """The evaluator's function name is infra/function.py's (not imported there: that module loads the CDK)."""
    from infra.function import function_name_of

    assert function_name_of("SqsWorker-fn") == _function_name("SqsWorker-fn")


def test_lambda_nothing_deleted_minutes_are_the_alarms() -> None:
    """The mapping-stopped bound's 5 minutes are StalledNothingDeleted's evaluation periods."""
    from infra.queue_alarms import STALLED_EVALUATION_MINUTES

    assert STALLED_EVALUATION_MINUTES == NOTHING_DELETED_MINUTES


def test_subjects_add_the_first_worker_of_the_other_target() -> None:
    """Workers on both targets: the container's catalogue runs on the first worker and the lambda catalogue on the
    first lambda worker, each subject first with every other worker after it."""
    (original,) = load_environments({CONTEXT_KEY: {ORIGINAL: ENVIRONMENTS[ORIGINAL]}})
    ecs, on_lambda = worker_facts(original)[0], worker_facts(ENVIRONMENT)[0]
    assert [[ecs, on_lambda], [on_lambda, ecs]] == subjects([ecs, on_lambda])
    assert [[on_lambda, ecs], [ecs, on_lambda]] == subjects([on_lambda, ecs])
    assert [[ecs]] == subjects([ecs])


def _mixed() -> dict[str, object]:
    """``ORIGINAL`` as two workers: its own on ECS (the default identity, first) and a copy named ``mail`` on
    Lambda (second), its environment-wide settings kept."""
    environment = copy.deepcopy(ENVIRONMENTS[ORIGINAL])
    if "workers" in environment:
        workers = environment.pop("workers")
        own = copy.deepcopy(workers[WORKER])
    else:
        own = {k: environment.pop(k) for k in list(environment) if k in WORKER_KEYS}
    switched = move_to_lambda({"workers": {"mail": copy.deepcopy(own)}}, "mail")["workers"]["mail"]
    return {**environment, "workers": {WORKER: {**own, "identity": "default"}, "mail": switched}}


def test_lambda_catalogue_runs_beside_the_containers_on_a_second_worker(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """An environment whose first worker is on ECS and second on Lambda runs both catalogues, each meeting its goals
    on its own worker's alarms (the second worker's alarm names carry its prefix)."""
    context = {CONTEXT_KEY: {"mixed": _mixed()}}
    (environment,) = load_environments(context)
    synthesized = synthesize_once(tmp_path_factory, context)["mixed"]
    found = run_catalogue(synthesized.outdir / f"{environment.stack_name}.template.json", environment)
    names = {o.scenario.name for o in found}
    assert ({s.name for s in LAMBDA_CATALOGUE} <= names, "steady" in names) == (True, True)
    assert [] == [(o.scenario.name, o.problems) for o in found if not o.intended]


def test_scenarios_command_runs_a_cdk_json_with_a_lambda_worker(template: Path, tmp_path: Path) -> None:
    """`scenarios --cdk-json FILE --templates DIR` evaluates that file's environments: the lambda scenarios, exit 0."""
    (tmp_path / "cdk.json").write_text(json.dumps({"context": CONTEXT}))
    command = [sys.executable, "-m", "infra.alarms", "scenarios", "--cdk-json", str(tmp_path / "cdk.json")]
    command += ["--templates", str(template.parent)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert (0, True) == (result.returncode, "lambda-function-errors" in result.stdout), result.stderr[-500:]


def test_scenarios_command_refuses_a_file_without_environments(tmp_path: Path) -> None:
    """A --cdk-json without context.sqs-worker:environments exits 2 naming the option and the key."""
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {}}))
    command = [sys.executable, "-m", "infra.alarms", "scenarios", "--cdk-json", str(tmp_path / "cdk.json")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert (2, True) == (result.returncode, f"must be a cdk.json with context.{CONTEXT_KEY}" in result.stderr)
