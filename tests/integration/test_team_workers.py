"""A team's own workers, which the framework does not know (``tests/team_handlers.py``: ``invoices`` declares samples,
``ledger`` none), on a stack synthesized from a context the tests build (``team_cdk_out``), without the notifications
example: the local demo runs and accounts for both, and every command ``local up`` prints works as printed."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumer.local.manual import read_env_file
from consumer.local.stack import local_client
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, poll_until
from tests.integration.conftest import ROOT, TEAM_STACK, TEAM_WORKERS, run_module
from tests.integration.local_runs import message_ids, stop_command, user_environment

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
    Real: the demo's and `local up`'s processes on a team's own stack."""
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
    Real: the demo's and `local up`'s processes on a team's own stack."""
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
    Real: the demo's and `local up`'s processes on a team's own stack."""
    done, report = demo_report
    accounting = report["workers"]["ledger"]["accounting"]
    assert accounting["produced"] == {"built": SAMPLES}
    assert (accounting["delivered"], accounting["dead_lettered"]) == (0, {"built": SAMPLES})
    assert accounting["dlq_reasons"] == {"poison: invoice lacks invoice_id": SAMPLES}
    assert (accounting["lost"], accounting["in_two_places"], accounting["balanced"]) == ([], [], True)
    assert "ledger: tests.team_handlers:ledger declares no samples, so the demo built each body" in done.stdout


@pytest.fixture(scope="module")
def served(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """`local up` on the team's stack from a checkout-like directory, as a user types it; yields the directory and
    the commands it printed last (two per worker)."""
    workdir = tmp_path_factory.mktemp("team-local")
    (workdir / ".venv").symlink_to(ROOT / ".venv")
    up = terminal(workdir, f".venv/bin/python -m consumer local up --port 0 --template {template}")
    assert up.stdout is not None
    printed = []
    for line in up.stdout:
        printed.append(line.rstrip("\n"))
        if "local send --worker invoices" in line:
            break
    try:
        assert (workdir / ".local.invoices.env").is_file(), "\n".join(printed)
        yield workdir, [line.strip() for line in printed if line.startswith("  ")]
    finally:
        assert stop_command(up, signal.SIGINT) == 0


def terminal(workdir: Path, command: str) -> subprocess.Popen[str]:
    """``command`` in a POSIX shell in ``workdir``, as a new terminal runs it (the repository importable)."""
    return subprocess.Popen(
        ["sh", "-c", command],
        cwd=workdir,
        env={**user_environment(), "PYTHONPATH": str(ROOT)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.real
def test_local_up_prints_each_workers_commands_with_its_own_env_file(served: tuple[Path, list[str]]) -> None:
    """A consumer and a send command per worker, each reading that worker's own file.
    Real: the demo's and `local up`'s processes on a team's own stack."""
    _, commands = served
    assert commands == [
        "set -a; . ./.local.ledger.env; set +a; .venv/bin/python -m consumer run",
        ".venv/bin/python -m consumer local send --worker ledger",
        "set -a; . ./.local.invoices.env; set +a; .venv/bin/python -m consumer run",
        ".venv/bin/python -m consumer local send --worker invoices",
    ]


@pytest.mark.real
def test_every_command_local_up_prints_works_as_printed(served: tuple[Path, list[str]]) -> None:
    """Each worker's consumer, started as printed, takes what its send command sends: invoices' declared sample is
    processed; ledger's built body (it declares no samples, and the send says so) is refused into its DLQ.
    Real: the demo's and `local up`'s processes on a team's own stack."""
    workdir, commands = served
    consumers = {worker: terminal(workdir, command) for worker, command in zip(WORKERS, commands[::2], strict=True)}
    sent = {}
    try:
        for worker, command in zip(WORKERS, commands[1::2], strict=True):
            sent[worker] = subprocess.run(
                ["sh", "-c", command],
                cwd=workdir,
                env={**user_environment(), "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert sent[worker].returncode == 0, sent[worker].stdout + sent[worker].stderr
        environments = {worker: read_env_file(workdir / f".local.{worker}.env") for worker in WORKERS}
        sqs = local_client("sqs", environments["invoices"]["AWS_ENDPOINT_URL"])
        assert poll_until(
            lambda: all(depth(sqs, e["QUEUE_URL"]).total == 0 for e in environments.values())
            and depth(sqs, environments["ledger"]["DLQ_URL"]).visible == 1,
            timeout=30,
        )
        (dead,) = sqs.receive_message(QueueUrl=environments["ledger"]["DLQ_URL"], MessageAttributeNames=["All"])[
            "Messages"
        ]
    finally:
        exits = {worker: stop_command(process, signal.SIGTERM) for worker, process in consumers.items()}
    assert exits == {"invoices": 0, "ledger": 0}
    log = [json.loads(line) for line in consumers["invoices"].stdout.read().splitlines() if line.startswith("{")]  # type: ignore[union-attr]
    assert [line["message_id"] for line in log if line.get("event") == "message_processed"] == message_ids(
        sent["invoices"].stdout
    )
    assert sent["invoices"].stdout.startswith("sent 1 valid event(s)")
    assert json.loads(dead["Body"])["id"] == re.findall(r"event_id (\S+)", sent["ledger"].stdout)[0]
    assert read_reason(dead["MessageAttributes"])["reason"] == "invoice lacks invoice_id"  # type: ignore[index]
    assert "tests.team_handlers:ledger declares no samples, so each body was built" in sent["ledger"].stdout
