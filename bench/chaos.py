"""The chaos suite (issue #5): ``python -m bench.chaos``, bounded in time and count, loopback only.

What one run does, all on 127.0.0.1 with no AWS account:

1. provisions the ``demo`` stack from ``cdk.out/SqsWorker-demo.template.json`` on
   moto's server (:mod:`consumer.local.stack`) and puts the fault-injecting proxy of
   :mod:`bench.proxy` in front of it: the consumers' ``AWS_ENDPOINT_URL`` is the
   proxy, so every SQS call they make may be throttled, fail with HTTP 500
   before reaching moto, or be applied and then answered with HTTP 500 (a lost
   answer). The idempotency table (DynamoDB) is reached directly: the faults
   are SQS's, and the table is what keeps side effects single across them;
2. **chaos phase**: ``--consumers`` ``python -m consumer run`` processes consume
   a paced stream of ``--messages`` events (good ones, downstream-flaky ones,
   malformed ones and ones the downstream rejects) while one random consumer is
   SIGKILLed every ``--kill-every`` seconds and replaced, and the endpoint is
   restarted once (the proxy stops listening for ``--outage-seconds``; moto's
   state is in memory, so restarting moto itself would lose every queue);
3. **corpus phase** (faults paused, no kills, and sent once every request from
   before the pause has been answered): the bad-input corpus of
   :mod:`bench.corpus`, one message per kind, then a few good canaries: each
   corpus message must reach the DLQ with a reason at its first receive, and the
   consumers must still be running and delivering;
4. **FIFO phase**: a FIFO pair (attributes from the FIFO declaration, checked by
   the consumer's own drift check at start) and its consumer: poison in the
   middle and at the head of a group, a shared deduplication id, 128-character ids;
5. SIGTERM to every consumer still running (each must exit 0), then the
   accounting: each produced event is applied once at the downstream or in the
   DLQ with a reason; lost = produced - (applied | DLQ) must be empty.

Exit code 1 if anything is lost, in a wrong place, in two places, in the DLQ
without a reason, a corpus message missed the DLQ at its first receive, a
repeat delivery is not explained by a SIGKILL, or a consumer did not exit 0.
A repeat delivery or an event in two places that the evidence traces to the
endpoint (moto's server handing one message to two receives at once, or its
store admitting two claims on one key), or to the SIGKILLs (an event applied or
dead-lettered whose every later holder was killed before its delete was applied,
until SQS's redrive moved it; one dead-lettered, its holder killed before the
delete, then applied), is reported, not failed, as is a DLQ copy without a reason
they explain: :mod:`bench.chaos_evidence` says how each is told apart.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import boto3
import typer
from botocore.config import Config
from rich.console import Console

from bench.chaos_accounting import (
    KINDS,
    PLACES,
    ChaosResult,
    account_stream,
    consumer_endings,
    corpus_checks,
    dlq_copies,
    reported_events,
    sort_dlq,
    stream_failures,
)
from bench.chaos_evidence import Delivery, ReceiveLog, trace
from bench.chaos_fifo import create_fifo_pair, fifo_report
from bench.chaos_fleet import Supervisor
from bench.chaos_report import render, write_markdown
from bench.corpus import KEY_ATTRIBUTE, Case, fifo_cases, standard_cases
from bench.proxy import FaultPlan, FaultProxy
from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.display import output_console
from consumer.local.harness import (
    TIMED_OUT,
    Fleet,
    LoopbackWebhook,
    Planned,
    Tick,
    batch_entries,
    batches,
    consumer_environment,
    demo_contract,
    queue_depth,
    quiet_seconds,
    read_dlq,
    sample_event,
    settle,
)
from consumer.local.stack import LOCAL_LOG_LEVEL

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cdk.out" / "SqsWorker-demo.template.json"
POLL_SECONDS = 1.0
#: Nothing moving for this long (source empty) means the phase has settled: the demo contract's lease
#: plus its maximum backoff (10 + 4 s) and two ticks, so every lease a SIGKILL left has expired.
QUIET_SECONDS = quiet_seconds(demo_contract(), margin_seconds=2 * POLL_SECONDS)
EVENT_PREFIX = "evt-chaos-"  # the stream's event ids: evt-chaos-00000, ...
PRODUCER_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)


@dataclass
class ChaosOptions:
    """One run's size, faults and outputs (the CLI's options)."""

    messages: int = 3000
    consumers: int = 4
    kill_every_seconds: float = 5.0
    outage_seconds: float = 5.0
    throttle: float = 0.03
    error_before: float = 0.02
    error_after: float = 0.02
    rate_per_second: float = 60.0
    max_depth: int = 150
    timeout_seconds: float = 840.0
    seed: int = 5
    template: Path = TEMPLATE
    log_dir: Path = Path(".chaos")
    results: Path | None = None
    docs: Path | None = None
    command: str = ""


# --------------------------------------------------------------------------- the downstream


class IdempotentDownstream(LoopbackWebhook):
    """The webhook, honouring ``Idempotency-Key`` like Stripe: the first 200 per key applies the effect.

    Later requests with an applied key get 200 without applying again. Every raw request is
    recorded with its sender (each consumer process gets its own URL path ``/notify/<label>``,
    ``c<N>``), so a repeat delivery can be traced to its cause (:mod:`bench.chaos_evidence`). ``reject`` keys get 422, ``flaky``
    keys 503 on their first request; anything else is applied.
    """

    def __init__(self, reject: Iterable[str] = (), flaky: Iterable[str] = (), seed: int = 11) -> None:
        super().__init__()
        self.reject, self.flaky = set(reject), set(flaky)
        self.deliveries: dict[str, list[Delivery]] = defaultdict(list)
        self.applied: Counter[str] = Counter()
        self.order: list[str] = []  # keys in the order their effect was applied
        self._lock = threading.Lock()
        self._rng = random.Random(seed)

    def respond(self, key: str, path: str) -> int:
        return self.answer(key, path.rpartition("/")[2])

    def answer(self, key: str, sender: str) -> int:
        # When this thread read the request: under load that can be after the sender was SIGKILLed, though it sent
        # before (bench.chaos_evidence never compares it with the sender's own kill).
        arrived = time.monotonic()
        with self._lock:
            pause = self._rng.uniform(0.005, 0.05)
        time.sleep(pause)  # a real call takes time: a SIGKILL can land between the 200 and the ack
        with self._lock:
            earlier = self.deliveries[key]
            if key in self.reject:
                status = 422
            elif key in self.flaky and not earlier:
                status = 503
            else:
                status = 200
                if not self.applied[key]:
                    self.order.append(key)
                self.applied[key] = 1  # idempotent: applied once, whatever the number of requests
            earlier.append(Delivery(sender, arrived, status))
        return status

    def snapshot(self) -> tuple[set[str], dict[str, list[Delivery]]]:
        with self._lock:
            return set(self.applied), {k: list(v) for k, v in self.deliveries.items()}


# --------------------------------------------------------------------------- the plan


def build_stream(count: int, seed: int) -> list[Planned]:
    """``count`` events in the shares of :data:`KINDS` (at least one of each), shuffled reproducibly."""
    if count < len(KINDS):
        raise ValueError(f'"messages" must be at least {len(KINDS)} (one of each kind): {count}')
    rng = random.Random(seed)
    counts = {name: max(1, round(count * share)) for name, (share, _) in KINDS.items()}
    counts["good"] += count - sum(counts.values())
    kinds = [kind for kind, n in counts.items() for _ in range(n)]
    rng.shuffle(kinds)
    poison = [c.body for c in standard_cases() if not c.attributes and len(c.body) < 10_000]
    plan = []
    for index, kind in enumerate(kinds):
        event_id = f"{EVENT_PREFIX}{index:05d}"
        body = poison[index % len(poison)] if kind == "malformed" else json.dumps(sample_event(event_id, index))
        plan.append(Planned(event_id, kind, body))
    return plan


# --------------------------------------------------------------------------- the run


class Chaos:
    """One run of the suite; :meth:`run` returns the result the report is made from."""

    def __init__(self, options: ChaosOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.rng = random.Random(options.seed)
        self.plan = build_stream(options.messages, options.seed)
        self.started = time.monotonic()
        self.deadline = self.started + options.timeout_seconds
        self.produced_ids: set[str] = set()
        self.sent_messages = 0
        self.phase = "provisioning"
        self.phases: dict[str, float] = {}
        self._producing = threading.Event()
        self.receives = ReceiveLog()  # the proxy's record of who received what (bench.chaos_evidence)

    # --- orchestration ------------------------------------------------------
    def run(self) -> ChaosResult:
        from consumer.local.stack import LOCAL_CREDENTIALS, LOCAL_REGION, local_client, provision, start_server

        options = self.options
        options.log_dir.mkdir(parents=True, exist_ok=True)
        for old in options.log_dir.glob("*.log"):
            old.unlink()
        server, moto = start_server()
        proxy = FaultProxy(
            moto,
            FaultPlan(
                throttle_before=options.throttle,
                error_before=options.error_before,
                error_after=options.error_after,
                seed=options.seed,
            ),
            observer=self.receives,
        )
        downstream = IdempotentDownstream(
            reject={p.event_id for p in self.plan if p.kind == "rejected"},
            flaky={p.event_id for p in self.plan if p.kind == "flaky"},
        )
        self.supervisor = Supervisor(downstream.url, self.rng, self._producing, self.deadline)
        fleets: list[Fleet] = []
        try:
            local = provision(moto, options.template)
            env = local.process_environment()
            self.queue_url, self.dlq_url = env["QUEUE_URL"], env["DLQ_URL"]
            self.moto = local_client("sqs", moto)  # the harness's own view: never faulted
            proxy.start()
            downstream.start()
            child = consumer_environment(
                env,
                {
                    "AWS_ENDPOINT_URL": proxy.url,
                    "AWS_ENDPOINT_URL_DYNAMODB": moto,  # the idempotency table: not the fault target
                    WEBHOOK_URL_ENV: downstream.url,
                    "PYTHONPATH": str(ROOT),
                },
            )
            fleet = Fleet(child, options.log_dir)
            fleets.append(fleet)
            self.console.print(
                f"moto {moto}, chaos proxy {proxy.url}, downstream {downstream.url};"
                f" lease {env['CONSUMER_VISIBILITY_TIMEOUT_SECONDS']} s,"
                f" max receives {env['CONSUMER_MAX_RECEIVE_COUNT']} (redrive backstop"
                f" {env['CONSUMER_REDRIVE_MAX_RECEIVE_COUNT']}); logs in {options.log_dir}"
            )
            producer = boto3.client(
                "sqs",
                endpoint_url=proxy.url,
                region_name=LOCAL_REGION,
                aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=PRODUCER_CONFIG,
            )
            self._chaos_phase(fleet, proxy, downstream, producer)
            corpus = self._corpus_phase(fleet, proxy, downstream)
            fifo = self._fifo_phase(child, downstream, fleets)
            self.phase = "stopping consumers (SIGTERM)"
            stop_timeout = float(env["CONSUMER_STOP_TIMEOUT_SECONDS"])
            for one in fleets:
                one.stop_all(timeout=stop_timeout)
            return self._result(fleets, proxy, downstream, corpus, fifo)
        finally:
            for one in fleets:
                one.kill_all()
            downstream.stop()
            proxy.stop()
            server.stop()

    def _mark(self, phase: str) -> None:
        self.phase = phase
        self.phases[phase] = round(time.monotonic() - self.started, 1)
        self.console.print(f"[bold]{self.phase}[/bold] at {self.phases[phase]} s")

    def _chaos_phase(self, fleet: Fleet, proxy: FaultProxy, downstream: IdempotentDownstream, producer: Any) -> None:
        self._mark("chaos: producing under kills, faults and one endpoint restart")
        for _ in range(self.options.consumers):
            self.supervisor.start(fleet)
        self._producing.set()
        threads = [
            threading.Thread(target=self._produce, args=(producer, proxy), name="producer", daemon=True),
            threading.Thread(
                target=self.supervisor.kill_loop,
                args=(fleet, self.options.kill_every_seconds),
                name="killer",
                daemon=True,
            ),
        ]
        for thread in threads:
            thread.start()
        # Until the stream is sent, then until every lease a SIGKILL or a lost answer left has
        # expired and its message settled: the source empty and the logs quiet.
        self._wait(lambda: False, fleet, downstream, quiet_is_done=True)
        threads[1].join()

    def _corpus_phase(self, fleet: Fleet, proxy: FaultProxy, downstream: IdempotentDownstream) -> list[dict]:
        self._mark("corpus: faults paused, no kills")
        proxy.pause_faults()
        # A consumer SIGKILLed (or cut off by the outage) mid long poll left that poll waiting at moto;
        # a corpus message handed to it would come back at receive 2 after its lease. Let them end.
        proxy.settle()
        self._mark("corpus: sending (every request from before the pause answered)")
        size = int(
            self.moto.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["MaximumMessageSize"])[
                "Attributes"
            ]["MaximumMessageSize"]
        )
        self.corpus = standard_cases(size)
        self.corpus_ids: dict[str, Case] = {}
        for case in self.corpus:
            message_id = self.moto.send_message(**case.send_arguments(self.queue_url))["MessageId"]
            self.corpus_ids[message_id] = case
        canaries = [f"evt-canary-{n}" for n in range(5)]
        for n, event_id in enumerate(canaries):
            self.moto.send_message(
                QueueUrl=self.queue_url,
                MessageBody=json.dumps(sample_event(event_id, n)),
                MessageAttributes={KEY_ATTRIBUTE: {"DataType": "String", "StringValue": event_id}},
            )
        alive_before = {c.number for c in fleet.alive()}
        self._wait(lambda: set(canaries) <= downstream.snapshot()[0], fleet, downstream)
        self._wait(lambda: False, fleet, downstream, quiet_is_done=True, quiet_seconds=4.0)
        self.canaries_applied = len(set(canaries) & downstream.snapshot()[0])
        self.corpus_alive = sorted(alive_before & {c.number for c in fleet.alive()})
        return [{"name": c.name, "what": c.what, "body_chars": len(c.body)} for c in self.corpus]

    def _fifo_phase(
        self, child: dict[str, str], downstream: IdempotentDownstream, fleets: list[Fleet]
    ) -> dict[str, Any]:
        self._mark("FIFO corpus: faults paused, no kills")
        queue_url, dlq_url = create_fifo_pair(self.moto, f"chaos-{os.getpid()}")
        env = {k: v for k, v in child.items() if not k.startswith("CONSUMER_") and k != "DLQ_URL"} | LOCAL_LOG_LEVEL
        env.update(
            {
                "QUEUE_URL": queue_url,
                "CONSUMER_HANDLER": "bench.corpus:fifo_handle",
                "CONSUMER_IDEMPOTENCY_TABLE": child["CONSUMER_IDEMPOTENCY_TABLE"],
            }
        )
        fleet = Fleet(env, self.options.log_dir / "fifo")
        fleet.log_dir.mkdir(exist_ok=True)
        fleets.append(fleet)
        self.supervisor.start(fleet, prefix="fifo-c")
        cases = fifo_cases()
        sent: dict[str, Case] = {}
        for case in cases:
            message_id = self.moto.send_message(**case.send_arguments(queue_url))["MessageId"]
            sent.setdefault(message_id, case)  # a deduplicated send returns the first send's MessageId
        goods = {c.event_id for c in cases if c.expect == "applied"}
        self._wait(lambda: goods <= downstream.snapshot()[0], fleet, downstream, queue_url=queue_url)
        self._wait(lambda: False, fleet, downstream, quiet_is_done=True, quiet_seconds=4.0, queue_url=queue_url)
        dlq = read_dlq(self.moto, dlq_url)
        return fifo_report(queue_url, sent, cases, dlq, downstream.snapshot()[0], list(downstream.order))

    # --- actors -------------------------------------------------------------
    def _produce(self, producer: Any, proxy: FaultProxy) -> None:
        """Send the plan in batches of 10 through the proxy (faults on), paced and depth-bounded.

        A batch the faults fail is sent again (an at-least-once producer): a lost answer thus
        puts two copies on the queue, which the consumers' idempotency must absorb.
        """
        options = self.options
        sends = batches(self.plan)
        pause = 10 / options.rate_per_second
        outage_at = len(sends) // 2
        for number, batch in enumerate(sends):
            if number == outage_at and options.outage_seconds > 0:
                threading.Thread(target=proxy.outage, args=(options.outage_seconds,), name="outage").start()
            while self._depth()[0] > options.max_depth and time.monotonic() < self.deadline:
                time.sleep(0.5)
            pending = {str(n): p for n, p in enumerate(batch)}
            while pending and time.monotonic() < self.deadline:
                try:
                    response = producer.send_message_batch(QueueUrl=self.queue_url, Entries=batch_entries(pending))
                except Exception:  # noqa: BLE001 (retries exhausted or endpoint down: send again)
                    time.sleep(0.5)
                    continue
                for ok in response.get("Successful", []):
                    self.produced_ids.add(pending.pop(ok["Id"]).event_id)
                    self.sent_messages += 1
            time.sleep(pause)
        self._producing.clear()

    # --- observation ----------------------------------------------------------
    def _depth(self, queue_url: str | None = None) -> tuple[int, int]:
        depth = queue_depth(self.moto, queue_url or self.queue_url)
        return depth.visible, depth.not_visible + depth.delayed

    def _wait(
        self,
        done: Callable[[], bool],
        fleet: Fleet,
        downstream: IdempotentDownstream,
        *,
        quiet_is_done: bool = False,
        quiet_seconds: float = QUIET_SECONDS,
        queue_url: str | None = None,
    ) -> None:
        """Until ``done()``, or (``quiet_is_done``) the source is empty and no log line came for ``quiet_seconds``."""
        last_print = 0.0

        def look() -> Tick:
            nonlocal last_print
            self.supervisor.supervise(fleet)
            fleet.read_logs()
            depth = self._depth(queue_url)
            if time.monotonic() - last_print > 5:
                last_print = time.monotonic()
                self._progress(depth, fleet, downstream)
            return Tick((depth, sum(fleet.events.values())), depth != (0, 0) or self._producing.is_set())

        quiet = quiet_seconds if quiet_is_done else None
        if settle(look, done, deadline=self.deadline, poll_seconds=POLL_SECONDS, quiet_seconds=quiet) == TIMED_OUT:
            self.console.print(f"[red]timed out after {self.options.timeout_seconds:.0f} s[/red] in {self.phase}")

    def _progress(self, depth: tuple[int, int], fleet: Fleet, downstream: IdempotentDownstream) -> None:
        applied, _ = downstream.snapshot()
        self.console.print(
            f"  {time.monotonic() - self.started:5.0f} s  sent {self.sent_messages}/{len(self.plan)}"
            f"  source visible/in flight {depth[0]}/{depth[1]}  applied {len(applied)}"
            f"  processed {fleet.events['message_processed']}  to DLQ {fleet.events['message_moved_to_dlq']}"
            f"  running {len(fleet.alive())}  killed {len(self.supervisor.killed)}",
            highlight=False,
        )

    # --- accounting -----------------------------------------------------------
    def _result(
        self,
        fleets: list[Fleet],
        proxy: FaultProxy,
        downstream: IdempotentDownstream,
        corpus: list[dict[str, Any]],
        fifo: dict[str, Any],
    ) -> ChaosResult:
        self._mark("accounting")
        applied, deliveries = downstream.snapshot()
        dlq = read_dlq(self.moto, self.dlq_url)
        by_event, corpus_found, unknown = sort_dlq(dlq, self.corpus_ids, EVENT_PREFIX)
        stream = account_stream(self.plan, PLACES, applied, by_event, unknown, sum(self._depth()), self.produced_ids)
        run = self.supervisor.record(fleets, self.receives, demo_contract(), self.started)
        traced = trace(deliveries, stream, run, dlq_copies(dlq, EVENT_PREFIX))
        stream.update(traced.accounting())
        failures = stream_failures(stream, traced.repeats)
        checks, corpus_failures = corpus_checks(self.corpus, corpus_found)
        failures += corpus_failures
        if self.canaries_applied != 5 or not self.corpus_alive:
            failures.append(
                f"after the corpus: {self.canaries_applied}/5 canaries applied, consumers alive {self.corpus_alive}"
            )
        for check in fifo["checks"]:
            if not check["ok"]:
                failures.append(f"FIFO {check['name']}: expected {check['expect']}, found {check['place']}")
        if not fifo["groups_in_order"]:
            failures.append(f"a FIFO group was applied out of order: {fifo['order']}")
        consumers, exit_failures = consumer_endings(fleets, self.supervisor.killed, self.supervisor.replaced)
        failures += exit_failures
        events: Counter[str] = Counter()
        for one in fleets:
            one.read_logs()
            events.update(one.events)
        if events["thread_crashed"]:
            failures.append(f"{events['thread_crashed']} consumer threads crashed")
        return ChaosResult(
            options={k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.options).items()},
            produced={**Counter(p.kind for p in self.plan), "sends_confirmed": self.sent_messages},
            accounting=stream,
            repeats=traced.repeats,
            corpus=checks,
            fifo=fifo,
            faults=proxy.fault_counts(),
            forwarded=dict(proxy.forwarded),
            outages=proxy.outages,
            kills=len(self.supervisor.killed),
            consumers=consumers,
            events=reported_events(events),
            phases=self.phases,
            elapsed_seconds=round(time.monotonic() - self.started, 1),
            failures=failures,
            double_hand_outs=traced.hand_outs,
        )


# --------------------------------------------------------------------------- CLI

app = typer.Typer(add_completion=False, help="The chaos suite: SIGKILLs, SQS faults, an endpoint restart, bad input.")


@app.command()
def main(
    messages: int = typer.Option(3000, help="Events in the chaos stream."),
    consumers: int = typer.Option(4, help="Consumer processes kept running."),
    kill_every: float = typer.Option(5.0, help="Seconds between SIGKILLs (+-30 %); 0 = none."),
    outage_seconds: float = typer.Option(5.0, help="How long the endpoint restart lasts; 0 = none."),
    throttle: float = typer.Option(0.03, help="Probability of RequestThrottled per SQS request."),
    error_before: float = typer.Option(0.02, help="Probability of HTTP 500 before forwarding."),
    error_after: float = typer.Option(0.02, help="Probability of HTTP 500 after moto applied the request."),
    rate: float = typer.Option(60.0, help="Producer pace, messages per second."),
    max_depth: int = typer.Option(150, help="The producer waits while more messages than this are visible."),
    timeout: float = typer.Option(840.0, help="Hard limit for the whole run, seconds."),
    seed: int = typer.Option(5, help="Seed of the stream, the kills and the faults."),
    template: Path = typer.Option(TEMPLATE, help="The demo stack's synthesized template."),
    logs: Path = typer.Option(Path(".chaos"), help="Directory for the consumers' logs."),
    results: Path = typer.Option(ROOT / "docs" / "bench" / "chaos.json", help="Where the JSON results go."),
    docs: bool = typer.Option(True, "--docs/--no-docs", help="Write the figures into docs/CHAOS.md."),
    docs_from: Path | None = typer.Option(None, help="Do not run: rewrite docs/CHAOS.md from this results JSON."),
) -> None:
    """Run the chaos suite; exit 1 unless every message ends in its place."""
    console = output_console()  # whole lines in a CI log, as the demo prints
    if docs_from is not None:
        stored = ChaosResult.from_json(json.loads(docs_from.read_text()))
        write_markdown(stored, ROOT / "docs" / "CHAOS.md")
        raise typer.Exit(0 if stored.ok else 1)
    if not template.exists():
        console.print(f"template {template} does not exist; synthesize first (python app.py)", style="red")
        raise typer.Exit(2)
    options = ChaosOptions(
        messages=messages,
        consumers=consumers,
        kill_every_seconds=kill_every,
        outage_seconds=outage_seconds,
        throttle=throttle,
        error_before=error_before,
        error_after=error_after,
        rate_per_second=rate,
        max_depth=max_depth,
        timeout_seconds=timeout,
        seed=seed,
        template=template,
        log_dir=logs,
        results=results,
        docs=ROOT / "docs" / "CHAOS.md" if docs else None,
        command="python -m bench.chaos " + " ".join(sys.argv[1:]),
    )
    result = Chaos(options, console).run()
    render(result, console)
    if options.results is not None:
        options.results.parent.mkdir(parents=True, exist_ok=True)
        options.results.write_text(json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n")
    if options.docs is not None:
        write_markdown(result, options.docs)
    raise typer.Exit(0 if result.ok else 1)


if __name__ == "__main__":
    app()
