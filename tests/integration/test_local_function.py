"""`python -m consumer local function`: a worker run as AWS Lambda would run it, on `local up`'s stack."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from consumer.local.manual import read_env_file
from consumer.local.stack import local_client
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, poll_until
from tests.integration.conftest import ROOT
from tests.integration.local_runs import (
    PYTHON,
    in_process,
    last_send_command,
    local_up,
    shell,
    stop_command,
    user_environment,
)


@pytest.mark.real
def test_local_function_runs_the_worker_as_lambda_would(cdk_out: Path, tmp_path: Path) -> None:
    """Loaded from the env file `local up` wrote, `local function` plays the event source mapping and invokes the
    function's entry point: two valid events are processed and deleted, a poison one ends in the DLQ with its reason
    (not listed, so the mapping deletes it from the source), and Ctrl-C exits 0. Real: the command's own process,
    its signal and the server's long polls."""
    env_file = tmp_path / ".local.env"
    counts: dict[str, int] = {}
    with local_up(cdk_out / "SqsWorker-dev.template.json", env_file, lambda line: last_send_command(line, counts)):
        environment = read_env_file(env_file)
        function = shell(
            f"set -a; . {env_file}; set +a; exec {PYTHON} -m consumer local function",
            env={**user_environment(), "PYTHONPATH": str(ROOT)},
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            for args in (("--count", "2"), ("--poison",)):
                sent = in_process("local", "send", *args, env=environment)
                assert sent.exit_code == 0, sent.stderr
            sqs = local_client("sqs", environment["AWS_ENDPOINT_URL"])
            assert poll_until(
                lambda: depth(sqs, environment["QUEUE_URL"]).total == 0
                and depth(sqs, environment["DLQ_URL"]).visible == 1,
                timeout=30,
            ), (depth(sqs, environment["QUEUE_URL"]), depth(sqs, environment["DLQ_URL"]))
            (moved,) = sqs.receive_message(QueueUrl=environment["DLQ_URL"], MessageAttributeNames=["All"])["Messages"]
        finally:
            exit_code = stop_command(function, signal.SIGINT)
    assert exit_code == 0
    assert function.stdout is not None
    log = [json.loads(line) for line in function.stdout.read().splitlines() if line.startswith("{")]
    invoked = [line for line in log if line.get("event") == "mapping_invoked"]
    assert (sum(line["records"] for line in invoked), sum(line["deleted"] for line in invoked)) == (3, 3)
    reason = read_reason(moved["MessageAttributes"])
    assert reason is not None and reason["kind"] == "poison"
