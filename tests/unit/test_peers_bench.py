"""The peers benchmark's pure parts: the counting endpoint's reading of requests and answers, the arithmetic over
rounds (medians, ratios, ideals, who is ahead), the correctness cells' reading of the handlers' record, and the
report's rendering of a small result. No endpoint, no subprocess, no network."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import counting_endpoint as ce
from bench import report
from bench.peers import correctness, subjects, summary
from bench.peers import report as peers_report

# --------------------------------------------------------------------------- counting endpoint


def test_operation_of_reads_the_json_protocols_target_per_service() -> None:
    assert ce.operation_of({"x-amz-target": "AmazonSQS.ReceiveMessage"}, b"") == "sqs.ReceiveMessage"
    assert ce.operation_of({"x-amz-target": "DynamoDB_20120810.PutItem"}, b"") == "dynamodb.PutItem"
    assert ce.operation_of({"x-amz-target": "Other_1.Thing"}, b"") == "Other_1.Thing"


def test_operation_of_reads_the_query_protocols_action_and_names_the_rest_other() -> None:
    assert ce.operation_of({}, b"Action=DeleteMessageBatch&QueueUrl=x") == "sqs.DeleteMessageBatch"
    assert ce.operation_of({}, b"") == "other"
    assert ce.operation_of({}, b"QueueUrl=x") == "other"


def test_caller_of_reads_the_access_key_from_the_header_or_a_presigned_query() -> None:
    header = {"authorization": "AWS4-HMAC-SHA256 Credential=subject/20261128/eu-west-1/sqs/aws4_request, Sig=x"}
    assert ce.caller_of(header, b"") == "subject"
    query = b"X-Amz-Credential=feeder%2F20261128%2Feu-west-1%2Fsqs%2Faws4_request&X-Amz-Signature=y"
    assert ce.caller_of({}, query) == "feeder"
    assert ce.caller_of({}, b"") == "anonymous"


@pytest.mark.parametrize(
    ("operation", "status", "body", "expected"),
    [
        ("sqs.DeleteMessageBatch", 200, json.dumps({"Successful": [{"Id": "0"}, {"Id": "1"}], "Failed": []}), (2, 0)),
        ("sqs.ReceiveMessage", 200, json.dumps({"Messages": [{}, {}, {}]}), (0, 3)),
        ("sqs.ReceiveMessage", 200, "{}", (0, 0)),
        ("sqs.DeleteMessage", 200, "", (1, 0)),
        ("sqs.DeleteMessage", 400, "{}", (0, 0)),
        ("sqs.DeleteMessageBatch", 200, "not json", (0, 0)),
        (
            "sqs.DeleteMessageBatch",
            200,
            "<R><DeleteMessageBatchResultEntry/><DeleteMessageBatchResultEntry></DeleteMessageBatchResultEntry></R>",
            (1, 0),
        ),
        ("sqs.ReceiveMessage", 200, "<R><Message><Body>a</Body></Message><Message></Message></R>", (0, 2)),
        ("sqs.DeleteMessage", 200, "<DeleteMessageResponse/>", (1, 0)),
    ],
)
def test_messages_in_answer_counts_deleted_and_received(
    operation: str, status: int, body: str, expected: tuple[int, int]
) -> None:
    assert ce.messages_in_answer(operation, status, body.encode()) == expected


def test_counts_keep_callers_apart_and_reset() -> None:
    counts = ce.Counts()
    counts.add("subject", "sqs.ReceiveMessage", received=10)
    counts.add("subject", "sqs.DeleteMessageBatch", deleted=10)
    counts.add("feeder", "sqs.SendMessageBatch")
    snapshot = counts.snapshot()
    assert snapshot["subject"] == {
        "requests": {"sqs.ReceiveMessage": 1, "sqs.DeleteMessageBatch": 1},
        "deleted": 10,
        "received": 10,
    }
    assert snapshot["feeder"]["requests"] == {"sqs.SendMessageBatch": 1}
    counts.reset()
    assert counts.snapshot() == {}


# --------------------------------------------------------------------------- summary


def _row(cell: str, subject: str, round_number: int, rate: float, cpu: float, **extra: Any) -> dict[str, Any]:
    kind, concurrency = cell.rsplit("_c", 1)
    return {
        "cell": cell,
        "kind": kind,
        "concurrency": int(concurrency),
        "round": round_number,
        "subject": subject,
        "shape": "1 process",
        "processes": 1,
        "deleted": int(rate * 8),
        "messages_per_second": rate,
        "cpu_ms_per_message": cpu,
        "sqs_requests_per_message": 0.2,
        "dynamodb_requests_per_message": 0.0,
        "load": 2.0 + round_number,
        **extra,
    }


ROWS = [
    _row("noop_c16", "bare", 0, 1000, 0.50),
    _row("noop_c16", "ours-idempotent", 0, 900, 0.60),
    _row("noop_c16", "bare", 1, 800, 0.40),
    _row("noop_c16", "ours-idempotent", 1, 700, 0.60),
    _row("noop_c16", "bare", 2, 900, 0.50),
    _row("noop_c16", "ours-idempotent", 2, 850, 0.55),
]


def test_round_ratio_divides_cpu_per_message_within_one_round() -> None:
    assert summary.round_ratio(ROWS, "noop_c16", 0, "ours-idempotent", "bare") == pytest.approx(1.2)
    assert summary.round_ratios(ROWS, "noop_c16", "ours-idempotent", "bare") == pytest.approx([1.2, 1.5, 1.1])
    assert summary.median(summary.round_ratios(ROWS, "noop_c16", "ours-idempotent", "bare")) == pytest.approx(1.2)


def test_round_ratio_is_none_when_either_side_failed_or_is_missing() -> None:
    rows = [*ROWS[:1], {**ROWS[1], "error": "RuntimeError: no start"}]
    assert summary.round_ratio(rows, "noop_c16", 0, "ours-idempotent", "bare") is None
    assert summary.round_ratio(ROWS, "noop_c16", 7, "ours-idempotent", "bare") is None
    assert summary.median([]) is None


def test_ideal_is_slots_over_duration_for_sleeps_and_one_core_per_process_for_spins() -> None:
    assert summary.ideal("io50", 16) == pytest.approx(320)
    assert summary.ideal("io200", 256) == pytest.approx(1280)
    assert summary.ideal("cpu5", 8, processes=2) == pytest.approx(400)
    assert summary.ideal("noop", 16) is None


def test_summarize_takes_medians_over_rounds_and_keeps_every_load() -> None:
    entry = summary.summarize(ROWS)[("noop_c16", "bare", 1)]
    assert (entry.rounds, entry.messages_per_second, entry.cpu_ms_per_message) == (3, 900, 0.5)
    assert entry.loads == [2.0, 3.0, 4.0]


def test_summarize_keeps_a_skip_reason_and_errors_apart_from_the_figures() -> None:
    rows = [
        {"cell": "io50_c16", "kind": "io50", "concurrency": 16, "round": 0, "subject": "bare", "skipped": "no handler"},
        {"cell": "io50_c16", "kind": "io50", "concurrency": 16, "round": 0, "subject": "x", "error": "boom"},
    ]
    found = summary.summarize(rows)
    assert found[("io50_c16", "bare", 1)].skipped == "no handler"
    assert found[("io50_c16", "x", 1)].errors == ["boom"]
    assert found[("io50_c16", "x", 1)].messages_per_second is None


def test_behind_names_each_metric_a_peer_is_ahead_on() -> None:
    rows = [_row("io50_c16", "ours", 0, 300, 1.0), _row("io50_c16", "p", 0, 310, 0.9), _row("io50_c16", "q", 0, 200, 2)]
    found = summary.summarize(rows)
    ours = found[("io50_c16", "ours", 1)]
    assert summary.behind(ours, found[("io50_c16", "p", 1)]) == ["messages_per_second", "cpu_ms_per_message"]
    assert summary.behind(ours, found[("io50_c16", "q", 1)]) == []
    assert summary.behind(None, found[("io50_c16", "q", 1)]) == []


# --------------------------------------------------------------------------- correctness


def _events(*lines: str) -> list[correctness.Event]:
    return correctness.parse("\n".join(lines))


def test_parse_leaves_out_a_torn_last_line() -> None:
    events = correctness.parse("start 1 10.5 7\nend 1 18.5 7\nsta")
    assert events == [correctness.Event("start", 1, 10.5, 7), correctness.Event("end", 1, 18.5, 7)]


def test_lease_figures_count_every_start_after_a_keys_first() -> None:
    events = _events("start 0 1 1", "start 1 1 1", "start 0 6 2", "start 0 11 3", "end 0 9 1", "end 1 9 1")
    figures = correctness.lease_figures(events, messages=3)
    assert figures["duplicate_starts"] == 2
    assert (figures["keys_started"], figures["keys_completed"], figures["starts"]) == (2, 2, 4)


def test_kill_figures_tell_cut_off_lost_duplicated_and_back_after() -> None:
    events = _events(
        "start 0 100 1",  # cut off by the kill at 101, started again 20 s later, finished
        "start 1 100 1",  # cut off and never seen again: lost unless still in the queue
        "start 2 100 1",
        "end 2 100.5 1",  # finished before the kill
        "start 0 121 2",
        "end 0 124 2",
        "start 2 122 2",  # finished twice: a duplicate
        "end 2 125 2",
    )
    figures = correctness.kill_figures(events, messages=3, killed_at=101, left_in_queue=0, visible_again=19.5)
    assert figures["cut_off"] == 2
    assert figures["completed"] == 2
    assert figures["lost"] == 1
    assert figures["duplicated"] == 1
    assert figures["cut_off_started_again"] == 1
    assert figures["cut_off_back_after_seconds"] == pytest.approx(20)
    assert correctness.kill_figures(events, 3, 101, left_in_queue=1, visible_again=None)["lost"] == 0


def test_invisible_until_is_measured_when_it_came_back_and_computed_when_it_did_not() -> None:
    assert correctness.invisible_until(19.4, 16, 0, 20) == "19 s after the kill (measured)"
    assert "12 hours after it was received" in correctness.invisible_until(None, 14, 14, 43200)
    assert "30 min" in correctness.invisible_until(None, 3, 3, 1800)
    assert correctness.invisible_until(0.0, 0, 0, 20).startswith("nothing held")


# --------------------------------------------------------------------------- subjects


def test_every_subject_runs_the_concurrency_it_claims() -> None:
    """dramatiq: processes of 8 threads; sqs-consumer: instances of batch 8; the shapes say so."""
    assert subjects.dramatiq_processes(16) == 2
    assert subjects.dramatiq_processes(256) == 32
    assert subjects.BY_NAME["dramatiq"].shape(64) == "8 processes x 8 threads"
    assert subjects.BY_NAME["sqs-consumer"].shape(64) == "1 process, 8 instances of batch 8"
    assert subjects.BY_NAME["celery"].shape(16) == "prefork, 16 processes"
    assert not subjects.BY_NAME["bare"].runs("io50") and subjects.BY_NAME["bare"].runs("noop")


def test_json_bodies_are_distinct_so_ours_guard_never_skips_one() -> None:
    context = subjects.Context("http://127.0.0.1:1", "http://127.0.0.1:1/000000000000/q", {})
    source = subjects.BodySource(subjects.BY_NAME["ours"], context, "noop", first=500)
    made = [source() for _ in range(100)]
    assert len(set(made)) == 100 and json.loads(made[0]) == {"n": 500}


def test_subjects_sign_as_the_subject_and_drop_inherited_aws_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("CONSUMER_HANDLER", "elsewhere:handler")
    context = subjects.Context("http://127.0.0.1:1", "http://127.0.0.1:1/000000000000/q", {})
    env = subjects.base_env(context)
    assert env["AWS_ACCESS_KEY_ID"] == "subject" and env["QUEUE_NAME"] == "q"
    assert "AWS_PROFILE" not in env and "CONSUMER_HANDLER" not in env and "BENCH_RECORD" not in env


# --------------------------------------------------------------------------- report


def _result(rows: list[dict[str, Any]], correctness_checks: dict[str, Any] | None = None) -> dict[str, Any]:
    names = ["bare", "ours-idempotent", "ours", "minimal", "celery"]
    return {
        "meta": {"date": "2026-11-28", "commit": "abc1234", "endpoint": "ministack", "cpus": 2, "python": "3.11.7"},
        "settings": {"rounds": 3, "other_rounds": 1, "warmup_seconds": 3, "window_seconds": 8},
        "subjects": [
            {"name": n, "label": n.upper(), "ours": n.startswith("ours"), "yardstick": n in ("bare", "minimal")}
            for n in names
        ],
        "rows": rows,
        "correctness": correctness_checks or {},
    }


def test_report_headline_shows_each_rounds_ratio_with_its_load_and_the_median() -> None:
    text = peers_report.section(_result(ROWS))
    assert "| 1 | 0.500 (load 2.0) | 0.600 (load 2.0) | 1.20 |" in text
    assert "| median | 0.500 | 0.600 | **1.20** |" in text
    assert "900 (1,000 / 800 / 900)" in text  # a median with each round's figure


def test_report_states_why_only_where_a_peer_is_measured_ahead_of_ours() -> None:
    rows = [
        _row("io50_c16", "ours-idempotent", 0, 300, 1.0),
        _row("io50_c16", "ours", 0, 300, 1.0),
        _row("io50_c16", "celery", 0, 320, 1.5),
        _row("noop_c64", "ours-idempotent", 0, 900, 0.6),
        _row("noop_c64", "ours", 0, 900, 0.6),
        _row("noop_c64", "celery", 0, 100, 4.0),
    ]
    summaries = summary.summarize(rows)
    why = {("celery", "io50_c16"): "it measured the wrong thing"}
    note = peers_report.peers_notes(summaries, "io50_c16", "celery", why)
    assert note == (
        "ahead of ours (idempotent handler) on msg/s: it measured the wrong thing; ahead of ours (DynamoDB guard) on"
        " msg/s: it measured the wrong thing"
    )
    assert peers_report.peers_notes(summaries, "noop_c64", "celery", why) == ""
    assert "no reason recorded" in peers_report.peers_notes(summaries, "io50_c16", "celery", {})
    # A variant's own reason comes first for that variant, and only for it.
    guarded = peers_report.peers_notes(summaries, "io50_c16", "celery", {**why, ("ours", "*"): "the guard"})
    assert guarded.endswith("ahead of ours (DynamoDB guard) on msg/s: the guard")
    # In the page, each reason is written once below the tables and the notes name it by its letter.
    reasons: list[str] = []
    lettered = peers_report.peers_notes(summaries, "io50_c16", "celery", {**why, ("ours", "*"): "the guard"}, reasons)
    assert lettered == "ahead of ours (idempotent handler) on msg/s (a); ahead of ours (DynamoDB guard) on msg/s (b)"
    assert reasons == ["it measured the wrong thing", "the guard"]


def test_report_renders_skips_errors_and_the_correctness_cells() -> None:
    rows = [
        *ROWS,
        {**_row("io50_c16", "bare", 0, 0, 0), "skipped": "no handler"},
        _row("io50_c16", "ours", 0, 300, 1.0),
        {**_row("io50_c16", "celery", 0, 0, 0), "error": "boom"},
    ]
    checks = {
        "lease": [
            {
                "subject": "ours",
                "messages": 8,
                "concurrency": 16,
                "handler_seconds": 8,
                "queue_visibility_seconds": 5,
                "subject_visibility_seconds": 5,
                "duplicate_starts": 0,
                "keys_completed": 8,
                "watched_seconds": 9.2,
            },
            {"subject": "celery", "error": "RuntimeError: x"},
        ],
        "kill": [
            {
                "subject": "celery",
                "messages": 16,
                "concurrency": 16,
                "handler_seconds": 3,
                "queue_visibility_seconds": 20,
                "cut_off": 16,
                "held_at_kill": 0,
                "lost": 16,
                "duplicated": 0,
                "invisible_until": "nothing held",
            }
        ],
    }
    text = peers_report.section(_result(rows, checks))
    assert "| BARE | 1 process | - | - | - | - | - | - | not run: no handler |" in text
    assert "failed: boom" in text
    assert "(ideal: 16 slots / 50 ms = 320 msg/s)" in text
    assert "| OURS | **0** | 8 of 8 | 9 | the queue's (5 s) |" in text
    assert "| CELERY | 16 | 0 | **16** | **0** | nothing held |" in text
    assert "Not measured yet" in text  # the CPU-bound cell did not run


def test_report_fills_the_peers_placeholder() -> None:
    assert report.sections()["peers"]
    assert "{{peers}}" in report.TEMPLATE.read_text()
