"""A team's own workers, which the framework does not know (``tests/team_handlers.py``: ``invoices`` declares samples,
``ledger`` none), on a stack synthesized from a context the tests build (``team_cdk_out``), without the notifications
example: the local demo runs and accounts for both (the commands ``local up`` prints for them:
tests/integration/test_local_workers.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import TEAM_STACK, TEAM_WORKERS, run_module

WORKERS = TEAM_WORKERS
#: Messages the demo sends each worker: invoices' three samples cycle (two valid, one poison) to 4 valid, 1 poison.
SAMPLES = 5


@pytest.fixture(scope="module")
def template(team_cdk_out: Path) -> Path:
    """The team's stack, synthesized (cdk-nag included) from the context tests/integration/conftest.py builds."""
    return team_cdk_out / f"{TEAM_STACK}.template.json"


@pytest.fixture(scope="module")
def demo_report(template: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m consumer demo` on the team's stack, short (a consumer per worker), with a JSON report."""
    workdir = tmp_path_factory.mktemp("team-demo")
    report = workdir / "report.json"
    done = run_module(
        "consumer",
        "demo",
        "--template",
        str(template),
        "--samples",
        str(SAMPLES),
        "--consumers",
        "1",
        "--produce-seconds",
        "1",
        "--timeout",
        "120",
        "--logs",
        str(workdir / "logs"),
        "--report",
        str(report),
        timeout=200,
    )
    return done, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.real
def test_demo_runs_every_worker_of_a_stack_without_the_example(
    demo_report: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """Both of the team's workers ran, each balanced and its consumer exited 0; the run exits 0.
    Real: the demo's processes on a team's own stack."""
    done, report = demo_report
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {name: w["handler"] for name, w in report["workers"].items()} == WORKERS
    assert [(name, w["ok"]) for name, w in report["workers"].items()] == [("ledger", True), ("invoices", True)]
    for worker in report["workers"].values():
        assert [c["exit_code"] for c in worker["consumers"]] == [0]  # no rolling restart: the example's feature
        phases = {h["phase"] for c in worker["consumers"] for h in c["health"]}
        assert phases == {"after producing", "before the stop"} and worker["unhealthy"] == []


@pytest.mark.real
def test_demo_accounts_a_workers_declared_samples_from_its_consumers_logs(
    demo_report: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """invoices: each valid sample processed exactly once (the consumers' logs) and deleted, the poison one in the
    DLQ with the handler's reason, nothing left in the source, lost, misplaced or unknown.
    Real: the demo's processes on a team's own stack."""
    _, report = demo_report
    invoices = report["workers"]["invoices"]
    accounting = invoices["accounting"]
    assert accounting["produced"] == {"sample": 4, "poison": 1}
    assert (accounting["delivered"], accounting["duplicates"], invoices["processed"]) == (4, 0, 4)
    assert accounting["dead_lettered"] == {"poison": 1}
    assert accounting["dlq_reasons"] == {"poison: invoice lacks invoice_id": 1}
    assert (accounting["lost"], accounting["misplaced"], accounting["unknown_in_dlq"]) == ([], [], [])
    assert (accounting["in_two_places"], accounting["left_in_source"], accounting["balanced"]) == ([], 0, True)
    assert {k: v["place"] for k, v in invoices["kinds"].items()} == {
        "sample": "delivered once",
        "poison": "DLQ with a reason",
    }


@pytest.mark.real
def test_demo_accounts_built_bodies_of_a_worker_without_samples_in_either_place(
    demo_report: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """ledger declares no samples: the demo built each body, the handler refused every one (no invoice_id), each is
    in the DLQ once with the reason, and the report says what to declare.
    Real: the demo's processes on a team's own stack."""
    done, report = demo_report
    accounting = report["workers"]["ledger"]["accounting"]
    assert accounting["produced"] == {"built": SAMPLES}
    assert (accounting["delivered"], accounting["dead_lettered"]) == (0, {"built": SAMPLES})
    assert accounting["dlq_reasons"] == {"poison: invoice lacks invoice_id": SAMPLES}
    assert (accounting["lost"], accounting["in_two_places"], accounting["balanced"]) == ([], [], True)
    assert "ledger: tests.team_handlers:ledger declares no samples, so the demo built each body" in done.stdout
