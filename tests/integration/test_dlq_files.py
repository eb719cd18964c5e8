"""``dlq export`` and ``dlq import``: the backup file's mode, every line checked before a send, and runs that
can be interrupted and resumed without a message in two places. Real boto3 against moto's server."""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from consumer.ops.commands import DLQ_TAKES_THE_CONSUMER_ONLY
from consumer.testing import depth, drain
from tests.integration import dlq_support
from tests.integration.conftest import create_pair
from tests.integration.dlq_support import CONTRACT, Clients, dead_letter, hook_client, on_call, signal_on_call

cli = dlq_support.cli
clients = dlq_support.clients
server_sqs = dlq_support.server_sqs

ATTRIBUTES_SHAPE = "an object of attribute name to {DataType, StringValue or BinaryValue}"
GOOD_LINE = json.dumps({"message_id": "m-1", "body": "fine", "message_attributes": {}, "attributes": {}})


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that takes nothing away, so a file's mode is what the command asked for when creating it."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_dlq_export_creates_its_file_readable_by_the_owner_only(cli: Any, server_sqs: Any, tmp_path: Path) -> None:
    """The export holds message bodies: the file is created with mode 0600, whatever the umask allows."""
    pair = create_pair(server_sqs, CONTRACT)
    dead_letter(server_sqs, pair, "bad", body="secret")
    out = tmp_path / "dlq.jsonl"

    result = cli("dlq", "export", "--dlq-url", pair.dlq_url, "--out", str(out))

    assert result.exit_code == 0, result.output
    assert mode(out) == 0o600
    assert [json.loads(line)["body"] for line in out.read_text().splitlines()] == ["secret"]


@pytest.mark.usefixtures("open_umask")
def test_dlq_export_append_keeps_the_existing_files_mode_and_warns_if_others_can_read_it(
    cli: Any, server_sqs: Any, tmp_path: Path
) -> None:
    """--append to a file the operator made keeps its mode (never widened, nor changed behind their back) and
    says so when others than the owner can read the bodies it now holds."""
    pair = create_pair(server_sqs, CONTRACT)
    dead_letter(server_sqs, pair, "bad", body="second")
    out = tmp_path / "dlq.jsonl"
    out.write_text(GOOD_LINE + "\n")
    out.chmod(0o640)

    result = cli("dlq", "export", "--dlq-url", pair.dlq_url, "--out", str(out), "--append")

    assert result.exit_code == 0, result.output
    assert mode(out) == 0o640
    assert f"warning: {out} can be read by others than its owner (mode 0640)" in result.stderr
    assert [json.loads(line)["body"] for line in out.read_text().splitlines()] == ["fine", "second"]


def test_dlq_export_delete_interrupted_before_the_delete_leaves_each_message_in_one_place(
    cli: Any, server_sqs: Any, tmp_path: Path, clients: Clients
) -> None:
    """Ctrl-C after a batch's lines are on disk, before its delete: the delete still happens, then the run stops;
    every message is in the file or in the DLQ (visible), never in both."""
    pair = create_pair(server_sqs, CONTRACT)
    bodies = {f"b{n}" for n in range(13)}
    for body in bodies:
        dead_letter(server_sqs, pair, "bad", body=body)
    signal_on_call(clients, "before-call", "DeleteMessageBatch", signal.SIGINT)
    out = tmp_path / "dlq.jsonl"

    result = cli("dlq", "export", "--dlq-url", pair.dlq_url, "--out", str(out), "--delete")

    assert result.exit_code == 130, result.output
    assert f"interrupted: 10 line(s) written to {out}, 10 of them deleted from the DLQ" in result.stderr
    written = [json.loads(line)["body"] for line in out.read_text().splitlines()]
    assert depth(server_sqs, pair.dlq_url) == (3, 0)
    remaining = [m["Body"] for m in drain(server_sqs, pair.dlq_url)]
    assert len(written) == 10 and sorted(written + remaining) == sorted(bodies)


