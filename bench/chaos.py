"""The chaos suite (issue #5): ``python -m bench.chaos``, bounded in time and count, loopback only.

What one run does, all on 127.0.0.1 with no AWS account:

1. provisions the ``demo`` stack from ``cdk.out/SqsWorker-demo.template.json`` on
   moto's server (in a process of its own; :mod:`consumer.local.stack`) and puts the fault-injecting proxy of
   :mod:`bench.proxy` in front of it: the consumers' ``AWS_ENDPOINT_URL`` is the
   proxy, so every SQS call they make may be throttled, fail with HTTP 500
   before reaching moto, or be applied and then answered with HTTP 500 (a lost
   answer). The idempotency table (DynamoDB) is reached directly: the faults
   are SQS's, and the table is what keeps side effects single across them;
2. **chaos phase**: three fleets of ``python -m consumer run`` processes, one per handler shape
   (:mod:`bench.chaos_lanes`): ``--consumers`` running the stack's own worker (``def handle(message)``,
   threads) on its queue pair, and ``--batch-consumers`` and ``--async-consumers`` running a batch handler
   (``max_batch``) and an ``async def`` handler (:mod:`bench.chaos_handlers`), each on a pair of its own made
   from its declaration. Each fleet consumes a paced stream of its own (``--messages``, ``--batch-messages``,
   ``--async-messages`` events: good ones, downstream-flaky ones, malformed ones and ones the downstream
   rejects; the other fleets' streams keep pace with the thread fleet's) while a random consumer is SIGKILLed
   every ``--kill-every`` seconds (each fleet's in turn) and replaced, and the endpoint is restarted once, when
   every fleet's producer is half way (the proxy stops listening for ``--outage-seconds``; moto's state is in
   memory, so restarting moto itself would lose every queue);
3. **corpus phase** (faults paused, no kills, and sent once every request from
   before the pause has been answered): the bad-input corpus of
   :mod:`bench.corpus`, one message per kind to each fleet's queue, then a few good canaries: each
   corpus message must reach the DLQ with a reason at its first receive, and the
   consumers must still be running and delivering;
4. **FIFO phase**: a FIFO pair (attributes from the FIFO declaration, checked by
   the consumer's own drift check at start) and its consumer: poison in the
   middle and at the head of a group, a shared deduplication id, 128-character ids;
5. SIGTERM to every consumer still running (each must exit 0), then the
   accounting, fleet by fleet: each produced event is applied once at the downstream or in the
   DLQ with a reason of the kind its own kind calls for; lost = produced - (applied | DLQ) must be empty.

Exit code 1 if anything is lost, in a wrong place, in two places, in the DLQ
without a reason or with the wrong kind of reason, a corpus message missed the DLQ at its first receive, a
repeat delivery is not explained by a SIGKILL, or a consumer did not exit 0; a failure of the batch or
async fleet names it.
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
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import boto3
import typer
from botocore.config import Config
from rich.console import Console

from bench.chaos_accounting import ChaosResult, consumer_endings, reported_events
from bench.chaos_evidence import ReceiveLog
from bench.chaos_fifo import create_fifo_pair, fifo_report
from bench.chaos_fleet import Supervisor, Watch, Watched
from bench.chaos_lanes import (
    ASYNC,
    BATCH,
    THREADS,
    Lane,
    declared_environment,
    declared_lane,
    fleet_results,
    produce,
    send_corpus,
)
from bench.chaos_report import render, write_markdown
from bench.chaos_stream import IdempotentDownstream, build_stream
from bench.common import EVIDENCE, RESULTS
from bench.corpus import Case, fifo_cases
from bench.endpoint import local_endpoint
from bench.proxy import FaultPlan, FaultProxy
from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.local.harness import (
    Fleet,
    consumer_environment,
    demo_contract,
    quiet_seconds,
    read_dlq,
)
from consumer.ops.progress import output_console

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cdk.out" / "SqsWorker-demo.template.json"
#: The chaos page, written from bench/CHAOS.template.md and one run's results (RESULTS / "chaos.json").
DOC = EVIDENCE / "CHAOS.md"
POLL_SECONDS = 1.0
#: Nothing moving for this long (source empty) means the phase has settled: the demo contract's lease
#: plus its maximum backoff (10 + 4 s) and two ticks, so every lease a SIGKILL left has expired (the batch and async
#: fleets are declared with the same timings).
QUIET_SECONDS = quiet_seconds(demo_contract(), margin_seconds=2 * POLL_SECONDS)
PRODUCER_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)


@dataclass
class ChaosOptions:
    """One run's size, faults and outputs (the CLI's options)."""

    messages: int = 3000
    consumers: int = 4
    batch_messages: int = 1000
    batch_consumers: int = 2
    async_messages: int = 1000
    async_consumers: int = 2
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


# --------------------------------------------------------------------------- the run


class Chaos:
    """One run of the suite; :meth:`run` returns the result the report is made from."""

    def __init__(self, options: ChaosOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.rng = random.Random(options.seed)
        self.plan = build_stream(options.messages, options.seed)
        # The other shapes' streams: seeded apart from the thread fleet's, their event ids their own.
        self.plans = {
            shape.name: build_stream(count, options.seed + n, shape.event_prefix)
            for n, (shape, count) in enumerate(((BATCH, options.batch_messages), (ASYNC, options.async_messages)), 1)
            if count > 0
        }
        self.started = time.monotonic()
        self.deadline = self.started + options.timeout_seconds
        self.phase = "provisioning"
        self.phases: dict[str, float] = {}
        self._producing = threading.Event()
        self.receives = ReceiveLog()  # the proxy's record of who received what (bench.chaos_evidence)
        self.lanes: list[Lane] = []
        self.fifo_fleet: Fleet | None = None
        self._halfway = 0
        self._lock = threading.Lock()

    # --- orchestration ------------------------------------------------------
    def run(self) -> ChaosResult:
        """Provision, run the phases, stop the consumers and account. moto's server runs in a process of its own (as
        ``--endpoint moto`` runs it for the benchmarks): in this one it would share an interpreter lock with the
        proxy, the downstream and the harness, which every fleet's every request goes through."""
        options = self.options
        options.log_dir.mkdir(parents=True, exist_ok=True)
        for old in options.log_dir.glob("**/*.log"):
            old.unlink()
        with local_endpoint("moto") as moto:
            return self._run_on(moto)

    def _run_on(self, moto: str) -> ChaosResult:
        from consumer.local.stack import LOCAL_CREDENTIALS, LOCAL_REGION, local_client, provision

        options = self.options
        plan = FaultPlan(
            throttle_before=options.throttle,
            error_before=options.error_before,
            error_after=options.error_after,
            seed=options.seed,
        )
        proxy = FaultProxy(moto, plan, observer=self.receives)
        every = [self.plan, *self.plans.values()]
        downstream = IdempotentDownstream(
            reject={p.event_id for events in every for p in events if p.kind == "rejected"},
            flaky={p.event_id for events in every for p in events if p.kind == "flaky"},
        )
        self.supervisor = Supervisor(downstream.url, self.rng, self._producing, self.deadline)
        try:
            local = provision(moto, options.template)
            env = local.process_environment()
            self.moto = local_client("sqs", moto)  # the harness's own view: never faulted
            self.dynamodb = local_client("dynamodb", moto)
            self.watch = Watch(self.supervisor, self.moto, self.console, self._producing.is_set, self.started)
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
            self.lanes = self._lanes(env, child)
            self.quiet_seconds = max(quiet_seconds(lane.contract, 2 * POLL_SECONDS) for lane in self.lanes)
            self.console.print(
                f"moto {moto}, chaos proxy {proxy.url}, downstream {downstream.url};"
                f" lease {env['CONSUMER_VISIBILITY_TIMEOUT_SECONDS']} s,"
                f" max receives {env['CONSUMER_MAX_RECEIVE_COUNT']} (redrive backstop"
                f" {env['CONSUMER_REDRIVE_MAX_RECEIVE_COUNT']}); fleets "
                + ", ".join(f"{lane.name} ({lane.consumers} x {lane.shape.what})" for lane in self.lanes)
                + f"; logs in {options.log_dir}"
            )
            producer = boto3.client(
                "sqs",
                endpoint_url=proxy.url,
                region_name=LOCAL_REGION,
                aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=PRODUCER_CONFIG,
            )
            self._chaos_phase(proxy, producer)
            self._corpus_phase(proxy, downstream)
            fifo = self._fifo_phase(child, downstream)
            self.phase = "stopping consumers (SIGTERM)"
            stop_timeout = max(
                [float(env["CONSUMER_STOP_TIMEOUT_SECONDS"])]
                + [lane.contract.stop_timeout_seconds for lane in self.lanes]
            )
            for one in self._fleets():
                one.stop_all(timeout=stop_timeout)
            return self._result(proxy, downstream, fifo)
        finally:
            for one in self._fleets():
                one.kill_all()
            downstream.stop()
            proxy.stop()

    def _lanes(self, env: dict[str, str], child: dict[str, str]) -> list[Lane]:
        """The thread fleet on the stack's pair, then a fleet per other shape on a pair from its declaration."""
        options = self.options
        lanes = [
            Lane(
                THREADS,
                demo_contract(),
                options.consumers,
                self.plan,
                options.rate_per_second,
                env["QUEUE_URL"],
                env["DLQ_URL"],
                Fleet(child, options.log_dir),
            )
        ]
        for shape, consumers in ((BATCH, options.batch_consumers), (ASYNC, options.async_consumers)):
            if shape.name in self.plans:
                plan = self.plans[shape.name]
                # Paced in proportion (and never ahead of the thread fleet's share: bench.chaos_lanes.produce), so
                # every fleet's stream spans the same time and meets the endpoint restart.
                rate = max(1.0, options.rate_per_second * len(plan) / len(self.plan))
                run_id = str(os.getpid())
                lanes.append(
                    declared_lane(
                        self.moto, self.dynamodb, shape, child, options.log_dir, plan, consumers, rate, run_id
                    )
                )
        return lanes

    def _fleets(self) -> list[Fleet]:
        return [lane.fleet for lane in self.lanes] + ([self.fifo_fleet] if self.fifo_fleet is not None else [])

    def _mark(self, phase: str) -> None:
        self.phase = phase
        self.phases[phase] = round(time.monotonic() - self.started, 1)
        self.console.print(f"[bold]{self.phase}[/bold] at {self.phases[phase]} s")

    def _chaos_phase(self, proxy: FaultProxy, producer: Any) -> None:
        self._mark("chaos: producing under kills, faults and one endpoint restart")
        for lane in self.lanes:
            for _ in range(lane.consumers):
                self.supervisor.start(lane.fleet, lane.shape.label_prefix)
        self._producing.set()
        fleets = [lane.fleet for lane in self.lanes]
        threads = [
            threading.Thread(target=self._produce, args=(producer, proxy), name="producers", daemon=True),
            threading.Thread(
                target=self.supervisor.kill_loop,
                args=(fleets, self.options.kill_every_seconds),
                name="killer",
                daemon=True,
            ),
        ]
        for thread in threads:
            thread.start()
        # Until the streams are sent, then until every lease a SIGKILL or a lost answer left has
        # expired and its message settled: the sources empty and the logs quiet.
        self._wait(lambda: False, quiet=self.quiet_seconds)
        threads[1].join()

    def _produce(self, producer: Any, proxy: FaultProxy) -> None:
        """Every fleet's producer at once (:func:`bench.chaos_lanes.produce`); the producing phase ends with the last."""
        threads = [
            threading.Thread(
                target=produce,
                args=(lane, producer),
                kwargs={
                    "visible": lambda url: self.watch.depth(url)[0],
                    # In proportion too: moto's receive scans the whole queue, and every fleet's goes to one server.
                    "max_depth": max(10, round(self.options.max_depth * len(lane.plan) / len(self.plan))),
                    "deadline": self.deadline,
                    "halfway": lambda: self._halfway_there(proxy),
                    "leader": None if lane is self.lanes[0] else self.lanes[0],
                },
                name=f"producer-{lane.name}",
                daemon=True,
            )
            for lane in self.lanes
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._producing.clear()

    def _halfway_there(self, proxy: FaultProxy) -> None:
        """A fleet's producer is half way: the endpoint restarts once every fleet's is."""
        with self._lock:
            self._halfway += 1
            last = self._halfway == len(self.lanes)
        if last and self.options.outage_seconds > 0:
            threading.Thread(target=proxy.outage, args=(self.options.outage_seconds,), name="outage").start()

    def _corpus_phase(self, proxy: FaultProxy, downstream: IdempotentDownstream) -> None:
        self._mark("corpus: faults paused, no kills")
        proxy.pause_faults()
        # A consumer SIGKILLed (or cut off by the outage) mid long poll left that poll waiting at moto;
        # a corpus message handed to it would come back at receive 2 after its lease. Let them end.
        proxy.settle()
        self._mark("corpus: sending (every request from before the pause answered)")
        for lane in self.lanes:
            send_corpus(self.moto, lane)
        alive_before = {lane.name: {c.number for c in lane.fleet.alive()} for lane in self.lanes}
        canaries = {key for lane in self.lanes for key in lane.canaries}
        self._wait(lambda: canaries <= downstream.snapshot()[0])
        self._wait(lambda: False, quiet=4.0)
        applied = downstream.snapshot()[0]
        for lane in self.lanes:
            lane.canaries_applied = len(set(lane.canaries) & applied)
            lane.corpus_alive = sorted(alive_before[lane.name] & {c.number for c in lane.fleet.alive()})

    def _fifo_phase(self, child: dict[str, str], downstream: IdempotentDownstream) -> dict[str, Any]:
        self._mark("FIFO corpus: faults paused, no kills")
        queue_url, dlq_url = create_fifo_pair(self.moto, f"chaos-{os.getpid()}")
        # The DLQ found through the source's redrive policy, as a local run does; the stack's idempotency table.
        table = child["CONSUMER_IDEMPOTENCY_TABLE"]
        env = declared_environment(child, "bench.corpus:fifo_handle", queue_url, None, table)
        fleet = self.fifo_fleet = Fleet(env, self.options.log_dir / "fifo")
        fleet.log_dir.mkdir(exist_ok=True)
        self.supervisor.start(fleet, prefix="fifo-c")
        cases = fifo_cases()
        sent: dict[str, Case] = {}
        for case in cases:
            message_id = self.moto.send_message(**case.send_arguments(queue_url))["MessageId"]
            sent.setdefault(message_id, case)  # a deduplicated send returns the first send's MessageId
        goods = {c.event_id for c in cases if c.expect == "applied"}
        watched: list[Watched] = [("fifo", fleet, queue_url, str)]
        self._wait(lambda: goods <= downstream.snapshot()[0], watched)
        self._wait(lambda: False, watched, quiet=4.0)
        dlq = read_dlq(self.moto, dlq_url)
        return fifo_report(queue_url, sent, cases, dlq, downstream.snapshot()[0], list(downstream.order))

    # --- observation ----------------------------------------------------------
    def _watched(self) -> list[Watched]:
        return [
            (lane.name, lane.fleet, lane.queue_url, lambda lane=lane: f"  sent {lane.sent}/{len(lane.plan)}")  # type: ignore[misc]
            for lane in self.lanes
        ]

    def _wait(self, done: Callable[[], bool], watched: list[Watched] | None = None, quiet: float | None = None) -> None:
        """Until ``done()``, or (``quiet`` seconds given) the watched fleets' sources are empty and their logs quiet
        that long (:class:`bench.chaos_fleet.Watch`); the fleets are the stream's unless ``watched`` says."""
        if not self.watch.wait(done, watched or self._watched(), quiet):
            self.console.print(f"[red]timed out after {self.options.timeout_seconds:.0f} s[/red] in {self.phase}")

    # --- accounting -----------------------------------------------------------
    def _result(self, proxy: FaultProxy, downstream: IdempotentDownstream, fifo: dict[str, Any]) -> ChaosResult:
        self._mark("accounting")
        applied, deliveries = downstream.snapshot()
        extra = [self.fifo_fleet] if self.fifo_fleet is not None else []
        results, failures = fleet_results(
            self.lanes, extra, self.supervisor, self.receives, self.moto, applied, deliveries, self.started
        )
        for check in fifo["checks"]:
            if not check["ok"]:
                failures.append(f"FIFO {check['name']}: expected {check['expect']}, found {check['place']}")
        if not fifo["groups_in_order"]:
            failures.append(f"a FIFO group was applied out of order: {fifo['order']}")
        named = [(lane.name, lane.fleet) for lane in self.lanes] + [("fifo", fleet) for fleet in extra]
        consumers, exit_failures = consumer_endings(
            named, self.supervisor.label, self.supervisor.killed, self.supervisor.replaced
        )
        failures += exit_failures
        events: Counter[str] = Counter()  # the thread and FIFO fleets' (each other fleet's are in its own result)
        for one in [self.lanes[0].fleet, *extra]:
            one.read_logs()
            events.update(one.events)
        crashed = sum(one.events["thread_crashed"] for one in self._fleets())
        if crashed:
            failures.append(f"{crashed} consumer threads crashed")
        standard = results.pop(self.lanes[0].name)
        return ChaosResult(
            options={k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.options).items()},
            produced=standard["produced"],
            accounting=standard["accounting"],
            repeats=standard["repeats"],
            corpus=standard["corpus"],
            fifo=fifo,
            faults=proxy.fault_counts(),
            forwarded=dict(proxy.forwarded),
            outages=proxy.outages,
            kills=standard["kills"],
            consumers=consumers,
            events=reported_events(events),
            phases=self.phases,
            elapsed_seconds=round(time.monotonic() - self.started, 1),
            failures=failures,
            double_hand_outs=standard["double_hand_outs"],
            fleets=results,
        )


