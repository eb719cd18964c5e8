"""Local provisioning from the synthesized template, and the manual local run as the README and docs/local.md give
it: `local up` in one terminal, `run` in a second, `local send` in a third, pasted as written into a scratch directory
laid out as a checkout after `make run`: `.venv` (this suite's) and `cdk.out/` (the session's real synth), so
`.local.env` and the default template path resolve there as they would at the repository root. One module, so the dev
stack is provisioned in this process once (``local``) and `local up`'s env file is compared with it."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.sqs.models import DEFAULT_SENDER_ID

from consumer.contract import BINDING_KEYS, WorkerContract
from consumer.local.harness import event_id_of
from consumer.local.manual import read_env_file, shell_path, worker_env_file
from consumer.local.stack import (
    LOCAL_SKIPPED_TYPES,
    LocalProvisioningError,
    LocalStack,
    _resolve,
    local_client,
    provision,
    start_server,
)
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
def test_local_up_env_file_is_the_provisioned_task_environment(served: tuple[Path, str], local: LocalStack) -> None:
    """The env file holds exactly what a stack provisioned from the same template gives the task (plus the
    endpoint and credentials): ``local``, provisioned apart from it as a restart is, gives the same, so a restart on
    the same port writes the same file. Real: the `local up` process and the file it writes."""
    env_file, _ = served
    written = read_env_file(env_file)
    expected = local.process_environment()
    endpoint, served_endpoint = expected["AWS_ENDPOINT_URL"], written["AWS_ENDPOINT_URL"]
    assert endpoint != served_endpoint  # two servers: the file is not read back from the one it compares with
    assert written == {key: value.replace(endpoint, served_endpoint) for key, value in expected.items()}


@pytest.fixture(scope="module")
def dev_template(cdk_out: Path) -> Path:
    """The dev stack's template, synthesized by the real entry point."""
    return cdk_out / "SqsWorker-dev.template.json"


@pytest.fixture(scope="module")
def local(dev_template: Path) -> Iterator[LocalStack]:
    """A fresh moto server with the dev stack provisioned from its template."""
    server, endpoint = start_server()
    try:
        yield provision(endpoint, dev_template)
    finally:
        server.stop()


def test_local_queues_carry_the_contracts_timings(local: LocalStack) -> None:
    """The template's queues exist locally with the dev contract's visibility, retention and redrive."""
    contract = WorkerContract.from_env(local.task_environment)
    sqs = local_client("sqs", local.endpoint)
    source = sqs.get_queue_attributes(QueueUrl=local.task_environment["QUEUE_URL"], AttributeNames=["All"])[
        "Attributes"
    ]
    dlq = sqs.get_queue_attributes(QueueUrl=local.task_environment["DLQ_URL"], AttributeNames=["All"])["Attributes"]
    assert int(source["VisibilityTimeout"]) == contract.visibility_timeout_seconds == 100
    assert int(source["MessageRetentionPeriod"]) == contract.source_retention_seconds == 86_400
    assert int(dlq["MessageRetentionPeriod"]) == contract.dlq_retention_seconds == 604_800
    redrive = json.loads(source["RedrivePolicy"])
    assert (redrive["maxReceiveCount"], redrive["deadLetterTargetArn"]) == (7, dlq["QueueArn"])


def test_local_task_environment_is_the_templates_resolved(local: LocalStack) -> None:
    """Every key the task would get (dev's declared dry run too), queue URLs on the local endpoint, a real local table."""
    environment = local.task_environment
    # CONSUMER_FAIR_QUEUE, CONSUMER_IDEMPOTENT and the batch and async shapes' fields are written only when a worker
    # declares them (dev's does not).
    assert set(environment) == WorkerContract.env_keys() - {
        "CONSUMER_FAIR_QUEUE",
        "CONSUMER_IDEMPOTENT",
        "CONSUMER_MAX_BATCH",
        "CONSUMER_BATCH_WINDOW_SECONDS",
        "CONSUMER_ASYNCHRONOUS",
    } | BINDING_KEYS | {"NOTIFY_DRY_RUN"}
    assert environment["QUEUE_URL"] == f"{local.endpoint}/123456789012/SqsWorker-dev-source"
    tables = local_client("dynamodb", local.endpoint).list_tables()["TableNames"]
    assert environment["CONSUMER_IDEMPOTENCY_TABLE"] in tables
    # moto gives every message one SenderId, whoever sent it: locally that is the task role's copies' sender.
    assert environment["CONSUMER_TASK_ROLE_ID"] == DEFAULT_SENDER_ID


