"""The process under test: our ``Consumer`` or the naive baseline, on one queue, with one handler.

``python -m bench.subject --impl ours|naive --queue-url URL --endpoint URL --result FILE ...``

The naive baseline is the consumer from the usual blog posts: receive up to 10,
run the handler on each in turn, delete each with its own ``DeleteMessage``,
and sleep a fixed delay when the queue was empty; no heartbeat, no signal
handling. At concurrency N it runs N such loops on N threads, the usual way to
scale it. Ours is :class:`consumer.runtime.consumer.Consumer` with a contract built from
the options, as the container builds it from the task's environment.

The handler sleeps ``body["sleep"]`` seconds (default ``--sleep``): 0 is a no-op
handler, 0.05 an I/O-bound one (a sleep releases the interpreter lock, as a
network call does). Every handler start is counted per message id (duplicates)
and its pickup latency (start - ``body["sent"]``, same host clock) is kept.

Both count their own SQS requests with botocore's ``before-send`` event, the
requests SQS bills (64 KiB chunks of a call's payload, :func:`billed_units`)
with ``response-received``, and the messages SQS confirmed deleted with ``after-call``, over a measurement window
after a warm-up. Optional ``--record FILE`` appends one JSON line per handler
start and end as they happen, so a process killed mid-run still leaves its record.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import typer
from botocore.config import Config
from botocore.exceptions import ClientError

from bench.tracing.subject import subject_tracer
from consumer.contract import WorkerContract
from consumer.limits import SQS_CLIENT, SQS_MAX_BATCH
from consumer.runtime import consumer as runtime
from consumer.runtime.clients import client_config
from consumer.runtime.consumer import Collaborators, Consumer
from consumer.runtime.observability import Metrics, configure_logging

NAIVE_EMPTY_DELAY_SECONDS = 1.0
#: https://aws.amazon.com/sqs/pricing/ and the SQS FAQ: each 64 KB (65,536 bytes) chunk of a payload is one request.
BILLED_CHUNK_BYTES = 64 * 1024
app = typer.Typer(add_completion=False)


def rss_kib() -> dict[str, int]:
    """Resident set size now and at its peak (KiB), from /proc (Linux)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return {"rss_kib": fields.get("VmRSS", 0), "peak_rss_kib": fields.get("VmHWM", 0)}


def client_config_for(concurrency: int) -> Config:
    """The container's SQS client configuration (bounded timeouts, standard retries), for every implementation.

    Merged with a connection pool large enough for ``concurrency`` threads (botocore's default of 10 would make
    a 64-thread baseline queue for connections, which measures the pool, not the loop).
    """
    return client_config(SQS_CLIENT).merge(Config(max_pool_connections=max(10, concurrency + 10)))


