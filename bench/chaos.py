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
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
import typer
from botocore.config import Config
from rich.console import Console
from rich.table import Table

from bench.corpus import KEY_ATTRIBUTE, Case, fifo_cases, fifo_handle, standard_cases
from bench.proxy import FAULT_KINDS, FaultPlan, FaultProxy
from consumer.contract import SQS_MAX_BATCH, contract_of
from consumer.examples.notifications import WEBHOOK_URL_ENV
from consumer.exit_codes import ExitCode
from consumer.local.demo import ConsumerProcess, Fleet, LoopbackWebhook, sample_event
from consumer.runtime.dead_letter import read_reason

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cdk.out" / "SqsWorker-demo.template.json"
APPLIED, DEAD_LETTERED = "applied once", "DLQ with a reason"
#: Share of each event kind in the chaos stream, and where it must end.
KINDS: dict[str, tuple[float, str]] = {
    "good": (0.82, APPLIED),
    "flaky": (0.08, APPLIED),  # the downstream answers 503 to its first delivery
    "malformed": (0.05, DEAD_LETTERED),  # not JSON or breaks the schema
    "rejected": (0.05, DEAD_LETTERED),  # the downstream answers 422
}
POLL_SECONDS = 1.0
#: Nothing moving for this long (source empty) means the phase has settled: longer than the demo
#: contract's 10 s lease plus its 4 s maximum backoff, so every lease a SIGKILL left has expired.
QUIET_SECONDS = 16.0
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


@dataclass
class Delivery:
    sender: int  # consumer process number (from the URL path)
    at: float  # monotonic, when the request arrived
    status: int


