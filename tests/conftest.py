"""Every tier runs the CDK's JavaScript (jsii in-process, ``python app.py`` and ``cdk`` in subprocesses) on
the project's pinned Node, as ``make`` does, also when pytest is started by hand."""

import os

import pytest

from infra.toolchain import NODE_BIN, use_pinned_node

use_pinned_node()


def machine_path() -> str:
    """The PATH without the project's Node: what a shell has before ``make`` or ``app.py`` pins it."""
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(NODE_BIN))


#: The modules that run longest, longest first (``pytest -n auto --durations=0`` on a fresh clone sums them), those
#: that mostly wait for real processes among them: each worker starts on one of them, waits overlap the other's
#: work, and the run ends on short modules, so neither worker ends it alone on a long one while the other waits.
#: Among the real tier's modules (``pytest -m real``) the order also keeps the second worker busy while the first one
#: runs the session's synth for the demo: the ones that synthesize on their own (test_entry, test_variants) or need
#: no synth come next, with a short one second, as xdist hands each worker two modules to start with.
#: pyproject.toml turns pytest-xdist's own order (modules with the most tests first) off for this.
LONGEST_FIRST = (
    "tests/alarms/test_catalogue.py",
    "tests/integration/test_demo.py",
    "tests/sim/test_scenarios.py",
    "tests/edits/test_edits.py",
    "tests/unit/test_types.py",
    "tests/sim/test_seeds.py",
    "tests/alarms/test_wake_up.py",
    "tests/infra/test_entry.py",
    "tests/integration/test_deploy_credentials.py",
    "tests/infra/test_variants.py",
    "tests/integration/test_process.py",
    "tests/integration/test_team_workers.py",
    "tests/integration/test_local_run.py",
    "tests/unit/test_architecture.py",
    "tests/integration/test_local_workers.py",
    "tests/integration/test_chaos_proxy.py",
    "tests/alarms/test_dlq_expiring.py",
    "tests/integration/test_example_webhooks.py",
    "workers/tests/test_audit.py",
    "tests/infra/test_permissions.py",
    "workers/tests/test_reports.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of :data:`LONGEST_FIRST` first, in its order; every other test keeps its place after them."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