def billed_units(request_bytes: int, response_bytes: int) -> int:
    """SQS's billed requests for one call: every started 64 KiB chunk of its payload, at least one.

    "Each 64 KB chunk of a payload is billed as 1 request" (SQS pricing FAQ; a 256 KiB payload is 4). The
    payload counted is the larger of the request and the response body: a send carries its messages in the
    request, a receive in the response.
    """
    payload = max(request_bytes, response_bytes)
    return max(1, -(-payload // BILLED_CHUNK_BYTES))


class Recorder:
    """Handler starts, ends, requests (as sent and as billed) and deletes; thread-safe, snapshot-able."""

    def __init__(self, record: Path | None) -> None:
        self._lock = threading.Lock()
        self._call = threading.local()  # the request body's size, from before-send to response-received
        self.billed = 0
        self.requests: Counter[str] = Counter()
        self.deleted = 0
        self.finished = 0
        self.starts: Counter[str] = Counter()
        self.latencies: list[float] = []
        self._record = record.open("a", buffering=1) if record else None

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-send.sqs.*", self._on_send)
        client.meta.events.register("response-received.sqs.*", self._on_response)
        client.meta.events.register("after-call.sqs.DeleteMessageBatch", self._on_batch_delete)
        client.meta.events.register("after-call.sqs.DeleteMessage", self._on_delete)

    def _on_send(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        name = target.decode() if isinstance(target, bytes) else str(target)
        # botocore sends and receives one attempt on the calling thread: response-received follows on this one.
        self._call.request_bytes = len(request.body or b"")
        with self._lock:
            self.requests[name.rsplit(".", 1)[-1] or "unknown"] += 1

    def _on_response(self, response_dict: dict[str, Any] | None, **_: Any) -> None:
        """Once per attempt, as before-send: an attempt that got no answer is billed on its request alone."""
        response_bytes = len(response_dict.get("body") or b"") if response_dict else 0
        units = billed_units(getattr(self._call, "request_bytes", 0), response_bytes)
        with self._lock:
            self.billed += units

    def _on_batch_delete(self, parsed: dict, **_: Any) -> None:
        with self._lock:
            self.deleted += len(parsed.get("Successful", []))

    def _on_delete(self, http_response: Any, **_: Any) -> None:
        if http_response.status_code == 200:
            with self._lock:
                self.deleted += 1

    def started(self, event_id: str, sent: float | None) -> None:
        now = time.time()
        with self._lock:
            self.starts[event_id] += 1
            if sent is not None:
                self.latencies.append(now - sent)
            if self._record:
                self._record.write(json.dumps({"e": "start", "id": event_id, "t": now, "sent": sent}) + "\n")

    def ended(self, event_id: str) -> None:
        with self._lock:
            self.finished += 1
            if self._record:
                self._record.write(json.dumps({"e": "end", "id": event_id, "t": time.time()}) + "\n")

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": sum(self.requests.values()),
                "billed_requests": self.billed,
                "deleted": self.deleted,
                "finished": self.finished,
            }


def make_handler(recorder: Recorder, default_sleep: float):
    def handle(body: str) -> None:
        event = json.loads(body)
        recorder.started(event["id"], event.get("sent"))
        time.sleep(event.get("sleep", default_sleep))
        recorder.ended(event["id"])

    return handle


class Naive:
    """The baseline: N threads of receive 10 / handle each / delete each / fixed delay when empty."""

    def __init__(self, client: Any, queue_url: str, concurrency: int, handle) -> None:
        self.client, self.queue_url, self.handle = client, queue_url, handle
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(concurrency)]

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            messages = self.client.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=SQS_MAX_BATCH).get(
                "Messages", []
            )
            if not messages:
                time.sleep(NAIVE_EMPTY_DELAY_SECONDS)
                continue
            for message in messages:
                try:
                    self.handle(message["Body"])
                except Exception:  # noqa: BLE001 (the baseline leaves a failed message to its visibility timeout)
                    continue
                try:
                    self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                except ClientError:
                    # A handle from an expired lease (the message was received again elsewhere): the usual
                    # post leaves this unhandled and the thread dies; the baseline keeps its threads alive.
                    continue

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(30)