class IdempotentDownstream(LoopbackWebhook):
    """The webhook, honouring ``Idempotency-Key`` like Stripe: the first 200 per key applies the effect.

    Later requests with an applied key get 200 without applying again. Every raw request is
    recorded with its sender (each consumer process gets its own URL path ``/notify/c<N>``), so a
    repeat delivery can be traced to a SIGKILLed sender or not. ``reject`` keys get 422, ``flaky``
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
        sender = path.rpartition("/c")[2]
        return self.answer(key, int(sender or 0))

    def answer(self, key: str, sender: int) -> int:
        arrived = time.monotonic()  # a sender SIGKILLed while we answer was alive when it sent
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


@dataclass(frozen=True)
class Planned:
    event_id: str
    kind: str
    body: str


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
        event_id = f"evt-chaos-{index:05d}"
        body = poison[index % len(poison)] if kind == "malformed" else json.dumps(sample_event(event_id, index))
        plan.append(Planned(event_id, kind, body))
    return plan


# --------------------------------------------------------------------------- the run


@dataclass
class ChaosResult:
    options: dict[str, Any]
    produced: dict[str, int]
    accounting: dict[str, Any]
    repeats: dict[str, Any]
    corpus: list[dict[str, Any]]
    fifo: dict[str, Any]
    faults: dict[str, dict[str, int]]
    forwarded: dict[str, int]
    outages: list[dict[str, float]]
    kills: int
    consumers: list[dict[str, Any]]
    events: dict[str, int]
    phases: dict[str, float]
    elapsed_seconds: float
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChaosResult:
        """Read back :meth:`to_json` output (to rewrite the docs from a stored run)."""
        return cls(**{k: v for k, v in data.items() if k != "ok"})


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
        self.killed: dict[int, float] = {}  # consumer number -> when it was SIGKILLed
        self.replaced: list[dict[str, Any]] = []  # consumers that exited on their own, replaced
        self.phase = "provisioning"
        self.phases: dict[str, float] = {}
        self._producing = threading.Event()
        self._fleet_lock = threading.Lock()

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
        )
        downstream = IdempotentDownstream(
            reject={p.event_id for p in self.plan if p.kind == "rejected"},
            flaky={p.event_id for p in self.plan if p.kind == "flaky"},
        )
        fleets: list[Fleet] = []
        try:
            local = provision(moto, options.template)
            env = local.process_environment()
            self.queue_url, self.dlq_url = env["QUEUE_URL"], env["DLQ_URL"]
            self.moto = local_client("sqs", moto)  # the harness's own view: never faulted
            proxy.start()
            downstream.start()
            child = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_"))}
            child.update(env)
            child.update(
                {
                    "AWS_ENDPOINT_URL": proxy.url,
                    "AWS_ENDPOINT_URL_DYNAMODB": moto,  # the idempotency table: not the fault target
                    WEBHOOK_URL_ENV: downstream.url,
                    "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": str(ROOT),
                }
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
            fifo = self._fifo_phase(child, proxy, downstream, local_client, fleets)
            self.phase = "stopping consumers (SIGTERM)"
            stop_timeout = float(env["CONSUMER_STOP_TIMEOUT_SECONDS"])
            for one in fleets:
                for consumer in one.alive():
                    one.stop(consumer, timeout=stop_timeout)
            return self._result(fleets, proxy, downstream, corpus, fifo)
        finally:
            for one in fleets:
                for consumer in one.alive():
                    consumer.process.kill()
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
            self._start(fleet, downstream)
        self._producing.set()
        threads = [
            threading.Thread(target=self._produce, args=(producer, proxy), name="producer", daemon=True),
            threading.Thread(target=self._kill_loop, args=(fleet, downstream), name="killer", daemon=True),
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
        self,
        child: dict[str, str],
        proxy: FaultProxy,
        downstream: IdempotentDownstream,
        local_client: Callable[[str, str], Any],
        fleets: list[Fleet],
    ) -> dict[str, Any]:
        self._mark("FIFO corpus: faults paused, no kills")
        contract = contract_of(fifo_handle)
        sqs = self.moto
        suffix = f"chaos-{os.getpid()}"
        pair = contract.queue_attributes()
        dlq_url = sqs.create_queue(QueueName=f"{suffix}-dlq.fifo", Attributes=pair.dead_letter.to_sqs())["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        queue_url = sqs.create_queue(
            QueueName=f"{suffix}-source.fifo", Attributes=pair.source.to_sqs(dead_letter_target_arn=dlq_arn)
        )["QueueUrl"]
        env = {k: v for k, v in child.items() if not k.startswith("CONSUMER_") and k != "DLQ_URL"}
        env.update(
            {
                "QUEUE_URL": queue_url,
                "CONSUMER_HANDLER": "bench.corpus:fifo_handle",
                "CONSUMER_IDEMPOTENCY_TABLE": child["CONSUMER_IDEMPOTENCY_TABLE"],
            }
        )
        fleet = Fleet(env, self.options.log_dir)
        fleet.log_dir = self.options.log_dir / "fifo"
        fleet.log_dir.mkdir(exist_ok=True)
        fleets.append(fleet)
        self._start(fleet, downstream)
        cases = fifo_cases()
        ids: dict[str, Case] = {}
        for case in cases:
            message_id = sqs.send_message(**case.send_arguments(queue_url))["MessageId"]
            ids.setdefault(message_id, case)  # a deduplicated send returns the first send's MessageId
        goods = {c.event_id for c in cases if c.expect == "applied"}
        self._wait(lambda: goods <= downstream.snapshot()[0], fleet, downstream, queue_url=queue_url)
        self._wait(lambda: False, fleet, downstream, quiet_is_done=True, quiet_seconds=4.0, queue_url=queue_url)
        dlq = self._read_dlq(dlq_url)
        order = [k for k in downstream.order if k.startswith("evt-fifo-")]
        checks = []
        by_message = {r["original_message_id"]: r for r in (record for _, record in dlq) if r}
        for message_id, case in ids.items():
            if case.expect == "deduplicated":
                continue  # moto answers a deduplicated send with a new MessageId; checked below
            record = by_message.get(message_id)
            if case.expect == "dlq":
                ok = record is not None and record["receive_count"] == 1 and record["kind"] == "poison"
                place = "DLQ" if record else "missing"
            else:
                ok = case.event_id in downstream.snapshot()[0]
                place = "applied" if ok else "missing"
            checks.append(
                {
                    "name": case.name,
                    "what": case.what,
                    "expect": case.expect,
                    "place": place,
                    "receive_count": record["receive_count"] if record else None,
                    "reason": record["reason"][:120] if record else None,
                    "ok": ok,
                }
            )
        dropped = [c for c in cases if c.expect == "deduplicated"]
        for case in dropped:
            applied = case.event_id in downstream.snapshot()[0]
            checks.append(
                {
                    "name": case.name,
                    "what": case.what,
                    "expect": case.expect,
                    "place": "applied" if applied else "dropped by SQS",
                    "receive_count": None,
                    "reason": None,
                    "ok": not applied,
                }
            )
        groups: dict[str, list[str]] = defaultdict(list)
        for key in order:
            groups[key.split("-")[2]].append(key)
        in_order = all(keys == sorted(keys, key=lambda k: int(k.rsplit("-", 1)[1])) for keys in groups.values())
        return {
            "queue": queue_url.rsplit("/", 1)[-1],
            "checks": checks,
            "order": {g: keys for g, keys in groups.items()},
            "groups_in_order": in_order,
            "dlq_messages": len(dlq),
        }

    # --- actors -------------------------------------------------------------
    def _start(self, fleet: Fleet, downstream: IdempotentDownstream) -> ConsumerProcess:
        """Start a consumer whose webhook URL names it, so the downstream knows who delivered."""
        with self._fleet_lock:
            fleet.environment[WEBHOOK_URL_ENV] = f"{downstream.url}/c{len(fleet.processes) + 1}"
            return fleet.start()

    def _produce(self, producer: Any, proxy: FaultProxy) -> None:
        """Send the plan in batches of 10 through the proxy (faults on), paced and depth-bounded.

        A batch the faults fail is sent again (an at-least-once producer): a lost answer thus
        puts two copies on the queue, which the consumers' idempotency must absorb.
        """
        options = self.options
        batches = [self.plan[i : i + 10] for i in range(0, len(self.plan), 10)]
        pause = 10 / options.rate_per_second
        outage_at = len(batches) // 2
        for number, batch in enumerate(batches):
            if number == outage_at and options.outage_seconds > 0:
                threading.Thread(target=proxy.outage, args=(options.outage_seconds,), name="outage").start()
            while self._depth()[0] > options.max_depth and time.monotonic() < self.deadline:
                time.sleep(0.5)
            pending = {str(n): p for n, p in enumerate(batch)}
            while pending and time.monotonic() < self.deadline:
                entries = [
                    {
                        "Id": n,
                        "MessageBody": p.body,
                        "MessageAttributes": {KEY_ATTRIBUTE: {"DataType": "String", "StringValue": p.event_id}},
                    }
                    for n, p in pending.items()
                ]
                try:
                    response = producer.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
                except Exception:  # noqa: BLE001 (retries exhausted or endpoint down: send again)
                    time.sleep(0.5)
                    continue
                for ok in response.get("Successful", []):
                    self.produced_ids.add(pending.pop(ok["Id"]).event_id)
                    self.sent_messages += 1
            time.sleep(pause)
        self._producing.clear()

    def _kill_loop(self, fleet: Fleet, downstream: IdempotentDownstream) -> None:
        """SIGKILL a random running consumer every few seconds and start its replacement."""
        every = self.options.kill_every_seconds
        while every > 0 and self._producing.is_set() and time.monotonic() < self.deadline:
            time.sleep(self.rng.uniform(0.7 * every, 1.3 * every))
            if not self._producing.is_set():
                return
            candidates = [c for c in fleet.alive() if c.ready]
            if not candidates:
                continue
            victim = self.rng.choice(candidates)
            victim.asked_to_stop = True  # not a crash: the supervisor must not count it
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            self.killed[victim.number] = time.monotonic()
            self._start(fleet, downstream)

    def _supervise(self, fleet: Fleet, downstream: IdempotentDownstream) -> None:
        """Replace consumers that exited on their own (as ECS would), recording how they ended."""
        for consumer in fleet.crashed():
            consumer.asked_to_stop = True
            consumer.exit_code = consumer.process.returncode
            self.replaced.append({"number": consumer.number, "exit_code": consumer.exit_code})
            self._start(fleet, downstream)

    # --- observation ----------------------------------------------------------
    def _depth(self, queue_url: str | None = None) -> tuple[int, int]:
        attributes = self.moto.get_queue_attributes(QueueUrl=queue_url or self.queue_url, AttributeNames=["All"])[
            "Attributes"
        ]
        return (
            int(attributes["ApproximateNumberOfMessages"]),
            int(attributes["ApproximateNumberOfMessagesNotVisible"])
            + int(attributes["ApproximateNumberOfMessagesDelayed"]),
        )

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
        quiet_since, last, last_print = time.monotonic(), None, 0.0
        while time.monotonic() < self.deadline:
            self._supervise(fleet, downstream)
            fleet.read_logs()
            depth = self._depth(queue_url)
            if done():
                return
            state = (depth, sum(fleet.events.values()))
            if state != last or depth != (0, 0) or self._producing.is_set():
                quiet_since, last = time.monotonic(), state
            elif quiet_is_done and time.monotonic() - quiet_since > quiet_seconds:
                return
            if time.monotonic() - last_print > 5:
                last_print = time.monotonic()
                applied, _ = downstream.snapshot()
                self.console.print(
                    f"  {time.monotonic() - self.started:5.0f} s  sent {self.sent_messages}/{len(self.plan)}"
                    f"  source visible/in flight {depth[0]}/{depth[1]}  applied {len(applied)}"
                    f"  processed {fleet.events['message_processed']}  to DLQ {fleet.events['message_moved_to_dlq']}"
                    f"  running {len(fleet.alive())}  killed {len(self.killed)}",
                    highlight=False,
                )
            time.sleep(POLL_SECONDS)
        self.console.print(f"[red]timed out after {self.options.timeout_seconds:.0f} s[/red] in {self.phase}")

    def _read_dlq(self, dlq_url: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Every DLQ message (held for 5 minutes, never deleted) with its reason record."""
        out = []
        while True:
            messages = self.moto.receive_message(
                QueueUrl=dlq_url,
                MaxNumberOfMessages=SQS_MAX_BATCH,
                VisibilityTimeout=300,
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                return out
            out.extend((m, read_reason(m.get("MessageAttributes", {}))) for m in messages)

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
        failures: list[str] = []
        applied, deliveries = downstream.snapshot()
        dlq = self._read_dlq(self.dlq_url)
        left = sum(self._depth())
        by_event: dict[str, list[dict[str, Any] | None]] = defaultdict(list)
        corpus_found: dict[str, dict[str, Any] | None] = {}
        unknown = 0
        for message, record in dlq:
            key = message.get("MessageAttributes", {}).get(KEY_ATTRIBUTE, {}).get("StringValue")
            if record and record.get("original_message_id") in self.corpus_ids:
                corpus_found[self.corpus_ids[record["original_message_id"]].name] = record
            elif key and key.startswith("evt-chaos-"):
                by_event[key].append(record)
            else:
                unknown += 1
        lost, misplaced, two_places, no_reason, good_in_dlq = [], [], [], [], []
        for p in self.plan:
            place = KINDS[p.kind][1]
            in_dlq, is_applied = p.event_id in by_event, p.event_id in applied
            if not in_dlq and not is_applied:
                lost.append(p.event_id)
            elif in_dlq and is_applied:
                two_places.append(p.event_id)
            elif is_applied and place != APPLIED:
                misplaced.append(p.event_id)
            elif in_dlq and place == APPLIED:
                good_in_dlq.append(p.event_id)
            if in_dlq and not all(by_event[p.event_id]):
                no_reason.append(p.event_id)
        unsent = [p.event_id for p in self.plan if p.event_id not in self.produced_ids]
        repeats = self._repeats(deliveries)
        reasons = Counter(
            (r["kind"] + ": " + r["reason"].split(":")[0]) if r else "no reason (SQS redrive)"
            for records in by_event.values()
            for r in records
        )
        accounting = {
            "applied_once": sum(1 for p in self.plan if p.event_id in applied),
            "applied_more_than_once": 0,  # the downstream applies a key at most once; repeats below
            "dead_lettered_events": len(by_event),
            "dlq_copies": sum(len(v) for v in by_event.values()),
            "good_in_dlq_with_reason": len(good_in_dlq),
            "lost": lost,
            "misplaced": misplaced,
            "in_two_places": two_places,
            "dlq_without_reason": no_reason,
            "unknown_in_dlq": unknown,
            "left_in_source": left,
            "unsent": unsent,
            "dlq_reasons": dict(reasons.most_common()),
        }
        for label, values in (
            ("lost", lost),
            ("in a wrong place", misplaced),
            ("in two places", two_places),
            ("in the DLQ without a reason (SQS's silent redrive)", no_reason),
            ("never sent (time ran out)", unsent),
        ):
            if values:
                failures.append(f"{len(values)} events {label}: {values[:5]}")
        if left:
            failures.append(f"{left} messages left in the source queue")
        if repeats["unexplained"]:
            failures.append(f"{len(repeats['unexplained'])} repeat deliveries not explained by a SIGKILL")
        corpus_checks = []
        for case in self.corpus:
            record = corpus_found.get(case.name)
            ok = record is not None and record["receive_count"] == 1 and record["kind"] == "poison"
            corpus_checks.append(
                {
                    "name": case.name,
                    "what": case.what,
                    "body_chars": len(case.body),
                    "place": "DLQ" if record else "missing",
                    "receive_count": record["receive_count"] if record else None,
                    "reason": record["reason"][:120] if record else None,
                    "ok": ok,
                }
            )
            if not ok:
                failures.append(f"corpus {case.name}: not in the DLQ with a reason at receive 1 ({record})")
        if self.canaries_applied != 5 or not self.corpus_alive:
            failures.append(
                f"after the corpus: {self.canaries_applied}/5 canaries applied, consumers alive {self.corpus_alive}"
            )
        for check in fifo["checks"]:
            if not check["ok"]:
                failures.append(f"FIFO {check['name']}: expected {check['expect']}, found {check['place']}")
        if not fifo["groups_in_order"]:
            failures.append(f"a FIFO group was applied out of order: {fifo['order']}")
        consumers = []
        for one in fleets:
            for c in one.processes:
                how = "SIGKILL" if c.number in self.killed and one is fleets[0] else None
                replaced = [r for r in self.replaced if r["number"] == c.number and one is fleets[0]]
                if replaced:
                    how = f"exited on its own ({replaced[0]['exit_code']})"
                elif how is None:
                    how = "SIGTERM"
                code = c.exit_code if c.exit_code is not None else c.process.returncode
                consumers.append(
                    {
                        "fleet": "fifo" if one is not fleets[0] else "standard",
                        "number": c.number,
                        "ended_by": how,
                        "exit_code": code,
                        "stopped_in_seconds": None if c.stopped_in_seconds is None else round(c.stopped_in_seconds, 2),
                    }
                )
                if how == "SIGTERM" and code != 0:
                    failures.append(f"consumer {c.number} exited {code} after SIGTERM")
                # A consumer killed at start-up, or started while the endpoint is down, exits CONFIG (StartupError):
                # ECS would start another task, and so does the supervisor here.
                if replaced and replaced[0]["exit_code"] != ExitCode.CONFIG:
                    failures.append(f"consumer {c.number} crashed with exit {replaced[0]['exit_code']}")
        events: Counter[str] = Counter()
        for one in fleets:
            one.read_logs()
            events.update(one.events)
        if events["thread_crashed"]:
            failures.append(f"{events['thread_crashed']} consumer threads crashed")
        produced = Counter(p.kind for p in self.plan)
        return ChaosResult(
            options={k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.options).items()},
            produced={**produced, "sends_confirmed": self.sent_messages},
            accounting=accounting,
            repeats=repeats,
            corpus=corpus_checks,
            fifo=fifo,
            faults=proxy.fault_counts(),
            forwarded=dict(proxy.forwarded),
            outages=proxy.outages,
            kills=len(self.killed),
            consumers=consumers,
            events={
                k: v
                for k, v in sorted(events.items())
                if k
                in {
                    "message_processed",
                    "message_moved_to_dlq",
                    "message_backoff",
                    "duplicate_skipped",
                    "message_in_progress_elsewhere",
                    "receive_failed",
                    "message_requeued",
                    "dlq_send_failed",
                    "handler_failed",
                    "idempotency_update_failed",
                    "idempotency_unavailable",
                    "thread_crashed",
                    "startup_failed",
                }
                or k.startswith("moved_to_dlq:")
            },
            phases=self.phases,
            elapsed_seconds=round(time.monotonic() - self.started, 1),
            failures=failures,
        )

    def _repeats(self, deliveries: dict[str, list[Delivery]]) -> dict[str, Any]:
        """Deliveries after the first 200 per key, split by cause.

        A repeat is explained when an earlier delivery's sender was SIGKILLed after it: the
        downstream had answered, but the consumer died before recording completion, so after the
        lease another consumer delivered again (the downstream's Idempotency-Key absorbed it).
        Anything else would be a duplicate the consumer caused.
        """
        explained, unexplained = 0, []
        for key, history in deliveries.items():
            successes = [d for d in history if d.status == 200]
            for n in range(1, len(successes)):
                earlier = successes[:n]
                if any(d.sender in self.killed and self.killed[d.sender] >= d.at for d in earlier):
                    explained += 1
                else:
                    unexplained.append({"key": key, "senders": [d.sender for d in successes]})
        return {
            "raw_repeat_deliveries": explained + len(unexplained),
            "explained_by_sigkill": explained,
            "unexplained": unexplained,
        }


