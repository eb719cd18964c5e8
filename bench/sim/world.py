"""One seeded run of the simulated world: queues, a producer, consumers, handlers, kills and signals.

A :class:`Plan` is everything a run varies, drawn from its seed (:meth:`Plan.draw`) or written out by a named
scenario. :func:`simulate` runs it: the world's own thread (``world/main``) creates the queue pair and the
idempotency table as the stack would (from the contract), starts the consumers (each one a "process": the real
:class:`consumer.runtime.consumer.Consumer` and its threads, with the SIGTERM handler ``python -m consumer run``
installs), sends the events over time, kills and restarts consumers and sends them SIGTERM as the plan says, then
turns the faults off, lets the consumers settle everything, stops them and reads the world back. What it read is a
:class:`Run`, which :mod:`bench.sim.invariants` checks.

Handlers are the world's: each records its side effect (``Run.effects``) when its work is done, so effects are
counted at the handler, never from the consumer's logs. An event's kind says how its handler behaves, attempt by
attempt (:data:`bench.sim.plan.KINDS`).
"""

from __future__ import annotations

import io
import json
import logging
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from bench.sim.aws import ACCOUNT, REGION, Aws, Faults
from bench.sim.clock import SimClock
from bench.sim.handlers import Handlers
from bench.sim.plan import Plan
from bench.sim.run import Process, Run
from bench.sim.scheduler import SimThread, Simulation
from consumer.limits import DYNAMODB_CLIENT, SQS_CLIENT
from consumer.queue_attributes import QueuePairAttributes
from consumer.runtime.cli import StopOnSignal
from consumer.runtime.clients import client_config, dynamodb_connections, sqs_connections
from consumer.runtime.consumer import Collaborators, Consumer
from consumer.runtime.idempotency import IDEMPOTENCY_KEY_ATTRIBUTE, DynamoDBStore
from consumer.runtime.inflight import InFlight, State
from consumer.runtime.liveness import Liveness
from consumer.runtime.observability import Metrics
from consumer.runtime.protection import ScaleInProtection
from consumer.runtime.wiring import Intake

TABLE = "sim-idempotency"


