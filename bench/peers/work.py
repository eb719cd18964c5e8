"""The work every subject's handler does, one definition for ours and every Python peer (standard library only).

Peers import it as a top-level module (``import work``: their apps run from this folder, in their own virtualenvs,
without the project on the path); ours' handlers import it as ``bench.peers.work``. The Node peer does the same work
in ``sqs-consumer/peer.mjs``.

Kinds: ``noop`` returns at once; ``io50`` and ``io200`` sleep 50 and 200 ms (a sleep releases the interpreter lock,
as a network call does); ``cpu5`` spins 5 ms of CPU in pure Python (holds the lock); ``slow8`` sleeps 8 s (the lease cell:
longer than the queue's 5 s visibility); ``kill3`` sleeps 3 s (the kill cell).

When ``BENCH_RECORD`` names a file (the correctness cells only, never a throughput cell), each handler appends a
``start`` and an ``end`` line for its message's key (``<event> <key> <unix time> <pid>``), one ``write`` on an
``O_APPEND`` descriptor per line, so lines from several processes and threads never interleave.
"""

from __future__ import annotations

import os
import time

#: Kind -> seconds the handler takes (0 for noop).
SECONDS = {"noop": 0.0, "io50": 0.05, "io200": 0.2, "cpu5": 0.005, "slow8": 8.0, "kill3": 3.0}
#: Kinds that hold the interpreter lock while they work (a spin), the others sleep.
SPIN = frozenset({"cpu5"})
RECORD_ENV = "BENCH_RECORD"
#: The record file (read once, at import): handlers pass their message's key only when it is set.
RECORD_PATH = os.environ.get(RECORD_ENV, "")
RECORDING = bool(RECORD_PATH)


def record(event: str, key: object, path: str = RECORD_PATH) -> None:
    """Append one ``event`` line for ``key`` to ``path`` (the file ``BENCH_RECORD`` names)."""
    line = f"{event} {key} {time.time():.6f} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def spin(seconds: float) -> None:
    """``seconds`` of this thread's own CPU time in pure Python: the same work however busy the machine is (a
    wall-clock spin does less work when the thread is descheduled or waits for the interpreter lock)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def do(kind: str, key: object = None) -> None:
    """The work of one message of ``kind`` (``key`` names it in the record)."""
    seconds = SECONDS[kind]
    recording = RECORDING and key is not None
    if recording:
        record("start", key)
    if kind in SPIN:
        spin(seconds)
    elif seconds:
        time.sleep(seconds)
    if recording:
        record("end", key)
