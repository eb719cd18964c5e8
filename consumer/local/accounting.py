"""Where every produced event ended: the accounting the demo's and the chaos suite's reports share.

Pure functions over what a run read back (the downstream's successes, the DLQ's messages), so the
rules that decide a run's exit code are tested without a queue. Each scenario names its own places
and decides which findings fail it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The two final places an event can have, and what a scenario expects of an event whose place is the handler's
#: call (a body the local demo built for a handler that declares no samples): exactly one of the two.
DELIVERED, DEAD_LETTERED = "delivered", "dead-lettered"
EITHER = "either"


@dataclass(frozen=True)
class Places:
    """The events that did not end where their kind calls for, each list in plan order."""

    lost: list[str]  # neither delivered nor in the DLQ
    in_two_places: list[str]  # delivered and in the DLQ
    delivered_unexpectedly: list[str]  # delivered only, its kind calls for the DLQ
    dead_lettered_unexpectedly: list[str]  # in the DLQ only, its kind calls for delivery
    without_reason: list[str]  # in the DLQ with a copy that carries no reason (SQS's silent redrive)
    misplaced: list[str]  # in one place only: not its own, or the DLQ without a reason


def places(
    expected: Iterable[tuple[str, str]],
    delivered: set[str] | frozenset[str],
    dead_lettered: Mapping[str, Sequence[Mapping[str, Any] | None]],
) -> Places:
    """Compare each event's final place with the one expected for it.

    ``expected``: (event id, :data:`DELIVERED`, :data:`DEAD_LETTERED` or :data:`EITHER`) in plan order;
    ``delivered``: event ids the downstream applied; ``dead_lettered``: event id -> the reason
    records of its DLQ copies (None for a copy without one).
    """
    lost, two, delivered_wrong, dead_wrong, no_reason, misplaced = [], [], [], [], [], []
    for event_id, place in expected:
        in_dlq, is_delivered = event_id in dead_lettered, event_id in delivered
        reasonless = in_dlq and not all(dead_lettered[event_id])
        wrong = False
        if not in_dlq and not is_delivered:
            lost.append(event_id)
        elif in_dlq and is_delivered:
            two.append(event_id)
        elif is_delivered and place == DEAD_LETTERED:
            delivered_wrong.append(event_id)
            wrong = True
        elif in_dlq and place == DELIVERED:
            dead_wrong.append(event_id)
            wrong = True
        else:
            wrong = reasonless
        if reasonless:
            no_reason.append(event_id)
        if wrong:
            misplaced.append(event_id)
    return Places(lost, two, delivered_wrong, dead_wrong, no_reason, misplaced)


def extra_deliveries(successes: Mapping[str, int]) -> int:
    """Successful deliveries beyond the first per event: side effects applied more than once."""
    return sum(n - 1 for n in successes.values() if n > 1)
