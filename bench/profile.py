"""``python -m bench profile``: where ours spends its CPU with the no-op handler at saturation.

Ours runs as in ``python -m bench throughput`` (the no-op handler, the producer
keeping the queue topped up) while py-spy samples the process from outside
(``--gil``: only samples of the thread holding the interpreter lock, which is
what bounds one process; ``--format raw``: one ``frame;frame;... count`` line
per distinct stack, frames ``function (file:line)``, outermost first). The
summary keeps the run's msg/s and CPU ms per message, the top functions by
self share (the sample's innermost frame) and by inclusive share (anywhere on
the stack), and the samples by category (:func:`category`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.throughput import HANDLERS, measure

SAMPLE_RATE = 250  # per second (py-spy's default is 100): 2,000 samples in an 8 s window, of which --gil keeps those with a holder
TOP = 15
#: Frames of these files make a sample an SDK call: botocore, its HTTP pool, and the standard library's client.
SDK_PREFIXES = ("botocore/", "urllib3/", "http/")
LOGGING_FUNCTION = "Logger._log"
#: Every thread's outermost frames: on every sample by construction, so left out of the inclusive ranking.
THREAD_ENTRY = {("Thread._bootstrap", "threading.py"), ("Thread._bootstrap_inner", "threading.py")}
THREAD_ENTRY |= {("Thread.run", "threading.py")}


def frame(text: str) -> tuple[str, str]:
    """``"HandlerRunner.run (consumer/runtime/processing.py:70)"`` ->
    ``("HandlerRunner.run", "consumer/runtime/processing.py")``."""
    function, _, where = text.rpartition(" (")
    if not function:
        return text, ""
    return function, where.rstrip(")").rpartition(":")[0] or where.rstrip(")")


def parse(lines: Iterable[str]) -> list[tuple[list[tuple[str, str]], int]]:
    """py-spy's raw lines as (frames outermost first, sample count); blank lines are skipped."""
    stacks = []
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack:
            stacks.append(([frame(text) for text in stack.split(";")], int(count)))
    return stacks


def category(frames: list[tuple[str, str]]) -> str:
    """What a sample was doing: an SDK call (any botocore, urllib3 or http.client frame), logging (under
    ``Logger._log``), else the innermost frame of ours (``runtime <module>.py`` for consumer/runtime/,
    ``consumer <file>`` for the rest of consumer/, ``bench harness``), else ``other`` (interpreter, threads)."""
    if any(file.startswith(SDK_PREFIXES) for _, file in frames):
        return "SDK call"
    if any(function == LOGGING_FUNCTION for function, _ in frames):
        return "logging"
    for _, file in reversed(frames):
        if file.startswith("consumer/runtime/"):
            return f"runtime {file.removeprefix('consumer/runtime/')}"
        if file.startswith("consumer/"):
            return f"consumer {file.removeprefix('consumer/')}"
        if file.startswith("bench/"):
            return "bench harness"
    return "other"


def summarize(lines: Iterable[str], top: int = TOP) -> dict[str, Any]:
    """Shares (0..1) of all samples: the ``top`` functions by self and by inclusive share, and every category."""
    own: Counter[tuple[str, str]] = Counter()
    anywhere: Counter[tuple[str, str]] = Counter()
    categories: Counter[str] = Counter()
    total = 0
    for frames, count in parse(lines):
        total += count
        own[frames[-1]] += count
        for key in set(frames) - THREAD_ENTRY:  # a recursive function counts once per sample
            anywhere[key] += count
        categories[category(frames)] += count
    if not total:
        raise ValueError(f'"lines" must hold at least one sample: {total}')

    def ranked(counter: Counter[Any]) -> list[dict[str, Any]]:
        return [{"function": f, "file": file, "share": n / total} for (f, file), n in counter.most_common(top)]

    return {
        "samples": total,
        "self": ranked(own),
        "inclusive": ranked(anywhere),
        "categories": {name: n / total for name, n in categories.most_common()},
    }


def py_spy() -> str:
    """py-spy from this interpreter's environment (bench/requirements.txt pins it), else from PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy not found beside the interpreter or on PATH: pip install -r bench/requirements.txt")
    return found


class ProfilerUnavailable(RuntimeError):
    """py-spy could not sample the subject (it needs ptrace: root, or kernel.yama.ptrace_scope=0)."""


def run(endpoint: str, concurrency: int = 16, window: float = 8.0, warmup: float = 2.0) -> dict[str, Any]:
    """Ours with the no-op handler at ``concurrency``, sampled by py-spy for the measurement window."""
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as directory:
        raw = Path(directory) / "raw.txt"
        spies: list[subprocess.Popen[bytes]] = []

        def sample(pid: int) -> None:
            time.sleep(warmup)  # the subject's own warm-up: sample only its measurement window
            command = [py_spy(), "record", "--pid", str(pid), "--gil", "--nonblocking", "--format", "raw"]
            command += ["-r", str(SAMPLE_RATE)]
            command += ["--duration", str(max(1, round(window))), "--output", str(raw)]
            spies.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

        row = measure(endpoint, "ours", concurrency, HANDLERS["noop"], warmup=warmup, window=window, observe=sample)
        for spy in spies:
            _, stderr = spy.communicate(timeout=window + 30)
            if spy.returncode != 0 or not raw.exists():
                raise ProfilerUnavailable(f"py-spy exited with code {spy.returncode}: {stderr.decode()[-2000:]}")
        summary = summarize(raw.read_text().splitlines())
    print(
        f"profile c={concurrency} {row['messages_per_second']:.1f} msg/s {row['cpu_ms_per_message'] or 0:.3f} CPU ms/msg"
        f"  {summary['samples']} samples: "
        + ", ".join(f"{name} {share:.0%}" for name, share in list(summary["categories"].items())[:5]),
        flush=True,
    )
    return {
        "concurrency": concurrency,
        "window_seconds": window,
        "sample_rate": SAMPLE_RATE,
        "messages_per_second": row["messages_per_second"],
        "cpu_ms_per_message": row["cpu_ms_per_message"],
        **summary,
    }
