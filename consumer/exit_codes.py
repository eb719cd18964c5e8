"""The process exit codes every ``python -m consumer`` command shares."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    #: The run (a demo, a redrive) found something wrong: lost, duplicated or left behind.
    FAILED = 1
    #: Bad configuration or input, refused before anything happened; the message names it.
    CONFIG = 2
