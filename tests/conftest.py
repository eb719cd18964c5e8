"""Every tier runs the CDK's JavaScript (jsii in-process, ``python app.py`` and ``cdk`` in subprocesses) on
the project's pinned Node, as ``make`` does, also when pytest is started by hand."""

import os

from infra.toolchain import NODE_BIN, use_pinned_node

use_pinned_node()


def machine_path() -> str:
    """The PATH without the project's Node: what a shell has before ``make`` or ``app.py`` pins it."""
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(NODE_BIN))
