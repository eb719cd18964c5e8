"""Every tier runs the CDK's JavaScript (jsii in-process, ``python app.py`` and ``cdk`` in subprocesses) on
the project's pinned Node, as ``make`` does, also when pytest is started by hand."""

from infra.toolchain import use_pinned_node

use_pinned_node()