@app.command()
def main(
    impl: str = typer.Option(..., help="ours | naive"),
    queue_url: str = typer.Option(...),
    endpoint: str = typer.Option(...),
    result: Path = typer.Option(..., help="where to write the JSON result"),
    dlq_url: str = typer.Option("", help="ours only"),
    concurrency: int = typer.Option(1),
    sleep: float = typer.Option(0.0, help="handler duration when the body names none"),
    max_duration: int = typer.Option(30, help="ours: the declared max duration (s)"),
    max_lease: int = typer.Option(900, help="ours: the declared max lease (s)"),
    idle_seconds: float = typer.Option(1.5, help="idle before 'ready' (idle RSS is taken then)"),
    warmup_seconds: float = typer.Option(2.0),
    window_seconds: float = typer.Option(8.0, help="0: run until SIGTERM"),
    record: Path | None = typer.Option(None, help="append one JSON line per handler start/end"),
    batch_fill: float | None = typer.Option(None, help="ours: override BATCH_FILL_SECONDS (ablation)"),
    log_level: str = typer.Option("INFO", help="ours: CONSUMER_LOG_LEVEL (the container's default is INFO)"),
    lookahead: float | None = typer.Option(None, help="ours: override LOOKAHEAD_WAIT_SECONDS (ablation; 0 = off)"),
    tracing: str = typer.Option(
        "off", help="ours: off | absent (off, opentelemetry unimportable) | sdk | otlp:<endpoint> (bench tracing)"
    ),
) -> None:
    if impl == "ours":
        # Ours logs as the container does (JSON lines at INFO; the lines go nowhere here, their formatting is the
        # cost): a benchmark that silenced them would not measure what a task pays per message.
        configure_logging(stream=open(os.devnull, "w"), level=log_level)  # noqa: SIM115 (lives as long as the process)
    else:
        logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    client = boto3.client("sqs", endpoint_url=endpoint, config=client_config_for(concurrency))
    recorder = Recorder(record)
    recorder.attach(client)
    handle = make_handler(recorder, sleep)
    if impl == "ours":
        if batch_fill is not None:
            runtime.BATCH_FILL_SECONDS = batch_fill
        if lookahead is not None:
            runtime.LOOKAHEAD_WAIT_SECONDS = lookahead
        contract = WorkerContract(
            max_duration_seconds=max_duration, concurrency=concurrency, max_lease_seconds=max_lease
        )
        consumer = Consumer(
            client,
            queue_url=queue_url,
            dlq_url=dlq_url or None,
            contract=contract,
            handler=lambda message: handle(message.body),
            collaborators=Collaborators(
                metrics=Metrics(stream=open("/dev/null", "w")),  # noqa: SIM115 (lives as long as the process)
                tracer=subject_tracer(tracing),
            ),
        )
        runner = threading.Thread(target=consumer.run, daemon=True)
        stop = consumer.stop
        # SIGTERM as ECS sends it: the consumer drains and exits; the naive baseline has no handler (it dies).
        signal.signal(signal.SIGTERM, lambda *_: consumer.stop())
        runner.start()
        join = runner.join
    elif impl == "naive":
        naive = Naive(client, queue_url, concurrency, handle)
        naive.start()
        forever = threading.Event()  # the naive process runs until SIGTERM kills it (it has no handler)
        stop, join = naive.stop, (lambda timeout=None: forever.wait(timeout))
    else:
        raise typer.BadParameter(f"must be ours or naive: {impl!r}", param_hint="--impl")
    time.sleep(idle_seconds)
    idle = rss_kib()
    print("ready", flush=True)
    if window_seconds <= 0:
        # Shutdown runs: wait for SIGTERM (ours drains and returns; the naive process is killed by it).
        join()
        result.write_text(json.dumps({"impl": impl, "idle": idle, "load": rss_kib(), **recorder.snapshot()}))
        return
    time.sleep(warmup_seconds)
    begin, t0, cpu0 = recorder.snapshot(), time.monotonic(), time.process_time()
    time.sleep(window_seconds)
    end, t1, cpu1 = recorder.snapshot(), time.monotonic(), time.process_time()
    load = rss_kib()
    stop()
    if impl == "ours":
        join(60)  # the naive stop() already joined its threads
    window = {key: end[key] - begin[key] for key in end}
    result.write_text(
        json.dumps(
            {
                "impl": impl,
                "concurrency": concurrency,
                "sleep": sleep,
                "seconds": t1 - t0,
                # The process's CPU time (every thread, user and system) over the window: what a task's bill scales with.
                "cpu_seconds": cpu1 - cpu0,
                "window": window,
                "requests_by_operation": dict(recorder.requests),
                "total": recorder.snapshot(),
                "latencies": recorder.latencies,
                "starts": dict(recorder.starts),
                "idle": idle,
                "load": load,
                "opentelemetry_modules": sum(name.partition(".")[0] == "opentelemetry" for name in sys.modules),
            }
        )
    )


if __name__ == "__main__":
    app()
