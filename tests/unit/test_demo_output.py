"""The demo's output off a terminal (CI, `make run > log`): plain, whole lines, and progress that agrees with the report."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from consumer.local.demo import Demo, DemoOptions
from consumer.local.demo_lane import DemoResult, Lane, LaneResult, account
from consumer.local.demo_notifications import KINDS, MIX, build_mix
from consumer.local.demo_report import render_report
from consumer.local.demo_reports import REPORT_KINDS, REPORTS_MIX, build_report_mix
from consumer.local.display import LiveDisplay, plain_line
from consumer.local.harness import ConsumerProcess, HealthCheck
from consumer.ops.progress import output_console

#: The report's longest row and its longest line: each was cut and wrapped at 80 columns.
REQUESTS_ROW = re.compile(r"SQS requests per processed message\W+2\.18 \(209 requests / 96 processed, .* see below\)")
REQUESTS_NOTE = re.compile(r"^SQS requests per processed message: half of this mix .* costs about 1\.1\.$")


HEALTHY = {"phase": "before the stop", "healthy": True, "line": "healthy: heartbeat 0 s ago, poller-0 1 s ago"}


class NoDeliveries:
    """A downstream's side of the progress table: nothing delivered yet."""

    url = "http://127.0.0.1:9/unused"

    def delivered(self) -> set[str]:
        return set()


#: What a lane reads of its worker's task environment.
TASK = {"QUEUE_URL": "q", "DLQ_URL": "d", "CONSUMER_STOP_TIMEOUT_SECONDS": "35"}


def demo_with_lanes(tmp_path: Path, console: Console) -> Demo:
    """A demo with its two lanes built, as after provisioning (no queue, no process started)."""
    demo = Demo(DemoOptions(template=tmp_path / "unused.json"), console)
    for worker, mix, plan in (("notifications", MIX, build_mix(6)), ("reports", REPORTS_MIX, build_report_mix(4))):
        env = TASK | {"CONSUMER_HANDLER": worker}
        demo.lanes.append(Lane(worker, mix, plan, NoDeliveries(), env, None, tmp_path / worker))  # type: ignore[arg-type]
    return demo


