"""Helpers for the tests of the manual local run (docs/local.md, the README's commands): a new terminal's
environment, a command in a POSIX shell, `consumer local up` for a block, the README's three commands, and what
`local send` printed."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from click.testing import Result

from tests.integration.conftest import ROOT

PYTHON = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable


def user_environment() -> dict[str, str]:
    """A new terminal's environment: nothing of this session's AWS_ or CONSUMER_ settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_"))}


def shell(command: str, *, cwd: Path = ROOT, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    """``command`` in a POSIX shell from ``cwd`` (the repository root), as a user pastes it, in ``env`` (a new
    terminal's: :func:`user_environment`)."""
    return subprocess.Popen(
        ["sh", "-c", command], cwd=cwd, env=env or user_environment(), text=True, stdout=subprocess.PIPE, **kwargs
    )


def in_process(*args: str, env: dict[str, str] | None = None) -> Result:
    """``python -m consumer ARGS`` in this process (typer's runner: its exit code, stdout and stderr), with ``env``
    as its whole AWS and CONSUMER environment, or none, as in a new terminal (:func:`user_environment`): for a
    command whose own process shows nothing more, run against a real `local up`."""
    from typer.testing import CliRunner

    from consumer.cli import build_app

    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("AWS_", "CONSUMER_"))}
    return CliRunner().invoke(build_app(args[0]), list(args), env={**unset, **(env or {})})


def terminal(workdir: Path, command: str) -> subprocess.Popen[str]:
    """``command`` in a POSIX shell in ``workdir`` (a checkout's layout: this repository's code on its path), as a
    new terminal runs it, in a session of its own; stdout and stderr together."""
    return shell(
        command,
        cwd=workdir,
        env={**user_environment(), "PYTHONPATH": str(ROOT)},
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


#: The sentence the README puts right before its manual run's block.
README_LEAD = "To run the stack by hand after `make run`"


def readme_commands() -> list[str]:
    """The commands of the README's sh block after :data:`README_LEAD`, comments stripped: `local up`, `run` from the
    env file, `local send`."""
    section = (ROOT / "README.md").read_text().split(README_LEAD, 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, f"no sh block after {README_LEAD!r} in README.md"
    return [line.split("  #", 1)[0].strip() for line in match.group(1).splitlines() if line.strip()]


@contextlib.contextmanager
def local_up(template: Path, env_file: Path, last_line: Callable[[str], bool]) -> Iterator[str]:
    """`python -m consumer local up` serving ``template`` (any free port), writing ``env_file``: :func:`serving`."""
    up = shell(
        f"exec {PYTHON} -m consumer local up --port 0 --template {template} --env-file {env_file}",
        stderr=subprocess.PIPE,
    )
    with serving(up, env_file, last_line) as output:
        yield output


@contextlib.contextmanager
def serving(up: subprocess.Popen[str], env_file: Path, last_line: Callable[[str], bool]) -> Iterator[str]:
    """A started `local up` (``up``, in a shell): yields what it printed up to the line ``last_line`` accepts (the
    last one before serving), once ``env_file`` is written, and stops it with Ctrl-C, which must exit 0."""
    assert up.stdout is not None
    output = []
    for line in up.stdout:
        output.append(line)
        if last_line(line):
            break
    try:
        assert env_file.is_file(), "".join(output) + (up.stderr.read() if up.poll() is not None and up.stderr else "")
        yield "".join(output)
    finally:
        assert stop_command(up, signal.SIGINT) == 0


def last_send_command(line: str, counts: dict[str, int]) -> bool:
    """Whether ``line`` is the last line `local up` prints before it serves: the last worker's send command (a
    consumer and a send command per worker). ``counts`` is the caller's, one per run."""
    counts["workers"] = counts.get("workers", 0) + line.startswith("worker ")
    counts["sends"] = counts.get("sends", 0) + (line.startswith("  ") and "local send" in line)
    return counts["sends"] == counts["workers"] > 0


def message_ids(output: str) -> list[str]:
    """The message ids `local send` printed."""
    return [line.split("message_id ")[1] for line in output.splitlines() if "message_id " in line]


def stop_command(shell: subprocess.Popen[str], signum: int) -> int:
    """Signal what ``sh -c`` runs (as a terminal's Ctrl-C or ECS's SIGTERM reaches the program, not the
    shell that started it) and return the shell's exit code, which is that program's."""
    children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split()
    for pid in children or [str(shell.pid)]:
        os.kill(int(pid), signum)
    try:
        return shell.wait(timeout=30)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
