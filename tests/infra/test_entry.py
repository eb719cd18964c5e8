"""The entry points a user runs by hand: ``python app.py`` (what ``cdk synth/diff/deploy`` runs) on the pinned
Node, quiet on success and one line on a configuration error; ``python -m infra.report``, make run's first step.

Each entry point runs once as a real process (``pytest -m real``): ``python -m infra.report`` here (on a setting that
breaks a rule: it stops before the synth), ``python app.py`` in tests/integration/test_app_py.py (the session's one
synth: no boto3, no banner on the machine's PATH) and the pinned CDK CLI reading its assembly there, and app.py
without the CDK here.
Their logic (refusals, the report's table in a narrow terminal, its notes) runs in process.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.settings import parse_environment
from infra.toolchain import NODE_BIN
from infra.worker_settings import CONTEXT_KEY
from tests.conftest import machine_path
from tests.reference import REPORT_JOB, reference_context, reference_context_json

ROOT = Path(__file__).resolve().parents[2]


def environments_with(**dev: Any) -> dict[str, Any]:
    """The reference environments with dev's settings changed, as ``-c env=dev`` would synthesize them."""
    environments = reference_context()[CONTEXT_KEY]
    environments["dev"] = {**environments["dev"], **dev}
    return {CONTEXT_KEY: environments, "env": "dev"}


@pytest.mark.real
def test_pinned_node_is_node_22() -> None:
    """make's PATH (node_modules/.bin first) gives `node` 22 LTS, the version package.json pins. Real: the binary's
    own answer."""
    result = subprocess.run(
        ["node", "--version"], env={"PATH": f"{NODE_BIN}{os.pathsep}{machine_path()}"}, capture_output=True, text=True
    )
    assert result.stdout.strip() == "v" + json.loads((ROOT / "package.json").read_text())["devDependencies"]["node"]
    assert result.stdout.startswith("v22.")


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            environments_with(source_retention_days=3, dlq_retention_days=1),
            f'"{CONTEXT_KEY}.dev.dlq_retention_days" must exceed source_retention_days (3) by at least 2 days,'
            " because a message keeps its original enqueue time in the DLQ, and the DLQ age page (half the gap after"
            " a move) must come at least a day before it can expire: 1",
        ),
        (
            {**reference_context(), "env": "qa"},
            "\"env\" must be one of the environments in cdk.json (dev, staging, prod, demo): 'qa'",
        ),
    ],
    ids=["retention", "unknown env"],
)
def test_app_py_reports_a_configuration_error_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], context: dict[str, Any], message: str
) -> None:
    """A bad setting or -c env= exits 2 with the error on one stderr line, no traceback, nothing synthesized."""
    from infra.app import main

    assert main(context=context, outdir=str(tmp_path)) == 2
    assert capsys.readouterr() == ("", f"invalid configuration: {message}\n")
    assert not list(tmp_path.glob("*.template.json"))


