"""Build the CDK app: one :class:`WorkerStack` per environment in ``cdk.json``."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App

from consumer.errors import ContractError
from infra.identities import IdentityLock
from infra.limits import check_templates
from infra.nag import enable_nag
from infra.settings import load_environments
from infra.stack import WorkerStack
from infra.worker_settings import CONTEXT_KEY

ENV_CONTEXT_KEY = "env"
CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` block of ``cdk.json`` (the CDK CLI passes it, plain ``python app.py`` does not)."""
    context: dict[str, Any] = json.loads(path.read_text())["context"]
    return context


def build_app(
    app: App | None = None,
    *,
    outdir: str | None = None,
    context: Mapping[str, Any] | None = None,
    lock: IdentityLock | None = None,
) -> tuple[App, list[WorkerStack]]:
    """Stacks for every environment, or only ``-c env=NAME``; cdk-nag enabled.

    ``context`` overrides ``cdk.json`` (tests use it to synthesize variants). With ``lock`` (workers.lock.json),
    each environment's workers are checked against its record, and what was built held for :meth:`IdentityLock.commit`
    (infra/identities.py), when the environments are the ``cdk.json`` beside it (not environments given some other
    way, which it never saw).
    """
    if app is None:
        merged = cdk_json_context()
        merged.update(context or {})
        app = App(outdir=outdir, context=merged)
    selected = app.node.try_get_context(ENV_CONTEXT_KEY)
    raw = app.node.try_get_context(CONTEXT_KEY)
    beside = lock.path.parent / CDK_JSON.name if lock is not None else None
    if beside is not None and (not beside.exists() or raw != cdk_json_context(beside).get(CONTEXT_KEY)):
        lock = None  # environments other than cdk.json's (CDK_CONTEXT_JSON, -c): the record is cdk.json's
    environments = load_environments({CONTEXT_KEY: raw}, selected, lock)
    stacks = [WorkerStack(app, settings=s) for s in environments]
    if lock is not None:
        for settings in environments:
            lock.record(settings.name, settings.workers)
    enable_nag(app)
    return app, stacks


def main(lock: IdentityLock | None = None, context: Mapping[str, Any] | None = None, outdir: str | None = None) -> int:
    """``python app.py``, what ``cdk synth/diff/deploy`` runs: synthesize, or exit 2 with the error in one line.

    A ``cdk.json`` setting or ``-c env=`` that breaks a rule is the user's to fix, so it is said as
    ``python -m infra.report`` says it (the setting's path, the rule, the value), on stderr, without a
    Python traceback the CDK CLI would print in full. ``lock`` (default: workers.lock.json beside cdk.json),
    ``context`` and ``outdir`` are :func:`build_app`'s.
    """
    try:
        lock = lock or IdentityLock()
        app, _ = build_app(outdir=outdir, context=context, lock=lock)
        check_templates(app.synth())
    except ContractError as error:
        print(f"invalid configuration: {error}", file=sys.stderr)
        return 2
    lock.commit()  # what a synth that passed (cdk-nag and the template sizes included) built
    return 0
