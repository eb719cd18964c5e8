"""A stack of several workers run by hand: `local up` writes each worker's environment, every command it prints works
as printed, `local send --worker` feeds one worker's queue, and the dlq commands an alarm of the second worker prints
read that worker's DLQ from the local stack's real CloudFormation outputs. The stack is the tests' own
(``team_cdk_out``: two handlers the framework does not know), so this holds whatever cdk.json declares."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consumer.local.manual import read_env_file
from consumer.local.stack import LOCAL_CREDENTIALS, LOCAL_REGION, local_client
from consumer.local.task import TaskContainer, TaskDefinitionError
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth, poll_until
from tests import team_handlers
from tests.integration.conftest import ROOT, TEAM_STACK, TEAM_WORKERS
from tests.integration.local_runs import (
    PYTHON,
    in_process,
    local_up,
    message_ids,
    shell,
    stop_command,
    user_environment,
)

STACK = TEAM_STACK
FIRST, SECOND = TEAM_WORKERS  # ledger, invoices


@pytest.fixture(scope="module")
def served(team_cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """`local up` serving the team's stack (two workers) on any free port; yields (its env file, its output)."""
    env_file = tmp_path_factory.mktemp("local") / "local.env"
    # What an earlier `local up` of a stack with an "orders" worker would have left.
    env_file.with_name("local.orders.env").write_text("QUEUE_URL=http://127.0.0.1:1/gone\n")
    # The last worker's send command is the last line printed before serving.
    template = team_cdk_out / f"{STACK}.template.json"
    with local_up(template, env_file, lambda line: f"--worker {SECOND}" in line) as output:
        yield env_file, output


def worker_files(env_file: Path) -> dict[str, Path]:
    return {w: env_file.with_name(f"local.{w}.env") for w in TEAM_WORKERS}


@pytest.mark.real
def test_local_up_writes_and_prints_each_workers_environment(served: tuple[Path, str]) -> None:
    """Each worker's file holds its own task environment; the env file is the first worker's, and the output
    names each worker's handler, queue and file, then the commands to run and feed each one.
    Real: the `local up` process serving the team stack."""
    env_file, output = served
    files = worker_files(env_file)
    environments = {worker: read_env_file(path) for worker, path in files.items()}
    assert read_env_file(env_file) == environments[FIRST]
    handlers = {w: e["CONSUMER_HANDLER"] for w, e in environments.items()}
    assert handlers == TEAM_WORKERS
    queues = {w: e["QUEUE_URL"].rsplit("/", 1)[1] for w, e in environments.items()}
    assert queues == {FIRST: f"{STACK}-source", SECOND: f"{STACK}-{SECOND}-source"}
    for worker, environment in environments.items():
        paths = f"{env_file} and {files[worker]}" if worker == FIRST else str(files[worker])
        assert (
            f"worker {worker}: handler {handlers[worker]}, queue {environment['QUEUE_URL']};"
            f" its task's environment ({len(environment)} variables) in {paths}\n"
        ) in output
    assert output.splitlines()[-4:] == [
        f"  set -a; . {files[FIRST]}; set +a; {PYTHON} -m consumer run",
        f"  {PYTHON} -m consumer local send --env-file {env_file} --worker {FIRST}",
        f"  set -a; . {files[SECOND]}; set +a; {PYTHON} -m consumer run",
        f"  {PYTHON} -m consumer local send --env-file {env_file} --worker {SECOND}",
    ]


@pytest.mark.real
def test_local_send_worker_sends_its_handlers_samples_to_that_workers_queue(served: tuple[Path, str]) -> None:
    """`local send --worker invoices` puts the samples invoices declares on its queue, none on the first worker's.
    Real: the `local up` process serving the team stack (the command runs in process)."""
    env_file, _ = served
    second = read_env_file(worker_files(env_file)[SECOND])
    first = read_env_file(env_file)
    sent = in_process("local", "send", "--env-file", str(env_file), "--worker", SECOND, "--count", "2")
    assert sent.exit_code == 0, sent.stderr
    assert sent.stdout.startswith(f"sent 2 valid event(s) to {second['QUEUE_URL']}")
    sqs = local_client("sqs", second["AWS_ENDPOINT_URL"])
    received = sqs.receive_message(QueueUrl=second["QUEUE_URL"], VisibilityTimeout=0, MaxNumberOfMessages=10)
    assert sorted(m["Body"] for m in received["Messages"]) == sorted(team_handlers.INVOICE_SAMPLES[:2])  # type: ignore[type-var]
    assert (depth(sqs, second["QUEUE_URL"]).total, depth(sqs, first["QUEUE_URL"]).total) == (2, 0)
    for message in received["Messages"]:  # the queue as it was, for the tests after this one
        sqs.delete_message(QueueUrl=second["QUEUE_URL"], ReceiptHandle=message["ReceiptHandle"])


