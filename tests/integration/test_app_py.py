"""`python app.py`, the entry point `cdk synth/diff/deploy` runs, as a user's shell starts it: the session's one real
synth (the ``app_py`` fixture, whose assembly every test of a local stack provisions from) is that run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra.settings import stack_name_of
from infra.toolchain import NODE_BIN
from tests.conftest import machine_path
from tests.integration.conftest import TEAM_STACK, Synthesis, synthesized_environments


@pytest.mark.real
def test_python_app_py_synthesizes_every_environment_quietly_without_boto3(app_py: Synthesis) -> None:
    """`python app.py` writes a stack for every environment it is given (``CDK_CONTEXT_JSON``, as the CLI gives
    cdk.json's context), prints nothing (no jsii banner: on the machine's PATH, without make's pinned Node first and
    no silencing variable, app.py pins the Node itself) and never imports the consumer's boto3 runtime. Real:
    app.py's own start in a fresh interpreter (the Node it pins before jsii starts, the modules it loads) and its exit
    status. CloudFormation validation, CDK's own plugin, is checked in process (the ``app_py`` fixture says why)."""
    assert app_py.returncode == 0, app_py.stderr[-2000:]
    assert app_py.stderr == ""  # jsii's end-of-life banner for an older Node would be here
    assert app_py.stdout.strip() == "boto3 absent"
    assert sorted(p.name for p in app_py.outdir.glob("*.template.json")) == sorted(
        f"{stack_name_of(name)}.template.json" for name in synthesized_environments()
    )


@pytest.mark.real
@pytest.mark.skipif(not (NODE_BIN / "cdk").exists(), reason="make test installs the CDK CLI")
def test_the_pinned_cdk_cli_reads_app_pys_assembly_and_says_nothing(cdk_out: Path) -> None:
    """`cdk synth` (the CLI package.json pins, on make's PATH) accepts the cloud assembly app.py writes and says
    nothing about it: no feature-flag notice (cdk.json decides them all), no warning, no Node banner. Real: the CLI
    itself, which reads the assembly's manifest, schema version and feature-flag report (a CLI too new or too old for
    the library's schema, or a flag cdk.json leaves unset, shows only here). Which stacks `-c env=` selects is
    app.py's, checked in process (tests/infra/test_variants.py)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("CDK_", "JSII_"))}
    environment.update(
        {
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
            "CI": "true",  # with CI=true the CLI writes its notices to stdout
            "PATH": f"{NODE_BIN}{os.pathsep}{machine_path()}",
        }
    )
    result = subprocess.run(
        [str(NODE_BIN / "cdk"), "synth", "-q", "--no-notices", "--app", str(cdk_out), TEAM_STACK],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (result.stdout + result.stderr).strip() == ""
