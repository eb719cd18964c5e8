"""The cells of ``python -m bench tracing``: ours with the no-op handler at saturation, before tracing existed, with
tracing off (opentelemetry importable, then not), and with tracing on.

* ``before``: the subject and the runtime of :data:`BEFORE_COMMIT`, the last commit before tracing, exported with
  ``git archive`` to a temporary directory (:func:`bench.common.tree_at`) and run from there in this interpreter:
  the baseline;
* ``off``: this tree, ``CONSUMER_TRACING`` unset;
* ``absent``: this tree, tracing off, with every ``opentelemetry`` import refused in the subject process
  (:func:`bench.tracing.subject.refuse_opentelemetry`);
* ``sdk`` and ``otlp``: tracing on (:mod:`bench.tracing.subject`).

Each round runs every cell once against the same local endpoint, one subject process each
(:func:`bench.throughput.measure`): messages per second, and the process's CPU per deleted message. Each round
starts one cell later than the last (round 2 at ``off``, round 3 at ``absent``...), so no cell always runs first or
last. The report's ratios are each round's against that round's ``before`` cell, so a machine busier in one round
than another moves both alike. The ``otlp`` cell posts its spans to :class:`Sink`, an HTTP endpoint in this process
that answers every export with 200 and counts the spans' requests (as the collector sidecar on localhost would
answer).
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import throughput
from bench.common import environment, tree_at

#: The cells, in the order the first round runs them; each later round starts one further along.
CELLS = ("before", "off", "absent", "sdk", "otlp")
#: The cell every ratio is taken against.
BASELINE = "before"
#: The last commit before tracing: 69ced6f added it, and this is its parent.
BEFORE_COMMIT = "d191a92"
CONCURRENCY = 16


class _SinkHandler(http.server.BaseHTTPRequestHandler):
    posts = 0
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with _SinkHandler.lock:
            _SinkHandler.posts += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that accepts every export; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SinkHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def order(round_index: int) -> tuple[str, ...]:
    """The cells in the order round ``round_index`` (from 0) runs them: :data:`CELLS` rotated by the round."""
    shift = round_index % len(CELLS)
    return CELLS[shift:] + CELLS[:shift]


def imported_from(tree: Path) -> Path:
    """Where a subject started from ``tree`` imports ``consumer`` from (the harness checks it is ``tree``'s)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import bench.subject, consumer; print(consumer.__file__)"],
        cwd=tree,
        env=environment(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(probe.stdout.strip())


def _options(cell: str, sink_url: str, before_tree: Path) -> dict[str, Any]:
    if cell == BASELINE:
        return {"source_tree": before_tree}  # that commit's subject has no --tracing option
    return {"tracing": f"otlp:{sink_url}" if cell == "otlp" else cell}


def run(endpoint: str, *, rounds: int, window: float, warmup: float) -> dict[str, Any]:
    rows = []
    with sink() as url, tree_at(BEFORE_COMMIT) as before_tree:
        source = imported_from(before_tree)
        if before_tree not in source.parents:
            raise RuntimeError(f"the {BASELINE} cell would import consumer from {source}, not from {before_tree}")
        for round_index in range(rounds):
            for cell in order(round_index):
                _SinkHandler.posts = 0
                row = throughput.measure(
                    endpoint, "ours", CONCURRENCY, 0.0, warmup=warmup, window=window, **_options(cell, url, before_tree)
                )
                row.update(cell=cell, round=round_index, exports=_SinkHandler.posts)
                rows.append(row)
                print(
                    f"round {round_index + 1} {cell:6} {row['messages_per_second']:8.1f} msg/s"
                    f"  {row['cpu_ms_per_message'] or 0:.3f} CPU ms/msg  {row['requests_per_message'] or 0:.3f} req/msg"
                    f"  opentelemetry modules {row['opentelemetry_modules']}",
                    flush=True,
                )
    return {
        "rows": rows,
        "settings": {
            "rounds": rounds,
            "window_seconds": window,
            "warmup_seconds": warmup,
            "concurrency": CONCURRENCY,
            "cells": list(CELLS),
            "baseline": BASELINE,
            "before_commit": BEFORE_COMMIT,
        },
    }