@pytest.mark.real
def test_local_send_to_an_unknown_worker_names_the_workers(served: tuple[Path, str]) -> None:
    """One line on stderr naming the workers `local up` wrote files for, and only this stack's (the file an earlier
    stack's "orders" worker left is gone); nothing sent (exit 2).
    Real: the files the `local up` process serving the team stack wrote; the refusal runs in process."""
    from typer.testing import CliRunner

    from consumer.cli import build_app

    env_file, _ = served
    assert not env_file.with_name("local.orders.env").exists()
    arguments = ["local", "send", "--env-file", str(env_file), "--worker", "orders"]
    done = CliRunner().invoke(build_app("local"), arguments)
    assert (done.exit_code, done.stdout) == (2, "")
    assert done.stderr == (
        f'consumer local: "--worker" must be one of the workers `local up` wrote an env file for next to {env_file}'
        f" ({', '.join(sorted(TEAM_WORKERS))}): 'orders'\n"
    )


def operator_environment(env_file: Path) -> dict[str, str]:
    """An operator's shell pointed at the local endpoint: credentials, region and AWS_ENDPOINT_URL, no queue URL."""
    endpoint = read_env_file(env_file)["AWS_ENDPOINT_URL"]
    return user_environment() | LOCAL_CREDENTIALS | {"AWS_REGION": LOCAL_REGION, "AWS_ENDPOINT_URL": endpoint}


def alarm_command(template: dict[str, Any], alarm: str, verb: str) -> list[str]:
    """The ``python -m consumer dlq VERB ...`` command the alarm's description prints, as argv."""
    description = template["Resources"][alarm]["Properties"]["AlarmDescription"]
    (command,) = re.findall(rf"`(python -m consumer dlq {verb} [^`]*)`", description)
    return shlex.split(command)[3:]  # after `python -m consumer`


@pytest.mark.real
def test_dlq_command_from_a_later_workers_alarm_reads_its_dlq(served: tuple[Path, str], team_cdk_out: Path) -> None:
    """`dlq stats --stack SqsWorker-team --worker invoices`, exactly as the second worker's DLQ alarm prints it, reads
    its DLQ from the stack's outputs; the same command without --worker reads the first worker's.
    Real: the `local up` process serving the team stack (the command runs in process)."""
    env_file, _ = served
    template = json.loads((team_cdk_out / f"{STACK}.template.json").read_text())
    (alarm,) = [k for k in template["Resources"] if k.startswith(f"{SECOND}AlarmsDlqDepth")]
    command = alarm_command(template, alarm, "stats")
    assert command == ["dlq", "stats", "--stack", STACK, "--worker", SECOND]
    files = worker_files(env_file)
    sqs = local_client("sqs", read_env_file(env_file)["AWS_ENDPOINT_URL"])
    for worker, count in ((FIRST, 1), (SECOND, 2)):
        for n in range(count):
            sqs.send_message(QueueUrl=read_env_file(files[worker])["DLQ_URL"], MessageBody=f"dead {worker} {n}")

    by_worker = in_process(*command, env=operator_environment(env_file))
    first = in_process(*command[:-2], env=operator_environment(env_file))

    assert (by_worker.exit_code, first.exit_code) == (0, 0), by_worker.stderr + first.stderr
    assert re.search(rf"^DLQ \S+/{STACK}-{SECOND}-dlq$", by_worker.stdout, re.MULTILINE), by_worker.stdout
    assert re.search(r"visible \(waiting\)\s*\S\s*2\b", by_worker.stdout), by_worker.stdout
    assert re.search(rf"^DLQ \S+/{STACK}-dlq$", first.stdout, re.MULTILINE), first.stdout
    assert re.search(r"visible \(waiting\)\s*\S\s*1\b", first.stdout), first.stdout


@pytest.mark.real
def test_dlq_stack_beats_the_tasks_own_queue_urls_in_the_environment(served: tuple[Path, str]) -> None:
    """Inside the first worker's task (ECS Exec), QUEUE_URL/DLQ_URL name that task's own queues: the second worker's
    alarm's `--stack ... --worker NAME` still reads that worker's DLQ, while a --dlq-url flag still wins over the
    stack. Real: the `local up` process serving the team stack (the command runs in process)."""
    env_file, _ = served
    first = read_env_file(env_file)
    inside_first_task = operator_environment(env_file) | {"QUEUE_URL": first["QUEUE_URL"], "DLQ_URL": first["DLQ_URL"]}

    by_stack = in_process("dlq", "stats", "--stack", STACK, "--worker", SECOND, env=inside_first_task)
    by_flag = in_process(
        "dlq", "stats", "--stack", STACK, "--worker", SECOND, "--dlq-url", first["DLQ_URL"], env=inside_first_task
    )

    assert (by_stack.exit_code, by_flag.exit_code) == (0, 0), by_stack.stderr + by_flag.stderr
    # moto's outputs spell a queue's URL as AWS does; the name says whose DLQ it is.
    assert re.search(rf"^DLQ \S+/{STACK}-{SECOND}-dlq$", by_stack.stdout, re.MULTILINE), by_stack.stdout
    assert f"DLQ {first['DLQ_URL']}\n" in by_flag.stdout, by_flag.stdout


