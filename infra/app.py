"""Build the CDK app: one :class:`WorkerStack` per environment in ``cdk.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App

from infra.nag import enable_nag
from infra.settings import CONTEXT_KEY, load_environments
from infra.stack import WorkerStack

ENV_CONTEXT_KEY = "env"
CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` block of ``cdk.json`` (the CDK CLI passes it, plain ``python app.py`` does not)."""
    context: dict[str, Any] = json.loads(path.read_text())["context"]
    return context


def build_app(
    app: App | None = None, *, outdir: str | None = None, context: Mapping[str, Any] | None = None
) -> tuple[App, list[WorkerStack]]:
    """Stacks for every environment, or only ``-c env=NAME``; cdk-nag enabled.

    ``context`` overrides ``cdk.json`` (tests use it to synthesize variants).
    """
    if app is None:
        merged = cdk_json_context()
        merged.update(context or {})
        app = App(outdir=outdir, context=merged)
    selected = app.node.try_get_context(ENV_CONTEXT_KEY)
    stacks = [
        WorkerStack(app, settings=s)
        for s in load_environments({CONTEXT_KEY: app.node.try_get_context(CONTEXT_KEY)}, selected)
    ]
    enable_nag(app)
    return app, stacks
