"""The "Tracing" section of docs/BENCHMARKS.md (bench/tracing/report.py): medians, and ratios against the off cell
of the same round."""

from __future__ import annotations

from typing import Any

from bench.tracing.report import COMMAND, section

META = {"date": "2026-11-28", "commit": "abc1234", "endpoint": "ministack", "cpus": 2, "python": "3.11.7"}
SETTINGS = {"rounds": 2, "window_seconds": 8.0, "warmup_seconds": 2.0, "concurrency": 16, "cells": ["off", "sdk"]}


def row(cell: str, round_index: int, rate: float, cpu_ms: float) -> dict[str, Any]:
    return {
        "cell": cell,
        "round": round_index,
        "messages_per_second": rate,
        "cpu_ms_per_message": cpu_ms,
        "requests_per_message": 0.2,
    }


def test_tracing_section_before_a_result_names_its_command() -> None:
    """No docs/bench/tracing.json yet: the section says which command makes it."""
    assert section(None) == f"_Not measured yet: run `{COMMAND}`._"


def test_tracing_section_ratios_are_each_rounds_against_its_own_off_cell() -> None:
    """Round 1: sdk 1.5x off's CPU; round 2: 1.1x; the median 1.30, each round in parentheses."""
    rows = [row("off", 0, 400, 0.6), row("sdk", 0, 300, 0.9), row("off", 1, 200, 1.0), row("sdk", 1, 220, 1.1)]
    text = section({"meta": META, "settings": SETTINGS, "rows": rows})
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    sdk = lines["| on: SDK, batch processor, spans dropped"].split(" | ")
    assert sdk[1:5] == ["260 (300, 220)", "1.000 (0.900, 1.100)", "0.93 (0.75, 1.10)", "1.30 (1.50, 1.10)"]
    off = lines["| off (`CONSUMER_TRACING` unset: the baseline)"].split(" | ")
    assert off[3:5] == ["1.00 (1.00, 1.00)", "1.00 (1.00, 1.00)"]
