"""``dlq redrive``'s client-side move as a new user runs it: bounded, talkative, never cut in half.

Real boto3 in the command and in the checks, on the simulated world (tests/integration/virtual.py: moto's SQS, which
has no message move task, so the copying path runs, on a virtual clock, so the run's start, the long polls and the
leases pass in no real time), with a real in-process ``Consumer`` on the same clock where the behaviour depends on one.

The three tests that send the process a real SIGINT or SIGTERM stay on moto's server: what they check includes that
the command installs its handlers for those signals, and Python runs a signal's handler on the main thread only,
which a simulated run's body is not (the tool installs no handler off the main thread).
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import Result

from consumer import PoisonMessage
from consumer.message import Message
from consumer.ops import passes as dlq_pass
from consumer.ops import progress, redrive
from consumer.runtime.dead_letter import ORIGINAL_ATTRIBUTES
from consumer.testing import depth, drain
from tests.integration import dlq_support
from tests.integration.conftest import create_pair
from tests.integration.dlq_support import CONTRACT, Clients, dead_letter, on_call, signal_on_call
from tests.integration.support import fast_contract
from tests.integration.virtual import Virtual

cli = dlq_support.cli
clients = dlq_support.clients
server_sqs = dlq_support.server_sqs
sigterm_raises = dlq_support.sigterm_raises
virtual_cli = dlq_support.virtual_cli


def guard_against_loops(clients: Clients, most: int) -> None:
    """Fail the command (instead of letting it run for ever) once it has sent more than ``most`` copies."""
    sent = {"count": 0}

    def count(params: dict[str, Any], **_: Any) -> None:
        sent["count"] += len(params["Entries"])
        if sent["count"] > most:
            raise RuntimeError(f"redrive looped: {sent['count']} copies sent for {most} messages")

    on_call(clients, "before-parameter-build", "SendMessageBatch", count)


def run_clock_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """This run's start as a clock an hour ahead of SQS would put it: every message looks older than the run."""
    real = redrive.start_on_sqs_clock

    def ahead(read: Any, clock: Any) -> tuple[dlq_pass.RunStart, dict[str, Any]]:
        start, response = real(read, clock)
        return dataclasses.replace(start, sqs_ms=start.sqs_ms + 3_600_000), response

    monkeypatch.setattr(redrive, "start_on_sqs_clock", ahead)


@pytest.mark.parametrize("clock", ["sqs", "an-hour-ahead"])
def test_dlq_redrive_with_a_consumer_poisoning_each_message_back_ends_and_leaves_each_once(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients, clock: str
) -> None:
    """GIVEN poison messages in the DLQ and a running consumer that poisons each straight back, WHEN redrive runs,
    THEN each is moved once, its return is left in the DLQ for the next run and reported, and the run ends
    (also when the start time is wrong: the copies this run sent are recognised by their ids)."""

    def body() -> None:
        sqs = virtual.sqs
        contract = fast_contract()
        pair = create_pair(sqs, contract)
        bodies = ["p0", "p1", "p2"]
        for text in bodies:
            dead_letter(sqs, pair, "bad", body=text)
        poisoned: list[str] = []

        def reject(message: Message) -> None:
            poisoned.append(message.body)
            raise PoisonMessage("still bad")

        guard_against_loops(clients, most=2 * len(bodies))
        if clock == "an-hour-ahead":
            run_clock_ahead(monkeypatch)
        # Deterministic, not a race: once the copies are in and the originals deleted, the run waits until the
        # consumer has poisoned every copy back before it receives again.
        returned = lambda: depth(sqs, pair.dlq_url)[0] == len(bodies)  # noqa: E731
        on_call(clients, "after-call", "DeleteMessageBatch", lambda **_: virtual.wait_until(returned))
        consumer = virtual.consumer_of(pair, contract, reject)

        with virtual.running(consumer):
            result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)
            virtual.wait_until(lambda: sum(depth(sqs, pair.queue_url)) == 0)

        assert result.exit_code == 0, result.output
        assert "moved 3, skipped by filter 0, failed 0, arrived during the run 3" in result.stdout
        assert "  3 message(s) arrived in the DLQ during the run; left for the next run" in result.stdout
        assert sorted(poisoned) == bodies
        assert sorted(m["Body"] for m in drain(sqs, pair.dlq_url)) == bodies
        assert depth(sqs, pair.queue_url) == (0, 0)

    virtual.run(body)


