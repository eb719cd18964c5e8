"""The manual local run as docs/local.md gives it: `local up` in one terminal, `run` in a second, `local send` in a third."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consumer.local.harness import event_id_of
from consumer.local.manual import read_env_file, worker_env_file
from consumer.local.stack import local_client
from consumer.runtime.dead_letter import read_reason
from tests.integration.conftest import ROOT, run_module
from tests.integration.local_runs import PYTHON, local_up, message_ids, shell, stop, user_environment


@pytest.fixture(scope="module")
def served(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """`python -m consumer local up` serving the dev stack (any free port) and its env file; yields (env file, output)."""
    env_file = tmp_path_factory.mktemp("local") / "local.env"
    # The last worker's send command is the last line printed before serving (a send command per worker).
    counts = {"workers": 0, "sends": 0}

    def last_send(line: str) -> bool:
        counts["workers"] += line.startswith("worker ")
        counts["sends"] += line.startswith("  ") and "local send" in line
        return counts["sends"] == counts["workers"] > 0

    with local_up(cdk_out / "SqsWorker-dev.template.json", env_file, last_send) as output:
        yield env_file, output


@pytest.mark.real
def test_local_up_env_file_is_the_provisioned_task_environment(served: tuple[Path, str], cdk_out: Path) -> None:
    """The env file holds exactly what a stack provisioned from the same template gives the task (plus the
    endpoint and credentials), so a restart on the same port writes the same file.
    Real: the `local up` process and the commands a user's terminal runs."""
    env_file, _ = served
    written = read_env_file(env_file)
    # Another process, as a restart is: moto's backends are per process, and this one's already hold the stack.
    done = subprocess.run(
        [sys.executable, "-c", PROVISION_AND_PRINT, str(cdk_out / "SqsWorker-dev.template.json")],
        cwd=ROOT,
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    expected = json.loads(done.stdout)
    endpoint, served_endpoint = expected["AWS_ENDPOINT_URL"], written["AWS_ENDPOINT_URL"]
    assert written == {key: value.replace(endpoint, served_endpoint) for key, value in expected.items()}


PROVISION_AND_PRINT = """
import json, sys
from pathlib import Path
from consumer.local.stack import provision, start_server
server, endpoint = start_server()
print(json.dumps(provision(endpoint, Path(sys.argv[1])).process_environment()))
server.stop()
"""


@pytest.mark.real
def test_local_up_env_file_loads_in_a_posix_shell(served: tuple[Path, str]) -> None:
    """`set -a; . FILE; set +a` exports every variable of the file with its value unchanged.
    Real: the `local up` process and the commands a user's terminal runs."""
    env_file, _ = served
    loaded = shell(
        f"set -a; . {env_file}; set +a; exec {PYTHON} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    )
    output, _ = loaded.communicate(timeout=30)
    environment = json.loads(output)
    assert {key: environment.get(key) for key in read_env_file(env_file)} == read_env_file(env_file)


def printed_workers(output: str) -> list[str]:
    """The workers `local up` named, one line each, in the stack's order."""
    return re.findall(r"^worker (\S+): handler ", output, re.MULTILINE)


@pytest.mark.real
def test_local_up_prints_the_next_two_commands(served: tuple[Path, str]) -> None:
    """What `local up` prints last is the consumer command (env file loaded) and the send command, ready to paste:
    on a one-worker stack with the env file, on a stack of several two per worker, each with that worker's file.
    Real: the `local up` process and the commands a user's terminal runs."""
    env_file, output = served
    workers = printed_workers(output)
    if len(workers) == 1:
        expected = [
            f"  set -a; . {env_file}; set +a; {PYTHON} -m consumer run",
            f"  {PYTHON} -m consumer local send --env-file {env_file}",
        ]
    else:
        expected = [
            line
            for worker in workers
            for line in (
                f"  set -a; . {worker_env_file(env_file, worker)}; set +a; {PYTHON} -m consumer run",
                f"  {PYTHON} -m consumer local send --env-file {env_file} --worker {worker}",
            )
        ]
    assert output.splitlines()[-len(expected) :] == expected


@pytest.mark.real
def test_local_up_writes_every_workers_own_env_file_for_a_chosen_worker_run(served: tuple[Path, str]) -> None:
    """Each worker's environment is in .local.<worker>.env, the first's too (its file is the env file's twin), so
    `local send --worker <first>` reads it, as docs/local.md's "One chosen worker" gives it.
    Real: the `local up` process and the commands a user's terminal runs."""
    env_file, output = served
    workers = printed_workers(output)
    environments = {worker: read_env_file(worker_env_file(env_file, worker)) for worker in workers}
    assert environments[workers[0]] == read_env_file(env_file)
    assert len({e["QUEUE_URL"] for e in environments.values()}) == len(workers)
    sent = run_module("consumer", "local", "send", "--env-file", str(env_file), "--worker", workers[0], timeout=60)
    assert sent.returncode == 0, sent.stderr
    assert f" event(s) to {environments[workers[0]]['QUEUE_URL']} (from {worker_env_file(env_file, workers[0])}):" in (
        sent.stdout
    )
    sqs = local_client("sqs", environments[workers[0]]["AWS_ENDPOINT_URL"])
    drained = sqs.receive_message(QueueUrl=environments[workers[0]]["QUEUE_URL"], MaxNumberOfMessages=10)
    assert len(drained.get("Messages", [])) == 1
    sqs.delete_message(
        QueueUrl=environments[workers[0]]["QUEUE_URL"], ReceiptHandle=drained["Messages"][0]["ReceiptHandle"]
    )


@pytest.mark.real
def test_local_send_events_are_processed_and_poison_lands_in_the_dlq(served: tuple[Path, str]) -> None:
    """The docs' commands: a consumer started from the env file processes what `local send` sends, and a
    `--poison` event ends in the DLQ with the schema rule it broke as its reason.
    Real: the `local up` process and the commands a user's terminal runs."""
    env_file, _ = served
    environment = read_env_file(env_file)
    consumer = shell(f"set -a; . {env_file}; set +a; exec {PYTHON} -m consumer run", stderr=subprocess.STDOUT)
    try:
        sent = run_module("consumer", "local", "send", "--count", "2", "--env-file", str(env_file), timeout=60)
        assert sent.returncode == 0, sent.stderr
        poisoned = subprocess.run(
            [sys.executable, "-m", "consumer", "local", "send", "--poison"],
            cwd=ROOT,
            env=user_environment() | environment,  # this time from the environment, as after `set -a; . FILE`
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert poisoned.returncode == 0, poisoned.stderr
        sqs = local_client("sqs", environment["AWS_ENDPOINT_URL"])
        dead = wait_for_dlq(sqs, environment["QUEUE_URL"], environment["DLQ_URL"])
    finally:
        exit_code = stop(consumer)
    assert exit_code == 0
    assert consumer.stdout is not None
    log = [json.loads(line) for line in consumer.stdout.read().splitlines() if line.startswith("{")]
    processed = {line["message_id"] for line in log if line.get("event") == "message_processed"}
    assert processed == set(message_ids(sent.stdout))
    assert sent.stdout.startswith(f"sent 2 valid event(s) to {environment['QUEUE_URL']} (from {env_file}):")
    (moved,) = dead
    reason = read_reason(moved["MessageAttributes"])
    assert [event_id_of(moved)] == event_ids(poisoned.stdout)
    assert reason is not None and reason["kind"] == "poison"
    assert reason["reason"] == 'schema check failed at properties/channel: enum ["email", "sms", "push"]'


def event_ids(output: str) -> list[str]:
    """The event ids `local send` printed (each also its idempotency-key attribute)."""
    return [line.split()[1] for line in output.splitlines() if line.startswith("  event_id ")]


def wait_for_dlq(sqs: Any, queue_url: str, dlq_url: str) -> list[dict[str, Any]]:
    """The DLQ's messages once the source is empty and the DLQ holds one, within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        source = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
        dlq = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])["Attributes"]
        counts = (source["ApproximateNumberOfMessages"], source["ApproximateNumberOfMessagesNotVisible"])
        if counts == ("0", "0") and dlq["ApproximateNumberOfMessages"] == "1":
            return sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"])["Messages"]
        time.sleep(0.2)
    raise AssertionError(f"source not drained into one DLQ message within 30 s: {counts}, DLQ {dlq}")


@pytest.mark.real
def test_local_up_on_a_taken_port_says_so_in_one_line(cdk_out: Path, tmp_path: Path) -> None:
    """`local up --port N` with N already listening exits 2 at once with one line naming the port. Real: a process
    whose moto server thread would wait forever on the failed bind (the timeout), and its exit code."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        # moto's threaded server waits forever for a bind that failed: this must not (the timeout)
        done = run_module("consumer", "local", "up", "--port", str(port), "--env-file", str(tmp_path / "e"), timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f'consumer local: "--port" must be a free port on 127.0.0.1: {port} is in use (another `local up`?);'
        " stop what holds it or pass --port N (0 = any free port)\n"
    )
    assert not (tmp_path / "e").exists()


def test_local_send_refuses_an_endpoint_that_is_not_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """`local send` never sends to AWS: a QUEUE_URL without a loopback AWS_ENDPOINT_URL is refused (exit 2), with
    nothing sent and one line saying why."""
    from typer.testing import CliRunner

    from consumer.cli import build_app

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    queue_url = "https://sqs.eu-west-1.amazonaws.com/123456789012/SqsWorker-prod-source"
    done = CliRunner().invoke(build_app("local"), ["local", "send"], env={"QUEUE_URL": queue_url})
    assert (done.exit_code, done.stdout) == (2, "")
    assert done.stderr == (
        'consumer local: "AWS_ENDPOINT_URL" must be a local endpoint (127.0.0.1 or localhost; `local send` never'
        " sends to AWS): ''\n"
    )
