"""``@worker(error_text=...)`` through the real runtime on moto: by default an exception's text is in the DLQ reason and
the logs; declared "omit", no reason, attribute or log line holds it, and they hold its type and where the handler's
code raised it. In-process on the simulated clock (every log record formatted as the container writes it) and as
`python -m consumer run` (a real process, on the wall clock)."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from consumer import Message
from consumer.declaration import contract_of
from consumer.runtime.dead_letter import read_reason
from consumer.runtime.failures import OMITTED
from consumer.runtime.observability import JsonFormatter
from consumer.testing import depth, drain, wait_until
from tests.integration import handlers
from tests.integration.conftest import ROOT, consumer_run_environment, create_pair
from tests.integration.handlers import CUSTOMER_ERROR, refuses_customer, refuses_customer_quietly
from tests.integration.virtual import Virtual

ADDRESS = "alice@example.com"
HANDLERS = Path(handlers.__file__).read_text().splitlines()


def raised_at(text: str) -> str:
    """Where look_up_customer raises ``text``'s line, as the omitted-text reason names it."""
    line = next(number for number, source in enumerate(HANDLERS, start=1) if source.strip() == text)
    return f"tests/integration/handlers.py:{line} in look_up_customer"


EXHAUSTED_OMITTED = (
    f"failed 2 times; last error: ValueError at {raised_at('raise ValueError(CUSTOMER_ERROR)')} ({OMITTED})"
)
REJECTED_OMITTED = f"KeyError at {raised_at('raise KeyError(CUSTOMER_ERROR)')} ({OMITTED})"


def dead_lettered(sqs: Any, dlq_url: str) -> dict[str, dict[str, Any]]:
    """Every DLQ message by its body: its reason record and every message attribute's value, as received."""
    moved = drain(sqs, dlq_url)
    return {
        m["Body"]: {
            "reason": read_reason(m["MessageAttributes"]) or {},
            "attributes": json.dumps(m["MessageAttributes"]),
        }
        for m in moved
    }


def run_until_both_dead_lettered(virtual: Virtual, handler: Callable[[Message], None], caplog: Any) -> dict[str, Any]:
    """Run ``handler`` on the virtual clock until "retry" (exhausted) and "reject" (non_retryable) are in the DLQ;
    every DLQ message by its body (:func:`dead_lettered`), the consumer's log at DEBUG in ``caplog``."""
    moved: dict[str, Any] = {}
    contract = contract_of(handler)
    caplog.set_level(logging.DEBUG, logger="consumer")

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, contract)
        for text in ("retry", "reject"):  # exhausted after 2 receives; non_retryable at the first
            sqs.send_message(QueueUrl=pair.queue_url, MessageBody=text)
        with virtual.running(virtual.consumer_of(pair, contract, handler)):
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url).total == 2, timeout=20)
        moved.update(dead_lettered(sqs, pair.dlq_url))

    virtual.run(body)
    return moved


def log_lines(caplog: Any) -> list[str]:
    """Every record as the container writes it: one JSON line with every field, a traceback included."""
    formatter = JsonFormatter()
    return [formatter.format(record) for record in caplog.records]


def test_error_text_by_default_is_in_the_dlq_reason_and_the_logs(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """The default keeps the exception's type and text: operators triage by it. On the virtual clock."""
    moved = run_until_both_dead_lettered(virtual, refuses_customer, caplog)

    assert moved["retry"]["reason"]["reason"] == f"failed 2 times; last error: ValueError: {CUSTOMER_ERROR}"
    assert moved["reject"]["reason"]["reason"] == f"KeyError: {CUSTOMER_ERROR!r}"
    failed = [json.loads(line) for line in log_lines(caplog) if '"event":"handler_failed"' in line]
    assert [line["error"] for line in failed] == [f"ValueError: {CUSTOMER_ERROR}"] * 2


def test_error_text_omitted_leaves_no_trace_of_it_and_says_type_and_place(
    virtual: Virtual, caplog: pytest.LogCaptureFixture
) -> None:
    """Declared "omit": neither reason nor attribute nor log line holds the address; each names the type and the
    handler's line that raised it. On the virtual clock."""
    moved = run_until_both_dead_lettered(virtual, refuses_customer_quietly, caplog)

    assert moved["retry"]["reason"]["reason"] == EXHAUSTED_OMITTED
    assert moved["reject"]["reason"]["reason"] == REJECTED_OMITTED
    assert [ADDRESS in message["attributes"] for message in moved.values()] == [False, False]
    lines = log_lines(caplog)
    assert [line for line in lines if ADDRESS in line] == []
    events = [json.loads(line) for line in lines]
    assert [e["error"] for e in events if e["event"] == "handler_failed"] == [
        EXHAUSTED_OMITTED.removeprefix("failed 2 times; last error: ")
    ] * 2
    assert sorted(e["reason"] for e in events if e["event"] == "message_moved_to_dlq") == sorted(
        [EXHAUSTED_OMITTED, REJECTED_OMITTED]
    )


def test_error_text_omitted_stays_out_of_what_the_process_writes(
    moto_server: str, server_sqs: Any, tmp_path: Path, process_guard: list[subprocess.Popen[str]]
) -> None:
    """`python -m consumer run` with the "omit" handler at DEBUG (botocore's request logs included): nothing it writes
    holds the address, and its message_moved_to_dlq lines name the type and the place."""
    pair = create_pair(server_sqs, contract_of(refuses_customer_quietly))
    for body in ("retry", "reject"):
        server_sqs.send_message(QueueUrl=pair.queue_url, MessageBody=body)
    env = consumer_run_environment(
        moto_server,
        QUEUE_URL=pair.queue_url,
        DLQ_URL=pair.dlq_url,
        CONSUMER_HANDLER="tests.integration.handlers:refuses_customer_quietly",
        CONSUMER_LOG_LEVEL="DEBUG",
    )
    output = tmp_path / "output"  # a file, not a pipe: DEBUG writes more than a pipe holds unread
    with output.open("w") as out:
        consumer = subprocess.Popen(
            [sys.executable, "-m", "consumer", "run"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        process_guard.append(consumer)
        wait_until(lambda: depth(server_sqs, pair.dlq_url).total == 2, timeout=30)
        consumer.send_signal(signal.SIGTERM)
        assert consumer.wait(timeout=20) == 0
    written = output.read_text()

    assert ADDRESS not in written
    events = [json.loads(line) for line in written.splitlines() if line.startswith('{"timestamp"')]
    moved = {e["reason"] for e in events if e.get("event") == "message_moved_to_dlq"}
    assert moved == {EXHAUSTED_OMITTED, REJECTED_OMITTED}
    assert ADDRESS not in json.dumps(dead_lettered(server_sqs, pair.dlq_url))
