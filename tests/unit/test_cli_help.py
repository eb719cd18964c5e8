"""--help shows a flag as a flag: no `<bool>` after options that take no value (typer 0.29 printed one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["run"], "--help"),
        (["dlq", "redrive"], "--dry-run"),
        (["dlq", "purge"], "--yes"),
        (["local", "up"], "--help"),
        (["demo"], "--help"),
    ],
    ids=lambda part: " ".join(part) if isinstance(part, list) else part,
)
def test_flags_are_shown_without_a_value(command: list[str], flag: str) -> None:
    """Every help line of a flag that takes no value names no value type."""
    environ = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    out = subprocess.run(
        [sys.executable, "-m", "consumer", *command, "--help"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if f" {flag} " in line]
    assert lines, f"{flag} not in the help of {' '.join(command)}:\n{out.stdout}"
    assert [line for line in out.stdout.splitlines() if "<bool>" in line] == []
