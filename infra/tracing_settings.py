"""An environment's ``tracing`` setting in ``cdk.json``: opt-in traces in X-Ray through a collector sidecar.

``"tracing": {"sample_ratio": 0.05}`` under ``sqs-worker:environments.<env>`` gives every worker of the environment
an AWS Distro for OpenTelemetry collector beside its consumer (:mod:`infra.tracing`) and the variables below;
without the key nothing is added. No CDK here: the settings and the report load this module without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from consumer.contract import TRACING_ENV
from infra.worker_settings import SettingsError

#: The runtime's mode with a sidecar (one of TRACING_MODES): an SDK provider exporting over OTLP/HTTP to the collector.
OTLP_MODE = "otlp"
#: The collector's OTLP/HTTP receiver: the containers of a Fargate task share one network namespace (awsvpc).
OTLP_HTTP_ENDPOINT = "http://localhost:4318"
#: The OpenTelemetry SDK's standard variables the construct sets (the SDK reads them, not the runtime):
#: https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/
#: https://opentelemetry.io/docs/specs/otel/protocol/exporter/
OTEL_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
OTEL_SAMPLER_ENV = "OTEL_TRACES_SAMPLER"
OTEL_SAMPLER_ARG_ENV = "OTEL_TRACES_SAMPLER_ARG"
#: A span whose parent was sampled is sampled; a root span at the ratio (the SDK's TraceIdRatioBased sampler).
SAMPLER = "parentbased_traceidratio"
#: Every variable the construct writes where tracing is on: handler_environment and secrets may not set them there.
TRACING_VARIABLES = (
    TRACING_ENV,
    OTEL_ENDPOINT_ENV,
    OTEL_PROTOCOL_ENV,
    OTEL_SERVICE_NAME_ENV,
    OTEL_SAMPLER_ENV,
    OTEL_SAMPLER_ARG_ENV,
)
TRACING_KEYS = ("sample_ratio",)
SAMPLE_RATIO_RULE = (
    "must be a number above 0 and at most 1: the share of traces started here that X-Ray records"
    ' (leave "tracing" out to turn tracing off)'
)


@dataclass(frozen=True, kw_only=True)
class TracingSettings:
    """Traces of every worker of an environment, exported to X-Ray by a collector sidecar."""

    #: The share of root traces recorded, 0 < ratio <= 1; a message whose producer's trace was sampled is recorded.
    sample_ratio: float

    def environment(self, service_name: str) -> dict[str, str]:
        """The consumer container's variables: the runtime's mode and the SDK's exporter, resource and sampler."""
        return {
            TRACING_ENV: OTLP_MODE,
            OTEL_ENDPOINT_ENV: OTLP_HTTP_ENDPOINT,
            OTEL_PROTOCOL_ENV: "http/protobuf",
            OTEL_SERVICE_NAME_ENV: service_name,
            OTEL_SAMPLER_ENV: SAMPLER,
            OTEL_SAMPLER_ARG_ENV: repr(self.sample_ratio),
        }


def parse_tracing(path: str, raw: object) -> TracingSettings:
    """``raw``, cdk.json's ``tracing`` at ``path`` (absent: tracing off, no sidecar), as settings."""
    if not isinstance(raw, Mapping) or set(raw) != set(TRACING_KEYS):
        raise SettingsError(path, 'must be an object with exactly "sample_ratio", e.g. {"sample_ratio": 0.05}', raw)
    ratio = raw["sample_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
        raise SettingsError(f"{path}.sample_ratio", SAMPLE_RATIO_RULE, ratio)
    return TracingSettings(sample_ratio=float(ratio))


def check_tracing_variables(tracing: TracingSettings | None, path: str, names: Mapping[str, object]) -> None:
    """Refuse a handler_environment or secrets variable (``names``, at ``path``) the construct sets with tracing on."""
    if tracing is None:
        return
    taken = [name for name in TRACING_VARIABLES if name in names]
    if taken:
        raise SettingsError(path, 'must not set variables the stack writes itself ("tracing" is on)', ", ".join(taken))
