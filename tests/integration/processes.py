"""Helpers of the real tier (``pytest -m real``): ``python -m consumer ...`` started as a real process, its log read,
its side effects counted, and what a user's terminal would run; shared by the test modules that need them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3

from consumer.declaration import contract_of
from consumer.testing import depth, poll_until
from tests.integration.conftest import REGION, ROOT, consumer_run_environment
from tests.integration.handlers import slow

__all__ = ["ROOT"]

CONTRACT = contract_of(slow)  # 5 s max duration: visibility 15 s, stop timeout 10 s
#: This interpreter as a user's shell names it from the repository root.
PYTHON = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable


def start(
    moto_server: str, queue_url: str, side_effects: Path, unset: tuple[str, ...] = (), **extra: str
) -> subprocess.Popen[str]:
    """`python -m consumer run` on moto's server with the slow handler; ``extra`` added, ``unset`` removed."""
    env = consumer_run_environment(
        moto_server,
        QUEUE_URL=queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        SIDE_EFFECTS_FILE=str(side_effects),
    )
    env.update(extra)
    for key in unset:
        env.pop(key, None)
    return subprocess.Popen(
        [sys.executable, "-m", "consumer", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_event(process: subprocess.Popen[str], event: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Read JSON log lines until ``event`` appears; returns the lines read."""
    lines: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        raw = process.stdout.readline()
        if not raw:
            break
        if raw.startswith("{") and '"event"' in raw:
            lines.append(json.loads(raw))
            if lines[-1]["event"] == event:
                return lines
    raise AssertionError(f"{event} not logged; stderr: {process.stderr.read() if process.poll() is not None else ''}")


def wait_in_flight(sqs: Any, url: str, count: int, timeout: float = 10.0) -> None:
    poll_until(lambda: depth(sqs, url).in_flight >= count, timeout)


def effects(path: Path) -> list[dict[str, Any]]:
    """The side effects the test handlers wrote to ``path``, one JSON line each."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def create_table(moto_server: str) -> str:
    """An idempotency table shaped like the stack's, in REGION on moto's server."""
    name = f"idem-{uuid.uuid4().hex[:12]}"
    boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_server).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def user_environment() -> dict[str, str]:
    """A new terminal's environment: nothing of this session's AWS_ or CONSUMER_ settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_"))}


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


def shell(command: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``command`` in a POSIX shell from the repository root, as a user pastes it."""
    return subprocess.Popen(
        ["sh", "-c", command], cwd=ROOT, env=user_environment(), text=True, stdout=subprocess.PIPE, **kwargs
    )


def stop(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> int:
    """Signal ``process`` and return its exit code (killed after 30 s)."""
    process.send_signal(signum)
    try:
        return process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()


@contextlib.contextmanager
def local_up(template: Path, env_file: Path, last_line: Callable[[str], bool]) -> Iterator[str]:
    """`python -m consumer local up` serving ``template`` (any free port), writing ``env_file``; yields what it
    printed up to the line ``last_line`` accepts (the last one before serving), and stops it with Ctrl-C."""
    up = shell(
        f"exec {PYTHON} -m consumer local up --port 0 --template {template} --env-file {env_file}",
        stderr=subprocess.PIPE,
    )
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
        assert stop(up, signal.SIGINT) == 0
