"""Handlers of a team's own, which the framework does not know: the local tools must run them all the same.

Importable by synth (a context a test builds names them), by ``python -m consumer run`` and by the local demo.
``invoices`` declares samples, ``ledger`` none; both refuse a body without an ``invoice_id`` as poison.
"""

from __future__ import annotations

import json
from datetime import timedelta

from consumer import Message, PoisonMessage, Sample, worker

#: Two invoices ``invoices`` books and one it refuses (no invoice_id), as a team would declare them.
INVOICE_SAMPLES = (
    '{"invoice_id": "inv-0001", "total": "12.50"}',
    '{"invoice_id": "inv-0002", "total": "99.00", "currency": "EUR"}',
    Sample('{"total": "1.00"}', poison=True),
)


def book(body: str) -> dict[str, object]:
    """The invoice in ``body``; :class:`PoisonMessage` if it is not a JSON object with an ``invoice_id``."""
    try:
        invoice = json.loads(body)
    except json.JSONDecodeError as error:
        raise PoisonMessage(f"body is not JSON: {error.msg}") from error
    if not isinstance(invoice, dict) or "invoice_id" not in invoice:
        raise PoisonMessage("invoice lacks invoice_id")
    return invoice


@worker(max_duration=timedelta(seconds=45), concurrency=4, samples=INVOICE_SAMPLES)
def invoices(message: Message) -> None:
    """Book one invoice (its samples declared)."""
    book(message.body)


@worker(max_duration=timedelta(seconds=20), concurrency=2)
def ledger(message: Message) -> None:
    """Book one invoice (no samples declared: the tools build a body, which this handler refuses)."""
    book(message.body)
