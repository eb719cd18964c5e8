"""The chaos suite's fleets, one per handler shape: each consumes its own queue pair with its own stream, under the
same faults, and is accounted for on its own.

The thread fleet (``standard``) runs the demo stack's own worker (the notifications handler, ``def handle(message)``)
on the pair provisioned from the template. The batch and async fleets run :mod:`bench.chaos_handlers`' handlers on a
pair each made from their declaration (:meth:`~consumer.contract.WorkerContract.queue_attributes`, as the FIFO phase
makes its pair), with an idempotency table each, shaped as the stack's. Every fleet's consumers are ``python -m consumer run`` processes
labelled for the downstream and the proxy (``c<N>``, ``batch-c<N>``, ``async-c<N>``), SIGKILLed every few seconds;
their events have their own ids (``evt-chaos-``, ``evt-batch-``, ``evt-async-``), so one downstream and one proxy
record serve every fleet's accounting (:func:`lane_result`).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos_accounting import (
    PLACES,
    Record,
    account_stream,
    corpus_checks,
    dlq_copies,
    dlq_kinds,
    expected_dlq_kinds,
    kind_failures,
    reported_events,
    sort_dlq,
    stream_failures,
)
from bench.chaos_evidence import Delivery, ReceiveLog, Run, trace
from bench.chaos_fleet import Supervisor
from bench.chaos_stream import EVENT_PREFIX
from bench.corpus import KEY_ATTRIBUTE, Case, standard_cases
from consumer.contract import WorkerContract
from consumer.declaration import contract_of, load_handler
from consumer.local.harness import Fleet, Planned, batch_entries, batches, queue_depth, read_dlq, sample_event
from consumer.local.stack import LOCAL_LOG_LEVEL

#: How many good canaries each fleet gets after its corpus (each must be applied).
CANARIES = 5


@dataclass(frozen=True)
class Shape:
    """A handler shape the suite runs as a fleet: its handler, labels, event ids and what a rejected event becomes."""

    name: str
    what: str  # for the report
    handler: str | None  # CONSUMER_HANDLER; None: the stack's own worker (the demo's notifications handler)
    label_prefix: str  # consumer labels: <prefix><N>
    event_prefix: str  # event ids: <prefix>00000, ...
    rejected_kind: str  # the DLQ reason kind of an event the downstream rejects (422)


THREADS = Shape("standard", "`def handle(message)`, threads", None, "c", EVENT_PREFIX, "poison")
BATCH = Shape(
    "batch",
    "`def handle(messages) -> BatchResult` (`max_batch`)",
    "bench.chaos_handlers:batch_handle",
    "batch-c",
    "evt-batch-",
    "non_retryable",
)
ASYNC = Shape(
    "async",
    "`async def handle(message)`, coroutines",
    "bench.chaos_handlers:async_handle",
    "async-c",
    "evt-async-",
    "non_retryable",
)
SHAPES = {shape.name: shape for shape in (THREADS, BATCH, ASYNC)}


@dataclass
class Lane:
    """One fleet of the run: its shape, contract, queues, consumers and stream, and what happened to them."""

    shape: Shape
    contract: WorkerContract
    consumers: int
    plan: list[Planned]
    rate_per_second: float
    queue_url: str
    dlq_url: str
    fleet: Fleet
    produced_ids: set[str] = field(default_factory=set)
    sent: int = 0
    corpus: list[Case] = field(default_factory=list)
    corpus_ids: dict[str, Case] = field(default_factory=dict)  # the corpus's MessageIds -> case
    canaries: list[str] = field(default_factory=list)
    canaries_applied: int = 0
    corpus_alive: list[int] = field(default_factory=list)  # consumers running through the whole corpus phase

    @property
    def name(self) -> str:
        return self.shape.name

    def labelled(self, label: str | None) -> bool:
        """Whether ``label`` names one of this fleet's consumers."""
        return label is not None and re.fullmatch(re.escape(self.shape.label_prefix) + r"\d+", label) is not None

    def owns(self, key: str) -> bool:
        """Whether ``key`` (an idempotency key) is one of this fleet's events or canaries."""
        return key.startswith(self.shape.event_prefix) or key in self.canaries


def create_pair(sqs: Any, contract: WorkerContract, prefix: str) -> tuple[str, str]:
    """A source and DLQ with the attributes ``contract`` derives (FIFO names for a FIFO contract); returns (source
    URL, DLQ URL)."""
    pair = contract.queue_attributes()
    suffix = ".fifo" if contract.fifo else ""
    dlq_url = sqs.create_queue(QueueName=f"{prefix}-dlq{suffix}", Attributes=pair.dead_letter.to_sqs())["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName=f"{prefix}-source{suffix}", Attributes=pair.source.to_sqs(dead_letter_target_arn=dlq_arn)
    )["QueueUrl"]
    return queue_url, dlq_url


