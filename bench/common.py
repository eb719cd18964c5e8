"""What every benchmark shares: queues on the local endpoint, a paced producer, and the subject process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from consumer.producer import batches
from consumer.queue_attributes import QueueAttributes
from consumer.testing import depth

ROOT = Path(__file__).resolve().parents[1]
#: The evidence folder: the benchmark and chaos pages, their plots and their JSON results (docs/evidence/).
EVIDENCE = ROOT / "docs" / "evidence"
RESULTS = EVIDENCE / "bench"
REGION = "eu-west-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION}
IMPLS = ("ours", "naive")
TOP_UP_BYTES = 16 * 1024 * 1024


def environment(root: Path = ROOT) -> dict[str, str]:
    """A subject process's environment: the endpoint's credentials, and ``root``'s packages first on the path."""
    return {**os.environ, **CREDENTIALS, "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": str(root)}


@contextmanager
def tree_at(commit: str) -> Iterator[Path]:
    """This repository's files at ``commit`` in a temporary directory, removed on exit.

    Read with ``git archive``: nothing is checked out and no git state changes here. A :class:`Subject` given the
    directory as ``source_tree`` runs that commit's ``bench.subject`` and ``consumer`` in this interpreter.
    """
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True)
    with tempfile.TemporaryDirectory(prefix=f"bench-{commit}-") as directory:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(directory, filter="data")
        yield Path(directory)


def client(endpoint: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"mode": "standard"}, max_pool_connections=20),
    )


def make_queues(
    sqs: Any, visibility_seconds: int, max_receive_count: int = 100, max_message_bytes: int | None = None
) -> tuple[str, str]:
    """A fresh source queue and DLQ (unique names); returns (source URL, DLQ URL).

    Not a contract's pair: the naive baseline has no contract, and the default 100 receives keep SQS's redrive
    out of every measurement; the rest stays at SQS's defaults (``max_message_bytes``: the source's
    MaximumMessageSize, for bodies over the 256 KiB default).
    """
    name = f"bench-{uuid.uuid4().hex[:10]}"
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source_attributes = QueueAttributes(
        visibility_timeout_seconds=visibility_seconds,
        redrive_max_receive_count=max_receive_count,
        maximum_message_bytes=max_message_bytes,
    )
    source = sqs.create_queue(QueueName=name, Attributes=source_attributes.to_sqs(dead_letter_target_arn=arn))[
        "QueueUrl"
    ]
    return source, dlq


def body(fields: dict[str, Any], sent: float, size: int | None = None) -> str:
    """The message body: ``fields`` and ``sent`` as JSON, padded (a ``pad`` field) to exactly ``size`` bytes."""
    if size is None:
        return json.dumps({**fields, "sent": sent})
    unpadded = len(json.dumps({**fields, "sent": sent, "pad": ""}))
    if size < unpadded:
        raise ValueError(f'"size" must be at least {unpadded} bytes, the event without padding: {size}')
    return json.dumps({**fields, "sent": sent, "pad": "x" * (size - unpadded)})


def send(sqs: Any, queue_url: str, events: list[dict[str, Any]], body_bytes: int | None = None) -> None:
    """Send ``events`` in batches; ``body_bytes`` pads every body to that size (ASCII: bytes = characters)."""
    sent = time.time()
    entries = [{"Id": str(i), "MessageBody": body(e, sent, body_bytes)} for i, e in enumerate(events)]
    for call in batches(entries):
        sqs.send_message_batch(QueueUrl=queue_url, Entries=call)


class Producer:
    """Keeps about ``target`` messages visible: a paced top-up, so the queue never grows deep.

    A deep queue would measure the endpoint (moto's receive slows with depth), and a
    consumer that never waits for work is what "at saturation" means.
    """

    def __init__(
        self,
        endpoint: str,
        queue_url: str,
        target: int,
        event: Callable[[], dict[str, Any]],
        body_bytes: int | None = None,
    ) -> None:
        self.sqs = client(endpoint)
        self.queue_url, self.target, self.event, self.body_bytes = queue_url, target, event, body_bytes
        # At most about 16 MiB of bodies per top-up: 100 bodies of 1 MiB would be 100 MiB in this process.
        self.top_up = 100 if body_bytes is None else max(1, min(100, TOP_UP_BYTES // body_bytes))
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            visible, _ = depth(self.sqs, self.queue_url)
            missing = self.target - visible
            if missing >= 10:
                batch = [self.event() for _ in range(min(missing, self.top_up))]
                send(self.sqs, self.queue_url, batch, self.body_bytes)
                self.sent += len(batch)
            else:
                self._stop.wait(0.02)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def event(**fields: Any) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, **fields}


class Subject:
    """``python -m bench.subject`` in its own process; ``ready()`` waits until it is polling and idle-measured.

    ``source_tree``: run the subject from that directory (its working directory and ``PYTHONPATH``), e.g. another
    commit's files from :func:`tree_at`; by default this repository's. ``options`` become the subject's flags.
    """

    def __init__(
        self, endpoint: str, impl: str, queue_url: str, *, source_tree: Path | None = None, **options: Any
    ) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="bench-")
        self.result_path = Path(self._dir.name) / "result.json"
        self.record_path = Path(self._dir.name) / "record.jsonl"
        command = [
            sys.executable,
            "-m",
            "bench.subject",
            "--impl",
            impl,
            "--queue-url",
            queue_url,
            "--endpoint",
            endpoint,
            "--result",
            str(self.result_path),
        ]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            command += [flag, str(self.record_path)] if key == "record" else [flag, str(value)]
        self.process = subprocess.Popen(
            command,
            cwd=source_tree or ROOT,
            env=environment(source_tree or ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ready(self) -> None:
        """Block until the subject prints "ready" (it exits, and so ends the read, if it cannot start)."""
        line = self.process.stdout.readline() if self.process.stdout else ""
        if line.strip() != "ready":
            self.process.kill()
            raise RuntimeError(f"subject did not start: {line!r} {self.process.stderr.read()[-3000:]}")

    def wait(self, timeout: float = 300) -> int:
        return self.process.wait(timeout)

    def result(self) -> dict[str, Any]:
        if not self.result_path.exists():
            stderr = self.process.stderr.read()[-3000:] if self.process.stderr else ""
            raise RuntimeError(f"subject wrote no result (exit {self.process.returncode}): {stderr}")
        return json.loads(self.result_path.read_text())

    def records(self) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        return [json.loads(line) for line in self.record_path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._dir.cleanup()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path
