"""How ``make test`` runs the suite on several pytest-xdist workers as cheaply as a serial run (hooks used by
tests/conftest.py).

* Tests whose fixtures must not run once per worker get an ``xdist_group`` mark: a module-scoped fixture (a synth,
  a whole short run) still runs once for its module when the module's tests share a worker; the container tier's
  session fixtures build one image.
* The ``slow(seconds)`` ones go first, slowest first, each with the rest of its group: a test that takes a
  minute by nature must not start last and run alone.
* pytest-xdist 3.8's own ``--dist loadgroup`` groups by renaming each item's ``_nodeid``, which pytest 9 no longer
  reads (an item's id is ``_id``), so nothing is grouped. :class:`GroupScheduling` does the grouping in the
  controller instead: the workers write each grouped test's group to a file beside their base temps, and the
  scheduler sends each group as one unit, in collection order. The test ids stay as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

#: The container tier's session fixtures synthesize the demo stack and build one image: its tests share a worker.
CONTAINER_TIER = Path(__file__).parent / "container"
#: Beside the workers' base temps: {test id: group}, written by the workers, read by the controller's scheduler.
GROUPS_FILE = "xdist-groups.json"


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The group of a test whose fixtures must run once, not once per worker; None for a test on its own."""
    if CONTAINER_TIER in item.path.parents:
        return "container-tier"
    fixture_info = getattr(item, "_fixtureinfo", None)
    definitions = fixture_info.name2fixturedefs.values() if fixture_info else ()
    if any(defs and defs[-1].scope == "module" for defs in definitions):
        return item.nodeid.split("::", 1)[0]  # the module
    return None


def xdist_group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))


def expected_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("slow")
    return float(marker.args[0]) if marker else 0.0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the groups, put the slow ones first (a stable sort: else as collected) and, on an xdist worker, write
    each grouped test's group for the controller's scheduler."""
    for item in items:
        group = shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    seconds: dict[str, float] = {}
    for item in items:
        unit = xdist_group(item) or item.nodeid
        seconds[unit] = max(seconds.get(unit, 0.0), expected_seconds(item))
    items.sort(key=lambda item: -seconds[xdist_group(item) or item.nodeid])
    if os.environ.get("PYTEST_XDIST_WORKER"):
        groups = {item.nodeid: group for item in items if (group := xdist_group(item)) is not None}
        shared = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
        partial = shared / f"{GROUPS_FILE}.{os.environ['PYTEST_XDIST_WORKER']}"
        partial.write_text(json.dumps(groups))
        partial.replace(shared / GROUPS_FILE)  # every worker writes the same map; the last one stays


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (pyproject.toml's addopts) scheduled by :class:`GroupScheduling`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Load scheduling where the tests of one ``xdist_group`` are one unit, sent to one worker."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # the workers wrote it during collection, before any scheduling
                self.groups = json.loads((config._tmp_path_factory.getbasetemp() / GROUPS_FILE).read_text())
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)
