"""Optional OpenTelemetry spans, one per attempt (docs/tracing.md): which mode, read from the environment.

This module imports without opentelemetry installed, and imports nothing of it while tracing is off: the spans
themselves are :mod:`.tracing_spans`, imported only by :func:`tracer_from_env` for "otlp" or "global".

* ``off`` (or unset): no tracer, no opentelemetry import; each attempt pays one ``tracer is None`` check.
* ``otlp``: the runtime installs an SDK ``TracerProvider`` (the global one too, so the handler's own instrumented
  calls export through it) with a ``BatchSpanProcessor`` and the OTLP/HTTP exporter. The SDK reads the standard
  variables itself: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``), ``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``.
* ``global``: spans go to whatever global ``TracerProvider`` the handler's module installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from consumer.contract import TRACING_ENV
from consumer.errors import ConfigurationError

if TYPE_CHECKING:
    from consumer.runtime.tracing_spans import AttemptTracer

#: The values TRACING_ENV (the contract's: the stack writes it too) accepts: "off" (the default, nothing imported),
#: "otlp" (an SDK provider exporting over OTLP/HTTP, configured by the standard OTEL_* variables) or "global" (the
#: handler's own provider).
TRACING_MODES = ("off", "otlp", "global")

#: At shutdown, how long the spans still buffered may take to export (within the stop timeout's
#: SHUTDOWN_FLUSH_SECONDS, which the acknowledger and the metrics share): an export still running then is dropped.
TRACE_FLUSH_SECONDS = 1.0

#: The packages each mode imports, by the module that is missing when the package is not installed.
_PACKAGES = {
    "global": (
        ("opentelemetry.trace", "opentelemetry-api"),
        ("opentelemetry.propagators.aws", "opentelemetry-propagator-aws-xray"),
    ),
    "otlp": (
        ("opentelemetry.trace", "opentelemetry-api"),
        ("opentelemetry.propagators.aws", "opentelemetry-propagator-aws-xray"),
        ("opentelemetry.sdk.trace", "opentelemetry-sdk"),
        ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry-exporter-otlp-proto-http"),
    ),
}


def tracing_mode(environ: Mapping[str, str]) -> str:
    """CONSUMER_TRACING's value ("off" when unset or empty); a ConfigurationError for any other value."""
    mode = environ.get(TRACING_ENV) or "off"
    if mode not in TRACING_MODES:
        raise ConfigurationError(TRACING_ENV, f"must be one of {', '.join(TRACING_MODES)}", mode)
    return mode


def tracer_from_env(environ: Mapping[str, str]) -> AttemptTracer | None:
    """The attempt tracer CONSUMER_TRACING asks for; None when tracing is off (and then nothing is imported).

    A ConfigurationError names the package "otlp" or "global" needs when it is not installed.
    """
    import importlib

    mode = tracing_mode(environ)
    if mode == "off":
        return None
    for module, package in _PACKAGES[mode]:
        try:
            importlib.import_module(module)
        except ImportError as missing:
            rule = f"needs the {package} package for {mode!r}, which is not installed ({missing})"
            raise ConfigurationError(TRACING_ENV, rule, mode) from missing
    from consumer.runtime.tracing_spans import global_tracer, otlp_tracer

    return otlp_tracer() if mode == "otlp" else global_tracer()


def close_tracing(tracer: AttemptTracer | None) -> None:
    """At the consumer's shutdown: end the spans still open and export what is buffered, within TRACE_FLUSH_SECONDS."""
    if tracer is not None:
        tracer.close(TRACE_FLUSH_SECONDS)