BAD_LINES = {
    "not-json": (
        "{body: 1}",
        '"line" must be JSON (Expecting property name enclosed in double quotes at character 2): "{body: 1}"',
    ),
    "not-an-object": ("[1]", '"line" must be a JSON object: [1]'),
    "body-type": ('{"body": 5}', '"body" must be a non-empty string: 5'),
    "body-empty": ('{"body": ""}', '"body" must be a non-empty string: ""'),
    "message-id-type": ('{"body": "x", "message_id": 7}', '"message_id" must be a string: 7'),
    "attributes-shape": (
        '{"body": "x", "message_attributes": [1]}',
        f'"message_attributes" must be {ATTRIBUTES_SHAPE}: [1]',
    ),
    "attribute-name": (
        '{"body": "x", "message_attributes": {"AWS.trace": {"DataType": "String", "StringValue": "1"}}}',
        '"message_attributes" must name attributes with 1-256 of A-Z a-z 0-9 _ - . (no AWS./Amazon. prefix,'
        ' no ..): "AWS.trace"',
    ),
    "too-many-attributes": (
        json.dumps(
            {
                "body": "x",
                "message_attributes": {f"a{n}": {"DataType": "String", "StringValue": "v"} for n in range(11)},
            }
        ),
        '"message_attributes" must hold at most 10 attributes: ["a0", "a1", "a10", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"]',
    ),
    "attribute-unknown-key": (
        '{"body": "x", "message_attributes": {"n": {"DataType": "String", "Stringvalue": "1"}}}',
        '"message_attributes.n" may hold only DataType, StringValue and BinaryValue: ["Stringvalue"]',
    ),
    "attribute-type": (
        '{"body": "x", "message_attributes": {"n": {"DataType": "Decimal", "StringValue": "1"}}}',
        '"message_attributes.n.DataType" must be String, Number or Binary (optionally .label): "Decimal"',
    ),
    "attribute-value-missing": (
        '{"body": "x", "message_attributes": {"n": {"DataType": "Number"}}}',
        '"message_attributes.n" must have a StringValue (DataType Number): {"DataType": "Number"}',
    ),
    "string-value-type": (
        '{"body": "x", "message_attributes": {"n": {"DataType": "String", "StringValue": 1}}}',
        '"message_attributes.n.StringValue" must be a string: 1',
    ),
    "number-value": (
        '{"body": "x", "message_attributes": {"n": {"DataType": "Number", "StringValue": "one"}}}',
        '"message_attributes.n.StringValue" must be a number (DataType Number): "one"',
    ),
    "binary-not-base64": (
        '{"body": "x", "message_attributes": {"b": {"DataType": "Binary", "BinaryValue": "AP9!iaW4="}}}',
        '"message_attributes.b.BinaryValue" must be strict base64: "AP9!iaW4="',
    ),
    "system-attributes-shape": (
        '{"body": "x", "attributes": ["MessageGroupId"]}',
        '"attributes" must be an object of SQS attribute name to string: ["MessageGroupId"]',
    ),
    "system-attribute-type": (
        '{"body": "x", "attributes": {"MessageGroupId": 5}}',
        '"attributes.MessageGroupId" must be a string: 5',
    ),
    "reason-type": ('{"body": "x", "reason": "why"}', '"reason" must be an object or null: "why"'),
    "dedup-id-type": (
        '{"body": "x", "reason": {"original_deduplication_id": 5}}',
        '"reason.original_deduplication_id" must be a string or null: 5',
    ),
    "body-character": (
        '{"body": "a\\u0000b"}',
        '"body" must hold only characters SQS accepts; character 2 is not: "\\u0000"',
    ),
    "not-utf-8": (b'{"body": "caf\xe9"}', '"line" must be UTF-8 (invalid continuation byte at byte 14)'),
}


@pytest.mark.parametrize(("line", "error"), BAD_LINES.values(), ids=BAD_LINES.keys())
def test_dlq_import_checks_every_line_before_the_first_send(
    cli: Any, server_sqs: Any, tmp_path: Path, line: str | bytes, error: str
) -> None:
    """One bad line between good ones: exit 2 naming its line, the field, the rule and the value; nothing sent."""
    pair = create_pair(server_sqs, CONTRACT)
    source = tmp_path / "in.jsonl"
    bad = line.encode() if isinstance(line, str) else line
    source.write_bytes(GOOD_LINE.encode() + b"\n" + bad + b"\n" + GOOD_LINE.encode() + b"\n")

    result = cli("dlq", "import", "--dlq-url", pair.dlq_url, "--in", str(source))

    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"consumer dlq: {source}:2: {error}; nothing was sent"
    assert depth(server_sqs, pair.dlq_url) == (0, 0)


def test_dlq_import_to_the_source_checks_folded_attributes_before_the_first_send(
    cli: Any, server_sqs: Any, tmp_path: Path
) -> None:
    """--to source unfolds x-original-attributes: a malformed one stops the import at its line, nothing sent."""
    pair = create_pair(server_sqs, CONTRACT)
    folded = {"x-original-attributes": {"DataType": "String", "StringValue": "[1]"}}
    source = tmp_path / "in.jsonl"
    source.write_text(f"{GOOD_LINE}\n{json.dumps({'body': 'x', 'message_attributes': folded})}\n")

    result = cli("dlq", "import", "--to", "source", "--queue-url", pair.queue_url, "--in", str(source))

    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f'consumer dlq: {source}:2: "x-original-attributes" must be {ATTRIBUTES_SHAPE}: [1]; nothing was sent'
    )
    assert depth(server_sqs, pair.queue_url) == (0, 0)


