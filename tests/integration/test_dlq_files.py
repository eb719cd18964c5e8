"""``dlq export``: a run that can be interrupted without a message in two places. Real boto3 against moto's
server."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.integration import dlq_support
from tests.integration.conftest import create_pair
from tests.integration.dlq_support import CONTRACT, dead_letter, depth, drain, signal_on_call

cli = dlq_support.cli
server_sqs = dlq_support.server_sqs


def test_dlq_export_delete_interrupted_before_the_delete_leaves_each_message_in_one_place(
    cli: Any, server_sqs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after a batch's lines are on disk, before its delete: the delete still happens, then the run stops;
    every message is in the file or in the DLQ (visible), never in both."""
    pair = create_pair(server_sqs, CONTRACT)
    bodies = {f"b{n}" for n in range(13)}
    for body in bodies:
        dead_letter(server_sqs, pair, "bad", body=body)
    signal_on_call(monkeypatch, "before-call", "DeleteMessageBatch", signal.SIGINT)
    out = tmp_path / "dlq.jsonl"

    result = cli("dlq", "export", "--dlq-url", pair.dlq_url, "--out", str(out), "--delete")

    assert result.exit_code == 130, result.output
    assert f"interrupted: 10 line(s) written to {out}, 10 of them deleted from the DLQ" in result.stderr
    written = [json.loads(line)["body"] for line in out.read_text().splitlines()]
    assert depth(server_sqs, pair.dlq_url) == (3, 0)
    remaining = [m["Body"] for m in drain(server_sqs, pair.dlq_url)]
    assert len(written) == 10 and sorted(written + remaining) == sorted(bodies)
