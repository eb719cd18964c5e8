"""A team's own handler, as a team writes one in its package (workers/<module>.py), for the edits tier.

Only synthesized here (nothing runs it): its declaration is what shapes the team's worker, a timing none of the
shipped handlers has (45 s, four at a time), so a check that assumed the example's numbers would fail on it.
"""

from __future__ import annotations

import json
from datetime import timedelta

from consumer import Message, PoisonMessage, worker


@worker(max_duration=timedelta(seconds=45), concurrency=4, max_receive_count=4)
def invoices(message: Message) -> None:
    """Book one invoice event; a body that is not an invoice never will be (the DLQ at once)."""
    invoice = json.loads(message.body)
    if not isinstance(invoice, dict) or "invoice_id" not in invoice:
        raise PoisonMessage("an invoice event is a JSON object with an invoice_id")
