"""The README's manual local run, its three commands run exactly as written (no AWS account needed).

They run from a scratch directory laid out as a checkout after `make run`: `.venv` (this suite's) and
`cdk.out/` (synthesized by the real entry point), so `.local.env` and the default template path resolve
there as they would at the repository root.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from consumer.local.manual import read_env_file
from consumer.local.stack import local_client
from consumer.testing import depth, poll_until
from tests.integration.conftest import ROOT
from tests.integration.local_runs import message_ids, stop_command, user_environment

#: The sentence the README puts right before the block.
LEAD = "To run the stack by hand after `make run`"


def readme_commands() -> list[str]:
    """The commands of the sh block after :data:`LEAD`, comments stripped."""
    section = (ROOT / "README.md").read_text().split(LEAD, 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, f"no sh block after {LEAD!r} in README.md"
    return [line.split("  #", 1)[0].strip() for line in match.group(1).splitlines() if line.strip()]


def test_readme_and_docs_give_the_same_manual_run() -> None:
    """docs/local.md explains the three commands the README gives; they are the same three."""
    docs = (ROOT / "docs" / "local.md").read_text()
    for command in readme_commands():
        assert command in docs


@pytest.mark.real
def test_readme_manual_run_commands_work_as_written(cdk_out: Path, tmp_path: Path) -> None:
    """`local up`, `run` from the env file, `local send`: the consumer processes the sent event, and both
    long-running commands stop cleanly (SIGTERM for the consumer, Ctrl-C for the stack).
    Real: the README's three commands in a POSIX shell, as a user pastes them."""
    up_command, run_command, send_command = readme_commands()
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "cdk.out").symlink_to(cdk_out)
    environ = {**user_environment(), "PYTHONPATH": str(ROOT)}

    def terminal(command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["sh", "-c", command],
            cwd=tmp_path,
            env=environ,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    up = terminal(up_command)
    assert up.stdout is not None
    printed = []
    for line in up.stdout:  # `local up` prints the next two commands last, then serves
        printed.append(line)
        if "local send" in line:
            break
    consumer = None
    try:
        assert (tmp_path / ".local.env").is_file(), "".join(printed)
        environment = read_env_file(tmp_path / ".local.env")
        consumer = terminal(run_command)
        sent = subprocess.run(
            ["sh", "-c", send_command], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        sqs = local_client("sqs", environment["AWS_ENDPOINT_URL"])
        assert poll_until(lambda: depth(sqs, environment["QUEUE_URL"]).total == 0, timeout=30)
    finally:
        consumer_exit = stop_command(consumer, signal.SIGTERM) if consumer else None
        up_exit = stop_command(up, signal.SIGINT)
    assert (consumer_exit, up_exit) == (0, 0)
    assert consumer is not None and consumer.stdout is not None
    log = [json.loads(line) for line in consumer.stdout.read().splitlines() if line.startswith("{")]
    processed = [line["message_id"] for line in log if line.get("event") == "message_processed"]
    assert processed == message_ids(sent.stdout) and len(processed) == 1
    assert os.path.samefile(tmp_path / "cdk.out", cdk_out)