def report(
    tmp_path: Path, environ: dict[str, str], context: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m infra.report` (make run's first step) on the reference environments, or ``context`` (given as the
    CDK CLI gives context), with ``environ``, its output captured."""
    command = [sys.executable, "-m", "infra.report", "--outdir", str(tmp_path / "out")]
    given = reference_context_json() if context is None else json.dumps(context)
    environ = {**environ, "CDK_CONTEXT_JSON": given}
    return subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300)


def report_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: dict[str, Any], **environ: str | None
) -> tuple[int, str]:
    """``python -m infra.report`` in this process (its typer command under CliRunner) on ``context``, with
    ``environ`` (COLUMNS, FORCE_COLOR as a terminal sets them; None unsets one): (exit code, stdout)."""
    from typer.testing import CliRunner

    import infra.app
    from infra.report import main

    monkeypatch.setattr(infra.app, "build_app", functools.partial(infra.app.build_app, context=context))
    result = CliRunner().invoke(typer_app(main), ["--outdir", str(tmp_path / "out")], env=environ)
    return result.exit_code, result.stdout


def typer_app(command: Any) -> Any:
    import typer

    app = typer.Typer()
    app.command()(command)
    return app


def test_the_report_in_a_narrow_terminal_wraps_cells_and_cuts_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an 80-column terminal the table wraps a long cell (a handler name, a secret) onto more lines
    instead of cutting it with an ellipsis."""
    context = {CONTEXT_KEY: {"dev": reference_context()[CONTEXT_KEY]["dev"]}}
    code, out = report_in_process(tmp_path, monkeypatch, context, COLUMNS="80", FORCE_COLOR="1")
    assert code == 0, out
    assert "notifications" in out and max(len(line) for line in strip_ansi(out).splitlines()) <= 80
    assert "…" not in out


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


#: The report off a terminal, run once for the tests that read it (a parallel run keeps the module on one worker).
_off_a_terminal: list[tuple[int, str]] = []


#: What the run reports: a one-worker environment and demo's two workers (every environment is a synth more, and the
#: report's columns are built the same way for each).
REPORTED = {CONTEXT_KEY: {name: reference_context()[CONTEXT_KEY][name] for name in ("dev", "demo")}}


def report_off_a_terminal(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """`python -m infra.report > log`, in process, once: stdout is typer's buffer, not a terminal, as a file is to
    rich, and no COLUMNS, FORCE_COLOR or TERM is set. (exit code, stdout)."""
    if not _off_a_terminal:
        unset: dict[str, str | None] = {"COLUMNS": None, "FORCE_COLOR": None, "TERM": None}
        _off_a_terminal.append(report_in_process(tmp_path_factory.mktemp("report"), monkeypatch, REPORTED, **unset))
    return _off_a_terminal[0]


def test_the_report_is_whole_lines_off_a_terminal(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m infra.report > log` (make run's first step, in CI) prints each line whole: no cut handler
    names, no path broken across lines (rich renders 80 columns off a terminal unless told otherwise)."""
    code, out = report_off_a_terminal(tmp_path_factory, monkeypatch)
    assert code == 0, out
    lines = out.splitlines()
    environments = REPORTED[CONTEXT_KEY]
    ok_lines = [line for line in lines if line.startswith("ok ")]
    assert len(ok_lines) == len(environments)
    for line in ok_lines:  # stack, template path and the nag summary on one line
        assert ".template.json - cdk-nag AwsSolutions:" in line and line.endswith("acknowledged with reasons")
    handler_row = next(line for line in lines if line.lstrip("│ ").startswith("handler "))
    assert "…" not in handler_row and "notifications" in handler_row


def test_the_report_shows_every_worker_of_every_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column per worker: a one-worker environment under its name, demo's two workers each under "demo" over
    the worker's name, with its own handler, fleet and derived timings (the report job's 10 minutes). It reads the
    run of the test above (shared, so it costs nothing more)."""
    code, out = report_off_a_terminal(tmp_path_factory, monkeypatch)
    assert code == 0, out
    lines = out.splitlines()

    def cells(label: str) -> list[str]:
        row = next(line for line in lines if line.startswith(("│ " + label, "┃ " + label)))
        return [cell.strip() for cell in row.strip("│┃").split(row[0])[1:]]

    header_above = next(line for line in lines if line.startswith("┃ ") and "demo" in line)
    assert [cell.strip() for cell in header_above.strip("┃").split("┃")] == ["", "", "demo", "demo"]
    assert cells("parameter") == ["dev", "notifications", "reports"]
    assert cells("handler") == ["notifications:handle", "demo:handle", "reference:report_job"]
    assert cells("declared max duration")[1:] == ["30 s", "600 s (10 min)"]
    assert cells("concurrency per task")[1:] == ["8", "2"]
    assert [line for line in lines if line.startswith("note ")] == []  # no worker above one vCPU


@pytest.mark.real
def test_the_report_says_a_configuration_error_in_one_whole_line_off_a_terminal(tmp_path: Path) -> None:
    """`python -m infra.report > log` on a setting that breaks a rule: exit 2 and the error on one line, however
    long, no traceback, nothing synthesized. Real: the entry point's interpreter start and exit code, and rich's view
    of a stdout that is a file, not a terminal (the table off a terminal, in process: the tests above)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TERM")}
    context = environments_with(source_retention_days=3, dlq_retention_days=1)
    done = report(tmp_path, environ, context)
    assert (done.returncode, done.stderr) == (2, ""), done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    assert line.startswith("invalid configuration: ") and "by at least 2 days" in line and len(line) > 80
    assert not list((tmp_path / "out").glob("*.template.json"))


def test_the_report_says_when_a_worker_declares_more_vcpu_than_one_process_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dev at cpu 2048: after the table, one line names the worker and says what to declare instead; the reference
    environments (at most 512) get no such line (the test above reads their report)."""
    context = {CONTEXT_KEY: {"dev": {**reference_context()[CONTEXT_KEY]["dev"], "cpu": 2048, "memory_mib": 4096}}}
    code, out = report_in_process(tmp_path, monkeypatch, context, COLUMNS="200")
    assert code == 0, out
    notes = [line for line in out.splitlines() if line.startswith("note ")]
    assert len(notes) == 1
    assert notes[0].startswith("note dev: cpu 2048 is 2 vCPU, but the task runs one consumer process")
    assert "Declare cpu 1024 and raise max_tasks instead" in notes[0]


#: Runs app.py as a python3 without the CDK installed would (the machine's, when `npx cdk` runs outside the venv).
WITHOUT_CDK = """
import importlib.abc, runpy, sys
class NoCdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("aws_cdk", "constructs", "cdk_nag", "jsii"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoCdk())
runpy.run_path("app.py", run_name="__main__")
"""


@pytest.mark.real
def test_app_py_without_the_cdk_says_how_in_one_line() -> None:
    """`npx cdk ls` outside the venv: one line saying what to run instead, no ModuleNotFoundError traceback. Real: an
    interpreter that has never imported the CDK (this one has), and its exit code."""
    result = subprocess.run([sys.executable, "-c", WITHOUT_CDK], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("app.py: the AWS CDK is not installed for ")
    assert "make synth ENV=<env>" in line and ". .venv/bin/activate" in line


def test_the_report_shows_each_workers_own_secrets_under_a_two_line_header() -> None:
    """Each worker's column lists its own secrets only; a one-worker environment's header is its name alone."""
    from infra.report import EnvironmentContracts, columns, settings_rows

    teams = parse_environment(
        "teams",
        {
            "workers": {
                "notifications": {
                    "handler": "consumer.examples.notifications:handle",
                    "secrets": {"NOTIFY_WEBHOOK_URL": "ssm:/teams/notify-webhook-url"},
                },
                "reports": {"handler": REPORT_JOB, "secrets": {"REPORTS_KEY": "ssm:/teams/reports-key"}},
            }
        },
    )
    dev = parse_environment("dev", reference_context()[CONTEXT_KEY]["dev"])
    shown = columns(
        EnvironmentContracts(settings, {w.name: settings.contract(w) for w in settings.workers})
        for settings in (dev, teams)
    )
    assert [c.header for c in shown] == ["dev", "teams\nnotifications", "teams\nreports"]
    assert [settings_rows(c.settings, c.worker)["secrets (ECS secrets)"] for c in shown] == [
        "none",
        "NOTIFY_WEBHOOK_URL",
        "REPORTS_KEY",
    ]
