"""`python -m consumer run`: what only a real process shows (a signal's delivery, a SIGKILL, the exit code the OS
sees: ``pytest -m real``), and its start-up checks and refusals, run in process on the command's own typer app.

The runtime's handling of a stop (draining, handing back, its timing) is the simulated world's (tests/sim: every
seed's plan sends SIGTERMs and SIGKILLs on the virtual clock); here a real process shows that the signal reaches it,
that it exits 0 with its in-flight work done, and that a process killed outright leaves its message to come back.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.sqs.models import DEFAULT_SENDER_ID

from consumer.declaration import contract_of
from consumer.message import PRIOR_RECEIVES_ATTRIBUTE
from consumer.testing import depth, wait_until
from tests.integration.conftest import REGION, RunResult, create_pair
from tests.integration.handlers import killed_on_first_receive, ordered_slow
from tests.integration.processes import CONTRACT, create_table, effects, start, wait_for_event, wait_in_flight
from tests.integration.support import holds_nothing

# --------------------------------------------------------------------------- a real process: signals and exit codes


@pytest.mark.real
def test_process_idle_exits_promptly_on_sigterm(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list
) -> None:
    """Idle, SIGTERM ends the process with 0 without waiting out the 20 s long poll. Real: the signal reaches a
    process blocked in a real socket read, and the exit code is the one the OS reports."""
    pair = create_pair(server_sqs, CONTRACT)
    process = start(moto_server, pair.queue_url, tmp_path / "effects")
    process_guard.append(process)
    wait_for_event(process, "consumer_started")
    time.sleep(0.5)  # let the poller enter its long poll
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert time.monotonic() - sent < 5  # about a second here; asserted loosely


@pytest.mark.real
def test_process_sigterm_finishes_in_flight_and_holds_nothing_back(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list
) -> None:
    """SIGTERM mid-work: both running handlers finish and are deleted; the unreceived message stays visible. Real:
    ECS's SIGTERM to the process, its handler threads finishing and the exit code 0 the OS reports."""
    pair = create_pair(server_sqs, CONTRACT)
    for body in ("1", "1.0", "1.00"):  # distinct bodies: the body hash is the idempotency key
        server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody=body)
    process = start(moto_server, pair.queue_url, tmp_path / "effects")
    process_guard.append(process)
    wait_for_event(process, "consumer_started")
    wait_in_flight(server_sqs, pair.queue_url, 2)
    assert depth(server_sqs, pair.queue_url) == (1, 2)  # two running (concurrency 2), one waiting
    started = tmp_path / "effects.started"
    wait_until(lambda: started.exists() and len(started.read_text().split()) == 2, what="both handlers started")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=CONTRACT.stop_timeout_seconds + 5) == 0
    assert len(effects(tmp_path / "effects")) == 2
    assert depth(server_sqs, pair.queue_url) == (1, 0)  # deleted the two, the third was never held


@pytest.mark.real
def test_process_sigkill_mid_work_leaves_the_message_to_come_back_once(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list
) -> None:
    """Killed during the handler: nothing applied, nothing deleted or handed back, the message in flight; it comes
    back after its 4 s lease to the next process, which applies it once. The next process starts beside the first
    (as ECS's replacement task would), so its start overlaps the lease, and its SIGTERM sends the delete at once
    (the shutdown's flush). Real: SIGKILL runs no code of the process at all, so only a real process shows that
    nothing it left behind deletes or releases the message. That every killed consumer's messages are applied
    exactly once, at any moment of the kill, is the simulated world's (tests/sim/test_seeds.py: plans with SIGKILLs,
    the exactly-once invariant)."""
    contract = contract_of(killed_on_first_receive)
    pair = create_pair(server_sqs, contract)
    server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="once")
    handler = {"CONSUMER_HANDLER": "tests.integration.handlers:killed_on_first_receive"}
    first = start(moto_server, pair.queue_url, tmp_path / "effects", **handler)
    process_guard.append(first)
    started = tmp_path / "effects.started"
    wait_until(started.exists, what="the handler started")
    second = start(moto_server, pair.queue_url, tmp_path / "effects", **handler)
    process_guard.append(second)
    first.kill()
    assert first.wait(timeout=10) == -signal.SIGKILL
    assert effects(tmp_path / "effects") == []
    assert depth(server_sqs, pair.queue_url) == (0, 1)  # neither deleted nor handed back: in flight
    wait_until(
        lambda: effects(tmp_path / "effects"), timeout=contract.visibility_timeout_seconds + 20, what="redelivery"
    )
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=20) == 0
    assert holds_nothing(server_sqs, pair.queue_url), depth(server_sqs, pair.queue_url)  # the message deleted
    applied = effects(tmp_path / "effects")
    assert [(e["pid"], e["receive_count"]) for e in applied] == [(second.pid, 2)]


