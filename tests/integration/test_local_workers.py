"""A stack of several workers run by hand: `local up` on the demo template writes each worker's environment,
`local send --worker` feeds one worker's queue, and the dlq commands an alarm of the second worker prints read
that worker's DLQ from the local stack's real CloudFormation outputs."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consumer.local.manual import read_env_file
from consumer.local.stack import LOCAL_CREDENTIALS, LOCAL_REGION, local_client
from consumer.local.task import TaskContainer, TaskDefinitionError
from consumer.testing import depth
from tests.integration.conftest import ROOT
from tests.integration.test_local_run import PYTHON, local_up, user_environment

STACK = "SqsWorker-demo"


@pytest.fixture(scope="module")
def served(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """`local up` serving the demo stack (two workers) on any free port; yields (its env file, its output)."""
    env_file = tmp_path_factory.mktemp("local") / "local.env"
    # What an earlier `local up` of a stack with an "orders" worker would have left.
    env_file.with_name("local.orders.env").write_text("QUEUE_URL=http://127.0.0.1:1/gone\n")
    # The last worker's send command is the last line printed before serving.
    with local_up(cdk_out / f"{STACK}.template.json", env_file, lambda line: "--worker reports" in line) as output:
        yield env_file, output


def worker_files(env_file: Path) -> dict[str, Path]:
    return {w: env_file.with_name(f"local.{w}.env") for w in ("notifications", "reports")}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", *args],
        cwd=ROOT,
        env=env or user_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_local_up_writes_and_prints_each_workers_environment(served: tuple[Path, str]) -> None:
    """Each worker's file holds its own task environment; the env file is the first worker's, and the output
    names each worker's handler, queue and file, then the commands to run and feed each one."""
    env_file, output = served
    files = worker_files(env_file)
    environments = {worker: read_env_file(path) for worker, path in files.items()}
    assert read_env_file(env_file) == environments["notifications"]
    handlers = {w: e["CONSUMER_HANDLER"] for w, e in environments.items()}
    assert handlers == {"notifications": "consumer.examples.demo:handle", "reports": "workers.reports:handle"}
    queues = {w: e["QUEUE_URL"].rsplit("/", 1)[1] for w, e in environments.items()}
    assert queues == {"notifications": f"{STACK}-source", "reports": f"{STACK}-reports-source"}
    for worker, environment in environments.items():
        paths = f"{env_file} and {files[worker]}" if worker == "notifications" else str(files[worker])
        assert (
            f"worker {worker}: handler {handlers[worker]}, queue {environment['QUEUE_URL']};"
            f" its task's environment ({len(environment)} variables) in {paths}\n"
        ) in output
    assert output.splitlines()[-4:] == [
        f"  set -a; . {files['notifications']}; set +a; {PYTHON} -m consumer run",
        f"  {PYTHON} -m consumer local send --env-file {env_file} --worker notifications",
        f"  set -a; . {files['reports']}; set +a; {PYTHON} -m consumer run",
        f"  {PYTHON} -m consumer local send --env-file {env_file} --worker reports",
    ]


def test_local_send_worker_sends_report_requests_to_that_workers_queue(served: tuple[Path, str]) -> None:
    """`local send --worker reports` puts report requests on the reports queue, none on the first worker's."""
    env_file, _ = served
    reports = read_env_file(worker_files(env_file)["reports"])
    first = read_env_file(env_file)
    sent = run("local", "send", "--env-file", str(env_file), "--worker", "reports", "--count", "2")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(f"sent 2 valid event(s) to {reports['QUEUE_URL']}")
    sqs = local_client("sqs", reports["AWS_ENDPOINT_URL"])
    (body,) = {m["Body"] for m in sqs.receive_message(QueueUrl=reports["QUEUE_URL"], VisibilityTimeout=0)["Messages"]}
    assert json.loads(body)["type"] == "report.requested"
    assert (depth(sqs, reports["QUEUE_URL"]).total, depth(sqs, first["QUEUE_URL"]).total) == (2, 0)


def test_local_send_to_an_unknown_worker_names_the_workers(served: tuple[Path, str]) -> None:
    """One line on stderr naming the workers `local up` wrote files for, and only this stack's (the file an earlier
    stack's "orders" worker left is gone); nothing sent."""
    env_file, _ = served
    assert not env_file.with_name("local.orders.env").exists()
    done = run("local", "send", "--env-file", str(env_file), "--worker", "orders")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f'consumer local: "--worker" must be one of the workers `local up` wrote an env file for next to {env_file}'
        " (notifications, reports): 'orders'\n"
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


