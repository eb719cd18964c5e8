"""The cells of ``python -m bench tracing``: ours with the no-op handler at saturation, tracing off then on.

Each round runs every cell in turn (off first) against the same local endpoint, one subject process each
(:func:`bench.throughput.measure`): messages per second, and the process's CPU per deleted message. The report's
ratios are each round's against that round's ``off`` cell, so a machine busier in one round than another moves
both alike. The ``otlp`` cell posts its spans to :class:`Sink`, an HTTP endpoint in this process that answers every
export with 200 and counts the spans' requests (as the collector sidecar on localhost would answer).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench import throughput

#: The cells, in the order each round runs them; "off" is the baseline.
CELLS = ("off", "sdk", "otlp")
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


def run(endpoint: str, *, rounds: int, window: float, warmup: float) -> dict[str, Any]:
    rows = []
    with sink() as url:
        for round_index in range(rounds):
            for cell in CELLS:
                _SinkHandler.posts = 0
                spec = f"otlp:{url}" if cell == "otlp" else cell
                row = throughput.measure(endpoint, "ours", CONCURRENCY, 0.0, warmup=warmup, window=window, tracing=spec)
                row.update(cell=cell, round=round_index, exports=_SinkHandler.posts)
                rows.append(row)
                print(
                    f"round {round_index + 1} {cell:4} {row['messages_per_second']:8.1f} msg/s"
                    f"  {row['cpu_ms_per_message'] or 0:.3f} CPU ms/msg  {row['requests_per_message'] or 0:.3f} req/msg",
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
        },
    }
