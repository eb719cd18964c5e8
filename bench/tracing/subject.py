"""The tracer ``python -m bench.subject --tracing CELL`` gives its consumer (imported only when a cell traces).

* ``off``: none, as ``CONSUMER_TRACING`` unset (nothing of opentelemetry imported);
* ``absent``: as ``off``, with opentelemetry made unimportable first (:func:`refuse_opentelemetry`), as in an image
  built without the packages;
* ``sdk``: the SDK as ``CONSUMER_TRACING=otlp`` builds it (a ``BatchSpanProcessor``, every trace sampled) with an
  exporter that drops each batch: the runtime's and the SDK's cost, no serialization, no network;
* ``otlp:<endpoint>``: ``CONSUMER_TRACING=otlp`` itself, every span serialized and posted over OTLP/HTTP to
  ``<endpoint>`` (the harness's sink answering 200, as the collector sidecar on localhost would).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult

    from consumer.runtime.tracing_spans import AttemptTracer

REFUSED = "opentelemetry"


class _Refuse(importlib.abc.MetaPathFinder):
    """Answers every import of ``opentelemetry`` or below it as Python does for a package not installed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] == REFUSED:
            raise ModuleNotFoundError(f"No module named {fullname!r} (refused by bench.tracing.subject)", name=fullname)
        return None


def refuse_opentelemetry() -> None:
    """Make opentelemetry unimportable in this process from now on.

    Raises RuntimeError if some of it is imported already: then this process could not stand for one without it.
    """
    loaded = sorted(name for name in sys.modules if name.partition(".")[0] == REFUSED)
    if loaded:
        raise RuntimeError(f"opentelemetry is imported already, so it cannot be made absent: {loaded[:5]}")
    sys.meta_path.insert(0, _Refuse())


def subject_tracer(cell: str) -> AttemptTracer | None:
    """The tracer for ``cell`` (see the module docstring); None for ``off`` and ``absent``."""
    if cell == "off":
        return None
    if cell == "absent":
        refuse_opentelemetry()
        return None
    from consumer.contract import TRACING_ENV
    from consumer.runtime.tracing import tracer_from_env

    if cell.startswith("otlp:"):
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = cell.removeprefix("otlp:")
        os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_always_on"  # every span: the most tracing costs
        return tracer_from_env({TRACING_ENV: "otlp"})
    if cell != "sdk":
        raise ValueError(f'"--tracing" must be off, absent, sdk or otlp:<endpoint>: {cell!r}')
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        """Takes each batch the processor exports and keeps nothing."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    from consumer.runtime.tracing_spans import attempt_tracer

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return attempt_tracer(provider, flush=lambda _seconds: provider.shutdown())