@pytest.mark.real
def test_process_sigterm_during_start_up_exits_0_at_once(tmp_path: Path, process_guard: list) -> None:
    """A start-up stuck on an endpoint that never answers still stops on SIGTERM with exit 0, holding nothing. Real:
    the signal lands in a real socket read inside botocore, which would retry an ordinary exception."""
    with socket.socket() as silent:  # accepts connections (backlog) and never answers a request
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        process = start(endpoint, f"{endpoint}/123456789012/never-answers", tmp_path / "effects")
        process_guard.append(process)
        wait_for_event(process, "consumer_starting")
        time.sleep(1.0)  # now inside the drift check's GetQueueAttributes, blocked on the read
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert time.monotonic() - sent < 5  # the read timeout is 30 s; asserted loosely
    assert process.stdout is not None
    lines = [json.loads(line) for line in process.stdout.read().splitlines() if line.startswith("{")]
    assert [line["event"] for line in lines if line["logger"] == "consumer"] == ["consumer_stopped_before_start"]


@pytest.mark.real
def test_process_notifications_example_refuses_to_start_without_a_webhook_or_dry_run(
    tmp_path: Path, process_guard: list
) -> None:
    """The example with neither NOTIFY_WEBHOOK_URL nor NOTIFY_DRY_RUN=true: exit 2 naming NOTIFY_WEBHOOK_URL, one
    line on stderr. Real: the exit code the OS sees from a fresh interpreter (the container's command as ECS runs
    it), and a stderr with nothing else on it; the other refusals run in process below."""
    process = start(
        "http://127.0.0.1:9",
        "http://127.0.0.1:9/123456789012/any",
        tmp_path / "effects",
        CONSUMER_HANDLER="consumer.examples.notifications:handle",
    )
    process_guard.append(process)
    assert process.wait(timeout=30) == 2
    assert process.stderr is not None
    lines = process.stderr.read().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        'consumer: cannot start: "NOTIFY_WEBHOOK_URL" must be set to the webhook\'s http(s):// URL, or'
        " NOTIFY_DRY_RUN=true declared"
    ), lines


# --------------------------------------------------------------------------- the command in process


def refusal(result: RunResult) -> str:
    """The one line a refused start-up writes to stderr (exit 2); fails on a traceback or anything else."""
    assert result.exit_code == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("consumer: cannot start: "), lines
    return lines[0].removeprefix("consumer: cannot start: ")


def test_process_sigterm_releases_received_but_unstarted_fifo_messages(
    moto_server: str, server_sqs: Any, tmp_path: Path, consumer_run: Any
) -> None:
    """One receive brings three messages of a group; on a stop (what SIGTERM asks) the first finishes, the other two
    are visible at once."""
    pair = create_pair(server_sqs, contract_of(ordered_slow))
    for i in range(3):
        server_sqs.send_message(
            QueueUrl=pair.queue_url, MessageBody=f"o{i}", MessageGroupId="g", MessageDeduplicationId=f"o{i}"
        )
    started = tmp_path / "effects.started"
    result = consumer_run(
        moto_server,
        QUEUE_URL=pair.queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:ordered_slow",
        SIDE_EFFECTS_FILE=str(tmp_path / "effects"),
        stop_when=lambda: started.exists() and depth(server_sqs, pair.queue_url) == (0, 3),
    )
    assert result.exit_code == 0, result
    assert started.read_text().split() == ["o0"]
    assert [e["body"] for e in effects(tmp_path / "effects")] == ["o0"]
    assert depth(server_sqs, pair.queue_url) == (2, 0)


def test_process_refuses_to_start_on_queue_drift(
    moto_server: str, server_sqs: Any, tmp_path: Path, consumer_run: Any
) -> None:
    """A queue whose visibility differs from the contract: exit 2 and a message saying what and how to fix."""
    pair = create_pair(server_sqs, CONTRACT, VisibilityTimeout="30")
    result = consumer_run(moto_server, QUEUE_URL=pair.queue_url, CONSUMER_HANDLER="tests.integration.handlers:slow")
    assert result.exit_code == 2, result
    assert "VisibilityTimeout is 30 s, the contract derives 15 s from max_duration 5 s" in result.stderr
    assert "redeploy the stack" in result.stderr


