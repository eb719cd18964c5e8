"""``python -m consumer dlq ...`` in-process, real boto3 in the command and in the checks, on the simulated world
(tests/integration/virtual.py: moto's SQS on a virtual clock, so the run's start, the long polls and the leases pass in
no real time).

Four stay on moto's server over HTTP, each for what it tests: an endpoint refusing connections, the region the tool's
own client factory resolves (twice), and ``--stack``, whose CloudFormation calls the simulated transport does not
speak (it answers SQS's and DynamoDB's JSON protocols).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import Result

from consumer.message import PRIOR_RECEIVES_ATTRIBUTE
from consumer.ops import redrive
from consumer.runtime.dead_letter import ORIGINAL_ATTRIBUTES, REASON_ATTRIBUTE, read_reason
from consumer.testing import depth, drain
from tests.integration import dlq_support
from tests.integration.conftest import REGION, QueuePair, create_pair
from tests.integration.dlq_support import (
    ATTRIBUTES,
    CONTRACT,
    FIFO_CONTRACT,
    Clients,
    dead_letter,
    hook_client,
    on_call,
)
from tests.integration.virtual import Virtual

cli = dlq_support.cli
clients = dlq_support.clients
server_sqs = dlq_support.server_sqs
virtual_cli = dlq_support.virtual_cli


def test_dlq_stats_reports_depth_in_flight_and_age(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """Visible and in-flight counts, the DLQ's retention and the sampled oldest age come back as JSON."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(3):
            dead_letter(sqs, pair, f"bad {n}")
        sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=1, VisibilityTimeout=60)

        result = virtual_cli("dlq", "stats", "--dlq-url", pair.dlq_url, "--json")

        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert (report["visible"], report["in_flight"], report["delayed"]) == (2, 1, 0)
        assert report["retention_seconds"] == CONTRACT.dlq_retention_seconds
        assert 0 <= report["oldest_age_seconds"] <= 60
        assert report["oldest_expires_in_seconds"] == report["retention_seconds"] - report["oldest_age_seconds"]
        assert depth(sqs, pair.dlq_url) == (2, 1)

    virtual.run(body)


