"""Liveness: the loops record their progress in a small file; ``python -m consumer health`` reads it.

A consumer whose poll loop silently stops keeps its task alive (bbc/sqs-consumer#236, #241): nothing
fails, nothing is received. So each poller (after every receive returns, empty or not, and while it
waits on purpose) and the heartbeat (every tick) call :meth:`Liveness.beat`; the file holds, per loop,
when it last made progress and how long it may go without (the contract's ``poll_stall_seconds`` and
``heartbeat_stall_seconds``). ECS runs ``python -m consumer health`` in the container
(infra/service.py); :func:`check` fails when a loop is past its allowance, and ECS replaces the task.

The file is written atomically (a temporary file, then ``os.replace``), at most once a second per
loop, so a busy poller costs nothing per message. Standard library only, and the check imports
nothing else: it starts every few seconds inside the task.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger("consumer")  # one logger name for the whole runtime (see inflight.py)

#: Where the loops record progress; the task's /tmp is its one writable volume (infra/service.py).
LIVENESS_FILE_ENV = "CONSUMER_LIVENESS_FILE"
DEFAULT_LIVENESS_FILE = "/tmp/consumer-liveness.json"  # noqa: S108 (the task's own volume, one consumer per task)
#: A loop's progress reaches the file at most this often: cheap, and still far below any allowance (>= 11 s).
MIN_WRITE_SECONDS = 1.0
HEARTBEAT_LOOP = "heartbeat"
#: The acknowledger's thread: it beats each time round its loop, and says it is idle when it sleeps for want of work.
ACKNOWLEDGER_LOOP = "acknowledger"


def liveness_path(environ: Mapping[str, str]) -> Path:
    """The progress file: ``CONSUMER_LIVENESS_FILE``, or the default both the consumer and the check use."""
    return Path(environ.get(LIVENESS_FILE_ENV) or DEFAULT_LIVENESS_FILE)


def poller_loop(index: int) -> str:
    """A poller's name in the file (the thread's name too)."""
    return f"poller-{index}"


class Liveness:
    """The writer: ``start`` names every loop and its allowance, ``beat`` records a loop's progress.

    ``path`` None records nothing (an in-process consumer in tests, unless one asks).
    A failed write is logged once and never stops the consumer: the check then reports the stale file.

    Example::

        liveness = Liveness(Path("/tmp/consumer-liveness.json"))
        liveness.start({"poller-0": 30, "heartbeat": 13})
        liveness.beat("poller-0")       # after each receive returns
    """

    def __init__(
        self, path: Path | None, *, clock: Callable[[], float] = time.time, min_write_seconds: float = MIN_WRITE_SECONDS
    ) -> None:
        self.path = path
        self._clock = clock
        self._min_write_seconds = min_write_seconds
        self._lock = threading.Lock()
        self._loops: dict[str, dict[str, float]] = {}
        self._written: dict[str, float] = {}
        self._stopping = False
        self._write_failed = False

    def start(self, allowances: Mapping[str, int]) -> None:
        """Every loop the check expects, with its allowance in seconds; each counts as having progressed now."""
        now = self._clock()
        with self._lock:
            self._loops = {name: {"at": now, "stall_after_seconds": seconds} for name, seconds in allowances.items()}
            self._written = dict.fromkeys(allowances, now)
            self._write()

    def beat(self, loop: str) -> None:
        """``loop`` made progress now (written at most every ``min_write_seconds`` for that loop)."""
        now = self._clock()
        with self._lock:
            entry = self._loops.get(loop)
            if entry is None:
                return  # not started (a part driven alone in a test)
            entry["at"] = now
            idle = entry.pop("idle", None) is not None  # working again: its allowance counts from now
            if idle or now - self._written[loop] >= self._min_write_seconds:
                self._written[loop] = now
                self._write()

    def idle(self, loop: str) -> None:
        """``loop`` sleeps until work comes, on purpose (whoever gives it work wakes it): no stall, however long."""
        now = self._clock()
        with self._lock:
            entry = self._loops.get(loop)
            if entry is None or entry.get("idle"):
                return
            entry["at"], entry["idle"] = now, 1.0
            self._written[loop] = now
            self._write()

    def stopping(self) -> None:
        """Shutdown began: the pollers stop on purpose; only the heartbeat (which runs until the end) is checked."""
        with self._lock:
            self._stopping = True
            self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        document = {"pid": os.getpid(), "stopping": self._stopping, "loops": self._loops}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(document))
            os.replace(temporary, self.path)  # atomic: the check never reads half a file
        except OSError as error:
            if not self._write_failed:
                self._write_failed = True
                log.warning("liveness_write_failed", extra={"path": str(self.path), "error": str(error)})


def check(path: Path, now: float) -> tuple[bool, str]:
    """(healthy, one line): healthy when every expected loop progressed within its allowance at ``now``."""
    try:
        document = json.loads(path.read_text())
        loops = {
            str(name): (float(entry["at"]), float(entry["stall_after_seconds"]))
            for name, entry in document["loops"].items()
        }
        idle = {str(name) for name, entry in document["loops"].items() if entry.get("idle")}
        stopping = bool(document.get("stopping", False))
    except FileNotFoundError:
        return False, f"unhealthy: no progress file at {path} (the consumer has not started its loops)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return False, f"unhealthy: cannot read the progress file {path}: {error!r}"
    stalled, fine = [], []
    for name, (at, allowed) in sorted(loops.items()):
        if stopping and name != HEARTBEAT_LOOP:
            continue  # shutting down: the pollers stopped receiving on purpose
        if name in idle:
            fine.append(f"{name} idle")  # asleep for want of work, on purpose
            continue
        ago = now - at
        if ago > allowed:
            since = datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
            stalled.append(f"{name} stalled: no progress since {since} ({ago:.0f} s ago, {allowed:.0f} s allowed)")
        else:
            fine.append(f"{name} {ago:.0f} s ago")
    if stalled:
        return False, "unhealthy: " + "; ".join(stalled)
    if not fine:
        return False, f"unhealthy: the progress file {path} names no loop"
    return True, ("healthy (stopping): " if stopping else "healthy: ") + ", ".join(fine)
