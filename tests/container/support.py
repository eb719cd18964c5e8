"""Helpers the container tests share: valid notification events to send the image's consumer."""

from __future__ import annotations

import json

from consumer.local.harness import sample_event


def events(prefix: str, count: int) -> dict[str, str]:
    """``count`` valid notification events: event id -> body (the handler's Idempotency-Key is the id)."""
    ids = [f"{prefix}-{i:06d}" for i in range(count)]  # the schema wants at least 8 characters
    return {event_id: json.dumps(sample_event(event_id, i)) for i, event_id in enumerate(ids)}
