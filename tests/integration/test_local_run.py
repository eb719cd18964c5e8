"""The manual local run as the README and docs/local.md give it: `local up` in one terminal, `run` in a second,
`local send` in a third, pasted as written into a scratch directory laid out as a checkout after `make run`: `.venv`
(this suite's) and `cdk.out/` (the session's real synth), so `.local.env` and the default template path resolve there
as they would at the repository root."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumer.local.harness import event_id_of
from consumer.local.manual import read_env_file, shell_path, worker_env_file
from consumer.local.stack import local_client
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, poll_until
from tests.integration.conftest import ROOT, run_module
from tests.integration.local_runs import (
    PYTHON,
    in_process,
    last_send_command,
    message_ids,
    readme_commands,
    serving,
    shell,
    stop_command,
    terminal,
    user_environment,
)


def test_readme_and_docs_give_the_same_manual_run() -> None:
    """docs/local.md explains the three commands the README gives; they are the same three."""
    docs = (ROOT / "docs" / "local.md").read_text()
    for command in readme_commands():
        assert command in docs


@pytest.fixture(scope="module")
def served(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The README's first command, `local up` (the dev stack on its fixed port, until Ctrl-C), run as written in a
    checkout's layout; yields (the env file it wrote, what it printed up to the last worker's send command, the last
    line before it serves). Ctrl-C stops it with exit 0 when the module is done."""
    workdir = tmp_path_factory.mktemp("checkout")
    (workdir / ".venv").symlink_to(ROOT / ".venv")
    (workdir / "cdk.out").symlink_to(cdk_out)
    counts: dict[str, int] = {}
    up = terminal(workdir, readme_commands()[0])
    with serving(up, workdir / ".local.env", lambda line: last_send_command(line, counts)) as printed:
        yield workdir / ".local.env", printed


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
def test_local_up_prints_the_readmes_next_two_commands(served: tuple[Path, str]) -> None:
    """What `local up` prints last is the consumer command (env file loaded) and the send command, ready to paste:
    on a one-worker stack the README's commands 2 and 3, on a stack of several two per worker, each with that
    worker's file. Real: the `local up` process as the README runs it."""
    _, output = served
    workers = printed_workers(output)
    if len(workers) == 1:
        expected = [f"  {command}" for command in readme_commands()[1:]]
    else:
        expected = [
            line
            for worker in workers
            for line in (
                f"  set -a; . {shell_path(worker_env_file(Path('.local.env'), worker))}; set +a;"
                f" .venv/bin/python -m consumer run",
                f"  .venv/bin/python -m consumer local send --worker {worker}",
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
    sent = in_process("local", "send", "--env-file", str(env_file), "--worker", workers[0])
    assert sent.exit_code == 0, sent.stderr
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
def test_readme_manual_run_commands_work_as_written(served: tuple[Path, str]) -> None:
    """The README's commands 2 and 3 in the checkout `local up` serves: the consumer started from the env file (the
    task's environment, test_local_up_env_file_is_the_provisioned_task_environment) dry-runs what `local send` sends
    (the reference dev declares NOTIFY_DRY_RUN), then what the docs' `local send --count 2 --env-file FILE` sends, and
    a `--poison` event sent from the loaded environment ends in the DLQ with the schema rule it broke as its reason;
    the consumer exits 0 on SIGTERM (the stack's Ctrl-C: served). Last of the module's tests on the stack: a stopped
    consumer's long poll still waits on the server and would take what a later test sends.
    Real: the README's commands in a POSIX shell, as a user pastes them."""
    env_file, _ = served
    workdir, environment = env_file.parent, read_env_file(env_file)
    _, run_command, send_command = readme_commands()
    consumer = terminal(workdir, run_command)
    try:
        sent = subprocess.run(
            ["sh", "-c", send_command],
            cwd=workdir,
            env={**user_environment(), "PYTHONPATH": str(ROOT)},  # the checkout's code, as terminal() runs it
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        two = in_process("local", "send", "--count", "2", "--env-file", str(env_file))
        assert two.exit_code == 0, two.stderr
        poisoned = in_process("local", "send", "--poison", env=environment)  # as after `set -a; . FILE`
        assert poisoned.exit_code == 0, poisoned.stderr
        sqs = local_client("sqs", environment["AWS_ENDPOINT_URL"])
        assert poll_until(
            lambda: depth(sqs, environment["QUEUE_URL"]).total == 0 and depth(sqs, environment["DLQ_URL"]).visible == 1,
            timeout=30,
        ), (depth(sqs, environment["QUEUE_URL"]), depth(sqs, environment["DLQ_URL"]))
        dead = sqs.receive_message(QueueUrl=environment["DLQ_URL"], MessageAttributeNames=["All"])["Messages"]
    finally:
        exit_code = stop_command(consumer, signal.SIGTERM)
    assert exit_code == 0
    assert consumer.stdout is not None
    log = [json.loads(line) for line in consumer.stdout.read().splitlines() if line.startswith("{")]
    processed = [line["message_id"] for line in log if line.get("event") == "message_processed"]
    assert len(message_ids(sent.stdout)) == 1 and sorted(processed) == sorted(message_ids(sent.stdout + two.stdout))
    assert sum(line.get("event") == "notification_dry_run" for line in log) == 3  # dev declares NOTIFY_DRY_RUN
    assert two.stdout.startswith(f"sent 2 valid event(s) to {environment['QUEUE_URL']} (from {env_file}):")
    (moved,) = dead
    reason = read_reason(moved["MessageAttributes"])
    assert [event_id_of(moved)] == event_ids(poisoned.stdout)
    assert reason is not None and reason["kind"] == "poison"
    assert reason["reason"] == 'schema check failed at properties/channel: enum ["email", "sms", "push"]'


def event_ids(output: str) -> list[str]:
    """The event ids `local send` printed (each also its idempotency-key attribute)."""
    return [line.split()[1] for line in output.splitlines() if line.startswith("  event_id ")]


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
