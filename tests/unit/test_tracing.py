"""CONSUMER_TRACING (consumer/runtime/tracing.py): the modes, the refusals in one line, the SDK set up from the
standard OTEL_* variables, spans exported at shutdown and a flush bounded against a collector that never answers.

The "otlp" and "global" cases run in a subprocess: OpenTelemetry's global provider can be set once per process."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumer.contract import TRACING_ENV
from consumer.errors import ConfigurationError
from consumer.runtime.tracing import TRACING_MODES, tracer_from_env, tracing_mode

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, **env: str) -> str:
    """``code`` in a fresh interpreter at the repository's root; its stdout's last line."""
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | env
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_tracing_env_names_and_modes_are_the_interface_with_the_stack() -> None:
    """The variable and its values, as infra/ writes them."""
    assert (TRACING_ENV, TRACING_MODES) == ("CONSUMER_TRACING", ("off", "otlp", "global"))


@pytest.mark.parametrize(
    ("environ", "mode"), [({}, "off"), ({TRACING_ENV: ""}, "off")] + [({TRACING_ENV: m}, m) for m in TRACING_MODES]
)
def test_tracing_mode_unset_or_empty_is_off(environ: dict[str, str], mode: str) -> None:
    """Unset or empty: off; each allowed value as given."""
    assert tracing_mode(environ) == mode


@pytest.mark.parametrize("value", ["on", "OTLP", "xray", " off"])
def test_tracing_mode_refuses_any_other_value_naming_the_variable_the_values_and_the_value(value: str) -> None:
    """Anything else: one line with the variable, the allowed values and the value."""
    with pytest.raises(ConfigurationError) as raised:
        tracing_mode({TRACING_ENV: value})
    assert str(raised.value) == f'"CONSUMER_TRACING" must be one of off, otlp, global: {value!r}'


def test_tracing_off_builds_no_tracer() -> None:
    """Off: None, the consumer's one check per attempt."""
    assert tracer_from_env({TRACING_ENV: "off"}) is None


@pytest.mark.parametrize(
    ("mode", "module", "package"),
    [
        ("global", "opentelemetry.trace", "opentelemetry-api"),
        ("otlp", "opentelemetry.sdk.trace", "opentelemetry-sdk"),
        ("otlp", "opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry-exporter-otlp-proto-http"),
        ("global", "opentelemetry.propagators.aws", "opentelemetry-propagator-aws-xray"),
    ],
)
def test_tracing_on_without_its_package_names_the_missing_package(
    monkeypatch: pytest.MonkeyPatch, mode: str, module: str, package: str
) -> None:
    """ "otlp" or "global" with a package not installed (None in sys.modules makes its import fail): a
    ConfigurationError naming the variable, the package and the mode."""
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigurationError) as raised:
        tracer_from_env({TRACING_ENV: mode})
    assert raised.value.parameter == TRACING_ENV
    assert raised.value.value == mode
    assert raised.value.rule.startswith(f"needs the {package} package for {mode!r}, which is not installed")


def test_otlp_installs_an_sdk_provider_configured_by_the_standard_otel_variables() -> None:
    """The SDK reads OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG) and OTEL_EXPORTER_OTLP_ENDPOINT itself: the global
    provider is ours, with a BatchSpanProcessor and the OTLP/HTTP exporter posting to <endpoint>/v1/traces."""
    line = run_python(
        """
        from opentelemetry import trace
        from consumer.runtime.tracing import tracer_from_env
        tracer = tracer_from_env({"CONSUMER_TRACING": "otlp"})
        provider = trace.get_tracer_provider()
        (processor,) = provider._active_span_processor._span_processors
        exporter = processor._batch_processor._exporter
        assert tracer._xray == {"aws.span.kind": "LOCAL_ROOT", "aws.local.service": "orders-worker"}, tracer._xray
        print(type(processor).__name__, type(exporter).__module__, exporter._endpoint,
              provider.resource.attributes["service.name"], provider.sampler.get_description())
        """,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://localhost:4318",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="orders-worker",
        OTEL_TRACES_SAMPLER="parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0.25",
    )
    assert line.split(" ", 4) == [
        "BatchSpanProcessor",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "http://localhost:4318/v1/traces",
        "orders-worker",
        line.split(" ", 4)[4],
    ]
    assert line.split(" ", 4)[4].startswith("ParentBased{root:TraceIdRatioBased{0.25}")


