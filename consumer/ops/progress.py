"""A pass's progress on stderr, drawn with rich: the command layer's :class:`~consumer.ops.passes.ProgressFactory`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as ProgressBar
from rich.table import Table
from rich.text import Text

from consumer.ops.passes import ProgressFactory
from consumer.runtime.clock import SYSTEM, Clock

#: How much of a body or reason a table shows, on one line.
BODY_PREVIEW_CHARS = 80
#: Off a terminal rich renders 80 columns and wraps or cuts; a pipe or a log file gets each line whole instead.
UNWRAPPED_WIDTH = 10_000


def output_console(*, stderr: bool = False) -> Console:
    """A console for the tools' output: the terminal's own width there; elsewhere (a pipe, CI, a log file)
    wide enough that no line is wrapped or cut (:data:`UNWRAPPED_WIDTH`)."""
    console = Console(stderr=stderr, highlight=False)
    return console if console.is_terminal else Console(stderr=stderr, highlight=False, width=UNWRAPPED_WIDTH)


#: Without a terminal (a pipe, CI, a log file) the progress bar is off; a line this often says how far a run is.
PROGRESS_LINE_SECONDS = 10


class Progress:
    """A pass's progress on stderr: rich's bar on a terminal; elsewhere (a pipe,
    CI, a log file) a line every PROGRESS_LINE_SECONDS, ``<label>: <done> of <total> <unit> (<detail>),
    <elapsed> s``, so that a long run is never silent. The final summary is the command's own. The lines are
    timed on ``clock``."""

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        unit: str,
        detail: Callable[[], str] = lambda: "",
        clock: Clock = SYSTEM,
    ) -> None:
        self.label, self.total, self.unit, self.detail = label, total, unit, detail
        self.clock = clock
        self.completed = 0
        self.console = Console(stderr=True, highlight=False)
        self.bar: ProgressBar | None = None
        self.task: Any = None
        self.started = self.last_line = clock.monotonic()

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.bar = ProgressBar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=self.total or None)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def advance(self, count: int) -> None:
        if count:
            self.update(self.completed + count)

    def update(self, completed: int, total: int | None = None) -> None:
        self.completed = completed
        self.total = self.total if total is None else total
        if self.bar is not None:
            self.bar.update(self.task, completed=completed, total=self.total or None)
        elif self.clock.monotonic() - self.last_line >= PROGRESS_LINE_SECONDS:
            self.last_line = self.clock.monotonic()
            detail = self.detail()
            typer.echo(
                f"{self.label}: {completed} of {self.total if self.total else '?'} {self.unit}"
                f"{f' ({detail})' if detail else ''}, {int(self.last_line - self.started)} s",
                err=True,
            )


def progress_on(clock: Clock) -> ProgressFactory:
    """The factory of :class:`Progress` timed on ``clock``: what a command hands its pass."""
    return functools.partial(Progress, clock=clock)


# --- what the commands' tables show ---------------------------------------------------------------


def preview(text: str, limit: int = BODY_PREVIEW_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def duration(seconds: float | None) -> str:
    """``1d``, ``2h 5m 3s``, ``-4m 0s``; ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours or days else []
    parts += [f"{minutes}m", f"{secs}s"] if not days else []
    return sign + " ".join(parts)


def message_table(title: str) -> Table:
    table = Table(title=title)
    for column in ("message id", "kind", "reason", "body"):
        table.add_column(column, overflow="fold")
    return table


def reason_preview(reason: dict[str, Any] | None) -> Text:
    return Text(preview(str(reason.get("reason", ""))) if reason else "-")