# --------------------------------------------------------------------------- CLI

app = typer.Typer(add_completion=False, help="The chaos suite: SIGKILLs, SQS faults, an endpoint restart, bad input.")


@app.command()
def main(
    messages: int = typer.Option(3000, help="Events in the thread fleet's stream."),
    consumers: int = typer.Option(4, help="Consumer processes of the thread fleet (the demo stack's worker)."),
    batch_messages: int = typer.Option(1000, help="Events in the batch handler fleet's stream; 0 = no batch fleet."),
    batch_consumers: int = typer.Option(2, help="Consumer processes of the batch handler fleet."),
    async_messages: int = typer.Option(1000, help="Events in the async handler fleet's stream; 0 = no async fleet."),
    async_consumers: int = typer.Option(2, help="Consumer processes of the async handler fleet."),
    kill_every: float = typer.Option(5.0, help="Seconds between SIGKILLs (+-30 %), each fleet's in turn; 0 = none."),
    outage_seconds: float = typer.Option(5.0, help="How long the endpoint restart lasts; 0 = none."),
    throttle: float = typer.Option(0.03, help="Probability of RequestThrottled per SQS request."),
    error_before: float = typer.Option(0.02, help="Probability of HTTP 500 before forwarding."),
    error_after: float = typer.Option(0.02, help="Probability of HTTP 500 after moto applied the request."),
    rate: float = typer.Option(
        60.0, help="The thread fleet's producer pace, messages per second (the others' in proportion to their streams)."
    ),
    max_depth: int = typer.Option(
        150, help="The thread fleet's producer waits while more than this are visible (the others' in proportion)."
    ),
    timeout: float = typer.Option(840.0, help="Hard limit for the whole run, seconds."),
    seed: int = typer.Option(5, help="Seed of the streams, the kills and the faults."),
    template: Path = typer.Option(TEMPLATE, help="The demo stack's synthesized template."),
    logs: Path = typer.Option(Path(".chaos"), help="Directory for the consumers' logs."),
    results: Path = typer.Option(RESULTS / "chaos.json", help="Where the JSON results go."),
    docs: bool = typer.Option(True, "--docs/--no-docs", help="Write the figures into docs/evidence/CHAOS.md."),
    docs_from: Path | None = typer.Option(None, help="Do not run: rewrite the chaos page from this JSON."),
) -> None:
    """Run the chaos suite; exit 1 unless every message ends in its place."""
    console = output_console()  # whole lines in a CI log, as the demo prints
    if docs_from is not None:
        stored = ChaosResult.from_json(json.loads(docs_from.read_text()))
        write_markdown(stored, DOC)
        raise typer.Exit(0 if stored.ok else 1)
    if not template.exists():
        console.print(f"template {template} does not exist; synthesize first (python app.py)", style="red")
        raise typer.Exit(2)
    options = ChaosOptions(
        messages=messages,
        consumers=consumers,
        batch_messages=batch_messages,
        batch_consumers=batch_consumers,
        async_messages=async_messages,
        async_consumers=async_consumers,
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
        docs=DOC if docs else None,
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