class World:
    """Runs one plan (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.contract = plan.contract()
        self.sim = SimClock(plan.seed, switch_probability=plan.switch_probability)
        self.rng = random.Random(f"world-{plan.seed}")  # events' kinds and durations
        slow = {"dynamodb": plan.ddb_latency_ms} if plan.ddb_latency_ms else None
        self.aws = Aws(self.sim, random.Random(f"aws-{plan.seed}"), plan.faults, latency_ms=plan.latency_ms, slow=slow)
        self.run = Run(plan, self.contract)
        self.handlers = Handlers(plan, self.run, self.sim, self.rng)
        self.aws.on_receive = self._received
        self._processes_started = 0
        self._stopping = False

    # --- the run ------------------------------------------------------------------------------------------------------
    def simulate(self) -> Run:
        capture = _LogCapture(self.sim)
        logger = logging.getLogger("consumer")
        saved_level, saved_propagate = logger.level, logger.propagate
        logger.addHandler(capture)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # the run's own log is its event log: nothing reaches the process's handlers
        try:
            with self.aws:
                self.sim.run(self._main)
                _read_back(self.aws, self.run)
                self.sim.close()
        finally:
            logger.removeHandler(capture)
            logger.setLevel(saved_level)
            logger.propagate = saved_propagate
        self.run.errors = list(self.sim.errors)
        self.run.events = self.sim.events
        self.run.ledger = self.aws.ledger
        return self.run

    def _main(self) -> None:
        plan, sim = self.plan, self.sim
        self._admin = self.aws.client("sqs", caller="world", faults=False)
        self._create_queues()
        producer = sim.thread(self._produce, name="producer")
        producer.start()
        sim.sleep(plan.consumers_from)  # a backlog first, when the plan says so
        for slot in range(plan.consumers):
            self._start_process(slot)
        chaos = sorted(
            [(at, "kill", slot) for at, slot in plan.kills] + [(at, "term", slot) for at, slot in plan.sigterms]
        )
        for at, what, slot in chaos:
            sim.sleep(at - sim.now)
            self._chaos(what, slot)
        sim.sleep(max(0.0, plan.chaos_until - sim.now))
        producer.join()
        self.aws.faults = Faults()  # the world settles: no more faults
        sim.record("chaos over")
        self._settle()
        self._stopping = True
        for process in self._alive():
            self._sigterm(process)
        for process in self.run.processes:
            process.thread.join(self.contract.stop_timeout_seconds + 30)
        sim.record("world stopped")

    def _queue_attributes(self) -> QueuePairAttributes:
        """The queue pair as the stack creates it for the plan's worker."""
        return self.contract.queue_attributes()

    def _create_queues(self) -> None:
        sqs, pair = self._admin, self._queue_attributes()
        suffix = ".fifo" if self.plan.fifo else ""
        self.run.dlq_url = sqs.create_queue(QueueName=f"sim-dlq{suffix}", Attributes=pair.dead_letter.to_sqs())[
            "QueueUrl"
        ]
        arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:sim-dlq{suffix}"
        attributes = pair.source.to_sqs(dead_letter_target_arn=arn)
        self.run.queue_url = sqs.create_queue(QueueName=f"sim-source{suffix}", Attributes=attributes)["QueueUrl"]
        if self.plan.guard:
            ddb = self.aws.client("dynamodb", caller="world", faults=False)
            ddb.create_table(
                TableName=TABLE,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )

    # --- the producer -------------------------------------------------------------------------------------------------
    def _produce(self) -> None:
        plan, sim = self.plan, self.sim
        for index in range(plan.messages):
            event = f"e{index:03d}"
            kind = plan.kinds[index % len(plan.kinds)] if plan.cycle_kinds else self.rng.choice(plan.kinds)
            self.run.kinds[event] = kind
            group = f"g{index % plan.groups}"
            self.run.groups[event] = group
            params: dict[str, Any] = {
                "QueueUrl": self.run.queue_url,
                "MessageBody": event,
                "MessageAttributes": {IDEMPOTENCY_KEY_ATTRIBUTE: {"DataType": "String", "StringValue": event}},
            }
            if plan.fifo:
                params["MessageGroupId"] = group
                params["MessageDeduplicationId"] = event
            if plan.send_over and index:
                sim.sleep(self.rng.uniform(0, 2 * plan.send_over / plan.messages))
            self._admin.send_message(**params)
            self.run.sent.append(event)
            sim.record(f"sent {event} kind={kind} group={group}")

    # --- processes ----------------------------------------------------------------------------------------------------
    def _start_process(self, slot: int) -> Process:
        self._processes_started += 1
        name = f"c{slot}" if self._processes_started <= self.plan.consumers else f"c{slot}.{self._processes_started}"
        thread = SimThread(self.sim, lambda: None, "main", name)
        process = Process(name, slot, thread, StopOnSignal(), self.sim.now)
        thread.target = lambda: self._run_process(process)
        self.run.processes.append(process)
        self.sim.record(f"process {name} starts")
        thread.start()
        return process

    def _consumer(self, name: str) -> Consumer:
        """The process's consumer, built on its own main thread (so its threads are the process's)."""
        sqs, collaborators = self._wiring(name)
        protection = ScaleInProtection(None)
        if self.plan.protection:
            protection = ScaleInProtection(
                "http://169.254.170.2/api/sim",
                clock=self.sim.monotonic,
                lock=self.sim.lock(),  # type: ignore[arg-type]
                opener=_Agent(self.sim, self.aws),  # type: ignore[arg-type]
            )
        return Consumer(
            sqs,
            queue_url=self.run.queue_url,
            dlq_url=self.run.dlq_url,
            contract=self.contract,
            handler=self.handlers.for_process(name),
            collaborators=replace(collaborators, protection=protection, liveness=Liveness(None)),
            intake=self.intake,
        )

    @property
    def intake(self) -> Intake:
        """Whose copies are trusted with their spent receives: the role moto's SQS records as every sender."""
        from moto.sqs.models import DEFAULT_SENDER_ID

        return Intake(task_role_id=DEFAULT_SENDER_ID)

    def _wiring(self, name: str) -> tuple[Any, Collaborators]:
        """The SQS client of ``name`` (labelled so in the ledger) and its collaborators: the run's clock, a seeded
        rng, the guard's store (none without a guard), metrics to a buffer. Its clients have the consumer's own botocore
        configuration (timeouts, three attempts, a fixed User-Agent: clients.py)."""
        sqs = self.aws.client("sqs", caller=name, config=client_config(SQS_CLIENT, sqs_connections(self.contract)))
        store = None
        if self.plan.guard:
            ddb_config = client_config(DYNAMODB_CLIENT, dynamodb_connections(self.contract))
            ddb = self.aws.client("dynamodb", caller=name, config=ddb_config)
            store = DynamoDBStore(TABLE, client=ddb, clock=self.sim.time, sleep=self.sim.sleep)
        collaborators = Collaborators(
            clock=self.sim,  # type: ignore[arg-type]
            rng=random.Random(f"{self.plan.seed}-{name}"),
            idempotency=store,
            metrics=Metrics(dimensions={"Queue": "sim-source"}, stream=io.StringIO(), clock=self.sim.time),
        )
        return sqs, collaborators

    def _run_process(self, process: Process) -> None:
        """A process's main thread: as ``python -m consumer run`` (its SIGTERM handler first, then the consumer)."""
        try:
            process.consumer = consumer = self._consumer(process.name)
            process.signal.consumer = consumer
            code = int(consumer.run())
        except BaseException as stopped:
            if type(stopped).__name__ != "_StoppedBeforeStart":
                raise
            code = 0  # SIGTERM during start-up: exit 0 at once, as the CLI does
        process.exit_code, process.exited = code, self.sim.now
        self.sim.record(f"process {process.name} exits {code}")
        self.sim.kill(process.name, but_me=True)  # its other threads end with it (a handler still running, too)
        self._restart_later(process.slot)

    def _restart_later(self, slot: int) -> None:
        """ECS replaces a task that exits (stuck, crashed, killed, or stopped by a deploy), a little later."""
        if self._stopping:
            return

        def restart() -> None:
            self.sim.sleep(self.plan.restart_after)
            if not self._stopping:
                self._start_process(slot)

        thread = SimThread(self.sim, restart, "restart", "world")
        thread.start()

    def _alive(self) -> list[Process]:
        return [p for p in self.run.processes if p.exited is None and p.killed is None]

    def _chaos(self, what: str, slot: int) -> None:
        process = next((p for p in self._alive() if p.slot == slot), None)
        if process is None:
            return
        if what == "term":
            self._sigterm(process)
            return
        process.killed = self.sim.now
        self.sim.record(f"SIGKILL {process.name}")
        self.sim.kill(process.name)
        self._restart_later(slot)

    def _sigterm(self, process: Process) -> None:
        self.sim.record(f"SIGTERM {process.name}")
        on_signal = process.signal

        def handle() -> None:
            if process.sigterm is None:
                process.sigterm = self.sim.now  # when the handler ran: the drain counts from it
            on_signal(15, None)

        self.sim.signal(process.thread, handle)

    # --- settling -----------------------------------------------------------------------------------------------------
    def _settle(self) -> None:
        """Wait until every event is done or in the DLQ, looking every 5 virtual seconds (every process that exits or
        is killed is replaced, so a consumer is running)."""
        sim, plan = self.sim, self.plan
        limit = sim.now + plan.settle_limit
        while sim.now < limit:
            if self._all_final():
                self.run.settled_at = sim.now
                sim.record("settled")
                return
            self._watch()
            sim.sleep(5.0)
        sim.record("not settled")

    def _all_final(self) -> bool:
        source = self.aws.sqs_queue(self.run.queue_url)
        dlq = self.aws.sqs_queue(self.run.dlq_url)
        in_dlq = {m.body for m in dlq._messages}
        if source._messages:
            return False
        return all(self.run.effects.get(e) or e in in_dlq for e in self.run.sent)

    def _watch(self) -> None:
        """None invisible past its lease without a live holder: a message the source holds in flight longer than any
        lease or backoff the contract gives must be held by a live consumer."""
        now_ms = self.sim.time() * 1000
        longest = max(self._source_visibility(), self.contract.retry_backoff_max_seconds) + 5
        held = {item.message.message_id for _, items in self._holdings() for item in items}
        for message in self.aws.sqs_queue(self.run.queue_url)._messages:
            invisible_for = (message.visible_at - now_ms) / 1000
            if invisible_for > longest and message.id not in held:
                self.run.audit.append(
                    f"{message.body} invisible for {invisible_for:.0f} s more with no live holder (t={self.sim.now:.1f})"
                )

    def _received(self, messages: list[dict[str, Any]]) -> None:
        """A receive hands out a message that a live consumer still holds (running and not given up on, waiting for
        its turn, or settled with its delete not yet sent): that holder's lease ran out under it (the invariants
        excuse a lease SQS refused to extend)."""
        ids = {message["MessageId"]: message["Body"] for message in messages}
        for process, items in self._holdings():
            given_up = {i.context.message_group_id for i in items if i.state is State.TIMED_OUT}
            for item in items:
                if item.message.message_id in ids and self._holds(item, given_up):
                    self.run.held_again.append(
                        (ids[item.message.message_id], process.name, self.sim.now, item.state.value)
                    )

    def _source_visibility(self) -> int:
        """The source queue's visibility timeout: a receive's lease."""
        return self.contract.visibility_timeout_seconds

    def _holdings(self) -> Iterator[tuple[Process, list[InFlight]]]:
        """Each live process with what its consumer holds in flight (the world sees everything)."""
        for process in self._alive():
            if process.consumer is not None:
                yield process, list(process.consumer._table._items.values())  # noqa: SLF001

    def _holds(self, item: Any, given_up: set[str | None]) -> bool:
        """Whether the consumer keeps ``item``'s lease by design (docs/runtime.md): running and not given up on, or
        done with until its delete is sent; waiting, only a batch handler's and a FIFO group's (not behind one given up
        on, whose group another task may take). A one-message handler's message received ahead of a free handler
        (the lookahead) is left to lapse: another task may run it sooner."""
        if item.state in (State.RUNNING, State.DONE, State.DELETING):
            return True
        if item.state is not State.WAITING:
            return False
        if self.contract.fifo:
            return item.context.message_group_id not in given_up
        return self.contract.max_batch is not None