def test_dlq_stats_resolves_queues_from_stack_outputs(
    cli: Callable[..., Result], server_sqs: Any, moto_server: str
) -> None:
    """--stack reads the DLQ URL from the stack's DeadLetterQueueUrl output."""
    pair = create_pair(server_sqs, CONTRACT)
    dead_letter(server_sqs, pair, "bad")
    stack = f"dlq-cli-{pair.dlq_url.rsplit('/', 1)[1]}"
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"QueueUrl": {"Value": pair.queue_url}, "DeadLetterQueueUrl": {"Value": pair.dlq_url}},
    }
    cloudformation = boto3.client("cloudformation", region_name=REGION, endpoint_url=moto_server)
    cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps(template))

    result = cli("dlq", "stats", "--stack", stack, "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["dlq_url"], report["visible"]) == (pair.dlq_url, 1)


def test_dlq_peek_leaves_every_message_in_place(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """After a peek every message is visible again at once, none deleted or left hidden."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(4):
            dead_letter(sqs, pair, f"bad {n}")

        result = virtual_cli("dlq", "peek", "--dlq-url", pair.dlq_url, "--max", "10")

        assert result.exit_code == 0, result.output
        assert "4 message(s)" in result.stdout
        assert depth(sqs, pair.dlq_url) == (4, 0)

    virtual.run(body)


def test_dlq_peek_groups_by_fingerprint(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """Reasons differing only in ids and numbers share one row, counted, with the consumer's kind."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        dead_letter(sqs, pair, "order 123 not found (trace 9f86d081884c7d65)", body='{"order": 123}')
        dead_letter(sqs, pair, "order 4567 not found (trace 0a1b2c3d4e5f6789)", body='{"order": 4567}')
        dead_letter(sqs, pair, "body is not JSON: Expecting value", body="not json")

        result = virtual_cli("dlq", "peek", "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        rows = [re.sub(r"[│┃]", "|", line) for line in result.stdout.splitlines()]
        grouped = [row for row in rows if "order <n> not found (trace <hex>)" in row]
        assert len(grouped) == 1 and re.match(r"\|\s+2 \| poison", grouped[0]), grouped
        assert any(re.match(r"\|\s+1 \| poison\s+\| body is not JSON: Expecting value", row) for row in rows)

    virtual.run(body)


def test_dlq_peek_into_a_pipe_prints_whole_lines(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """Piped or logged (no terminal), a peek's rows are not folded at 80 columns: the message id and the
    reason each stay whole on the row that names them."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        reason = "schema check failed at properties/channel: enum [email, sms, push]"  # under the 80-char preview
        dead_letter(sqs, pair, reason, body='{"channel": "pigeon", "recipient": "someone@example.com"}')
        (message_id,) = [
            json.loads(line)["message_id"]
            for line in virtual_cli("dlq", "peek", "--dlq-url", pair.dlq_url, "--json").stdout.splitlines()
        ]

        result = virtual_cli("dlq", "peek", "--dlq-url", pair.dlq_url, columns=None)  # no COLUMNS: a pipe's width

        assert result.exit_code == 0, result.output
        rows = result.stdout.splitlines()
        assert any(message_id in row and reason in row for row in rows), result.stdout

    virtual.run(body)


def test_dlq_peek_json_carries_the_reason_record(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """--json prints one line per message with the reason the consumer wrote and its fingerprint."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        params = dead_letter(sqs, pair, "order 42 not found")

        result = virtual_cli("dlq", "peek", "--dlq-url", pair.dlq_url, "--json")

        assert result.exit_code == 0, result.output
        [line] = [json.loads(text) for text in result.stdout.splitlines()]
        assert line["reason"] == read_reason(params["MessageAttributes"])
        assert line["fingerprint"] == {"kind": "poison", "reason": "order <n> not found"}
        assert line["message_attributes"]["blob"] == {"DataType": "Binary", "BinaryValue": "AP9iaW4="}

    virtual.run(body)


def test_dlq_redrive_moves_everything_back_without_the_reason(
    virtual: Virtual, virtual_cli: Callable[..., Result]
) -> None:
    """Every message reaches the source with its body and attributes, minus x-dlq-reason; the DLQ is empty."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        bodies = {f'{{"n": {n}}}' for n in range(12)}
        for text in bodies:
            dead_letter(sqs, pair, "bad", body=text)

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert "moved 12, skipped by filter 0, failed 0" in result.stdout
        moved = drain(sqs, pair.queue_url)
        assert {m["Body"] for m in moved} == bodies
        assert all(m["MessageAttributes"] == ATTRIBUTES for m in moved)
        assert depth(sqs, pair.dlq_url) == (0, 0)

    virtual.run(body)


def test_dlq_redrive_drops_a_carried_receive_count(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """A requeued copy that SQS's own redrive dead-lettered still carries x-prior-receives; redriven, it
    starts a new retry budget, so the attribute does not go back with it."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        carried = {PRIOR_RECEIVES_ATTRIBUTE: {"DataType": "Number", "StringValue": "4"}}
        sqs.send_message(QueueUrl=pair.dlq_url, MessageBody="job", MessageAttributes={**ATTRIBUTES, **carried})

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        (moved,) = drain(sqs, pair.queue_url)
        assert (moved["Body"], moved["MessageAttributes"]) == ("job", ATTRIBUTES)

    virtual.run(body)


def test_dlq_redrive_fifo_keeps_group_and_dedup_ids(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIFO messages go back in order with their MessageGroupId and MessageDeduplicationId."""

    monkeypatch.setattr(redrive, "FIFO_DEDUP_WINDOW_SECONDS", 0)  # these ids never were in the source

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, FIFO_CONTRACT)
        for n in range(3):
            dead_letter(sqs, pair, "bad", body=f"m{n}", MessageGroupId="g-1", MessageDeduplicationId=f"d-{n}")

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        moved = drain(sqs, pair.queue_url)
        assert [
            (m["Body"], m["Attributes"]["MessageGroupId"], m["Attributes"]["MessageDeduplicationId"]) for m in moved
        ] == [
            ("m0", "g-1", "d-0"),
            ("m1", "g-1", "d-1"),
            ("m2", "g-1", "d-2"),
        ]
        assert all(REASON_ATTRIBUTE not in m["MessageAttributes"] for m in moved)
        assert depth(sqs, pair.dlq_url) == (0, 0)

    virtual.run(body)


def test_dlq_redrive_fifo_holds_messages_inside_the_dedup_window(
    virtual: Virtual, virtual_cli: Callable[..., Result]
) -> None:
    """A FIFO message that reached the DLQ under 5 min ago stays there: the source could drop it as a duplicate."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, FIFO_CONTRACT)
        dead_letter(sqs, pair, "bad", MessageGroupId="g-1", MessageDeduplicationId="d-1")

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert "moved 0" in result.stdout and "held (FIFO dedup window) 1" in result.stdout
        assert depth(sqs, pair.queue_url) == (0, 0)
        assert depth(sqs, pair.dlq_url) == (1, 0)

    virtual.run(body)


def test_dlq_redrive_unfolds_folded_attributes(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """Ten attributes folded into x-original-attributes come back as the original ten."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        ten = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(9)}
        ten["bin"] = {"DataType": "Binary", "BinaryValue": b"\x01\x02"}
        params = dead_letter(sqs, pair, "bad", attributes=ten)
        assert set(params["MessageAttributes"]) == {ORIGINAL_ATTRIBUTES, REASON_ATTRIBUTE}

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        [moved] = drain(sqs, pair.queue_url)
        assert moved["MessageAttributes"] == ten

    virtual.run(body)


def test_dlq_redrive_dry_run_moves_nothing(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """--dry-run lists what would move and leaves both queues as they were."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(3):
            dead_letter(sqs, pair, f"bad {n}")

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url, "--dry-run")

        assert result.exit_code == 0, result.output
        assert "would move 3" in result.stdout
        assert depth(sqs, pair.queue_url) == (0, 0)
        assert depth(sqs, pair.dlq_url) == (3, 0)

    virtual.run(body)


@pytest.mark.parametrize("expression", ["customer-7", "re:customer-[7]$"], ids=["substring", "regex"])
def test_dlq_redrive_filter_moves_only_matches(
    virtual: Virtual, virtual_cli: Callable[..., Result], expression: str
) -> None:
    """Only messages whose reason matches move; the others stay in the DLQ, visible."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(6):
            dead_letter(sqs, pair, f"unknown customer-{7 if n % 2 else 8}", body=f"b{n}")

        result = virtual_cli(
            "dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url, "--filter", expression
        )

        assert result.exit_code == 0, result.output
        assert "moved 3, skipped by filter 3" in result.stdout
        assert sorted(m["Body"] for m in drain(sqs, pair.queue_url)) == ["b1", "b3", "b5"]
        assert sorted(m["Body"] for m in drain(sqs, pair.dlq_url)) == ["b0", "b2", "b4"]

    virtual.run(body)


def test_dlq_redrive_interrupted_loses_nothing_and_a_rerun_finishes(
    virtual: Virtual, virtual_cli: Callable[..., Result], clients: Clients
) -> None:
    """Ctrl-C during the second SendMessageBatch leaves every message in a queue; a second run moves the rest."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        bodies = [f"b{n}" for n in range(15)]
        for text in bodies:
            dead_letter(sqs, pair, "bad", body=text)
        hook_client(clients, "SendMessageBatch", allowed=1, error=KeyboardInterrupt())

        interrupted = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert interrupted.exit_code == 130
        assert "interrupted after moving 10 message(s)" in interrupted.output
        assert depth(sqs, pair.queue_url) == (10, 0)
        assert depth(sqs, pair.dlq_url) == (5, 0)  # the unsent batch was released, not left hidden
        clients.hooks.clear()

        rerun = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert rerun.exit_code == 0, rerun.output
        assert sorted(m["Body"] for m in drain(sqs, pair.queue_url)) == sorted(bodies)
        assert depth(sqs, pair.dlq_url) == (0, 0)

    virtual.run(body)


def test_dlq_redrive_cancel_reports_an_endpoint_without_move_tasks(
    virtual: Virtual, virtual_cli: Callable[..., Result]
) -> None:
    """--cancel on moto (no message move tasks) exits 1 with one line saying there is nothing to cancel."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)

        result = virtual_cli("dlq", "redrive", "--dlq-url", pair.dlq_url, "--cancel")

        assert result.exit_code == 1
        assert result.stderr.strip().splitlines() == [
            f"consumer dlq: ListMessageMoveTasks on {pair.dlq_url}: this endpoint has no message move tasks,"
            " nothing to cancel"
        ]

    virtual.run(body)


def test_dlq_export_writes_every_message_and_leaves_them(
    virtual: Virtual, virtual_cli: Callable[..., Result], tmp_path: Path
) -> None:
    """One JSON line per message (binary attributes base64, reason parsed); the DLQ keeps every message."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(13):
            dead_letter(sqs, pair, f"bad {n}", body=f"b{n}")
        out = tmp_path / "dlq.jsonl"

        result = virtual_cli("dlq", "export", "--dlq-url", pair.dlq_url, "--out", str(out))

        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(line["body"] for line in lines) == sorted(f"b{n}" for n in range(13))
        assert len({line["message_id"] for line in lines}) == 13
        assert lines[0]["message_attributes"]["blob"]["BinaryValue"] == "AP9iaW4="
        assert lines[0]["reason"]["kind"] == "poison" and "SentTimestamp" in lines[0]["attributes"]
        assert depth(sqs, pair.dlq_url) == (13, 0)

    virtual.run(body)


def test_dlq_export_interrupted_loses_nothing(
    virtual: Virtual, virtual_cli: Callable[..., Result], tmp_path: Path, clients: Clients
) -> None:
    """export --delete cut off after one batch: every message is in the file or still in the DLQ, visible."""

    from botocore.exceptions import EndpointConnectionError

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(13):
            dead_letter(sqs, pair, "bad", body=f"b{n}")
        hook_client(clients, "ReceiveMessage", allowed=1, error=EndpointConnectionError(endpoint_url="cut"))
        out = tmp_path / "dlq.jsonl"

        result = virtual_cli("dlq", "export", "--dlq-url", pair.dlq_url, "--out", str(out), "--delete")

        assert result.exit_code == 1
        assert f"ReceiveMessage on {pair.dlq_url} failed" in result.stderr
        written = {json.loads(line)["body"] for line in out.read_text().splitlines()}
        remaining = {m["Body"] for m in drain(sqs, pair.dlq_url)}
        assert len(written) == 10 and written | remaining == {f"b{n}" for n in range(13)}

    virtual.run(body)


def test_dlq_import_resends_an_export(virtual: Virtual, virtual_cli: Callable[..., Result], tmp_path: Path) -> None:
    """An export imported into another DLQ recreates the same bodies, attributes and reasons."""

    def body() -> None:
        sqs = virtual.sqs
        first, second = create_pair(sqs, CONTRACT), create_pair(sqs, CONTRACT)
        for n in range(12):
            dead_letter(sqs, first, f"bad {n}", body=f"b{n}")
        out = tmp_path / "dlq.jsonl"
        assert virtual_cli("dlq", "export", "--dlq-url", first.dlq_url, "--out", str(out)).exit_code == 0

        result = virtual_cli("dlq", "import", "--dlq-url", second.dlq_url, "--in", str(out))

        assert result.exit_code == 0, result.output
        assert "imported 12 of 12" in result.stdout
        copies = drain(sqs, second.dlq_url)
        assert sorted(m["Body"] for m in copies) == sorted(f"b{n}" for n in range(12))
        assert all(m["MessageAttributes"]["blob"] == ATTRIBUTES["blob"] for m in copies)
        assert {read_reason(m["MessageAttributes"])["reason"] for m in copies} == {f"bad {n}" for n in range(12)}

    virtual.run(body)


def test_dlq_purge_without_yes_aborts_on_no(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """Answering "n" deletes nothing."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(2):
            dead_letter(sqs, pair, f"bad {n}")

        result = virtual_cli("dlq", "purge", "--dlq-url", pair.dlq_url, input="n\n")

        assert result.exit_code == 1
        assert "Purge about 2 message(s)" in result.output and "nothing was deleted" in result.stderr
        assert depth(sqs, pair.dlq_url) == (2, 0)

    virtual.run(body)


def test_dlq_purge_with_yes_empties(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """--yes purges without asking and reports the approximate count."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for n in range(2):
            dead_letter(sqs, pair, f"bad {n}")

        result = virtual_cli("dlq", "purge", "--dlq-url", pair.dlq_url, "--yes")

        assert result.exit_code == 0, result.output
        assert f"purged about 2 message(s) from {pair.dlq_url}" in result.stdout
        assert depth(sqs, pair.dlq_url) == (0, 0)

    virtual.run(body)


@pytest.mark.parametrize(
    ("args", "missing"),
    [(["stats"], "DLQ"), (["redrive", "--dlq-url", "http://127.0.0.1:9/123456789012/d"], "source queue")],
    ids=["stats", "redrive"],
)
def test_dlq_unresolved_queues_exit_2_naming_every_way(
    virtual: Virtual, virtual_cli: Callable[..., Result], args: list[str], missing: str
) -> None:
    """Without a flag, the environment or --stack the command exits 2 and names all three."""

    def body() -> None:
        result = virtual_cli("dlq", *args)

        assert result.exit_code == 2
        message = result.stderr.strip()
        assert message.startswith(f"consumer dlq: cannot tell which {missing} to use")
        for way in ("--queue-url", "--dlq-url", "QUEUE_URL", "DLQ_URL", "--stack"):
            assert way in message

    virtual.run(body)


def test_dlq_stats_unreachable_endpoint_exits_1_with_one_line(cli: Callable[..., Result]) -> None:
    """A dead endpoint: exit 1, one line naming the operation and the queue, no traceback."""
    url = "http://127.0.0.1:9/123456789012/dlq"

    result = cli("dlq", "stats", "--dlq-url", url, endpoint="http://127.0.0.1:9")

    assert result.exit_code == 1
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"consumer dlq: GetQueueAttributes on {url} failed: Could not connect")
    assert "Traceback" not in result.output


def test_dlq_stats_takes_the_region_from_aws_region_alone(
    cli: Callable[..., Result], server_sqs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only AWS_REGION set (boto3 reads AWS_DEFAULT_REGION only): the tool uses it, as consumer run does."""
    pair = create_pair(server_sqs, CONTRACT)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", REGION)

    result = cli("dlq", "stats", "--dlq-url", pair.dlq_url, "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["visible"] == 0


def test_dlq_stats_without_any_region_exits_2_naming_the_variable(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No region anywhere and a queue URL that names none: exit 2, one line naming AWS_REGION, no AWS call."""
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    url = "http://127.0.0.1:9/123456789012/dlq"

    result = cli("dlq", "stats", "--dlq-url", url, endpoint="http://127.0.0.1:9")

    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith('consumer dlq: "AWS_REGION" must be set')
    assert line.endswith(f"names no region: '{url}'")


def test_dlq_peek_missing_queue_exits_1_naming_it(virtual: Virtual, virtual_cli: Callable[..., Result]) -> None:
    """A DLQ URL that names no queue: exit 1 with the operation and the queue."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        missing = pair.dlq_url + "-gone"

        result = virtual_cli("dlq", "peek", "--dlq-url", missing)

        assert result.exit_code == 1
        assert (
            result.stderr.strip()
            == f"consumer dlq: ReceiveMessage on {missing} failed: the queue does not exist"
            + (" (check the URL, the account and the region)")
        )

    virtual.run(body)


class MoveTaskApi:
    """Scripted answers for the three move-task operations moto lacks, on otherwise real clients.

    Every other call still goes over HTTP to moto's server. The answers are
    injected through botocore's own ``before-call`` hook (what botocore's Stubber
    uses), after botocore has validated the request parameters.
    """

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        clients: Clients,
        listings: list[list[dict[str, Any]]],
        moved: int = 0,
    ) -> None:
        self.listings = listings  # one ListMessageMoveTasks answer per call; the last one repeats
        self.moved = moved
        self.calls: list[tuple[str, dict[str, Any]]] = []
        monkeypatch.setattr(redrive, "MOVE_TASK_POLL_SECONDS", 0.0)
        for operation in ("StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask"):
            on_call(clients, "before-call", operation, self.answer)

    def answer(self, model: Any, params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse

        body = json.loads(params["body"])
        self.calls.append((model.name, body))
        if model.name == "StartMessageMoveTask":
            parsed: dict[str, Any] = {"TaskHandle": "task-1"}
        elif model.name == "ListMessageMoveTasks":
            parsed = {"Results": self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]}
        else:
            parsed = {"ApproximateNumberOfMessagesMoved": self.moved}
        return AWSResponse(None, 200, {}, None), parsed


def task(status: str, moved: int, total: int = 3, handle: str = "task-1", **extra: Any) -> dict[str, Any]:
    return {
        "TaskHandle": handle,
        "Status": status,
        "ApproximateNumberOfMessagesMoved": moved,
        "ApproximateNumberOfMessagesToMove": total,
        **extra,
    }


def arns(sqs: Any, pair: QueuePair) -> tuple[str, str]:
    get = lambda url: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]  # noqa: E731
    return get(pair.dlq_url), get(pair.queue_url)


def test_dlq_redrive_native_starts_a_move_task_and_follows_it(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    """Where the endpoint has move tasks, redrive starts one from the DLQ to the source at --rate and follows it."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        api = MoveTaskApi(monkeypatch, clients, [[], [task("RUNNING", 1)], [task("COMPLETED", 3)]])
        dlq_arn, source_arn = arns(sqs, pair)

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url, "--rate", "5")

        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == "redrive (native move task): completed, moved ~3 message(s)"
        assert api.calls[1] == (
            "StartMessageMoveTask",
            {"SourceArn": dlq_arn, "DestinationArn": source_arn, "MaxNumberOfMessagesPerSecond": 5},
        )
        assert [name for name, _ in api.calls] == [
            "ListMessageMoveTasks",
            "StartMessageMoveTask",
            "ListMessageMoveTasks",
            "ListMessageMoveTasks",
        ]

    virtual.run(body)


def test_dlq_redrive_native_follows_a_task_already_running(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    """A move task already running on the DLQ is followed, never started twice."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        running = task("RUNNING", 2, handle="task-0")
        api = MoveTaskApi(monkeypatch, clients, [[running], [running], [task("COMPLETED", 3, handle="task-0")]])

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert "a move task is already running on this DLQ; following it (task-0)" in result.stderr
        assert "StartMessageMoveTask" not in [name for name, _ in api.calls]
        assert result.stdout.strip() == "redrive (native move task): completed, moved ~3 message(s)"

    virtual.run(body)


def test_dlq_redrive_native_failed_task_exits_1_with_its_reason(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    """A move task that fails is reported with SQS's failure reason and exit 1."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        MoveTaskApi(monkeypatch, clients, [[], [task("FAILED", 1, FailureReason="AccessDenied on the destination")]])

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 1
        assert (
            f"message move task on {pair.dlq_url} failed after ~1 messages: AccessDenied on the destination"
            in result.stderr
        )

    virtual.run(body)


def test_dlq_redrive_cancel_cancels_the_running_task(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    """--cancel stops the running move task by its handle and says how far it got."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        api = MoveTaskApi(
            monkeypatch, clients, [[task("COMPLETED", 3, handle="old"), task("RUNNING", 2, handle="task-7")]], moved=2
        )

        result = virtual_cli("dlq", "redrive", "--dlq-url", pair.dlq_url, "--cancel")

        assert result.exit_code == 0, result.output
        assert api.calls[-1] == ("CancelMessageMoveTask", {"TaskHandle": "task-7"})
        assert result.stdout.strip() == f"cancelled the move task on {pair.dlq_url} after ~2 message(s)"

    virtual.run(body)
