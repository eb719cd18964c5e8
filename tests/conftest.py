"""Every tier runs the CDK's JavaScript (jsii in-process, ``python app.py`` and ``cdk`` in subprocesses) on
the project's pinned Node, as ``make`` does, also when pytest is started by hand.

``make test`` runs the suite on several pytest-xdist workers; :mod:`tests.parallel`'s hooks keep that as cheap
as a serial run (what shares a module-scoped fixture shares a worker, the slowest tests start first).
"""

from infra.toolchain import use_pinned_node
from tests.parallel import pytest_collection_modifyitems, pytest_xdist_make_scheduler

__all__ = ["pytest_collection_modifyitems", "pytest_xdist_make_scheduler"]

use_pinned_node()
