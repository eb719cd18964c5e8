"""`python app.py`, the entry point `cdk synth/diff/deploy` runs, as a user's shell starts it: the session's one real
synth (the ``app_py`` fixture, whose assembly every test of a local stack provisions from) is that run."""

from __future__ import annotations

import pytest

from infra.settings import stack_name_of
from tests.integration.conftest import Synthesis, synthesized_environments


@pytest.mark.real
def test_python_app_py_synthesizes_every_environment_quietly_without_boto3(app_py: Synthesis) -> None:
    """`python app.py` writes a stack for every environment it is given (``CDK_CONTEXT_JSON``, as the CLI gives
    cdk.json's context), prints nothing (no jsii banner: on the machine's PATH, without make's pinned Node first and
    no silencing variable, app.py pins the Node itself) and never imports the consumer's boto3 runtime. Real:
    app.py's own start in a fresh interpreter (the Node it pins before jsii starts, the modules it loads) and its exit
    status."""
    assert app_py.returncode == 0, app_py.stderr[-2000:]
    assert app_py.stderr == ""  # jsii's end-of-life banner for an older Node would be here
    assert app_py.stdout.strip() == "boto3 absent"
    assert sorted(p.name for p in app_py.outdir.glob("*.template.json")) == sorted(
        f"{stack_name_of(name)}.template.json" for name in synthesized_environments()
    )