def test_local_alarms_come_from_the_template(local: LocalStack, dev_template: Path) -> None:
    """Every metric and metric-math alarm moto's CloudFormation skips is created from the template itself."""
    resources = json.loads(dev_template.read_text())["Resources"]
    metric_alarms = {k for k, v in resources.items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    alarms = {a["AlarmName"]: a for a in local_client("cloudwatch", local.endpoint).describe_alarms()["MetricAlarms"]}
    assert set(alarms) == {f"{local.stack_name}-{logical_id}" for logical_id in metric_alarms}
    assert len(alarms) == 10  # with DownstreamUnavailable, DlqExpiring's two inputs, and the wake-up (dev is at zero)
    contract = WorkerContract.from_env(local.task_environment)
    dlq = [{"Name": "QueueName", "Value": "SqsWorker-dev-dlq"}]

    def alarm(construct_id: str) -> dict[str, Any]:
        (found,) = [a for k, a in alarms.items() if k.startswith(f"{local.stack_name}-Alarms{construct_id}")]
        return found

    def metrics(found: dict[str, Any]) -> tuple[list[str], dict[str, tuple[str, Any, int]]]:
        expressions = [m["Expression"] for m in found["Metrics"] if "Expression" in m]
        stats = {
            m["Id"]: (
                m["MetricStat"]["Metric"]["MetricName"],
                m["MetricStat"]["Metric"]["Dimensions"],
                m["MetricStat"]["Period"],
            )
            for m in found["Metrics"]
            if "MetricStat" in m
        }
        return expressions, stats

    oldest, held = alarm("DlqAge"), alarm("DlqHeldLong")
    assert (oldest["MetricName"], oldest["Threshold"]) == (
        "ApproximateAgeOfOldestMessage",
        contract.dlq_age_alarm_seconds,
    )
    assert oldest["Dimensions"] == dlq
    assert held["EvaluationPeriods"] * 3_600 == contract.dlq_age_alarm_seconds  # dev: (7 - 1) days / 2, in hours
    assert metrics(held) == (
        ["FILL(visible, 0) + FILL(hidden, 0)"],
        {
            "visible": ("ApproximateNumberOfMessagesVisible", dlq, 3_600),
            "hidden": ("ApproximateNumberOfMessagesNotVisible", dlq, 3_600),
        },
    )
    for inputs in (oldest, held):  # DlqExpiring's inputs notify nobody; the composite (skipped locally) does
        assert (inputs["AlarmActions"], inputs["OKActions"]) == ([], [])
    depth = alarm("DlqDepth")
    # dev sends its pages to the ticket topic (pages_to_tickets in cdk.json).
    assert depth["AlarmActions"] == [local.outputs["TicketTopicArn"]]
    assert (depth["EvaluationPeriods"], depth["DatapointsToAlarm"]) == (20, 1)
    expressions, stats = metrics(depth)
    assert expressions == ["FILL(visible, 0) + FILL(hidden, 0) + FILL(moved, 0)"]
    assert stats == {
        "visible": ("ApproximateNumberOfMessagesVisible", dlq, 60),
        "hidden": ("ApproximateNumberOfMessagesNotVisible", dlq, 60),
        "moved": ("dead_lettered", [{"Name": "Queue", "Value": "SqsWorker-dev-source"}], 60),
    }
    expressions, stats = metrics(alarm("DlqNewArrivals"))
    assert expressions == ["IF(DIFF(dlq) > 0 AND (dlq - DIFF(dlq)) > 0, DIFF(dlq), 0)", "visible + hidden"]
    assert stats == {
        "visible": ("ApproximateNumberOfMessagesVisible", dlq, 60),
        "hidden": ("ApproximateNumberOfMessagesNotVisible", dlq, 60),
    }
    skipped = [k for k, v in resources.items() if v["Type"] in LOCAL_SKIPPED_TYPES]
    # The two composite alarms (ConsumerStalled, DlqExpiring), the dashboard, the default security group's stripping
    # and its provider's function.
    assert len(skipped) == 5
    # dev scales to zero: its wake-up alarm is created without its step policy action (the harness runs the tasks).
    (wake_up,) = [k for k, v in resources.items() if v["Properties"].get("PolicyType") == "StepScaling"]
    assert [s.split(" ")[0] for s in local.skipped] == [*skipped, wake_up]
    assert alarm_named(alarms, "ConsumerWakeUpAlarm")["AlarmActions"] == []


def test_local_provision_without_a_template_says_how_to_make_one(tmp_path: Path) -> None:
    """A missing cdk.out gives the command that creates it."""
    with pytest.raises(LocalProvisioningError, match=r"synthesize first \(python app.py or make run\)"):
        provision("http://127.0.0.1:9", tmp_path / "SqsWorker-dev.template.json")


def test_local_reference_to_an_unknown_resource_is_a_clear_error() -> None:
    """A Ref the local stack cannot resolve names itself instead of failing on a missing value."""
    with pytest.raises(LocalProvisioningError, match="Nowhere"):
        _resolve({"Ref": "Nowhere"}, {}, "http://127.0.0.1:1")


def alarm_named(alarms: dict[str, Any], construct_path: str) -> dict[str, Any]:
    """The one alarm whose name (``<stack>-<logical id>``) holds ``construct_path``."""
    (found,) = [a for name, a in alarms.items() if construct_path in name]
    return found


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