@pytest.mark.parametrize("clock", ["sqs", "an-hour-ahead"])
def test_dlq_redrive_leaves_a_copy_that_sqs_dead_letters_again_during_the_run(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients, clock: str
) -> None:
    """A copy that SQS's own backstop redrive moves back (received maxReceiveCount times, never deleted) keeps its
    MessageId and SentTimestamp: the run recognises it by either and leaves it for the next run."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        dead_letter(sqs, pair, "bad", body="job")
        guard_against_loops(clients, most=2)
        if clock == "an-hour-ahead":
            run_clock_ahead(monkeypatch)

        def exhaust_the_copy(**_: Any) -> None:
            for _attempt in range(CONTRACT.redrive_max_receive_count + 1):  # the last receive makes SQS move it
                sqs.receive_message(QueueUrl=pair.queue_url, VisibilityTimeout=0)

        on_call(clients, "after-call", "DeleteMessageBatch", exhaust_the_copy)

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert "moved 1, skipped by filter 0, failed 0, arrived during the run 1" in result.stdout
        assert [m["Body"] for m in drain(sqs, pair.dlq_url)] == ["job"]
        assert depth(sqs, pair.queue_url) == (0, 0)

    virtual.run(body)


def test_dlq_redrive_leaves_a_failure_that_arrives_during_the_run(
    virtual: Virtual, virtual_cli: Callable[..., Result], clients: Clients
) -> None:
    """A message the consumer dead-letters while redrive runs (not a copy of this run's) stays for the next run:
    the run is bounded to what the DLQ held when it started, by SentTimestamp on SQS's clock."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for text in ("old-1", "old-2"):
            dead_letter(sqs, pair, "bad", body=text)
        arrived = {"count": 0}

        def new_failure(**_: Any) -> None:
            if not arrived["count"]:
                arrived["count"] += 1
                dead_letter(sqs, pair, "bad", body="new")

        on_call(clients, "after-call", "SendMessageBatch", new_failure)

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert "moved 2, skipped by filter 0, failed 0, arrived during the run 1" in result.stdout
        assert sorted(m["Body"] for m in drain(sqs, pair.queue_url)) == ["old-1", "old-2"]
        assert [m["Body"] for m in drain(sqs, pair.dlq_url)] == ["new"]

    virtual.run(body)


def test_dlq_redrive_prints_progress_lines_when_stderr_is_not_a_terminal(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pipe or CI (no terminal, so no progress bar) redrive says how far it is, then prints its summary."""

    def body() -> None:
        sqs = virtual.sqs
        monkeypatch.setattr(progress, "PROGRESS_LINE_SECONDS", 0)
        pair = create_pair(sqs, CONTRACT)
        for n in range(12):
            dead_letter(sqs, pair, "bad", body=f"b{n}")

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        lines = result.stderr.splitlines()
        assert any(re.fullmatch(r"redrive: 10 of 12 message\(s\) handled \(moved 10\), \d+ s", line) for line in lines)
        assert any(re.fullmatch(r"redrive: 12 of 12 message\(s\) handled \(moved 12\), \d+ s", line) for line in lines)
        assert "moved 12, skipped by filter 0, failed 0" in result.stdout

    virtual.run(body)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.usefixtures("sigterm_raises")
def test_dlq_redrive_interrupted_between_send_and_delete_leaves_each_message_in_one_place(
    cli: Any, server_sqs: Any, clients: Clients, signum: int
) -> None:
    """A signal that arrives once SQS has the copies but before the originals are deleted waits for the delete:
    the run then stops, releases the rest and reports; no message is in both queues."""
    pair = create_pair(server_sqs, CONTRACT)
    bodies = [f"b{n}" for n in range(15)]
    for body in bodies:
        dead_letter(server_sqs, pair, "bad", body=body)
    signal_on_call(clients, "after-call", "SendMessageBatch", signum)

    result = cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

    assert result.exit_code == 128 + signum, result.output
    assert "interrupted after moving 10 message(s)" in result.stderr
    assert depth(server_sqs, pair.queue_url) == (10, 0)
    assert depth(server_sqs, pair.dlq_url) == (5, 0)  # released at once, not left hidden
    places = [m["Body"] for m in drain(server_sqs, pair.queue_url) + drain(server_sqs, pair.dlq_url)]
    assert sorted(places) == sorted(bodies)


@pytest.mark.parametrize(("visibility", "extended"), [(10, True), (60, False)], ids=["short-lease", "default-lease"])
def test_dlq_redrive_extends_a_lease_too_short_for_the_send_and_delete(
    virtual: Virtual,
    virtual_cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    clients: Clients,
    visibility: int,
    extended: bool,
) -> None:
    """Before a batch's send, a lease that could run out before its delete is answered is extended to cover the
    step's worst case, so the delete's receipt handles are still valid; a long enough lease costs no call."""

    def body() -> None:
        sqs = virtual.sqs
        monkeypatch.setattr(dlq_pass, "STEP_SECONDS", 30)
        pair = create_pair(sqs, CONTRACT)
        for n in range(3):
            dead_letter(sqs, pair, "bad", body=f"b{n}")
        calls: list[tuple[str, dict[str, Any]]] = []
        for operation in ("ChangeMessageVisibilityBatch", "SendMessageBatch"):
            on_call(
                clients,
                "before-parameter-build",
                operation,
                lambda params, model, **_: calls.append((model.name, params)),
            )

        result = virtual_cli(
            "dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url, "--visibility", str(visibility)
        )

        assert result.exit_code == 0, result.output
        before_send = [params for name, params in calls[: [n for n, _ in calls].index("SendMessageBatch")]]
        if extended:
            [extension] = before_send
            assert [entry["VisibilityTimeout"] for entry in extension["Entries"]] == [30, 30, 30]
        else:
            assert before_send == []
        assert depth(sqs, pair.dlq_url) == (0, 0)

    virtual.run(body)


def test_dlq_redrive_leaves_a_message_whose_lease_cannot_be_extended(
    virtual: Virtual, virtual_cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    """A message SQS will not extend (its receipt handle no longer good: another reader has it) is not sent: its
    delete could not follow. It stays in the DLQ and is reported as failed; the others move."""

    def body() -> None:
        sqs = virtual.sqs
        monkeypatch.setattr(dlq_pass, "STEP_SECONDS", 30)
        pair = create_pair(sqs, CONTRACT)
        for n in range(3):
            dead_letter(sqs, pair, "bad", body=f"b{n}")
        calls = {"count": 0}

        def refuse_the_second(parsed: dict[str, Any], **_: Any) -> None:
            calls["count"] += 1
            if calls["count"] == 1:  # the extension; later calls release
                parsed["Successful"] = [entry for entry in parsed["Successful"] if entry["Id"] != "1"]
                parsed["Failed"] = [
                    {"Id": "1", "Code": "ReceiptHandleIsInvalid", "SenderFault": True, "Message": "gone"}
                ]

        on_call(clients, "after-call", "ChangeMessageVisibilityBatch", refuse_the_second)

        result = virtual_cli(
            "dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url, "--visibility", "10"
        )

        assert result.exit_code == 1, result.output
        assert "moved 2, skipped by filter 0, failed 1" in result.stdout
        [refused] = re.findall(
            r"  failed (\S+): its lease could not be extended: ReceiptHandleIsInvalid: gone \(left in the DLQ\)",
            result.stdout,
        )
        assert [m["MessageId"] for m in drain(sqs, pair.dlq_url)] == [refused]
        assert len(drain(sqs, pair.queue_url)) == 2

    virtual.run(body)


def test_dlq_redrive_skips_and_reports_malformed_folded_attributes(
    virtual: Virtual, virtual_cli: Callable[..., Result]
) -> None:
    """A message whose x-original-attributes is not JSON, or not attributes, stays in the DLQ and is reported;
    the others move."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        dead_letter(sqs, pair, "bad", body="good")
        folded = {
            "not-json": "{not json",
            "not-attributes": json.dumps({"tenant": {"DataType": "String"}}),
        }
        ids = {
            body: sqs.send_message(
                QueueUrl=pair.dlq_url,
                MessageBody=body,
                MessageAttributes={ORIGINAL_ATTRIBUTES: {"DataType": "String", "StringValue": value}},
            )["MessageId"]
            for body, value in folded.items()
        }

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 1, result.output
        assert "moved 1, skipped by filter 0, failed 0, malformed 2" in result.stdout
        assert (
            f'  malformed {ids["not-json"]}: "x-original-attributes" must be JSON'
            " (Expecting property name enclosed in double quotes at character 2):"
            ' "{not json" (left in the DLQ)'
        ) in result.stdout
        assert (
            f'  malformed {ids["not-attributes"]}: "x-original-attributes.tenant" must have a StringValue'
            ' (DataType String): {"DataType": "String"} (left in the DLQ)'
        ) in result.stdout
        assert [m["Body"] for m in drain(sqs, pair.queue_url)] == ["good"]
        assert depth(sqs, pair.dlq_url) == (2, 0)

    virtual.run(body)


def test_dlq_redrive_ends_while_failures_keep_arriving(
    virtual: Virtual, virtual_cli: Callable[..., Result], clients: Clients
) -> None:
    """A DLQ that keeps receiving new failures does not hold the run: after MAX_STALE_RECEIVES receives that
    bring only messages that arrived after the start, it ends, leaving them for the next run."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        dead_letter(sqs, pair, "bad", body="old")
        arrivals = {"count": 0}

        def another_failure(**_: Any) -> None:
            if arrivals["count"] < 50:  # a bound for the test itself, should the run not end
                arrivals["count"] += 1
                dead_letter(sqs, pair, "bad", body=f"new-{arrivals['count']}")

        on_call(clients, "after-call", "ReceiveMessage", another_failure)

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert f"moved 1, skipped by filter 0, failed 0, arrived during the run {dlq_pass.MAX_STALE_RECEIVES}" in (
            result.stdout
        )
        assert [m["Body"] for m in drain(sqs, pair.queue_url)] == ["old"]

    virtual.run(body)


def test_dlq_redrive_says_when_it_handled_fewer_messages_than_the_dlq_held(
    virtual: Virtual, virtual_cli: Callable[..., Result], clients: Clients
) -> None:
    """A message the DLQ held at the start that the run never got (another reader had it hidden) is not
    silently missing from the report: the run says how many it handled of how many, and to run again."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        for text in ("a", "b", "c"):
            dead_letter(sqs, pair, "bad", body=text)
        taken = {"count": 0}

        def another_reader(**_: Any) -> None:
            if not taken["count"]:
                taken["count"] += 1
                sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=1, VisibilityTimeout=60)

        on_call(clients, "before-call", "ReceiveMessage", another_reader)

        result = virtual_cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

        assert result.exit_code == 0, result.output
        assert "moved 2, skipped by filter 0, failed 0" in result.stdout
        assert (
            "  note: the DLQ showed about 3 message(s) at the start and this run handled 2; run redrive again for the rest"
        ) in result.stdout

    virtual.run(body)


@pytest.mark.usefixtures("sigterm_raises")
def test_dlq_redrive_stopped_during_a_receive_releases_what_it_holds(
    cli: Any, server_sqs: Any, clients: Clients
) -> None:
    """SIGTERM (an ECS task or a CI job stopping) while a receive is answered: the run notes what the answer hid,
    stops with exit 143, and every message it held is visible in the DLQ again, not hidden until its lease ends."""
    pair = create_pair(server_sqs, CONTRACT)
    for n in range(15):
        dead_letter(server_sqs, pair, "bad", body=f"b{n}")
    calls = {"count": 0}

    def stop_on_second_receive(**_: Any) -> None:
        calls["count"] += 1
        if calls["count"] == 2:
            signal.raise_signal(signal.SIGTERM)

    on_call(clients, "after-call", "ReceiveMessage", stop_on_second_receive)

    result = cli("dlq", "redrive", "--queue-url", pair.queue_url, "--dlq-url", pair.dlq_url)

    assert result.exit_code == 143, result.output
    assert "interrupted after moving 10 message(s)" in result.stderr
    assert (depth(server_sqs, pair.queue_url), depth(server_sqs, pair.dlq_url)) == ((10, 0), (5, 0))


def test_dlq_pass_keeps_going_when_many_held_messages_reappear_at_once(virtual: Virtual) -> None:
    """Held messages whose lease ran out come back together: the pass re-hides them and still finds the unseen ones."""

    def body() -> None:
        sqs = virtual.sqs
        pair = create_pair(sqs, CONTRACT)
        held = [f"held-{n}" for n in range(35)]
        for text in held:
            sqs.send_message(QueueUrl=pair.dlq_url, MessageBody=text)
        with dlq_pass.Lease(sqs, pair.dlq_url, visibility=2, clock=virtual.sim) as lease:
            seen = []
            while len(seen) < len(held):
                seen += [m["Body"] for m in lease.receive(10) or []]
            for n in range(5):
                sqs.send_message(QueueUrl=pair.dlq_url, MessageBody=f"unseen-{n}")
            virtual.wait_until(lambda: depth(sqs, pair.dlq_url)[0] == 40, timeout=10)  # the 35 are visible again

            found = lease.receive(10)

        assert sorted(m["Body"] for m in found or []) == [f"unseen-{n}" for n in range(5)]

    virtual.run(body)