def test_process_refuses_to_start_when_the_stack_contract_differs_from_the_handler(
    moto_server: str, server_sqs: Any, consumer_run: Any
) -> None:
    """The stack's CONSUMER_* contract for another declaration: exit 2 naming the field."""
    pair = create_pair(server_sqs, CONTRACT)
    deployed = {**CONTRACT.to_env()}
    stale = type(CONTRACT)(
        max_duration_seconds=90,
        concurrency=2,
        max_receive_count=3,
        retry_backoff_base_seconds=1,
        retry_backoff_max_seconds=1,
    )
    deployed.update(stale.to_env())
    result = consumer_run(
        moto_server, QUEUE_URL=pair.queue_url, CONSUMER_HANDLER="tests.integration.handlers:slow", **deployed
    )
    line = refusal(result)
    assert '"CONSUMER_MAX_DURATION_SECONDS" differs from the handler\'s @worker declaration' in line
    assert "(max_duration: stack 90, handler 5" in line  # the @worker argument, as the author wrote it


@pytest.mark.parametrize(
    ("task_role_id", "receive_count", "warned"),
    [(DEFAULT_SENDER_ID, 3, []), (None, 1, ["carried_receives_untrusted"])],
    ids=["task-role-id-set", "bare-local-run"],
)
def test_process_trusts_a_carried_count_only_from_its_task_role(
    moto_server: str,
    server_sqs: Any,
    tmp_path: Path,
    consumer_run: Any,
    task_role_id: str | None,
    receive_count: int,
    warned: list[str],
) -> None:
    """`consumer run` hands CONSUMER_TASK_ROLE_ID to the runtime: set to the SenderId moto gives every message,
    a copy carrying 2 spent receives is on its third; unset (a bare local run), the count restarts at 1 and the
    start-up log says so once."""
    pair = create_pair(server_sqs, CONTRACT)
    carried = {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "2"}}
    server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="0", MessageAttributes=carried)
    binding = {"CONSUMER_TASK_ROLE_ID": task_role_id} if task_role_id else {}
    side_effects = tmp_path / "effects"
    result = consumer_run(
        moto_server,
        QUEUE_URL=pair.queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        SIDE_EFFECTS_FILE=str(side_effects),
        stop_when=lambda: bool(effects(side_effects)),
        **binding,
    )
    assert result.exit_code == 0, result
    assert [e["receive_count"] for e in effects(side_effects)] == [receive_count]
    assert [line["event"] for line in result.events() if line["event"] == "carried_receives_untrusted"] == warned


def test_process_refuses_a_task_role_id_that_is_no_role_id(
    moto_server: str, server_sqs: Any, consumer_run: Any
) -> None:
    """A whole SenderId pasted into CONSUMER_TASK_ROLE_ID would match no copy: exit 2, one line naming it."""
    pair = create_pair(server_sqs, CONTRACT)
    result = consumer_run(
        moto_server,
        QUEUE_URL=pair.queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        CONSUMER_TASK_ROLE_ID="AROAEXAMPLEOWNROLE01:task",
    )
    assert refusal(result) == (
        '"CONSUMER_TASK_ROLE_ID" must be the task role\'s RoleId'
        " (16 to 128 letters, digits or underscores): 'AROAEXAMPLEOWNROLE01:task'"
    )


def test_process_missing_queue_is_a_clear_error(moto_server: str, consumer_run: Any) -> None:
    """A QUEUE_URL that does not exist: exit 2, no queue created."""
    result = consumer_run(
        moto_server,
        QUEUE_URL=f"{moto_server}/123456789012/does-not-exist",
        CONSUMER_HANDLER="tests.integration.handlers:slow",
    )
    assert "the queue does not exist" in refusal(result)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)
    assert not any(url.endswith("/does-not-exist") for url in sqs.list_queues().get("QueueUrls", []))


def test_process_without_credentials_is_a_clear_error(moto_server: str, tmp_path: Path, consumer_run: Any) -> None:
    """No credentials anywhere: exit 2 naming the operation, not a traceback."""
    result = consumer_run(
        moto_server,
        QUEUE_URL=f"{moto_server}/123456789012/any",
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        AWS_ACCESS_KEY_ID="",
        AWS_SECRET_ACCESS_KEY="",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
    )
    line = refusal(result)
    assert "GetQueueAttributes on" in line and "Unable to locate credentials" in line


