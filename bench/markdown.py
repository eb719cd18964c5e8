"""The Markdown both benchmark pages' generators write: tables, the "measured at" line, the "not measured" line.

Standard library only, imported by :mod:`bench.report` and :mod:`bench.peers.report` alike (neither imports the
other's helpers, so the two never import each other in a cycle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def measured(result: Mapping[str, Any]) -> str:
    """The line that says when, at which commit, on which endpoint and machine a result was measured."""
    meta = result["meta"]
    return (
        f"_Measured {meta['date']} at commit `{meta['commit']}`, endpoint: {meta['endpoint']},"
        f" {meta['cpus']} CPUs, Python {meta['python']}._"
    )


def missing(command: str, narrower: str = "") -> str:
    """What a section says before its result exists: the command that makes it (and a narrower one, if any)."""
    return f"_Not measured yet: run `{command}`" + (f" (or `{narrower}`)" if narrower else "") + "._"
