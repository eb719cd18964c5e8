"""The runtime's AWS calls, recorded during this run, are all listed where the permissions tier evaluates them.

``tests/infra/runtime_calls.json`` lists every call the consumer runtime makes, as (operation, IAM
action, resource); ``tests/infra/test_permissions.py`` checks the synthesized task role allows each
one on AWS. This module's one test is the last of the run (tests/integration/conftest.py moves it there, and under
pytest-xdist its file is the last one sent): it fails on a call the list lacks, so a new runtime call cannot ship
without its permission being evaluated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from consumer.testing import wait_until
from tests.integration.conftest import ROOT, WORKER_CALLS, shared_directory
from tests.integration.recorder import runtime_call_recorder

RUNTIME_CALLS_FILE = ROOT / "tests" / "infra" / "runtime_calls.json"
#: How long the check waits for the other workers to finish their tests.
OTHER_WORKERS_TIMEOUT_SECONDS = 600


def listed_calls() -> set[tuple[str, str, str]]:
    calls = json.loads(RUNTIME_CALLS_FILE.read_text())["calls"]
    return {(c["operation"], c["action"], c["resource"]) for c in calls}


def other_workers_calls(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str, str]]:
    """Under pytest-xdist: what the runtime made on every other worker, once each has finished (this test is the last
    one sent, so the others end as it runs); nothing in a serial run."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count:
        return set()
    directory = shared_directory(tmp_path_factory) / WORKER_CALLS
    others = [directory / f"gw{n}.jsonl" for n in range(int(count)) if f"gw{n}" != worker]
    wait_until(
        lambda: all(path.exists() for path in others),
        timeout=OTHER_WORKERS_TIMEOUT_SECONDS,
        what=f"every other xdist worker's runtime calls in {directory}",
        interval=0.2,
    )
    return runtime_call_recorder.recorded_by_subprocesses(directory)


def test_every_runtime_call_is_listed_for_the_permissions_tier(
    runtime_calls: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every AWS call the runtime made in this run is in tests/infra/runtime_calls.json (this test runs last)."""
    made = runtime_call_recorder.recorded() | runtime_call_recorder.recorded_by_subprocesses(runtime_calls)
    made |= other_workers_calls(tmp_path_factory)
    if not made:
        pytest.skip("no runtime code made an AWS call in this run")
    missing = sorted(made - listed_calls())
    assert not missing, "\n".join(
        f"the runtime called {operation} ({action} on the {resource}), which {RUNTIME_CALLS_FILE.relative_to(ROOT)}"
        " does not list: add it there, and tests/infra/test_permissions.py will check the task role allows it"
        for operation, action, resource in missing
    )
