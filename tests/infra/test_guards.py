"""Production guards: paging that cannot be a placeholder, secrets, the senders allowed, task hardening."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from infra.settings import CONTEXT_KEY, PAGING_ENDPOINT_PATTERN, SettingsError
from tests.infra.conftest import Synthesized, synthesize

HANDLER = "consumer.examples.notifications:handle"


def evaluate(expression: Any, parameters: dict[str, str]) -> Any:
    """The few intrinsic functions the PagingEndpoint condition uses, evaluated as CloudFormation does."""
    if not isinstance(expression, dict):
        return expression
    ((function, argument),) = expression.items()
    if function == "Ref":
        return parameters[argument]
    if function == "Fn::Split":
        delimiter, source = argument
        return evaluate(source, parameters).split(delimiter)
    if function == "Fn::Select":
        index, values = argument
        return evaluate(values, parameters)[index]
    if function == "Fn::Equals":
        left, right = argument
        return evaluate(left, parameters) == evaluate(right, parameters)
    raise AssertionError(f"unexpected function {function}")


def test_prod_takes_its_paging_endpoint_at_deploy(prod: Synthesized) -> None:
    """PagingEndpoint: no default (a deploy without it fails first), the placeholder-refusing pattern, hidden."""
    parameter = prod.json["Parameters"]["PagingEndpoint"]
    assert "Default" not in parameter
    assert (parameter["Type"], parameter["AllowedPattern"], parameter["NoEcho"]) == (
        "String",
        PAGING_ENDPOINT_PATTERN,
        True,
    )
    assert parameter["ConstraintDescription"] == (
        "must be an email address or an https:// URL, not on example.com/.org/.net or a reserved"
        " .example, .test, .invalid or .localhost domain"
    )


@pytest.mark.parametrize(
    ("endpoint", "protocol"),
    [
        ("oncall@corp.io", "email"),
        ("https://events.pagerduty.com/integration/abc/enqueue", "https"),
        ("ops+https://@corp.io", "email"),
    ],
)
def test_paging_endpoint_subscribes_with_the_protocol_its_value_needs(
    prod: Synthesized, endpoint: str, protocol: str
) -> None:
    """The subscription's protocol is https for an https:// value, email otherwise, by a CloudFormation condition."""
    (subscription,) = prod.resources("AWS::SNS::Subscription").values()
    properties = subscription["Properties"]
    assert properties["Endpoint"] == {"Ref": "PagingEndpoint"}
    assert properties["TopicArn"] == {"Ref": prod.logical_id(prod.stack.paging.topic)}
    condition, when_true, when_false = properties["Protocol"]["Fn::If"]
    is_https = evaluate(prod.json["Conditions"][condition], {"PagingEndpoint": endpoint})
    assert (when_true if is_https else when_false) == protocol


@pytest.mark.parametrize("name", ["dev", "staging", "demo"])
def test_environments_without_required_paging_ask_nothing_at_deploy(
    synthesized: dict[str, Synthesized], name: str
) -> None:
    """Only an environment that requires paging and commits no subscription declares PagingEndpoint."""
    env = synthesized[name]
    assert set(env.json["Parameters"]) == {"BootstrapVersion"}
    assert "Conditions" not in env.json


def test_committed_subscription_needs_no_parameter_and_a_placeholder_elsewhere_warns(tmp_path: Path) -> None:
    """prod with a real committed address takes no parameter; a placeholder where paging is optional is a warning."""
    context = {
        CONTEXT_KEY: {
            "prod": {"handler": HANDLER, "paging": {"emails": ["oncall@corp.io"]}},
            "qa": {"handler": HANDLER, "paging": {"emails": ["oncall@example.com"]}},
        }
    }
    environments = synthesize(tmp_path, context)
    prod, qa = environments["prod"], environments["qa"]
    assert set(prod.json["Parameters"]) == {"BootstrapVersion"}
    prod.template.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@corp.io"})
    Annotations.from_stack(qa.stack).has_warning(
        "*", Match.string_like_regexp("qa: paging subscription oncall@example.com is a placeholder")
    )
    assert not Annotations.from_stack(prod.stack).find_warning("*", Match.string_like_regexp("placeholder"))


def test_prod_with_a_placeholder_does_not_synthesize(tmp_path: Path) -> None:
    """The app refuses prod paging example.com before writing anything."""
    context = {CONTEXT_KEY: {"prod": {"handler": HANDLER, "paging": {"emails": ["oncall@example.com"]}}}}
    with pytest.raises(SettingsError) as raised:
        synthesize(tmp_path, context)
    assert raised.value.parameter == f"{CONTEXT_KEY}.prod.paging.emails"
    assert list(tmp_path.iterdir()) == []
