"""The local SQS endpoint the benchmarks run against: ministack (default) or moto's server, on 127.0.0.1.

Why ministack by default: moto's ReceiveMessage gets about 0.77 ms slower per
queued message (see shared ENVIRONMENT.md), so against moto a throughput figure
measures moto, not the consumer. ministack stays at a few milliseconds per call
up to thousands of queued messages. It pins an older botocore, so it lives in
its own virtualenv (``.bench/ministack``), created on first use from
``bench/ministack-requirements.txt``. ``--endpoint moto`` runs the same
benchmarks on moto's server instead (in a subprocess, so it never shares the
measured process's interpreter lock).

Either way the producer keeps the queue shallow (a paced top-up, see
:class:`bench.common.Producer`), so no figure depends on the queue's depth.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MINISTACK_VENV = ROOT / ".bench" / "ministack"
MINISTACK_REQUIREMENTS = Path(__file__).with_name("ministack-requirements.txt")
START_TIMEOUT_SECONDS = 60
ENDPOINTS = ("ministack", "moto")


class EndpointError(RuntimeError):
    """The local endpoint could not be installed or did not start; the message says which and why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ministack_binary() -> Path:
    binary = MINISTACK_VENV / "bin" / "ministack"
    stamp = MINISTACK_VENV / ".installed"
    if binary.exists() and stamp.exists() and stamp.read_text() == MINISTACK_REQUIREMENTS.read_text():
        return binary
    subprocess.run([sys.executable, "-m", "venv", str(MINISTACK_VENV)], check=True)
    pip = [str(MINISTACK_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run([*pip, "-r", str(MINISTACK_REQUIREMENTS)], capture_output=True, text=True)
    if result.returncode != 0:
        raise EndpointError(f"installing ministack into {MINISTACK_VENV} failed: {result.stderr[-2000:]}")
    stamp.write_text(MINISTACK_REQUIREMENTS.read_text())
    return binary


def _wait_listening(port: int, process: subprocess.Popen, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EndpointError(f"{name} exited with code {process.returncode} before listening on port {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.1)
    raise EndpointError(f"{name} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_SECONDS} s")


@contextlib.contextmanager
def local_endpoint(kind: str = "ministack", *, counting: bool = False) -> Iterator[str]:
    """Start ``kind`` on a free loopback port; yields its URL and stops it afterwards.

    ``counting``: serve it behind :mod:`bench.counting_endpoint`, which counts requests and deletes per caller at
    ``/_bench/counts`` (the yardstick's way to count, outside the measured process); on moto, for the tests.
    """
    if kind not in ENDPOINTS:
        raise EndpointError(f"endpoint must be one of {', '.join(ENDPOINTS)}: {kind!r}")
    port = free_port()
    if kind == "ministack":
        # BIND_HOST: ministack listens on every interface unless told otherwise.
        env = {**os.environ, "BIND_HOST": "127.0.0.1", "GATEWAY_PORT": str(port), "LOG_LEVEL": "WARNING"}
        command = [str(_ministack_binary())]
        if counting:
            # ministack's interpreter runs the wrapper from this tree (standard library only besides ministack).
            command = [str(_ministack_binary().with_name("python")), "-m", "bench.counting_endpoint"]
            env["PYTHONPATH"] = str(ROOT)
    elif counting:
        env = {**os.environ, "GATEWAY_PORT": str(port), "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "bench.counting_endpoint", "moto"]
    else:
        env = dict(os.environ)
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, process, kind)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
