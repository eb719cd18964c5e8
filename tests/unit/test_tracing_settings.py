"""An environment's ``tracing`` setting (infra/tracing_settings.py): parsed, or refused in one line naming its path."""

from __future__ import annotations

import pytest

from infra.settings import parse_environment
from infra.tracing_settings import SAMPLE_RATIO_RULE, TRACING_VARIABLES, TracingSettings
from infra.worker_settings import CONTEXT_KEY, SettingsError

HANDLER = "consumer.examples.notifications:handle"
PATH = f"{CONTEXT_KEY}.qa.tracing"


def error_for(raw: dict[str, object]) -> SettingsError:
    with pytest.raises(SettingsError) as raised:
        parse_environment("qa", raw)
    return raised.value


def shown(value: object) -> str:
    """How a SettingsError shows a value (null: "not set")."""
    return "not set" if value is None else repr(value)


def test_tracing_settings_absent_is_off() -> None:
    """Without the key an environment traces nothing (no sidecar, no variables, no X-Ray action)."""
    assert parse_environment("qa", {"handler": HANDLER}).tracing is None


@pytest.mark.parametrize(("ratio", "expected"), [(0.05, 0.05), (1, 1.0), (1.0, 1.0), (1e-06, 1e-06)])
def test_tracing_settings_take_a_ratio_up_to_one(ratio: float, expected: float) -> None:
    """A ratio above 0 and at most 1 (both edges) is taken, an integer 1 as 1.0."""
    settings = parse_environment("qa", {"handler": HANDLER, "tracing": {"sample_ratio": ratio}})
    assert settings.tracing == TracingSettings(sample_ratio=expected)


@pytest.mark.parametrize("ratio", [0, 0.0, -0.1, 1.0000001, 2, True, "0.05", None, float("nan"), float("inf")])
def test_tracing_settings_refuse_a_ratio_out_of_range(ratio: object) -> None:
    """0, a negative, above 1, a boolean, a string or null: the path, the rule and the value, in one line."""
    error = error_for({"handler": HANDLER, "tracing": {"sample_ratio": ratio}})
    assert (error.parameter, error.rule) == (f"{PATH}.sample_ratio", SAMPLE_RATIO_RULE)
    assert str(error) == f'"{PATH}.sample_ratio" {SAMPLE_RATIO_RULE}: {shown(ratio)}'
    assert "\n" not in str(error)


@pytest.mark.parametrize("raw", [{}, {"sample_ratio": 0.1, "exporter": "xray"}, {"ratio": 0.1}, True, None, [0.1]])
def test_tracing_settings_refuse_anything_but_the_one_key(raw: object) -> None:
    """tracing is an object with exactly sample_ratio: a missing ratio, a typo or an extra key is refused."""
    error = error_for({"handler": HANDLER, "tracing": raw})
    assert str(error) == (
        f'"{PATH}" must be an object with exactly "sample_ratio", e.g. {{"sample_ratio": 0.05}}: {shown(raw)}'
    )


@pytest.mark.parametrize("key", ["handler_environment", "secrets"])
@pytest.mark.parametrize("name", TRACING_VARIABLES)
def test_tracing_settings_refuse_a_worker_variable_the_stack_writes(key: str, name: str) -> None:
    """With tracing on, no worker's handler_environment or secrets may set a variable the construct writes."""
    value = "ssm:/team/value" if key == "secrets" else "mine"
    raw = {
        "tracing": {"sample_ratio": 0.5},
        "workers": {"emails": {"handler": HANDLER, key: {name: value}}},
    }
    error = error_for(raw)
    assert str(error) == (
        f'"{CONTEXT_KEY}.qa.workers.emails.{key}" must not set variables the stack writes itself ("tracing" is on):'
        f" {name!r}"
    )


def test_tracing_settings_leave_those_variables_to_the_team_without_tracing() -> None:
    """Without tracing the construct writes none of them, so a team may set them (its own SDK setup, "global")."""
    variables = {"CONSUMER_TRACING": "global", "OTEL_SERVICE_NAME": "emails"}
    settings = parse_environment("qa", {"handler": HANDLER, "handler_environment": variables})
    assert settings.handler_environment == variables


def test_tracing_settings_environment_is_the_sdks_standard_variables() -> None:
    """The variables the consumer container gets, keyed exactly by TRACING_VARIABLES."""
    environment = TracingSettings(sample_ratio=0.25).environment("SqsWorker-qa")
    assert environment == {
        "CONSUMER_TRACING": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "SqsWorker-qa",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    assert tuple(environment) == TRACING_VARIABLES


def test_tracing_settings_the_report_says_whether_an_environment_traces() -> None:
    """`python -m infra.report` shows each environment's sampling ratio, or off."""
    from infra.report import settings_rows

    traced = parse_environment("qa", {"handler": HANDLER, "tracing": {"sample_ratio": 0.05}})
    assert settings_rows(traced)["traces (X-Ray)"] == "sampled 0.05"
    assert settings_rows(parse_environment("qa", {"handler": HANDLER}))["traces (X-Ray)"] == "off"