def export_lines(path: Path, count: int) -> list[str]:
    """``count`` export lines in ``path``; returns their bodies."""
    bodies = [f"b{n}" for n in range(1, count + 1)]
    path.write_text("".join(json.dumps({"message_id": f"m-{b}", "body": b}) + "\n" for b in bodies))
    return bodies


def test_dlq_import_interrupted_says_where_to_resume_and_a_resumed_run_sends_the_rest_once(
    cli: Any, server_sqs: Any, tmp_path: Path, clients: Clients
) -> None:
    """Ctrl-C while a batch is being sent: the answer is awaited, the report names the last line sent and the
    --from-line to resume with, and resuming there sends every line exactly once in all."""
    pair = create_pair(server_sqs, CONTRACT)
    source = tmp_path / "in.jsonl"
    bodies = export_lines(source, 15)
    signal_on_call(clients, "before-call", "SendMessageBatch", signal.SIGINT)

    interrupted = cli("dlq", "import", "--dlq-url", pair.dlq_url, "--in", str(source))

    assert interrupted.exit_code == 130, interrupted.output
    assert (
        f"interrupted: sent 10 of 15 line(s) from {source}; last line sent: 10; resume with --from-line 11"
        in interrupted.stderr
    )
    clients.hooks.clear()
    resumed = cli("dlq", "import", "--dlq-url", pair.dlq_url, "--in", str(source), "--from-line", "11")

    assert resumed.exit_code == 0, resumed.output
    assert f"imported 5 of 5 message(s) from {source} (lines 11-15) into {pair.dlq_url}" in resumed.stdout
    assert sorted(m["Body"] for m in drain(server_sqs, pair.dlq_url)) == sorted(bodies)


def test_dlq_import_stops_at_a_failed_batch_and_says_where_to_resume(
    cli: Any, server_sqs: Any, tmp_path: Path, clients: Clients
) -> None:
    """A line SQS refuses stops the import after its batch: the report names it, the lines of that batch that
    did go, and the --from-line to resume with; no later batch is sent."""
    pair = create_pair(server_sqs, CONTRACT)
    source = tmp_path / "in.jsonl"
    export_lines(source, 15)

    def refuse_line_3(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Successful"] = [entry for entry in parsed["Successful"] if entry["Id"] != "3"]
        parsed["Failed"] = [{"Id": "3", "Code": "InvalidMessageContents", "SenderFault": True, "Message": "no"}]

    on_call(clients, "after-call", "SendMessageBatch", refuse_line_3)

    result = cli("dlq", "import", "--dlq-url", pair.dlq_url, "--in", str(source))

    assert result.exit_code == 1, result.output
    assert f"imported 9 of 15 message(s) from {source} (lines 1-15) into {pair.dlq_url}" in result.stdout
    assert "  line 3 failed: InvalidMessageContents: no" in result.stdout
    assert (
        "  stopped after that batch: every line up to line 2 was sent; resume with --from-line 3"
        " (lines 4-10 were sent too and would be sent again)"
    ) in result.stdout
    assert depth(server_sqs, pair.dlq_url) == (10, 0)  # SQS took the whole first batch; nothing after it went


def test_dlq_import_refused_by_the_dlqs_policy_says_to_import_to_the_source(
    cli: Any, server_sqs: Any, tmp_path: Path, clients: Clients
) -> None:
    """Where producers are named the DLQ's policy refuses every sender but the task role (moto enforces none: SQS's
    AccessDenied comes through botocore's hook): the error says why and to import --to source, nothing was sent."""
    pair = create_pair(server_sqs, CONTRACT)
    source = tmp_path / "in.jsonl"
    export_lines(source, 3)
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "explicit deny"}}, "SendMessageBatch")
    hook_client(clients, "SendMessageBatch", allowed=0, error=denied)

    result = cli("dlq", "import", "--dlq-url", pair.dlq_url, "--in", str(source))

    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == (
        f"consumer dlq: SendMessageBatch on {pair.dlq_url} failed: AccessDenied: explicit deny; {DLQ_TAKES_THE_CONSUMER_ONLY}"
    )
    assert depth(server_sqs, pair.dlq_url) == (0, 0)
