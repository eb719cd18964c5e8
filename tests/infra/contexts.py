"""Environments several infra test modules synthesize: one definition each, so ``synthesize_once``
(tests/infra/conftest.py) synthesizes each once per session, whichever module asks first."""

from __future__ import annotations

from typing import Any

HANDLER = "consumer.examples.notifications:handle"
REPORTS = "tests.reference:report_job"

#: Two workers of environment ``qa``: "fast" (the first, max 4) and "idle" (min 1, max 2); the capacity and Graviton
#: tests each turn one knob on in their variants.
TWO_WORKERS: dict[str, Any] = {"fast": {"handler": HANDLER, "max_tasks": 4}, "idle": {"handler": HANDLER}}

#: Traced with one worker, untraced, and traced with two workers (reports at 1 GiB): the sidecar's template and the
#: permissions the collector gets.
TRACING: dict[str, dict[str, Any]] = {
    "traced": {"handler": HANDLER, "tracing": {"sample_ratio": 0.05}},
    "untraced": {"handler": HANDLER},
    "traced-teams": {
        "tracing": {"sample_ratio": 1},
        "workers": {"notifications": {"handler": HANDLER}, "reports": {"handler": REPORTS, "memory_mib": 1024}},
    },
}
