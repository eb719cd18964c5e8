"""What every alarm recording holds (``infra/alarms/recordings/NAME.json``, written by the lab's recorder,
``python -m bench.alarm_recording``, read by the evaluator's catalogue): the checks both sides' tests run on one."""

from __future__ import annotations

from typing import Any

from infra.alarms.events import SqsEvent

DOCUMENT_KEYS = {"scenario", "source", "recorded_with", "queues", "events", "emf", "tasks", "onset", "end"}
#: The command each recording names as the one that made it (and re-makes it).
RECORDED_WITH = "python -m bench.alarm_recording"


def check_document(document: dict[str, Any], name: str) -> list[SqsEvent]:
    """What every recording holds, whatever its scenario; returns its events."""
    assert set(document) == DOCUMENT_KEYS
    assert (document["scenario"], document["source"]) == (name, "recorded")
    assert document["recorded_with"] == f"{RECORDED_WITH} {name}"
    source, dlq = document["queues"]
    assert set(source) == {"name", "fifo", "retention_seconds", "visibility_timeout"}
    assert dlq["name"] == f"{source['name']}-dlq" and document["emf"]["queue"] == source["name"]
    events = [SqsEvent.from_json(e) for e in document["events"]]
    assert [e.to_json() for e in events] == document["events"]
    assert [e.t for e in events] == sorted(e.t for e in events)
    assert {e.queue for e in events} <= {source["name"], dlq["name"]}
    assert 0 < document["onset"] < document["end"]
    assert all(0 <= e.t <= document["end"] for e in events)
    assert all(0 <= t <= document["end"] for t, _, _ in document["emf"]["points"])
    assert document["tasks"][0] == [0.0, 0, document["tasks"][0][2]] and document["tasks"][-1][1:] == [0, 0]
    check_causal_order(events)
    return events


def check_causal_order(events: list[SqsEvent]) -> None:
    """Each message is sent before it is received, and received before a delete or visibility change names it."""
    received: set[tuple[str, str | None]] = set()
    sent: set[tuple[str, str | None]] = set()
    for event in events:
        key = (event.queue, event.message_id)
        if event.op == "send":
            assert key not in sent, event
            sent.add(key)
        elif event.op == "receive":
            assert key in sent, event
            received.add(key)
        elif event.op in ("delete", "change_visibility"):
            assert key in received, event