# --------------------------------------------------------------------------- report


def render(result: ChaosResult, console: Console) -> None:
    """The closing summary: final places, repeats, corpus, FIFO, faults and consumer exits."""
    a = result.accounting
    summary = Table(title="Chaos suite: where every message ended", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    rows = [
        ("produced (plan)", ", ".join(f"{k} {v}" for k, v in result.produced.items())),
        ("applied once at the downstream", str(a["applied_once"])),
        ("events in the DLQ with a reason (copies)", f"{a['dead_lettered_events']} ({a['dlq_copies']})"),
        ("good events in the DLQ with a reason (faults exhausted retries)", str(a["good_in_dlq_with_reason"])),
        ("lost", str(len(a["lost"]))),
        ("in a wrong place / in two places", f"{len(a['misplaced'])} / {len(a['in_two_places'])}"),
        ("in the DLQ without a reason (SQS silent redrive)", str(len(a["dlq_without_reason"]))),
        ("left in the source", str(a["left_in_source"])),
        (
            "raw repeat deliveries (explained by SIGKILL / not)",
            f"{result.repeats['raw_repeat_deliveries']} ({result.repeats['explained_by_sigkill']}"
            f" / {len(result.repeats['unexplained'])})",
        ),
        ("SIGKILLs", str(result.kills)),
        ("endpoint restarts", ", ".join(f"{o['seconds']} s down" for o in result.outages) or "none"),
        (
            "corpus (standard) in the DLQ at receive 1",
            f"{sum(c['ok'] for c in result.corpus)} / {len(result.corpus)}",
        ),
        ("FIFO checks passed", f"{sum(c['ok'] for c in result.fifo['checks'])} / {len(result.fifo['checks'])}"),
        ("consumer log events", ", ".join(f"{k} {v}" for k, v in result.events.items())),
        ("elapsed", f"{result.elapsed_seconds} s"),
    ]
    for label, value in rows:
        summary.add_row(label, value)
    console.print(summary)
    faults = Table(title="Injected faults (by kind and operation)")
    faults.add_column("kind")
    faults.add_column("operations")
    faults.add_column("total", justify="right")
    for kind in FAULT_KINDS:
        counts = result.faults.get(kind, {})
        faults.add_row(kind, ", ".join(f"{op} {n}" for op, n in counts.items()), str(sum(counts.values())))
    console.print(faults)
    if result.failures:
        for failure in result.failures:
            console.print(f"[red]FAIL[/red] {failure}")
    else:
        console.print("[green]OK[/green]: nothing lost, nothing misplaced, every corpus message dead-lettered at once")


def write_markdown(result: ChaosResult, path: Path) -> None:
    """``docs/CHAOS.md``: what was run, the command, the figures, and what each fault demonstrates."""
    a, o = result.accounting, result.options
    faults = "\n".join(
        f"| {kind} | {sum(result.faults.get(kind, {}).values())} | "
        + ", ".join(f"{op} {n}" for op, n in result.faults.get(kind, {}).items())
        + " |"
        for kind in FAULT_KINDS
    )
    corpus = "\n".join(
        f"| `{c['name']}` | {c['what']} | {c['place']} | {c['receive_count']} | {'yes' if c['ok'] else 'NO'} |"
        for c in result.corpus
    )
    fifo = "\n".join(
        f"| `{c['name']}` | {c['what']} | {c['expect']} | {c['place']} | {'yes' if c['ok'] else 'NO'} |"
        for c in result.fifo["checks"]
    )
    exits = Counter(f"{c['fleet']} {c['ended_by']} -> exit {c['exit_code']}" for c in result.consumers)
    text = f"""# Chaos suite

Issue #5: several consumer processes on one queue, thousands of messages, a random consumer
SIGKILLed every few seconds and restarted, the endpoint restarted once, throttling and HTTP 500s
injected; afterwards every message has either succeeded with its side effect applied once, or is
in the DLQ with a reason. Plus a bad-input corpus whose every message must reach the DLQ with a
reason at its first receive while the consumer keeps running. Everything runs on 127.0.0.1.

## How to run it

```
{o["command"] or "python -m bench.chaos"}
```

`bench/chaos.py` (the run), `bench/proxy.py` (the fault-injecting proxy), `bench/corpus.py`
(the bad-input corpus). The short form runs in CI as `tests/integration/test_chaos.py` (a few
hundred messages, 3 consumers, a few kills, one endpoint restart, faults on). The exit code is 1
if anything is lost, misplaced, in two places or in the DLQ without a reason, if a corpus message
missed the DLQ at its first receive, if a repeat delivery is not explained by a SIGKILL, or if a
consumer that was not SIGKILLed did not exit 0 on SIGTERM. Results: `docs/bench/chaos.json`.

## The set-up

- The `demo` stack (`cdk.out/SqsWorker-demo.template.json`: 10 s lease, 3 receives before the
  consumer dead-letters, redrive backstop 5, 1-4 s retry backoff) provisioned on moto's server,
  the handler being the notifications example; {o["consumers"]} `python -m consumer run` processes.
- **A fault-injecting reverse proxy** between the consumers and moto (`AWS_ENDPOINT_URL`). Per
  SQS request, with probabilities {o["throttle"]} / {o["error_before"]} / {o["error_after"]}:
  - `throttle_before`: HTTP 400 `RequestThrottled` (SQS's JSON protocol: `__type` plus the
    `x-amzn-query-error` header); botocore classifies it as throttling and retries it. Nothing
    reached moto.
  - `error_before`: HTTP 500 `InternalError`, not forwarded; botocore retries it as transient.
  - `error_after`: forwarded and **applied by moto**, then answered with HTTP 500: the lost
    answer. A lost ReceiveMessage leaves messages in flight that no consumer saw (they return
    after the lease, one receive closer to the DLQ); a lost SendMessageBatch makes the producer
    send again (two copies of one event: the idempotency table must absorb the second); a lost
    DeleteMessageBatch is retried on a handle that is already gone.
- **The endpoint restart** is the proxy closing its socket and every open connection for
  {o["outage_seconds"]} s, then listening again on the same port: moto's server keeps its state in
  memory, so restarting moto itself would lose every queue and message, which a restart of the
  real SQS endpoint never does. Consumers see refused and reset connections and back off.
- **SIGKILL** of a random consumer every {o["kill_every_seconds"]} s (+-30 %), replaced at once;
  its received messages come back after the 10 s lease.
- **The downstream** honours `Idempotency-Key` like Stripe: the first success per key applies the
  effect, later requests with that key get 200 without applying again. It also counts raw
  deliveries, per sender (each consumer process has its own webhook path).
- The idempotency table (DynamoDB on moto) is reached directly, not through the proxy: the faults
  are SQS's; the table is what keeps a side effect single across them.
- Stream: {result.produced.get("good", 0)} good, {result.produced.get("flaky", 0)} flaky (downstream 503 on
  the first delivery), {result.produced.get("malformed", 0)} malformed, {result.produced.get("rejected", 0)}
  rejected (downstream 422), paced at {o["rate_per_second"]} msg/s with the source kept under
  {o["max_depth"]} visible messages (moto's receive slows down as the queue grows).

## Figures of the full run

| figure | value |
|---|---|
| events produced (sends SQS confirmed; copies from lost answers come on top) | {sum(v for k, v in result.produced.items() if k in KINDS)} ({result.produced["sends_confirmed"]}) |
| applied exactly once at the downstream | {a["applied_once"]} |
| events in the DLQ with a reason (DLQ copies) | {a["dead_lettered_events"]} ({a["dlq_copies"]}) |
| good events in the DLQ with a reason (faults exhausted their retries) | {a["good_in_dlq_with_reason"]} |
| **lost** | **{len(a["lost"])}** |
| in a wrong place / in two places / in the DLQ without a reason | {len(a["misplaced"])} / {len(a["in_two_places"])} / {len(a["dlq_without_reason"])} |
| left in the source queue | {a["left_in_source"]} |
| raw repeat deliveries at the downstream | {result.repeats["raw_repeat_deliveries"]} |
| of which explained by a SIGKILL of the earlier sender / not explained | {result.repeats["explained_by_sigkill"]} / {len(result.repeats["unexplained"])} |
| SIGKILLs / endpoint restarts | {result.kills} / {len(result.outages)} ({", ".join(f"{x['seconds']} s" for x in result.outages)}) |
| consumers and how they ended | {"; ".join(f"{k}: {v}" for k, v in sorted(exits.items()))} |
| consumer log events | {", ".join(f"{k} {v}" for k, v in result.events.items())} |
| DLQ reasons (grouped) | {"; ".join(f"{k}: {v}" for k, v in a["dlq_reasons"].items())} |
| elapsed | {result.elapsed_seconds} s (phases: {", ".join(f"{k} at {v} s" for k, v in result.phases.items())}) |
| verdict | {"OK" if result.ok else "FAILED: " + "; ".join(result.failures)} |

**Raw repeat deliveries are not consumer-caused duplicates.** A consumer SIGKILLed after the
downstream answered 200 but before it recorded completion in the idempotency table leaves an
in-progress record whose lease lapses; after the message's lease, another consumer delivers it
again. The downstream's `Idempotency-Key` makes that harmless (applied stays 1), which is why the
example handler sends one. The suite traces each repeat to its earlier sender: a repeat whose
earlier sender was not SIGKILLed afterwards would be a duplicate the consumer caused, and fails
the run.

## Injected faults

| kind | total | by operation |
|---|---:|---|
{faults}

What each demonstrates: throttles and pre-forward 500s are retried by botocore (standard mode;
the consumer's `max_attempts: 3` means 3 retries, 4 attempts in all) and, past that, by the consumer's own paths (receive backoff, per-entry retry of
batched deletes and visibility changes, a failed DLQ send leaving the message for a later
receive). Post-forward 500s are the hard case: the operation happened and the client believes it
did not. Nothing is lost and no effect is applied twice because deletes are idempotent, a
message is deleted only after SQS confirmed its DLQ copy, and the idempotency key (the event id
in the `idempotency-key` attribute) turns a second copy into `duplicate_skipped`. DLQ copies
beyond one per event are lost-answer duplicates of a poison event, each moved with its reason.
Consumers that "exited on its own (2)" were started while the endpoint was down: the start-up
check (GetQueueAttributes) failed and the process exited 2, as it should; the supervisor
started another, as ECS would.

## Bad-input corpus (standard queue): each in the DLQ with a reason at receive 1

Faults paused and no kills during this phase: a lost ReceiveMessage answer would make any
message's first visible receive its second, which says nothing about the consumer. The corpus is
sent only once every request forwarded before the pause has been answered: a consumer SIGKILLed
mid long poll leaves its poll waiting at moto, and a message handed to it comes back one receive
count up after its lease (`FaultProxy.settle`). Five good
canaries sent after the corpus were applied ({"yes" if not any("canaries" in f for f in result.failures) else "NO"}),
by the same consumer processes.

| kind | what | place | receive count | ok |
|---|---|---|---:|---|
{corpus}

The body of `max_size_body` is the source queue's `MaximumMessageSize` as moto reports it
(1,040,384 bytes: the stack keeps the source 8 KiB under the DLQ's 1,048,576, SQS's limit since
August 2025). Real SQS counts body plus attributes in bytes, so without that headroom the DLQ copy
of a maximum-size message (the same body plus the reason attribute) would be refused, and the
message would cycle until SQS's redrive dead-lettered it without a reason. moto checks only the
body's length in characters, so here the headroom is asserted on the template
(`tests/infra/test_stack.py`) and on the reason attribute's size (`tests/unit/test_runtime_parts.py`).

## FIFO corpus

Queue `{result.fifo["queue"]}` under the FIFO form of the demo declaration (`bench/corpus.py:fifo_handle`);
good neighbours applied in group order: {"yes" if result.fifo["groups_in_order"] else "NO"}
({"; ".join(f"{g}: {', '.join(k.rsplit('-', 1)[1] for k in keys)}" for g, keys in result.fifo["order"].items())}).

| case | what | expected | found | ok |
|---|---|---|---|---|
{fifo}
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


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
    console = Console()
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