def copy_table(dynamodb: Any, source: str, name: str) -> str:
    """A new idempotency table ``name`` shaped as the stack's ``source`` (keys, billing, expiry); returns its name.

    Each fleet has its own, as each worker of a stack does: a message without an ``idempotency-key`` attribute is
    keyed by its body, and the corpus sends one body to every fleet's queue, so a shared table would have one fleet
    find another's claim on it (and defer or skip a message it must dead-letter)."""
    table = dynamodb.describe_table(TableName=source)["Table"]
    dynamodb.create_table(
        TableName=name,
        KeySchema=table["KeySchema"],
        AttributeDefinitions=table["AttributeDefinitions"],
        BillingMode="PAY_PER_REQUEST",
    )
    expiry = dynamodb.describe_time_to_live(TableName=source).get("TimeToLiveDescription", {})
    if expiry.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") and expiry.get("AttributeName"):
        specification = {"Enabled": True, "AttributeName": expiry["AttributeName"]}
        dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=specification)
    return name


def declared_environment(
    child: Mapping[str, str], handler: str, queue_url: str, dlq_url: str | None, table: str
) -> dict[str, str]:
    """A consumer's environment for ``handler`` on its own pair and idempotency ``table``: the stack's endpoints and
    credentials, without the stack worker's contract (so the handler's own declaration is the contract: a local
    run)."""
    env = {k: v for k, v in child.items() if not k.startswith("CONSUMER_") and k != "DLQ_URL"} | LOCAL_LOG_LEVEL
    env |= {"QUEUE_URL": queue_url, "CONSUMER_HANDLER": handler, "CONSUMER_IDEMPOTENCY_TABLE": table}
    return env | ({"DLQ_URL": dlq_url} if dlq_url else {})


def declared_lane(
    sqs: Any,
    dynamodb: Any,
    shape: Shape,
    child: Mapping[str, str],
    log_dir: Path,
    plan: list[Planned],
    consumers: int,
    rate_per_second: float,
    run_id: str,
) -> Lane:
    """The fleet of ``shape`` on a pair its handler's declaration makes and an idempotency table of its own, to
    consume ``plan``; logs in ``log_dir/<shape>``."""
    assert shape.handler is not None
    contract = contract_of(load_handler(shape.handler))
    name = f"chaos-{shape.name}-{run_id}"
    queue_url, dlq_url = create_pair(sqs, contract, name)
    table = copy_table(dynamodb, child["CONSUMER_IDEMPOTENCY_TABLE"], f"{name}-idempotency")
    fleet = Fleet(declared_environment(child, shape.handler, queue_url, dlq_url, table), log_dir / shape.name)
    fleet.log_dir.mkdir(parents=True, exist_ok=True)
    return Lane(shape, contract, consumers, plan, rate_per_second, queue_url, dlq_url, fleet)


def send_corpus(sqs: Any, lane: Lane) -> None:
    """Send the bad-input corpus (sized to the source's ``MaximumMessageSize``) to ``lane``'s queue, then its good
    canaries, recording the corpus's MessageIds on the lane."""
    attributes = sqs.get_queue_attributes(QueueUrl=lane.queue_url, AttributeNames=["MaximumMessageSize"])
    lane.corpus = standard_cases(int(attributes["Attributes"]["MaximumMessageSize"]))
    for case in lane.corpus:
        lane.corpus_ids[sqs.send_message(**case.send_arguments(lane.queue_url))["MessageId"]] = case
    lane.canaries = [f"evt-canary-{lane.name}-{n}" for n in range(CANARIES)]
    for n, event_id in enumerate(lane.canaries):
        sqs.send_message(
            QueueUrl=lane.queue_url,
            MessageBody=json.dumps(sample_event(event_id, n)),
            MessageAttributes={KEY_ATTRIBUTE: {"DataType": "String", "StringValue": event_id}},
        )


def produce(
    lane: Lane,
    producer: Any,
    *,
    visible: Callable[[str], int],
    max_depth: int,
    deadline: float,
    halfway: Callable[[], None],
    leader: Lane | None = None,
) -> None:
    """Send ``lane``'s plan in batches of 10 through the proxy (faults on), paced and depth-bounded; ``halfway()``
    once half its batches are sent (the endpoint restart waits for every fleet's). With a ``leader`` (the thread
    fleet's lane), never ahead of it: each batch waits until the leader has sent as large a share of its plan, so
    every fleet's stream spans the same time, whatever holds the leader back (moto's answers, under load).

    A batch the faults fail is sent again (an at-least-once producer): a lost answer thus puts two copies on the
    queue, which the consumers' idempotency must absorb.
    """
    sends = batches(lane.plan)
    pause = 10 / lane.rate_per_second
    for number, batch in enumerate(sends):
        while leader is not None and leader.sent * len(sends) < number * len(leader.plan):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)
        if number == len(sends) // 2:
            halfway()
        while visible(lane.queue_url) > max_depth and time.monotonic() < deadline:
            time.sleep(0.5)
        pending = {str(n): p for n, p in enumerate(batch)}
        while pending and time.monotonic() < deadline:
            try:
                response = producer.send_message_batch(QueueUrl=lane.queue_url, Entries=batch_entries(pending))
            except Exception:  # noqa: BLE001 (retries exhausted or endpoint down: send again)
                time.sleep(0.5)
                continue
            for ok in response.get("Successful", []):
                lane.produced_ids.add(pending.pop(ok["Id"]).event_id)
                lane.sent += 1
        time.sleep(pause)


