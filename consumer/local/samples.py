"""A worker's sample messages for the local tools: the ones its handler declares, else one built from what the tool
knows.

``python -m consumer local send`` and the local demo (for a worker it has no mix of its own for) send what a
handler declares with ``@worker(samples=...)`` (:class:`consumer.Sample`), each message with a new event id (its
``idempotency-key`` attribute), so a second send is processed again rather than skipped as a duplicate. A
handler that declares none gets a body built from the one thing the tool knows about each message, its event id:
``{"id": "<event id>"}``. Where such a body ends (processed, or refused into the DLQ) is the handler's call, so
the tools say they built it, name the declaration that would send what the handler expects instead, and the
demo's accounting expects it in either final place, exactly once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence

from consumer.contract import HANDLER_ENV
from consumer.declaration import Sample, load_handler, samples_of
from consumer.errors import ContractError
from consumer.local.harness import Planned

#: A planned message's kind: a declared sample the handler must process, one it must refuse (``poison=True``),
#: or a body built because the handler declares no samples (either place, exactly once).
SAMPLE, POISON, BUILT = "sample", "poison", "built"
#: Where the hint to declare samples points.
DECLARE_HINT = "declare @worker(samples=...) next to the handler (docs/handlers.md#sample-messages-samples)"


class SamplesUnavailableError(Exception):
    """The worker's handler cannot be loaded, or declares none of the samples asked for; the message says which."""


def declared_samples(environment: Mapping[str, str]) -> tuple[str | None, tuple[Sample, ...]]:
    """The handler ``environment`` names (``CONSUMER_HANDLER``, None when unset) and the samples it declares.

    The handler is imported, as ``python -m consumer run`` imports it: a spec that does not load is a
    :class:`SamplesUnavailableError` with the loader's one line.
    """
    spec = environment.get(HANDLER_ENV)
    if spec is None:
        return None, ()
    try:
        handler = load_handler(spec, HANDLER_ENV)
    except ContractError as error:
        raise SamplesUnavailableError(str(error)) from error
    return spec, samples_of(handler)


def built_body(event_id: str) -> str:
    """The body a tool builds for a handler without samples: a JSON object carrying the event id."""
    return json.dumps({"id": event_id})


def plan_samples(
    samples: Sequence[Sample], count: int, *, prefix: str, poison: bool | None, handler: str | None
) -> list[Planned]:
    """``count`` messages ``<prefix>-<run>-000``..., cycling through ``samples`` in their declared order.

    ``poison``: None plans every sample (the demo: at least ``count``, and at least one of each sample), True
    the poison ones, False the others. With none declared of that sort: built bodies (:func:`built_body`) for
    False and None; for True a :class:`SamplesUnavailableError` naming ``handler``, because only the handler's
    author knows what it refuses.
    """
    chosen = [s for s in samples if poison is None or s.poison is poison]
    if not chosen and poison:
        raise SamplesUnavailableError(
            f'"--poison" needs a sample the handler refuses: {handler or "the handler"} declares none'
            " (Sample(body, poison=True) in its @worker(samples=...)); send a body of your own with --body TEXT"
        )
    total = max(count, len(chosen)) if poison is None else count
    run = uuid.uuid4().hex[:8]
    plan = []
    for index in range(total):
        event_id = f"{prefix}-{run}-{index:03d}"
        if chosen:
            sample = chosen[index % len(chosen)]
            plan.append(Planned(event_id, POISON if sample.poison else SAMPLE, sample.body))
        else:
            plan.append(Planned(event_id, BUILT, built_body(event_id)))
    return plan


def body_plan(count: int, body: str, prefix: str = "body-local") -> list[Planned]:
    """``count`` messages with ``body`` as it is (``local send --body``), each with a new event id."""
    run = uuid.uuid4().hex[:8]
    return [Planned(f"{prefix}-{run}-{index:03d}", "body", body) for index in range(count)]
