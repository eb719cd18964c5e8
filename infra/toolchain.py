"""The project's pinned Node, first on ``PATH`` for whatever runs the CDK's JavaScript.

``package.json`` pins Node 22 LTS (npm serves Node as a package, ``node_modules/.bin/node``) the way it
pins the CDK CLI, so jsii and ``cdk`` run on a supported Node even where the machine has Node 20, which
jsii calls end-of-life with an 11-line banner on every synth. ``make`` puts the directory first on
``PATH`` itself; :func:`use_pinned_node` does the same for the entry points a user may run by hand
(``python app.py``, ``npx cdk ...`` after activating the venv, ``python -m infra.report``). It changes
nothing before ``make`` has installed the Node tools: the machine's Node is used then.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = ROOT / "node_modules" / ".bin"


def use_pinned_node(environ: MutableMapping[str, str] = os.environ) -> None:
    """Put ``node_modules/.bin`` first on ``environ["PATH"]`` if the pinned Node is installed there.

    Call it before ``aws_cdk`` is imported: jsii starts its Node process at import, found on ``PATH``.
    """
    if not (NODE_BIN / "node").exists():
        return
    entries = [entry for entry in environ.get("PATH", "").split(os.pathsep) if entry and entry != str(NODE_BIN)]
    environ["PATH"] = os.pathsep.join([str(NODE_BIN), *entries])
