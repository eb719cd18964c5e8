"""Output for a local run: a rich table redrawn in a terminal; elsewhere (CI, a log file) plain, whole lines."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from consumer.ops.progress import UNWRAPPED_WIDTH, output_console

__all__ = ["UNWRAPPED_WIDTH", "LiveDisplay", "output_console"]


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
        table = self.render()
        cells = [f"{row}={value}" for row, value in zip(table.columns[0].cells, table.columns[1].cells, strict=True)]
        line = f"[{table.title}] " + ", ".join(cells)
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
