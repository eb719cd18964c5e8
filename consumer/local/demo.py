"""The local demo (``python -m consumer demo``, the second half of ``make run``): the whole system on moto.

What it does, with no AWS account:

1. provisions the ``demo`` stack from the synthesized ``cdk.out`` template on
   moto's server on 127.0.0.1 (:mod:`consumer.local.stack`);
2. starts a downstream webhook on 127.0.0.1 that behaves per event: accepts,
   fails transiently (HTTP 503 once or twice), answers slower than the queue's
   visibility lease, rejects (HTTP 422), or is in an outage until the operator
   step below;
3. starts ``python -m consumer run`` processes with the task's environment, the
   handler being the notifications example under the demo declaration;
4. produces a realistic mix, including malformed events, and restarts one
   consumer halfway (SIGTERM, as an ECS deployment does);
5. once the outage messages have exhausted their retries and sit in the DLQ,
   ends the outage and runs the operator's ``python -m consumer dlq redrive``;
6. stops the consumers with SIGTERM and accounts for every message: delivered
   exactly once at the webhook, or in the DLQ with a reason, nothing lost,
   nothing duplicated, and the SQS requests the consumers made per processed
   message (from their own EMF ``sqs_requests`` metric).

The exit code is 0 only if the accounting balances: every produced event is in
exactly one final place, the one its kind calls for, no event was delivered
twice, and every consumer exited 0 after SIGTERM.

moto is a development dependency; it is imported (through :mod:`consumer.local.stack`)
only when the demo runs.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console
from rich.table import Table

from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local import accounting
from consumer.local.display import LiveDisplay, output_console
from consumer.local.harness import (
    QUIET,
    TIMED_OUT,
    Fleet,
    LoopbackWebhook,
    Planned,
    Tick,
    batch_entries,
    batches,
    consumer_environment,
    demo_contract,
    event_id_of,
    queue_depth,
    quiet_seconds,
    read_dlq,
    sample_event,
    settle,
)
from consumer.ops.queues import fingerprint
from consumer.runtime.heartbeat import METRICS_FLUSH_SECONDS

#: The event kinds the producer mixes, and where each must end.
DELIVERED, DEAD_LETTERED = "delivered once", "DLQ with a reason"


class Kind(NamedTuple):
    share: float  # of the mix
    place: str  # where an event of this kind must end
    downstream: str  # what the webhook does with it


KINDS: dict[str, Kind] = {
    "good": Kind(0.45, DELIVERED, "HTTP 200 after 20-200 ms"),
    "flaky": Kind(0.15, DELIVERED, "HTTP 503 once or twice, then 200"),
    "slow": Kind(0.05, DELIVERED, "HTTP 200 after longer than the queue's visibility lease"),
    "malformed": Kind(0.15, DEAD_LETTERED, "never reached: not JSON or breaks the schema"),
    "rejected": Kind(0.05, DEAD_LETTERED, "HTTP 422 (a permanent refusal)"),
    "outage": Kind(0.15, DELIVERED, "HTTP 503 until the outage ends, then 200 (after a DLQ redrive)"),
}
#: The redrive filter: the exhausted-retries reason of an outage event names the handler's error.
REDRIVE_FILTER = "DownstreamUnavailable"
POLL_SECONDS = 0.5
#: Nothing moving for this long with the source empty means the run has settled: the demo contract's
#: lease plus its maximum backoff (10 + 4 s), and 6 s of slack.
QUIET_SECONDS = quiet_seconds(demo_contract(), margin_seconds=6.0)
#: How often the operator step may run: once, plus again for events that reach the DLQ after it.
REDRIVE_ROUNDS = 3


def _malformed_body(event_id: str, index: int, variant: int) -> str:
    """A body the handler must refuse as poison; the variants are the usual ways producers get it wrong."""
    good = sample_event(event_id, index)
    variants: list[Callable[[], str]] = [
        lambda: json.dumps(good)[:-7],  # truncated JSON
        lambda: "event_id=" + event_id + "&type=notification.requested",  # form-encoded, not JSON
        lambda: json.dumps([good]),  # an array, not an object
        lambda: json.dumps(sample_event(event_id, index, recipient=None)),  # a required field missing
        lambda: json.dumps(sample_event(event_id, index, channel="pigeon")),  # not an allowed channel
        lambda: json.dumps(sample_event(event_id, index, template="Welcome Email!")),  # breaks the template pattern
        lambda: json.dumps(sample_event(event_id, index, type="notification.sent")),  # wrong event type
        lambda: json.dumps({**good, "priority": "high"}),  # an unknown property
        lambda: "\ufeff" + json.dumps(good, ensure_ascii=False),  # a byte-order mark before the JSON
    ]
    return variants[variant % len(variants)]()


def build_mix(count: int, seed: int = 7) -> list[Planned]:
    """``count`` events in the shares of :data:`KINDS` (at least one of each), shuffled reproducibly."""
    if count < len(KINDS):
        raise ValueError(f'"messages" must be at least {len(KINDS)} (one of each kind): {count}')
    rng = random.Random(seed)
    counts = {name: max(1, round(count * kind.share)) for name, kind in KINDS.items()}
    counts["good"] += count - sum(counts.values())
    kinds = [kind for kind, n in counts.items() for _ in range(n)]
    rng.shuffle(kinds)
    planned = []
    malformed = 0
    for index, kind in enumerate(kinds):
        event_id = f"evt-demo-{index:05d}"
        if kind == "malformed":
            body, malformed = _malformed_body(event_id, index, malformed), malformed + 1
        else:
            body = json.dumps(sample_event(event_id, index), ensure_ascii=False)
        planned.append(Planned(event_id, kind, body, transient_failures=rng.choice((1, 2)) if kind == "flaky" else 0))
    return planned


# --------------------------------------------------------------------------- the downstream


class Downstream(LoopbackWebhook):
    """The webhook the example handler POSTs to, on 127.0.0.1; it records every attempt per event id.

    A success is counted when the 200 is sent, so ``successes[id] > 1`` is a duplicate side effect.
    """

    def __init__(self, plan: Iterable[Planned], slow_seconds: float) -> None:
        super().__init__()
        self.plan = {p.event_id: p for p in plan}
        self.slow_seconds = slow_seconds
        self.outage = threading.Event()
        self.outage.set()
        self.attempts: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.refusals: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._rng = random.Random(11)

    def respond(self, key: str, path: str) -> int:
        return self.answer(key)

    def answer(self, event_id: str) -> int:
        planned = self.plan.get(event_id)
        with self._lock:
            self.attempts[event_id] += 1
            attempt = self.attempts[event_id]
            pause = self._rng.uniform(0.02, 0.2)
        if planned is None:
            status = 400
        elif planned.kind == "rejected":
            status = 422
        elif planned.kind == "flaky" and attempt <= planned.transient_failures:
            status = 503
        elif planned.kind == "outage" and self.outage.is_set():
            status = 503
        else:
            status = 200
            if planned.kind == "slow":
                pause = self.slow_seconds
        time.sleep(pause)
        with self._lock:
            if status == 200:
                self.successes[event_id] += 1
            else:
                self.refusals[status] += 1
        return status

    def delivered(self) -> set[str]:
        with self._lock:
            return {event_id for event_id, n in self.successes.items() if n}


# --------------------------------------------------------------------------- accounting


@dataclass
class Accounting:
    """Where every produced event ended, and whether that balances."""

    produced: dict[str, int]
    delivered: int
    dead_lettered: dict[str, int]
    dlq_reasons: dict[str, int]
    duplicates: int
    lost: list[str]
    misplaced: list[str]
    unknown_in_dlq: list[str]
    in_two_places: list[str]
    left_in_source: int

    @property
    def balanced(self) -> bool:
        total = sum(self.produced.values())
        return (
            not self.lost
            and not self.misplaced
            and not self.unknown_in_dlq
            and not self.in_two_places
            and self.left_in_source == 0
            and self.delivered + sum(self.dead_lettered.values()) == total
        )


def account(
    plan: Iterable[Planned],
    successes: Mapping[str, int],
    dlq: Mapping[str, Mapping[str, Any] | None],
    left_in_source: int,
) -> Accounting:
    """Compare each planned event's final place with the one its kind calls for.

    ``successes``: 200 answers per event id at the downstream; ``dlq``: event id ->
    its reason record (None when it carries none), for every message in the DLQ;
    ``left_in_source``: messages still in the source queue.
    """
    planned = list(plan)
    known = {p.event_id for p in planned}
    delivered = {event_id for event_id, n in successes.items() if n > 0}
    found = accounting.places(
        (
            (p.event_id, accounting.DELIVERED if KINDS[p.kind].place == DELIVERED else accounting.DEAD_LETTERED)
            for p in planned
        ),
        delivered,
        {event_id: [reason] for event_id, reason in dlq.items()},
    )
    produced = Counter(p.kind for p in planned)
    dead_lettered = Counter(p.kind for p in planned if p.event_id in dlq)
    return Accounting(
        produced=dict(produced),
        delivered=len(delivered & known),
        dead_lettered=dict(dead_lettered),
        dlq_reasons=dict(Counter(": ".join(fingerprint(dlq[i])) for i in dlq if i in known)),
        duplicates=accounting.extra_deliveries(successes),
        lost=found.lost,
        misplaced=found.misplaced,
        unknown_in_dlq=sorted(set(dlq) - known),
        in_two_places=found.in_two_places,
        left_in_source=left_in_source,
    )


# --------------------------------------------------------------------------- the run


@dataclass
class DemoOptions:
    template: Path
    messages: int = 120
    consumers: int = 2
    slow_seconds: float = 14.0
    produce_seconds: float = 10.0
    rolling_restart: bool = True
    timeout_seconds: float = 300.0
    log_dir: Path = Path(".demo")
    report: Path | None = None


@dataclass
class DemoResult:
    accounting: Accounting
    consumers: list[dict[str, Any]]
    redrive: dict[str, Any]
    retried: int
    heartbeat_extensions: int
    requeued: int
    sqs_requests: int
    processed: int
    downstream_refusals: dict[str, int]
    elapsed_seconds: float
    timed_out_phase: str | None = None

    @property
    def requests_per_message(self) -> float | None:
        return self.sqs_requests / self.processed if self.processed else None

    @property
    def ok(self) -> bool:
        return (
            self.accounting.balanced
            and self.accounting.duplicates == 0
            and self.timed_out_phase is None
            and all(c["exit_code"] == 0 for c in self.consumers)
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["accounting"]["balanced"] = self.accounting.balanced
        data["requests_per_message"] = self.requests_per_message
        data["ok"] = self.ok
        return data


class Demo:
    """One run of the demo; :meth:`run` returns the result the report is made from."""

    def __init__(self, options: DemoOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.plan = build_mix(options.messages)
        self.phase = "provisioning"
        self.produced = 0
        self.started = time.monotonic()
        self._restart: threading.Thread | None = None
        self.depths = (0, 0, 0)  # (source visible, source in flight or delayed, DLQ), refreshed by _wait()

    def run(self) -> DemoResult:
        from consumer.local.stack import local_client, provision, start_server

        options = self.options
        options.log_dir.mkdir(parents=True, exist_ok=True)
        server, endpoint = start_server()
        downstream = Downstream(self.plan, options.slow_seconds)
        fleet: Fleet | None = None
        try:
            local = provision(endpoint, options.template)
            self.env = local.process_environment()
            self.queue_url, self.dlq_url = self.env["QUEUE_URL"], self.env["DLQ_URL"]
            self.console.print(
                f"local stack [bold]{local.stack_name}[/bold] on {endpoint} (from {options.template});"
                f" visibility {self.env['CONSUMER_VISIBILITY_TIMEOUT_SECONDS']} s,"
                f" max receives {self.env['CONSUMER_MAX_RECEIVE_COUNT']}, alarms: {len(local.alarms)}"
            )
            self.sqs = local_client("sqs", endpoint)
            downstream.start()
            fleet = Fleet(consumer_environment(self.env, {WEBHOOK_URL_ENV: downstream.url}), options.log_dir)
            stop_timeout = float(self.env["CONSUMER_STOP_TIMEOUT_SECONDS"])
            return self._run(downstream, fleet, stop_timeout)
        finally:
            if fleet is not None:
                fleet.kill_all()
            downstream.stop()
            server.stop()

    def _run(self, downstream: Downstream, fleet: Fleet, stop_timeout: float) -> DemoResult:
        options = self.options
        for _ in range(options.consumers):
            fleet.start()
        deadline = time.monotonic() + options.timeout_seconds
        expected_dlq = sum(1 for p in self.plan if KINDS[p.kind].place == DEAD_LETTERED)
        outage = {p.event_id for p in self.plan if p.kind == "outage"}
        must_deliver_first = {p.event_id for p in self.plan if KINDS[p.kind].place == DELIVERED} - outage
        timed_out: str | None = None
        redrive: dict[str, Any] = {}
        with self._display(downstream, fleet) as refresh:
            self.phase = "producing"
            producer = threading.Thread(target=self._produce, args=(fleet,), name="producer", daemon=True)
            producer.start()

            def settled_before_redrive() -> bool:
                # Every event delivered or in the DLQ, the source empty. Usually the DLQ then holds exactly
                # the poison and outage events; a flaky one can join them with its 503 as reason when a
                # receive nobody saw (a long poll left pending by a consumer that exited at the rolling
                # restart) spent one of its receives:
                # the redrive's filter takes it back with the outage events.
                visible, in_flight, dead = self.depths
                delivered = len(must_deliver_first & downstream.delivered())
                return (
                    not producer.is_alive()
                    and (visible, in_flight) == (0, 0)
                    and dead >= expected_dlq + len(outage)
                    and delivered + dead >= len(self.plan)
                )

            stalled = self._wait(settled_before_redrive, deadline, refresh, fleet, producer)
            if stalled:
                timed_out = f"{stalled} in the first pass (outage events exhausting their retries into the DLQ)"
            if stalled is None or stalled.startswith(QUIET):
                self.phase = "operator: downstream fixed, redriving the DLQ"
                downstream.outage.clear()
                redrive = self._redrive()
                self.phase = "reprocessing redriven events"
                everything = {p.event_id for p in self.plan if KINDS[p.kind].place == DELIVERED}
                for _ in range(REDRIVE_ROUNDS):
                    stalled = self._wait(
                        lambda: everything <= downstream.delivered() and self.depths == (0, 0, expected_dlq),
                        deadline,
                        refresh,
                        fleet,
                        producer,
                    )
                    if not (stalled and stalled.startswith(QUIET) and self.depths[2] > expected_dlq):
                        break
                    # A late arrival: an event with a receive lost to a pending poll at the restart can exhaust
                    # its retries after the first redrive. The operator redrives again, as one would.
                    self.phase = "operator: redriving late arrivals"
                    again = self._redrive()
                    redrive["moved"] += again["moved"]
                    redrive["exit_code"] = redrive["exit_code"] or again["exit_code"]
                    redrive["rounds"] = redrive.get("rounds", 1) + 1
                    self.phase = "reprocessing redriven events"
                if stalled:
                    timed_out = f"{stalled} while the redriven events were reprocessed"
            self.phase = "stopping consumers (SIGTERM)"
            refresh()
            if self._restart is not None:
                self._restart.join()
            fleet.stop_all(timeout=stop_timeout)
            fleet.read_logs()
            self.phase = "accounting"
            refresh()
        dlq, left_in_source = self._final_places()
        accounting = account(self.plan, downstream.successes, dlq, left_in_source)
        return DemoResult(
            accounting=accounting,
            consumers=[
                {
                    "number": c.number,
                    "exit_code": c.final_exit_code,
                    "stopped_in_seconds": c.stopped_in_rounded,
                    "log": str(c.log_path),
                }
                for c in fleet.processes
            ],
            redrive=redrive,
            retried=fleet.events["message_backoff"],
            heartbeat_extensions=int(fleet.metrics["visibility_extensions"]),
            requeued=int(fleet.metrics["requeued"]),
            sqs_requests=int(fleet.metrics["sqs_requests"]),
            processed=int(fleet.metrics["processed"]),
            downstream_refusals={str(k): v for k, v in sorted(downstream.refusals.items())},
            elapsed_seconds=round(time.monotonic() - self.started, 1),
            timed_out_phase=timed_out,
        )

    # --- steps ----------------------------------------------------------------
    def _produce(self, fleet: Fleet) -> None:
        """Send the plan in batches of 10, paced over ``produce_seconds``; a rolling restart halfway."""
        sends = batches(self.plan)
        pause = self.options.produce_seconds / max(1, len(sends))
        restarted = not self.options.rolling_restart
        stop_timeout = float(self.env["CONSUMER_STOP_TIMEOUT_SECONDS"])
        for batch in sends:
            entries = batch_entries({str(n): p for n, p in enumerate(batch)})
            response = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            if response.get("Failed"):
                raise RuntimeError(f"SendMessageBatch to {self.queue_url} failed: {response['Failed']}")
            self.produced += len(batch)
            if not restarted and self.produced >= len(self.plan) // 2:
                restarted = True
                self._restart = threading.Thread(target=self._deploy, args=(fleet, stop_timeout), name="deploy")
                self._restart.start()
            time.sleep(pause)

    def _deploy(self, fleet: Fleet, stop_timeout: float) -> None:
        """An ECS rolling deployment: a new task starts and reports running, then the oldest gets SIGTERM."""
        old = fleet.alive()[0]
        new = fleet.start()
        deadline = time.monotonic() + 60
        while not new.ready and new.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the display's read_logs() marks it ready
        fleet.stop(old, timeout=stop_timeout)

    def _redrive(self) -> dict[str, Any]:
        """The operator's command, as a subprocess with the task's queue binding."""
        command = [sys.executable, "-m", "consumer", "dlq", "redrive", "--filter", REDRIVE_FILTER]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | self.env
        before = self._depths()[2]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        after = self._depths()[2]
        summary = [line for line in done.stdout.splitlines() if line.strip()]
        return {
            "command": "python -m consumer dlq redrive --filter " + REDRIVE_FILTER,
            "exit_code": done.returncode,
            "moved": before - after,
            "output": summary[-5:],
        }

    def _depths(self) -> tuple[int, int, int]:
        """(source visible, source in flight or delayed, DLQ visible + in flight)."""
        source, dlq = queue_depth(self.sqs, self.queue_url), queue_depth(self.sqs, self.dlq_url)
        return source.visible, source.not_visible + source.delayed, dlq.visible + dlq.not_visible

    def _wait(
        self,
        done: Callable[[], bool],
        deadline: float,
        refresh: Callable[[], None],
        fleet: Fleet,
        producer: threading.Thread,
    ) -> str | None:
        """None once ``done()``; otherwise why the wait ended: timed out, a consumer died, or nothing moves.

        The queue depths are read once per tick, into ``self.depths``, for ``done()`` and the display.
        """

        def look() -> Tick:
            self.depths = self._depths()
            refresh()
            if fleet.crashed():
                self.phase = "a consumer exited on its own: stopping"
                return Tick(None, True, stop="a consumer exited on its own")
            busy = self.depths[:2] != (0, 0) or producer.is_alive()
            return Tick((self.depths, sum(fleet.events.values())), busy)

        stalled = settle(look, done, deadline=deadline, poll_seconds=POLL_SECONDS, quiet_seconds=QUIET_SECONDS)
        if stalled == QUIET:
            # Source empty and nothing logged for longer than any backoff or lease: it will not get there.
            return f"{QUIET} for {QUIET_SECONDS:.0f} s short of the expected places"
        if stalled == TIMED_OUT:
            return f"timed out after {self.options.timeout_seconds:.0f} s"
        return stalled

    def _final_places(self) -> tuple[dict[str, dict[str, Any] | None], int]:
        """Every DLQ message by event id (with its reason), and how many are left in the source."""
        dlq = {
            event_id_of(message) or message["MessageId"]: reason for message, reason in read_dlq(self.sqs, self.dlq_url)
        }
        self.depths = self._depths()
        return dlq, self.depths[0] + self.depths[1]

    # --- display --------------------------------------------------------------
    def _snapshot(self, downstream: Downstream, fleet: Fleet) -> Table:
        visible, in_flight, dlq = self.depths
        table = Table(title=f"sqs-worker demo - {self.phase}", show_header=False, min_width=60)
        table.add_column(style="bold")
        table.add_column(justify="right")
        table.add_row("elapsed", f"{time.monotonic() - self.started:.0f} s")
        table.add_row("produced", f"{self.produced} / {len(self.plan)}")
        table.add_row("source queue: visible / in flight", f"{visible} / {in_flight}")
        table.add_row("dead-letter queue", str(dlq))
        table.add_row("delivered at the webhook (unique)", str(len(downstream.delivered())))
        table.add_row("processed / retried / poisoned", _triple(fleet.events, "message_processed", "message_backoff"))
        # A consumer writes its metrics every METRICS_FLUSH_SECONDS and when it stops: until then this lags
        # behind the extensions made (the closing report counts after every consumer has stopped).
        table.add_row(
            f"heartbeat extensions (metric, written every {METRICS_FLUSH_SECONDS} s and at stop)",
            str(int(fleet.metrics["visibility_extensions"])),
        )
        table.add_row("consumer processes running", str(len(fleet.alive())))
        return table

    def _display(self, downstream: Downstream, fleet: Fleet) -> LiveDisplay:
        return LiveDisplay(self.console, lambda: self._snapshot(downstream, fleet), tick=fleet.read_logs)


def _triple(events: Mapping[str, int], processed: str, retried: str) -> str:
    return f"{events.get(processed, 0)} / {events.get(retried, 0)} / {events.get('moved_to_dlq:poison', 0)}"


def run_demo(options: DemoOptions, console: Console | None = None) -> int:
    """Run the demo, print the report, write ``options.report`` (JSON) if set; returns the exit code."""
    from consumer.local.demo_report import render_report

    console = console or output_console()
    result = Demo(options, console).run()
    render_report(result, console)
    if options.report is not None:
        options.report.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return 0 if result.ok else 1
