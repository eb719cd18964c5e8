"""``python -m bench tracing`` (bench/tracing/): the section of docs/evidence/BENCHMARKS.md, with ratios against the
``before`` cell of the same round; the cells' order; the ``absent`` cell's refused imports; another commit's tree."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from bench.common import environment, tree_at
from bench.tracing.harness import CELLS, imported_from, order
from bench.tracing.report import COMMAND, section
from bench.tracing.subject import refuse_opentelemetry

META = {"date": "2026-11-28", "commit": "abc1234", "endpoint": "ministack", "cpus": 2, "python": "3.11.7"}
SETTINGS = {
    "rounds": 2,
    "window_seconds": 8.0,
    "warmup_seconds": 2.0,
    "concurrency": 16,
    "cells": ["before", "off", "sdk"],
    "baseline": "before",
    "before_commit": "d191a92",
}


def row(cell: str, round_index: int, rate: float, cpu_ms: float, modules: int | None = 0) -> dict[str, Any]:
    return {
        "cell": cell,
        "round": round_index,
        "messages_per_second": rate,
        "cpu_ms_per_message": cpu_ms,
        "requests_per_message": 0.2,
        "opentelemetry_modules": modules,
    }


def cells_of(text: str) -> dict[str, list[str]]:
    """The table's rows by their first column."""
    rows = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return {cells[0]: cells for cells in rows}


def test_tracing_section_before_a_result_names_its_command() -> None:
    """No docs/evidence/bench/tracing.json yet: the section says which command makes it."""
    assert section(None) == f"_Not measured yet: run `{COMMAND}`._"


def test_tracing_section_ratios_are_each_rounds_against_its_own_before_cell() -> None:
    """Round 1: sdk 1.5x before's CPU, off 1.1x; round 2: sdk 1.1x, off 0.9x; medians, each round in parentheses."""
    rows = [
        row("before", 0, 400, 0.6, None),
        row("off", 0, 440, 0.66),
        row("sdk", 0, 300, 0.9, 12),
        row("before", 1, 200, 1.0, None),
        row("off", 1, 180, 0.9),
        row("sdk", 1, 220, 1.1, 14),
    ]
    table = cells_of(section({"meta": META, "settings": SETTINGS, "rows": rows}))
    assert table["on: SDK, batch processor, spans dropped"][1:] == [
        "260 (300, 220)",
        "1.000 (0.900, 1.100)",
        "0.93 (0.75, 1.10)",
        "1.30 (1.50, 1.10)",
        "0.200 (0.200, 0.200)",
        "12-14",
    ]
    assert table["off (`CONSUMER_TRACING` unset)"][3:5] == ["1.00 (1.10, 0.90)", "1.00 (1.10, 0.90)"]
    before = table["before tracing (commit `d191a92`): the baseline"]
    assert before[3:5] + before[6:] == ["1.00 (1.00, 1.00)", "1.00 (1.00, 1.00)", "-"]


def test_tracing_cells_each_open_one_round_of_as_many() -> None:
    """Each round starts one cell further along: over len(CELLS) rounds every cell runs first once."""
    assert order(0) == CELLS
    assert order(1) == (*CELLS[1:], CELLS[0])
    assert sorted(order(index)[0] for index in range(len(CELLS))) == sorted(CELLS)


def test_refuse_opentelemetry_makes_its_import_fail_as_if_not_installed() -> None:
    """In a fresh process: after the refusal, importing opentelemetry raises ModuleNotFoundError, and tracing off
    builds no tracer."""
    script = (
        "from bench.tracing.subject import subject_tracer\n"
        "assert subject_tracer('absent') is None\n"
        "try:\n    import opentelemetry.trace\nexcept ModuleNotFoundError as error:\n    print(error.name)\n"
    )
    probe = subprocess.run([sys.executable, "-c", script], env=environment(), capture_output=True, text=True)
    assert (probe.returncode, probe.stdout) == (0, "opentelemetry\n"), probe.stderr


def test_refuse_opentelemetry_when_it_is_imported_already_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that imported some of opentelemetry cannot stand for one without it: refused, and no finder added."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    finders = list(sys.meta_path)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", object())
    with pytest.raises(RuntimeError, match=r"^opentelemetry is imported already, so it cannot be made absent: \["):
        refuse_opentelemetry()
    assert sys.meta_path == finders


def test_tree_at_a_commit_is_what_a_subject_imports_from() -> None:
    """A subject started from tree_at(HEAD)'s directory imports that directory's consumer, not this checkout's."""
    with tree_at("HEAD") as tree:
        assert imported_from(tree) == tree / "consumer" / "__init__.py"
    assert not tree.exists()