def test_dlq_command_from_a_later_workers_alarm_reads_its_dlq(served: tuple[Path, str], cdk_out: Path) -> None:
    """`dlq stats --stack SqsWorker-demo --worker reports`, exactly as the reports DLQ alarm prints it, reads the
    reports DLQ from the stack's outputs; the same command without --worker reads the first worker's."""
    env_file, _ = served
    template = json.loads((cdk_out / f"{STACK}.template.json").read_text())
    (alarm,) = [k for k in template["Resources"] if k.startswith("reportsAlarmsDlqDepth")]
    command = alarm_command(template, alarm, "stats")
    assert command == ["dlq", "stats", "--stack", STACK, "--worker", "reports"]
    files = worker_files(env_file)
    sqs = local_client("sqs", read_env_file(env_file)["AWS_ENDPOINT_URL"])
    for worker, count in (("notifications", 1), ("reports", 2)):
        for n in range(count):
            sqs.send_message(QueueUrl=read_env_file(files[worker])["DLQ_URL"], MessageBody=f"dead {worker} {n}")

    by_worker = run(*command, env=operator_environment(env_file))
    first = run(*command[:-2], env=operator_environment(env_file))

    assert (by_worker.returncode, first.returncode) == (0, 0), by_worker.stderr + first.stderr
    assert re.search(rf"^DLQ \S+/{STACK}-reports-dlq$", by_worker.stdout, re.MULTILINE), by_worker.stdout
    assert re.search(r"visible \(waiting\)\s*\S\s*2\b", by_worker.stdout), by_worker.stdout
    assert re.search(rf"^DLQ \S+/{STACK}-dlq$", first.stdout, re.MULTILINE), first.stdout
    assert re.search(r"visible \(waiting\)\s*\S\s*1\b", first.stdout), first.stdout


def test_dlq_stack_beats_the_tasks_own_queue_urls_in_the_environment(served: tuple[Path, str]) -> None:
    """Inside the first worker's task (ECS Exec), QUEUE_URL/DLQ_URL name that task's own queues: the reports alarm's
    `--stack ... --worker reports` still reads the reports DLQ, while a --dlq-url flag still wins over the stack."""
    env_file, _ = served
    first = read_env_file(env_file)
    inside_first_task = operator_environment(env_file) | {"QUEUE_URL": first["QUEUE_URL"], "DLQ_URL": first["DLQ_URL"]}

    by_stack = run("dlq", "stats", "--stack", STACK, "--worker", "reports", env=inside_first_task)
    by_flag = run(
        "dlq", "stats", "--stack", STACK, "--worker", "reports", "--dlq-url", first["DLQ_URL"], env=inside_first_task
    )

    assert (by_stack.returncode, by_flag.returncode) == (0, 0), by_stack.stderr + by_flag.stderr
    # moto's outputs spell a queue's URL as AWS does; the name says whose DLQ it is.
    assert re.search(rf"^DLQ \S+/{STACK}-reports-dlq$", by_stack.stdout, re.MULTILINE), by_stack.stdout
    assert f"DLQ {first['DLQ_URL']}\n" in by_flag.stdout, by_flag.stdout


def test_dlq_worker_the_stack_lacks_names_the_workers(served: tuple[Path, str]) -> None:
    """An unknown --worker: one line naming the stack's workers, from its WorkerNames output."""
    env_file, _ = served
    done = run("dlq", "peek", "--stack", STACK, "--worker", "orders", env=operator_environment(env_file))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"consumer dlq: \"--worker\" must be one of the workers of {STACK} (notifications, reports): 'orders'\n"
    )


def test_dlq_worker_without_a_stack_is_a_usage_error(served: tuple[Path, str]) -> None:
    """--worker picks a stack's worker: without --stack it names the rule, before any AWS call."""
    env_file, _ = served
    done = run("dlq", "stats", "--worker", "reports", env=operator_environment(env_file))
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr
        == 'consumer dlq: "--worker" must come with "--stack STACK" (it picks that stack\'s worker): \'reports\'\n'
    )


def test_task_container_of_the_demo_is_picked_by_worker(cdk_out: Path) -> None:
    """On the demo template the reports worker's container is its own (its handler, its stop timeout), and
    leaving the worker out names both."""
    reports = TaskContainer.from_assembly(cdk_out, STACK, "reports")
    first = TaskContainer.from_assembly(cdk_out, STACK, "notifications")
    handlers = [
        {e["Name"]: e["Value"] for e in task.definition["Environment"]}["CONSUMER_HANDLER"] for task in (first, reports)
    ]
    assert handlers == ["consumer.examples.demo:handle", "workers.reports:handle"]
    assert "REPORTS_DRY_RUN" in reports.environment_names and "NOTIFY_DRY_RUN" not in reports.environment_names
    with pytest.raises(TaskDefinitionError, match=r"for the workers notifications, reports: None$"):
        TaskContainer.from_assembly(cdk_out, STACK)
