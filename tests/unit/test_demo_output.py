"""The demo's output off a terminal (CI, `make run > log`): plain, whole lines, and progress that agrees with the report."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from consumer.local.demo import Demo, DemoOptions, DemoResult, account, build_mix
from consumer.local.demo_report import render_report
from consumer.local.display import LiveDisplay, output_console
from consumer.local.harness import Fleet

#: The report's longest row and its longest line: each was cut and wrapped at 80 columns.
REQUESTS_ROW = re.compile(r"SQS requests per processed message\W+2\.18 \(209 requests / 96 processed, .* see below\)")
REQUESTS_NOTE = re.compile(r"^SQS requests per processed message: half of this mix .* costs about 1\.1\.$")


class NoDeliveries:
    """The webhook's side of the progress table: nothing delivered yet."""

    def delivered(self) -> set[str]:
        return set()


@pytest.fixture
def log_file(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> pytest.CaptureFixture[str]:
    """Standard output captured, not a terminal, as with `make run > log` (and no COLUMNS to go by)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    return capsys


def a_result(heartbeat_extensions: int) -> DemoResult:
    plan = build_mix(120)
    dead = {p.event_id: {"kind": "poison", "reason": "schema check failed at properties/channel: enum"} for p in plan}
    return DemoResult(
        accounting=account(plan, {}, dead, 0),
        consumers=[{"number": 1, "exit_code": 0, "stopped_in_seconds": 13.6, "log": ".demo/consumer-1.log"}],
        redrive={"moved": 18, "command": "python -m consumer dlq redrive --filter DownstreamUnavailable"},
        retried=63,
        heartbeat_extensions=heartbeat_extensions,
        requeued=2,
        sqs_requests=209,
        processed=96,
        downstream_refusals={"422": 6, "503": 81},
        elapsed_seconds=29.3,
    )


def test_output_console_off_a_terminal_never_wraps(log_file: pytest.CaptureFixture[str]) -> None:
    """The report to a file keeps every row on one line: the longest cell whole, no line broken under it."""
    console = output_console()
    assert console.is_terminal is False
    render_report(a_result(heartbeat_extensions=12), console)
    output = log_file.readouterr().out
    lines = output.splitlines()
    assert [line for line in lines if REQUESTS_ROW.search(line)] != []
    assert [line for line in lines if REQUESTS_NOTE.search(line)] != []
    assert [line for line in lines if "redrive --filter DownstreamUnavailable`" in line and "18 via" in line] != []
    assert "\x1b[" not in output  # no colour or cursor codes in a log


def test_plain_progress_ends_with_the_numbers_the_report_shows(
    log_file: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Off a terminal there is no redraw; the last progress line comes after the consumers' final metrics
    (written when they stop) and shows the heartbeat extensions the report counts."""
    console = output_console()
    demo = Demo(DemoOptions(template=tmp_path / "unused.json"), console)
    fleet = Fleet({}, tmp_path)
    # What Fleet.read_logs adds up at each look: no metric line mid-run, the consumers' last ones once they stop.
    metrics_at_each_look = [Counter(), Counter({"visibility_extensions": 12})]

    def read_logs() -> None:
        fleet.metrics = metrics_at_each_look.pop(0)

    display = LiveDisplay(console, lambda: demo._snapshot(NoDeliveries(), fleet), tick=read_logs)
    with display as refresh:
        refresh()  # mid-run: the consumers have written no metrics yet
    render_report(a_result(heartbeat_extensions=int(fleet.metrics["visibility_extensions"])), console)
    output = log_file.readouterr().out
    progress = [line for line in output.splitlines() if line.startswith("[sqs-worker demo")]
    shown = [int(m) for line in progress for m in re.findall(r"heartbeat extensions \([^)]*\)=(\d+)", line)]
    reported = [int(m) for m in re.findall(r"heartbeat visibility extensions\W*(\d+)", output)]
    assert (shown, reported) == ([0, 12], [12])
    assert "\r" not in output and "\x1b[" not in output


def test_progress_names_when_the_heartbeat_metric_is_written() -> None:
    """The progress row says the metric lags (written each minute and at stop), so a 0 mid-run is no contradiction."""
    demo = Demo(DemoOptions(template=Path("unused.json")), Console(file=io.StringIO()))
    table = demo._snapshot(NoDeliveries(), Fleet({}, Path(".")))
    assert "heartbeat extensions (metric, written every 60 s and at stop)" in list(table.columns[0].cells)


def test_the_last_progress_line_is_not_repeated_when_nothing_changed(
    log_file: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The closing line is printed after the final look only if it says something the log has not just said."""
    console = output_console()
    demo = Demo(DemoOptions(template=tmp_path / "unused.json"), console)
    fleet = Fleet({}, tmp_path)
    display = LiveDisplay(console, lambda: demo._snapshot(NoDeliveries(), fleet), tick=lambda: None)
    with display as refresh:
        refresh()  # the final look inside the run prints; the close sees the same numbers
    progress = [line for line in log_file.readouterr().out.splitlines() if line.startswith("[sqs-worker demo")]
    assert len(progress) == 1
