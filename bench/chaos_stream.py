"""The chaos suite's stream and downstream: the events each fleet's producer sends, and the idempotent webhook every
fleet's handler delivers them to (the one record the accounting reads of what was applied, by whom and when)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler

from bench.chaos_accounting import KINDS
from bench.chaos_evidence import Delivery
from bench.corpus import standard_cases
from consumer.local.harness import LoopbackWebhook, Planned, sample_event

EVENT_PREFIX = "evt-chaos-"  # the thread fleet's event ids: evt-chaos-00000, ...


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
        self._server.RequestHandlerClass = _with_bulk(self._server.RequestHandlerClass, self)

    def respond(self, key: str, path: str) -> int:
        return self.answer(key, path.rpartition("/")[2])

    def answer(self, key: str, sender: str) -> int:
        return self.answer_many([key], sender)[key]

    def answer_many(self, keys: Sequence[str], sender: str) -> dict[str, int]:
        """One call for ``keys`` (a bulk request: one pause for all), each answered as a request of its own would be."""
        # When this thread read the request: under load that can be after the sender was SIGKILLed, though it sent
        # before (bench.chaos_evidence never compares it with the sender's own kill).
        arrived = time.monotonic()
        with self._lock:
            pause = self._rng.uniform(0.005, 0.05)
        time.sleep(pause)  # a real call takes time: a SIGKILL can land between the 200 and the ack
        statuses = {}
        with self._lock:
            for key in keys:
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
                statuses[key] = status
        return statuses

    def snapshot(self) -> tuple[set[str], dict[str, list[Delivery]]]:
        with self._lock:
            return set(self.applied), {k: list(v) for k, v in self.deliveries.items()}


#: A bulk request's path ends ``/bulk/<sender>``: its JSON body ``{"keys": [...]}``, its answer ``{"statuses": {key:
#: status}}`` (the batch handler's one call per batch, bench.chaos_handlers).
BULK = "/bulk/"


def _with_bulk(base: type[BaseHTTPRequestHandler], downstream: IdempotentDownstream) -> type[BaseHTTPRequestHandler]:
    """``base`` (the webhook's handler) answering bulk requests too."""

    class Bulk(base):  # type: ignore[valid-type,misc]
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            if BULK not in self.path:
                super().do_POST()
                return
            keys = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))["keys"]
            body = json.dumps({"statuses": downstream.answer_many(keys, self.path.rpartition("/")[2])}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Bulk


def build_stream(count: int, seed: int, prefix: str = EVENT_PREFIX) -> list[Planned]:
    """``count`` events in the shares of :data:`KINDS` (at least one of each), shuffled reproducibly, their ids
    ``<prefix>00000`` on."""
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
        event_id = f"{prefix}{index:05d}"
        body = poison[index % len(poison)] if kind == "malformed" else json.dumps(sample_event(event_id, index))
        plan.append(Planned(event_id, kind, body))
    return plan
