"""The chaos suite's FIFO phase: its queue pair, and what the FIFO corpus's final places say."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.chaos_accounting import Record, check_of, dead_lettered_at_first_receive
from bench.chaos_lanes import create_pair
from bench.corpus import Case, fifo_handle
from consumer.declaration import contract_of


def create_fifo_pair(sqs: Any, prefix: str) -> tuple[str, str]:
    """A FIFO source and DLQ with the attributes of the FIFO declaration; returns (source URL, DLQ URL)."""
    return create_pair(sqs, contract_of(fifo_handle), prefix)


def fifo_report(
    queue_url: str,
    sent: Mapping[str, Case],
    cases: Sequence[Case],
    dlq: Iterable[tuple[dict[str, Any], Record]],
    applied: set[str],
    order: Sequence[str],
) -> dict[str, Any]:
    """Each FIFO case's place, and whether the good neighbours were applied in group order.

    ``sent``: message id -> case (the first send's id for a deduplicated one); ``dlq``: the DLQ's
    messages with their reasons; ``applied``: event ids the downstream applied, ``order`` in the
    order it applied them.
    """
    records = [record for _, record in dlq]
    by_message = {r["original_message_id"]: r for r in records if r}
    checks = []
    for message_id, case in sent.items():
        if case.expect == "deduplicated":
            continue  # moto answers a deduplicated send with a new MessageId; checked below
        record = by_message.get(message_id)
        if case.expect == "dlq":
            ok = dead_lettered_at_first_receive(record)
            place = "DLQ" if record else "missing"
        else:
            ok = case.event_id in applied
            place = "applied" if ok else "missing"
        checks.append(check_of(case.name, case.what, place, record, ok, expect=case.expect))
    for case in cases:
        if case.expect == "deduplicated":
            dropped = case.event_id not in applied
            place = "dropped by SQS" if dropped else "applied"
            checks.append(check_of(case.name, case.what, place, None, dropped, expect=case.expect))
    groups: dict[str, list[str]] = defaultdict(list)
    for key in (k for k in order if k.startswith("evt-fifo-")):
        groups[key.split("-")[2]].append(key)
    in_order = all(keys == sorted(keys, key=lambda k: int(k.rsplit("-", 1)[1])) for keys in groups.values())
    return {
        "queue": queue_url.rsplit("/", 1)[-1],
        "checks": checks,
        "order": dict(groups.items()),
        "groups_in_order": in_order,
        "dlq_messages": len(records),
    }