@pytest.mark.real
def test_dlq_worker_the_stack_lacks_names_the_workers(served: tuple[Path, str]) -> None:
    """An unknown --worker: one line naming the stack's workers, from its WorkerNames output.
    Real: the `local up` process serving the team stack (the command runs in process)."""
    env_file, _ = served
    done = in_process("dlq", "peek", "--stack", STACK, "--worker", "orders", env=operator_environment(env_file))
    assert (done.exit_code, done.stdout) == (2, "")
    assert done.stderr == (
        f"consumer dlq: \"--worker\" must be one of the workers of {STACK} ({FIRST}, {SECOND}): 'orders'\n"
    )


def test_dlq_worker_without_a_stack_is_a_usage_error() -> None:
    """--worker picks a stack's worker: without --stack it names the rule, before any AWS call (no endpoint given)."""
    done = in_process("dlq", "stats", "--worker", SECOND, env=LOCAL_CREDENTIALS | {"AWS_REGION": LOCAL_REGION})
    assert (done.exit_code, done.stdout) == (2, "")
    assert (
        done.stderr
        == f'consumer dlq: "--worker" must come with "--stack STACK" (it picks that stack\'s worker): {SECOND!r}\n'
    )


@pytest.mark.real
def test_every_command_local_up_prints_works_as_printed(served: tuple[Path, str]) -> None:
    """Each worker's consumer, started as printed, takes what its send command sends: invoices' declared sample is
    processed; ledger's built body (it declares no samples, and the send says so) is refused into its DLQ, with the
    handler's reason. Real: the commands in a POSIX shell, as a user pastes them, each consumer's SIGTERM exit.
    Last of the module: a stopped consumer's long poll still waits on the server and would take what a later test
    sends."""
    env_file, output = served
    commands = [line.strip() for line in output.splitlines()[-4:]]  # a consumer and a send command per worker

    environments = {worker: read_env_file(path) for worker, path in worker_files(env_file).items()}
    sqs = local_client("sqs", environments[SECOND]["AWS_ENDPOINT_URL"])
    for environment in environments.values():  # what the tests above left
        sqs.purge_queue(QueueUrl=environment["DLQ_URL"])
    consumers = {
        worker: shell(command, stderr=subprocess.STDOUT, start_new_session=True)
        for worker, command in zip(TEAM_WORKERS, commands[::2], strict=True)
    }
    sent = {}
    try:
        for worker, command in zip(TEAM_WORKERS, commands[1::2], strict=True):
            sent[worker] = subprocess.run(
                ["sh", "-c", command], cwd=ROOT, env=user_environment(), capture_output=True, text=True, timeout=60
            )
            assert sent[worker].returncode == 0, sent[worker].stdout + sent[worker].stderr
        assert poll_until(
            lambda: all(depth(sqs, e["QUEUE_URL"]).total == 0 for e in environments.values())
            and depth(sqs, environments[FIRST]["DLQ_URL"]).visible == 1,
            timeout=30,
        )
        (dead,) = sqs.receive_message(QueueUrl=environments[FIRST]["DLQ_URL"], MessageAttributeNames=["All"])[
            "Messages"
        ]
    finally:
        exits = {worker: stop_command(process, signal.SIGTERM) for worker, process in consumers.items()}
    assert exits == {FIRST: 0, SECOND: 0}
    log = [json.loads(line) for line in consumers[SECOND].stdout.read().splitlines() if line.startswith("{")]  # type: ignore[union-attr]
    assert [line["message_id"] for line in log if line.get("event") == "message_processed"] == message_ids(
        sent[SECOND].stdout
    )
    assert sent[SECOND].stdout.startswith("sent 1 valid event(s)")
    assert json.loads(dead["Body"])["id"] == re.findall(r"event_id (\S+)", sent[FIRST].stdout)[0]
    assert read_reason(dead["MessageAttributes"])["reason"] == "invoice lacks invoice_id"  # type: ignore[index]
    assert f"{TEAM_WORKERS[FIRST]} declares no samples, so each body was built" in sent[FIRST].stdout


def test_task_container_of_a_stack_of_several_is_picked_by_worker(team_cdk_out: Path) -> None:
    """On a stack of two workers the second worker's container is its own (its handler, its environment), and
    leaving the worker out names both."""
    second = TaskContainer.from_assembly(team_cdk_out, STACK, SECOND)
    first = TaskContainer.from_assembly(team_cdk_out, STACK, FIRST)
    handlers = [
        {e["Name"]: e["Value"] for e in task.definition["Environment"]}["CONSUMER_HANDLER"] for task in (first, second)
    ]
    assert handlers == [TEAM_WORKERS[FIRST], TEAM_WORKERS[SECOND]]
    assert "INVOICES_BOOK" in second.environment_names and "INVOICES_BOOK" not in first.environment_names
    with pytest.raises(TaskDefinitionError, match=rf"for the workers {FIRST}, {SECOND}: None$"):
        TaskContainer.from_assembly(team_cdk_out, STACK)