def _read_back(aws: Aws, run: Run) -> None:
    """After the run: what is left in each queue (the omniscient view, no request)."""
    for attribute, url in (("source", run.queue_url), ("dlq", run.dlq_url)):
        messages = []
        for message in aws.sqs_queue(url)._messages:
            reason = message.message_attributes.get("x-dlq-reason", {}).get("StringValue")
            messages.append(
                {
                    "body": message.body,
                    "reason": json.loads(reason) if reason else None,
                    "receive_count": message.approximate_receive_count,
                }
            )
        setattr(run, attribute, messages)


class _Agent:
    """The ECS agent's task-protection endpoint: each call takes the world's latency and answers as the agent does."""

    def __init__(self, sim: Simulation, aws: Aws) -> None:
        self.sim = sim
        self.aws = aws

    def open(self, request: Any, timeout: float | None = None) -> io.BytesIO:
        self.sim.sleep(self.aws.latency() * 4)
        reply = json.dumps({"protection": {"ProtectionEnabled": True}}).encode()
        return _Reply(reply)


class _Reply(io.BytesIO):
    def __enter__(self) -> _Reply:
        return self


class _LogCapture(logging.Handler):
    """The runtime's log lines, into the event log: the event and the message it is about."""

    FIELDS = ("message_id", "why", "kind", "reason", "error", "state", "operation")

    def __init__(self, sim: Simulation) -> None:
        super().__init__(logging.DEBUG)
        self.sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        current = self.sim.current
        if current is None or current._os is not threading.current_thread():
            return  # not this run's thread (one of an earlier run in this process that never unwound): not its event
        parts = [record.getMessage()]
        for name in self.FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                parts.append(f"{name}={str(value)[:80]}")
        self.sim.record("log " + " ".join(parts))


def simulate(plan: Plan) -> Run:
    """Run a container plan once; the :class:`Run` it left (bench/sim/functions.py's LambdaWorld runs a Lambda
    plan)."""
    if plan.target != "container":
        raise ValueError(f'"target" must be container here (bench/sim/functions.py runs the others): {plan.target}')
    return World(plan).simulate()


__all__ = ["World", "simulate"]