class _Collector(http.server.BaseHTTPRequestHandler):
    posts: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Collector.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    """A local HTTP endpoint that answers every OTLP export (a stand-in for the sidecar's receiver)."""
    _Collector.posts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_otlp_spans_buffered_at_shutdown_are_exported_by_close(collector: str) -> None:
    """A span ended just before shutdown (the batch processor would wait 5 s) reaches the collector at close."""
    line = run_python(
        """
        import time
        from opentelemetry import trace
        from consumer.runtime.tracing import close_tracing, tracer_from_env
        tracer = tracer_from_env({"CONSUMER_TRACING": "otlp"})
        trace.get_tracer("test").start_span("last").end()
        started = time.monotonic()
        close_tracing(tracer)
        print(round(time.monotonic() - started, 1), flush=True)
        import os
        os._exit(0)  # no atexit: the SDK's own shutdown at exit would export the span too
        """,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector,
        OTEL_BSP_SCHEDULE_DELAY="60000",
    )
    assert _Collector.posts == ["/v1/traces"]
    assert float(line) < 1.0


def test_otlp_close_is_bounded_when_the_collector_never_answers() -> None:
    """A collector that accepts and never answers: close returns after TRACE_FLUSH_SECONDS, not the exporter's 10 s
    timeout nor the processor's 30 s."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        line = run_python(
            """
            import time
            from opentelemetry import trace
            from consumer.runtime.tracing import TRACE_FLUSH_SECONDS, close_tracing, tracer_from_env
            tracer = tracer_from_env({"CONSUMER_TRACING": "otlp"})
            trace.get_tracer("test").start_span("last").end()
            started = time.monotonic()
            close_tracing(tracer)
            print(round(time.monotonic() - started - TRACE_FLUSH_SECONDS, 1))
            """,
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{silent.getsockname()[1]}",
            OTEL_BSP_SCHEDULE_DELAY="60000",
        )
        assert time.monotonic() - started < 30
    assert float(line) < 0.5


def test_global_mode_sends_spans_to_the_provider_the_handlers_module_installed() -> None:
    """CONSUMER_TRACING=global: the attempt spans go to the global provider installed before (by the handler's
    module), which close flushes but does not shut down."""
    line = run_python(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60000))
        trace.set_tracer_provider(provider)
        from consumer.runtime.tracing import close_tracing, tracer_from_env
        tracer = tracer_from_env({"CONSUMER_TRACING": "global"})
        tracer._tracer.start_span("attempt").end()
        close_tracing(tracer)
        trace.get_tracer("after").start_span("still open for spans").end()
        provider.force_flush()
        print([(s.name, s.instrumentation_scope.name) for s in exporter.get_finished_spans()])
        """
    )
    assert line == "[('attempt', 'consumer'), ('still open for spans', 'after')]"


def test_global_mode_without_a_provider_installed_warns_once_at_start_up() -> None:
    """CONSUMER_TRACING=global while the handler's module installed no provider: one warning line (the spans would
    be no-ops until one is)."""
    line = run_python(
        """
        import logging
        records = []
        logging.getLogger("consumer").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r)})())
        from consumer.runtime.tracing import tracer_from_env
        tracer_from_env({"CONSUMER_TRACING": "global"})
        print([(r.levelname, r.getMessage(), r.binding) for r in records])
        """
    )
    assert line == "[('WARNING', 'tracing_global_without_provider', 'CONSUMER_TRACING')]"
