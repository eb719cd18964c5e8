"""The exit codes are an interface (ECS, scripts, the chaos supervisor, the README): one enum, fixed numbers."""

from __future__ import annotations

from consumer.exit_codes import ExitCode


def test_exit_codes_keep_the_numbers_the_readme_documents() -> None:
    """0 ok, 1 failed (lost messages, an AWS error, a crash), 2 refused before starting, 3 every slot stuck."""
    assert {code.name: int(code) for code in ExitCode} == {"OK": 0, "FAILED": 1, "CONFIG": 2, "STUCK": 3}