@pytest.fixture
def log_file(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> pytest.CaptureFixture[str]:
    """Standard output captured, not a terminal, as with `make run > log` (and no COLUMNS to go by)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    return capsys


def a_result(heartbeat_extensions: int) -> DemoResult:
    plan = build_mix(120)
    dead = {p.event_id: {"kind": "poison", "reason": "schema check failed at properties/channel: enum"} for p in plan}
    notifications = LaneResult(
        worker="notifications",
        handler="consumer.examples.demo:handle",
        accounting=account(plan, KINDS, {}, dead, 0),
        consumers=[
            {
                "number": 1,
                "exit_code": 0,
                "stopped_in_seconds": 13.6,
                "log": ".demo/notifications/consumer-1.log",
                "health": [HEALTHY, HEALTHY],
            }
        ],
        redrive={"moved": 1, "command": "python -m consumer dlq redrive --filter WebhookUnavailable"},
        circuit={"opens": 9, "closes": 3, "open_seconds": 31.4, "longest_open_seconds": 14.2},
        retried=63,
        heartbeat_extensions=heartbeat_extensions,
        requeued=2,
        sqs_requests=209,
        processed=96,
        downstream_refusals={"422": 6, "503": 81},
        mix=MIX,
        tenants={
            "tenant-noisy": {"produced": 90, "delivered": 72, "processed": 72, "moved_to_dlq": 18},
            "tenant-a": {"produced": 6, "delivered": 5, "processed": 5, "moved_to_dlq": 1},
        },
    )
    requests = build_report_mix(28)
    uploaded = {p.event_id: 1 for p in requests if p.kind in ("valid", "transient")}
    poison = {"kind": "poison", "reason": "report request lacks rows"}
    not_json = {"kind": "non_retryable", "reason": "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"}
    reports = LaneResult(
        worker="reports",
        handler="workers.reports:handle",
        accounting=account(
            requests,
            REPORT_KINDS,
            uploaded,
            {p.event_id: poison if p.kind == "malformed" else not_json for p in requests if p.event_id not in uploaded},
            0,
        ),
        consumers=[{"number": 1, "exit_code": 0, "stopped_in_seconds": 0.1, "log": ".demo/reports/consumer-1.log"}],
        retried=4,
        heartbeat_extensions=0,
        requeued=0,
        sqs_requests=40,
        processed=21,
        downstream_refusals={"503": 4},
        mix=REPORTS_MIX,
    )
    return DemoResult(workers=[notifications, reports], elapsed_seconds=29.3)


def test_output_console_off_a_terminal_never_wraps(log_file: pytest.CaptureFixture[str]) -> None:
    """The report to a file keeps every row on one line: the longest cell whole, no line broken under it."""
    console = output_console()
    assert console.is_terminal is False
    render_report(a_result(heartbeat_extensions=12), console)
    output = log_file.readouterr().out
    lines = output.splitlines()
    assert [line for line in lines if REQUESTS_ROW.search(line)] != []
    assert [line for line in lines if REQUESTS_NOTE.search(line)] != []
    assert [line for line in lines if "redrive --filter WebhookUnavailable`" in line and "1 via" in line] != []
    assert [line for line in lines if "circuit open" in line and "31.4 s in all, longest 14.2 s; 9 opens" in line] != []
    assert "\x1b[" not in output  # no colour or cursor codes in a log


def test_plain_progress_ends_with_the_numbers_the_report_shows(
    log_file: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Off a terminal there is no redraw; the last progress line comes after the consumers' final metrics
    (written when they stop) and shows the heartbeat extensions the report counts."""
    console = output_console()
    demo = demo_with_lanes(tmp_path, console)
    fleet = demo.lanes[0].fleet
    # What Fleet.read_logs adds up at each look: no metric line mid-run, the consumers' last ones once they stop.
    metrics_at_each_look = [Counter(), Counter({"visibility_extensions": 12})]

    def read_logs() -> None:
        fleet.metrics = metrics_at_each_look.pop(0)

    display = LiveDisplay(console, demo._snapshot, tick=read_logs)
    with display as refresh:
        refresh()  # mid-run: the consumers have written no metrics yet
    render_report(a_result(heartbeat_extensions=int(fleet.metrics["visibility_extensions"])), console)
    output = log_file.readouterr().out
    progress = [line for line in output.splitlines() if line.startswith("[sqs-worker demo")]
    shown = [int(m) for line in progress for m in re.findall(r"heartbeat extensions \([^)]*\)=(\d+) \| 0", line)]
    reported = [int(m) for m in re.findall(r"heartbeat visibility extensions\W*(\d+)", output)]
    assert (shown, reported) == ([0, 12], [12, 0])
    assert "\r" not in output and "\x1b[" not in output


def test_progress_names_when_the_heartbeat_metric_is_written(tmp_path: Path) -> None:
    """The progress row says the metric lags (written each minute and at stop), so a 0 mid-run is no contradiction."""
    demo = demo_with_lanes(tmp_path, Console(file=io.StringIO()))
    table = demo._snapshot()
    assert "heartbeat extensions (metric, written every 60 s and at stop)" in list(table.columns[0].cells)


def test_the_last_progress_line_is_not_repeated_when_nothing_changed(
    log_file: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The closing line is printed after the final look only if it says something the log has not just said."""
    console = output_console()
    demo = demo_with_lanes(tmp_path, console)
    display = LiveDisplay(console, demo._snapshot, tick=lambda: None)
    with display as refresh:
        refresh()  # the final look inside the run prints; the close sees the same numbers
    progress = [line for line in log_file.readouterr().out.splitlines() if line.startswith("[sqs-worker demo")]
    assert len(progress) == 1


def test_progress_shows_a_column_per_worker(tmp_path: Path) -> None:
    """The live table names each worker in its own column, with that worker's own plan size."""
    table = demo_with_lanes(tmp_path, Console(file=io.StringIO()))._snapshot()
    assert [str(column.header) for column in table.columns] == ["worker", "notifications", "reports"]
    assert list(table.columns[0].cells)[0] == "produced"
    assert [list(column.cells)[0] for column in table.columns[1:]] == ["0 / 6", "0 / 4"]


def test_plain_line_gives_each_row_every_worker_value(tmp_path: Path) -> None:
    """Off a terminal a row reads label=first | second, after the workers' names in the same order."""
    line = plain_line(demo_with_lanes(tmp_path, Console(file=io.StringIO()))._snapshot())
    assert line.startswith("[sqs-worker demo - provisioning - ")
    assert "(notifications | reports) produced=0 / 6 | 0 / 4, " in line


def test_report_shows_each_worker_by_name_and_its_verdict(log_file: pytest.CaptureFixture[str]) -> None:
    """The closing report has each worker's tables under its name, its DLQ reasons and a verdict line each."""
    render_report(a_result(heartbeat_extensions=12), output_console())
    lines = log_file.readouterr().out.splitlines()
    titles = [line.strip() for line in lines if line.strip().endswith("where every message ended")]
    assert titles == [
        "notifications (consumer.examples.demo:handle): where every message ended",
        "reports (workers.reports:handle): where every message ended",
    ]
    assert [line for line in lines if "poison: report request lacks rows" in line and line.rstrip("│ ").endswith("6")]
    assert [
        line
        for line in lines
        if "non_retryable: JSONDecodeError: Expecting value" in line and line.rstrip("│ ").endswith("3")
    ]
    assert [line for line in lines if "processed (delivered exactly once at the report store)" in line and "19" in line]
    assert "reports: balanced: 19 delivered + 9 in the DLQ = 28 of 28 produced" in lines
    assert lines[-1] == "accounting does NOT balance for 2 worker(s), 29.3 s elapsed; logs in .demo"


def test_report_shows_each_tenant_and_each_consumer_s_liveness(log_file: pytest.CaptureFixture[str]) -> None:
    """The notifications worker's tenants each have a row (produced, delivered, logged), and every consumer's health
    checks are counted; the reports worker, without tenants, has no tenant table."""
    render_report(a_result(heartbeat_extensions=12), output_console())
    lines = [line.strip("│ ") for line in log_file.readouterr().out.splitlines()]
    rows = [re.split(r"\s*│\s*", line) for line in lines if line.startswith("tenant-")]
    assert rows == [["tenant-noisy", "90", "72", "72", "18"], ["tenant-a", "6", "5", "5", "1"]]
    assert len([line for line in lines if "per tenant" in line]) == 1
    assert [line for line in lines if line.startswith("liveness") and line.endswith("#1: healthy x2")]


def test_report_names_an_unhealthy_consumer_and_unsent_events_and_fails(
    log_file: pytest.CaptureFixture[str],
) -> None:
    """A consumer that answered unhealthy, or an event the producer could not send, is spelled out and fails the run."""
    result = a_result(heartbeat_extensions=12)
    notifications = result.workers[0]
    notifications.unhealthy = ["#1 (before the stop): unhealthy: poller-0 stalled"]
    notifications.unsent = ["evt-demo-00007: InternalError: boom"]
    render_report(result, output_console())
    out = log_file.readouterr().out
    assert "UNHEALTHY #1 (before the stop): unhealthy: poller-0 stalled" in out
    assert "evt-demo-00007: InternalError: boom" in out
    assert (notifications.ok, result.ok) == (False, False)


def test_report_shows_the_duplicate_copies_the_idempotency_store_skipped_only_when_there_were_any(
    log_file: pytest.CaptureFixture[str],
) -> None:
    """A copy the idempotency store already had done is settled as processed without the handler: the report says
    how many there were, beside the events delivered once, so processed less those is what the handlers did."""
    row = "duplicate copies skipped (the idempotency store had the event done; the handler did not run)"
    result = a_result(heartbeat_extensions=12)
    render_report(result, output_console())
    assert row not in log_file.readouterr().out
    result.workers[0].duplicates_skipped = 1
    render_report(result, output_console())
    assert [line for line in log_file.readouterr().out.splitlines() if row in line and line.rstrip("│ ").endswith("1")]


class Running:
    """A consumer's process that is still running."""

    def poll(self) -> None:
        return None


def test_progress_shows_each_consumer_s_last_health_check(tmp_path: Path) -> None:
    """The live display's liveness row: each checked consumer's last answer, in one cell of the plain line."""
    demo = demo_with_lanes(tmp_path, Console(file=io.StringIO()))
    fleet = demo.lanes[0].fleet
    for number, healthy in ((1, True), (2, False)):
        checked = ConsumerProcess(number, Running(), tmp_path / "x.log", {})  # type: ignore[arg-type]
        checked.health.append(HealthCheck("before the stop", healthy, "..."))
        fleet.processes.append(checked)
    line = plain_line(demo._snapshot())
    assert "liveness (python -m consumer health, last check)=#1 healthy; #2 UNHEALTHY | not checked yet" in line
