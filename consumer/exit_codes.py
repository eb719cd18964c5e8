"""The process exit codes every ``python -m consumer`` command (and the chaos suite reading them) shares."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    #: Something went wrong while running: the demo or a redrive found messages lost, duplicated or left
    #: behind, an AWS call of the DLQ tool failed, or a consumer thread crashed (ECS starts another task).
    FAILED = 1
    #: Bad configuration or input, refused before anything happened; the message names it. Also the
    #: consumer's start-up refusal (queue missing or drifted from the contract).
    CONFIG = 2
    #: Every handler slot holds a handler past its timeout: only a new task can make progress.
    STUCK = 3