def partition(deliveries: Mapping[str, list[Delivery]], lanes: Sequence[Lane]) -> dict[str, dict[str, list[Delivery]]]:
    """The downstream's deliveries by fleet: each key to the declared fleet that owns it, else to the first (the
    thread fleet, which also answers for the FIFO corpus and anything no fleet owns)."""
    found: dict[str, dict[str, list[Delivery]]] = {lane.name: {} for lane in lanes}
    for key, history in deliveries.items():
        owner = next((lane for lane in lanes[1:] if lane.owns(key)), lanes[0])
        found[owner.name][key] = history
    return found


def receives_of(receives: ReceiveLog, lane: Lane, lanes: Sequence[Lane]) -> ReceiveLog:
    """The proxy's record of ``lane``'s consumers (the first fleet's: every consumer no other fleet labels)."""
    if lane is lanes[0]:
        return receives.only(lambda label: not any(other.labelled(label) for other in lanes[1:]))
    return receives.only(lane.labelled)


def fleet_results(
    lanes: Sequence[Lane],
    extra: Sequence[Fleet],
    supervisor: Supervisor,
    receives: ReceiveLog,
    sqs: Any,
    applied: set[str],
    deliveries: Mapping[str, list[Delivery]],
    started: float,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every fleet's result (:func:`lane_result`, with its kills and log events) by name, and the failures, each
    but the first fleet's naming its fleet. ``extra``: fleets whose logs the first fleet's evidence reads too (the
    FIFO phase's); ``sqs`` reads the queues (never faulted)."""
    by_lane = partition(deliveries, lanes)
    results: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    for lane in lanes:
        first = lane is lanes[0]
        logged = [lane.fleet, *extra] if first else [lane.fleet]
        run = supervisor.record(logged, receives_of(receives, lane, lanes), lane.contract, started)
        left = sum(queue_depth(sqs, lane.queue_url))
        result, own = lane_result(lane, applied, by_lane[lane.name], read_dlq(sqs, lane.dlq_url), run, left)
        lane.fleet.read_logs()
        results[lane.name] = result | {
            "kills": supervisor.kills(lane.fleet),
            "events": reported_events(lane.fleet.events),
        }
        failures += own if first else [f"{lane.name} fleet: {failure}" for failure in own]
    return results, failures


def lane_result(
    lane: Lane,
    applied: set[str],
    deliveries: Mapping[str, Sequence[Delivery]],
    dlq: Iterable[tuple[dict[str, Any], Record]],
    run: Run,
    left: int,
) -> tuple[dict[str, Any], list[str]]:
    """One fleet's accounting, its repeats traced to their causes, its corpus, and the failures they make (each
    unprefixed: the caller names the fleet)."""
    dlq = list(dlq)
    prefix = lane.shape.event_prefix
    by_event, corpus_found, unknown = sort_dlq(dlq, lane.corpus_ids, prefix)
    stream = account_stream(lane.plan, PLACES, applied, by_event, unknown, left, lane.produced_ids)
    stream["dlq_kinds"] = dlq_kinds(lane.plan, by_event)
    traced = trace(deliveries, stream, run, dlq_copies(dlq, prefix))
    stream.update(traced.accounting())
    failures = stream_failures(stream, traced.repeats)
    failures += kind_failures(stream["dlq_kinds"], expected_dlq_kinds(lane.shape.rejected_kind))
    checks, corpus_failures = corpus_checks(lane.corpus, corpus_found)
    failures += corpus_failures
    if lane.canaries_applied != len(lane.canaries) or not lane.corpus_alive:
        failures.append(
            f"after the corpus: {lane.canaries_applied}/{len(lane.canaries)} canaries applied,"
            f" consumers alive {lane.corpus_alive}"
        )
    result = {
        "handler": lane.shape.handler or "the demo stack's worker (consumer.examples.demo:handle)",
        "shape": lane.shape.what,
        "declaration": declaration(lane.contract),
        "consumers": lane.consumers,
        "produced": {**Counter(p.kind for p in lane.plan), "sends_confirmed": lane.sent},
        "accounting": stream,
        "repeats": traced.repeats,
        "double_hand_outs": traced.hand_outs,
        "corpus": checks,
        "canaries": f"{lane.canaries_applied}/{len(lane.canaries)}",
    }
    return result, failures


def declaration(contract: WorkerContract) -> dict[str, Any]:
    """What the report shows of a fleet's contract: its shape, concurrency and the timings the evidence reads."""
    return {
        "concurrency": contract.concurrency,
        "max_batch": contract.max_batch,
        "batch_window_seconds": contract.batch_window_seconds,
        "asynchronous": contract.asynchronous,
        "lease_seconds": contract.visibility_timeout_seconds,
        "max_receive_count": contract.max_receive_count,
        "redrive_max_receive_count": contract.redrive_max_receive_count,
    }
