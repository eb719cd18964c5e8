"""The benchmark harness's own arithmetic and configuration, without an endpoint."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bench import common, profile, subject, throughput
from consumer.limits import SQS_CLIENT


def test_bench_subject_client_is_configured_as_the_container_configures_its_own() -> None:
    """Every implementation gets the container's timeouts and retries, with a pool for its threads."""
    config = subject.client_config_for(64)
    assert (config.connect_timeout, config.read_timeout) == (SQS_CLIENT.connect_seconds, SQS_CLIENT.read_seconds)
    assert config.retries == {"mode": "standard", "total_max_attempts": SQS_CLIENT.max_attempts}
    assert config.max_pool_connections == 74


def test_bench_subject_client_pool_has_room_beyond_the_threads() -> None:
    """One thread still gets the 10 spare connections the consumer's own poller and acknowledger use."""
    assert subject.client_config_for(1).max_pool_connections == 11


@pytest.mark.parametrize(
    ("request_bytes", "response_bytes", "expected"),
    [(0, 0, 1), (65_536, 300, 1), (65_537, 300, 2), (300, 262_144, 4), (300, 262_145, 5), (1_048_576, 0, 16)],
)
def test_bench_billed_units_count_every_started_64_kib_of_the_larger_body(
    request_bytes: int, response_bytes: int, expected: int
) -> None:
    """One billed request per started 64 KiB chunk of the call's payload (request or response), at least one."""
    assert subject.billed_units(request_bytes, response_bytes) == expected


def test_bench_recorder_bills_each_attempt_from_its_request_and_response_bodies() -> None:
    """A 300-byte send answered by a 256 KiB + 1 response is billed 5; an attempt with no answer, 1."""
    recorder = subject.Recorder(None)
    recorder._on_send(SimpleNamespace(headers={"X-Amz-Target": b"AmazonSQS.ReceiveMessage"}, body=b"x" * 300))
    recorder._on_response({"body": b"x" * 262_145})
    recorder._on_send(SimpleNamespace(headers={"X-Amz-Target": b"AmazonSQS.DeleteMessageBatch"}, body=b"x" * 300))
    recorder._on_response(None)
    assert recorder.snapshot() == {"requests": 2, "billed_requests": 6, "deleted": 0, "finished": 0}


def test_bench_body_is_padded_to_exactly_the_size_asked() -> None:
    """A 1 KiB body is 1024 bytes of JSON that still carries the event's fields and send time."""
    text = common.body({"id": "abc"}, 1.5, 1024)
    assert len(text.encode()) == 1024
    assert {k: v for k, v in json.loads(text).items() if k != "pad"} == {"id": "abc", "sent": 1.5}


def test_bench_body_smaller_than_the_event_is_refused() -> None:
    """A size the event does not fit in names the parameter, the rule and the value."""
    with pytest.raises(ValueError, match=r'^"size" must be at least 37 bytes, the event without padding: 10$'):
        common.body({"id": "abc"}, 1.5, 10)


def test_bench_send_cuts_batches_at_ten_entries_and_at_one_mib() -> None:
    """25 small events go in 10 + 10 + 5; three 512 KiB bodies in 2 + 1 (a batch holds 1 MiB of bodies)."""
    calls: list[int] = []
    sqs = SimpleNamespace(send_message_batch=lambda QueueUrl, Entries: calls.append(len(Entries)))  # noqa: N803
    common.send(sqs, "q", [{"id": str(i)} for i in range(25)])
    common.send(sqs, "q", [{"id": str(i)} for i in range(3)], body_bytes=524_288)
    assert calls == [10, 10, 5, 2, 1]


@pytest.mark.parametrize(
    ("body_bytes", "expected"), [(None, 300), (1024, 300), (262_144, 256), (1_048_576, 64), (4_194_304, 40)]
)
def test_bench_producer_target_holds_about_64_mib_of_bodies(body_bytes: int | None, expected: int) -> None:
    """Small bodies keep the usual 300 visible; 1 MiB bodies 64; never fewer than 40 (four receives of 10)."""
    assert throughput.target_for(300, body_bytes) == expected


RAW = [
    "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);Poller.run (consumer/runtime/polling.py:50);"
    "BaseClient._make_api_call (botocore/client.py:1076);HTTPConnection.getresponse (urllib3/connection.py:651) 6",
    "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);"
    "HandlerRunner.run (consumer/runtime/processing.py:70);"
    "Logger.info (logging/__init__.py:1489);Logger._log (logging/__init__.py:1634);"
    "JsonFormatter.format (consumer/runtime/observability.py:80) 2",
    "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);"
    "HandlerRunner.run (consumer/runtime/processing.py:70);"
    "Message.from_sqs (consumer/message.py:40);Condition.notify (threading.py:369) 1",
    "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);"
    "HandlerRunner.run (consumer/runtime/processing.py:70);"
    "make_handler.<locals>.handle (bench/subject.py:120) 1",
    "",
]


def test_bench_profile_frame_splits_function_and_file() -> None:
    """A py-spy frame is ``function (file:line)``; the line number is dropped."""
    assert profile.frame("HandlerRunner.run (consumer/runtime/processing.py:70)") == (
        "HandlerRunner.run",
        "consumer/runtime/processing.py",
    )


def test_bench_profile_summary_ranks_self_and_inclusive_shares() -> None:
    """10 samples: the SDK's innermost frame holds 6 of them; HandlerRunner.run is on 4 stacks; thread entries are
    left out."""
    summary = profile.summarize(RAW, top=2)
    assert summary["samples"] == 10
    assert summary["self"] == [
        {"function": "HTTPConnection.getresponse", "file": "urllib3/connection.py", "share": 0.6},
        {"function": "JsonFormatter.format", "file": "consumer/runtime/observability.py", "share": 0.2},
    ]
    inclusive = {r["function"]: r["share"] for r in profile.summarize(RAW, top=4)["inclusive"]}
    assert inclusive == {
        "Poller.run": 0.6,
        "BaseClient._make_api_call": 0.6,
        "HTTPConnection.getresponse": 0.6,
        "HandlerRunner.run": 0.4,
    }


def test_bench_profile_categories_sdk_then_logging_then_innermost_of_ours() -> None:
    """SDK frames win over ours, logging over the runtime, else the innermost module of ours."""
    assert profile.summarize(RAW)["categories"] == {
        "SDK call": 0.6,
        "logging": 0.2,
        "consumer message.py": 0.1,
        "bench harness": 0.1,
    }


def test_bench_profile_category_of_runtime_frames_is_their_module() -> None:
    """A sample whose innermost frame of ours is consumer/runtime/inflight.py is the runtime's inflight.py."""
    frames = [("Thread.run", "threading.py"), ("InFlight.add", "consumer/runtime/inflight.py"), ("x", "queue.py")]
    assert profile.category(frames) == "runtime inflight.py"
    assert profile.category([("Thread.run", "threading.py")]) == "other"


def test_bench_profile_summary_of_no_samples_is_refused() -> None:
    """An empty profile (py-spy saw nothing) is an error naming what was empty, not a division by zero."""
    with pytest.raises(ValueError, match=r'^"lines" must hold at least one sample: 0$'):
        profile.summarize([""])
