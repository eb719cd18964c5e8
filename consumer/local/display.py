"""Output for a local run: a rich table redrawn in a terminal; elsewhere (CI, a log file) plain, whole lines."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

__all__ = ["LiveDisplay"]


def plain_line(table: Table) -> str:
    """``table`` on one line: ``[title] row=value, ...``; with a column per subject (a worker each),
    ``[title] (a | b) row=value-a | value-b, ...`` so every row still reads as one ``label=values`` pair."""
    labels, *values = table.columns
    subjects = " | ".join(str(column.header) for column in values) if len(values) > 1 else ""
    cells = [
        f"{label}={' | '.join(str(cell) for cell in row)}"
        for label, *row in zip(labels.cells, *(c.cells for c in values), strict=True)
    ]
    return f"[{table.title}] " + (f"({subjects}) " if subjects else "") + ", ".join(cells)


class LiveDisplay:
    """Live progress in a terminal; a plain line every few seconds elsewhere (CI logs), and a last one at the end.

    The last line is printed after the final ``tick``, so it carries the same numbers as the closing report.
    """

    PLAIN_EVERY_SECONDS = 5.0

    def __init__(self, console: Console, render: Callable[[], Table], tick: Callable[[], None]) -> None:
        self.console = console
        self.render = render
        self.tick = tick
        self._live: Live | None = None
        self._last_plain = 0.0
        self._last_line = ""

    def __enter__(self) -> Callable[[], None]:
        if self.console.is_terminal:
            self._live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self.refresh

    def refresh(self) -> None:
        self.tick()
        if self._live is not None:
            self._live.update(self.render())
        elif time.monotonic() - self._last_plain >= self.PLAIN_EVERY_SECONDS:
            self._print_plain()

    def _print_plain(self, *, unless_unchanged: bool = False) -> None:
        self._last_plain = time.monotonic()
        line = plain_line(self.render())
        if unless_unchanged and line == self._last_line:
            return  # the last refresh already printed exactly this: a log shows it once
        self._last_line = line
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def __exit__(self, *exc_info: object) -> None:
        self.tick()
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(None, None, None)
        else:
            self._print_plain(unless_unchanged=True)
