"""Benchmark 7: synth time (ours vs the aws-ecs-patterns baseline) and the test suite's time as `make test` runs it."""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.common import ROOT

SYNTH_RUNS = 3


def make_test_command() -> list[str]:
    """The pytest command `make test` runs (the Makefile's ``test:`` recipe), with this interpreter for ``$(PY)``."""
    match = re.search(r"^test:.*\n\t\$\(PY\) (-m pytest .*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(
            "the Makefile's test recipe runs no `$(PY) -m pytest`: the suite's figure would not be make test's"
        )
    return [sys.executable, *shlex.split(match[1])]


def _timed(command: list[str], env: dict[str, str] | None = None, timeout: float = 900, check: bool = True) -> float:
    began = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stdout[-12000:]}")
    return time.monotonic() - began


def synth_seconds(script: str, context: dict[str, Any] | None = None, runs: int = SYNTH_RUNS) -> list[float]:
    """Wall time of ``python <script>`` into a fresh outdir, ``runs`` times (the first warms the jsii cache)."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as outdir:
            env = {**os.environ, "CDK_OUTDIR": outdir}  # make bench puts the pinned Node first on PATH
            if context:
                env["CDK_CONTEXT_JSON"] = json.dumps(context)
            times.append(_timed([sys.executable, script], env))
    return times


def run(suite: bool = True) -> dict[str, Any]:
    synth = {
        "baseline: QueueProcessingFargateService, 1 stack, no cdk-nag": synth_seconds("bench/baseline_app.py"),
        "ours: app.py -c env=prod, 1 stack, cdk-nag": synth_seconds("app.py", {"env": "prod"}),
        "ours: app.py, all 4 environments, cdk-nag": synth_seconds("app.py"),
    }
    rows = [{"what": what, "median_seconds": statistics.median(times), "runs": times} for what, times in synth.items()]
    for row in rows:
        print(f"synth {row['median_seconds']:6.1f} s  {row['what']}", flush=True)
    tiers = []
    if suite:
        command = make_test_command()
        seconds = _timed([*command, "-q", "-p", "no:cacheprovider"], timeout=1800)
        tiers.append({"tier": f"the whole suite, as `make test` runs it ({' '.join(command[1:])})", "seconds": seconds})
        print(f"suite {seconds:6.1f} s  as make test runs it", flush=True)
    return {"synth": rows, "suite": tiers}