@pytest.mark.parametrize(
    ("source", "spec", "rule"),
    [
        ("def handle(:\n", "startup_syntax_error:handle", "names a module with a syntax error ("),
        ('raise RuntimeError("no database")\n', "startup_raises:handle", "names a module that raised RuntimeError"),
        (None, ".handlers:slow", 'must name an absolute module ("package.module:function"), not a relative one'),
    ],
    ids=["syntax-error", "raises-on-import", "relative"],
)
def test_process_handler_that_cannot_be_imported_is_one_line(
    moto_server: str,
    tmp_path: Path,
    consumer_run: Any,
    monkeypatch: pytest.MonkeyPatch,
    source: str | None,
    spec: str,
    rule: str,
) -> None:
    """A handler module with a syntax error, one raising at import, or a relative path: exit 2, one line, no traceback."""
    if source is not None:
        (tmp_path / f"{spec.partition(':')[0]}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = consumer_run(moto_server, QUEUE_URL=f"{moto_server}/123456789012/any", CONSUMER_HANDLER=spec)
    line = refusal(result)
    assert line.startswith(f'"CONSUMER_HANDLER" {rule}') and line.endswith(f": {spec!r}")


def test_process_invalid_log_level_is_one_line(moto_server: str, consumer_run: Any) -> None:
    """CONSUMER_LOG_LEVEL=LOUD: exit 2 naming the variable, the allowed values and the value."""
    result = consumer_run(
        moto_server,
        QUEUE_URL=f"{moto_server}/123456789012/any",
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        CONSUMER_LOG_LEVEL="LOUD",
    )
    assert refusal(result) == (
        "\"CONSUMER_LOG_LEVEL\" must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL (any case): 'LOUD'"
    )


def without_region(tmp_path: Path) -> dict[str, Any]:
    """Neither AWS_DEFAULT_REGION nor a config file: no region unless the caller or the queue URL gives one."""
    return {"unset": ("AWS_DEFAULT_REGION",), "AWS_CONFIG_FILE": str(tmp_path / "no-config")}


@pytest.mark.parametrize("source", ["AWS_REGION", "QUEUE_URL"])
def test_process_without_aws_default_region_takes_the_region_for_every_client(
    moto_server: str, server_sqs: Any, tmp_path: Path, consumer_run: Any, source: str
) -> None:
    """Only AWS_REGION (as some tools set it), or no region but an AWS queue URL: SQS and DynamoDB both work."""
    pair = create_pair(server_sqs, CONTRACT)
    table = create_table(moto_server)
    server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody="0.1")
    account, name = pair.queue_url.rsplit("/", 2)[-2:]
    queue_url = pair.queue_url if source == "AWS_REGION" else f"https://sqs.{REGION}.amazonaws.com/{account}/{name}"
    region = {"AWS_REGION": REGION} if source == "AWS_REGION" else {}
    side_effects = tmp_path / "effects"
    result = consumer_run(
        moto_server,
        QUEUE_URL=queue_url,
        CONSUMER_HANDLER="tests.integration.handlers:slow",
        CONSUMER_IDEMPOTENCY_TABLE=table,
        SIDE_EFFECTS_FILE=str(side_effects),
        stop_when=lambda: bool(effects(side_effects)),
        **without_region(tmp_path),
        **region,
    )
    assert result.exit_code == 0, result
    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_server)
    wait_until(
        lambda: [item["status"]["S"] for item in dynamodb.scan(TableName=table)["Items"]] == ["COMPLETED"],
        what="the claim completed",
    )


def test_process_without_any_region_is_one_line(moto_server: str, tmp_path: Path, consumer_run: Any) -> None:
    """No region anywhere and a local queue URL that names none: exit 2 naming the variable, not NoRegionError."""
    queue_url = f"{moto_server}/123456789012/any"
    result = consumer_run(
        moto_server, QUEUE_URL=queue_url, CONSUMER_HANDLER="tests.integration.handlers:slow", **without_region(tmp_path)
    )
    assert refusal(result) == (
        '"AWS_REGION" must be set (or AWS_DEFAULT_REGION, or a region in the AWS config file),'
        f" because QUEUE_URL names no region: {queue_url!r}"
    )


@pytest.mark.parametrize(
    ("spec", "refusal_line"),
    [
        ("guarded", '"HANDLER_TOKEN" must be set to the downstream\'s token: not set'),
        (
            "broken_setup",
            '"CONSUMER_HANDLER" names a handler whose start-up check broken_check failed'
            " (KeyError: 'NOT_SET_ANYWHERE'): 'tests.integration.handlers:broken_setup'",
        ),
    ],
)
def test_process_handler_start_up_check_refuses_before_any_call(
    consumer_run: Any, spec: str, refusal_line: str
) -> None:
    """A handler's setup check refusing: exit 2, its one line, before any AWS call (the endpoint is not even there)."""
    result = consumer_run(
        "http://127.0.0.1:9",
        QUEUE_URL="http://127.0.0.1:9/123456789012/any",
        CONSUMER_HANDLER=f"tests.integration.handlers:{spec}",
    )
    assert refusal(result) == refusal_line
