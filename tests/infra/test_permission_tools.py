"""The permissions tier's own tools can fail: the evaluator answers as AWS does, the resolver refuses what it does
not know, and the trust check names what it cannot evaluate. Hand-made policies and templates, no synthesis."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.permissions import (
    ADMIN_POLICY,
    ALLOWED,
    OTHER_ACCOUNT,
    TASK_ID,
    Scenario,
    evaluate,
    trust_problems,
)
from tests.infra.resolve import FAKE_ACCOUNT, ResolvedTemplate, ResolveError, resolve_template

CLOUDWATCH = "cloudwatch.amazonaws.com"

TOPIC = "arn:aws:sns:eu-west-1:111122223333:paging"
TLS_ONLY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sns:Publish",
            "Resource": TOPIC,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    ],
}
ALLOW_THIS_ACCOUNTS_ALARMS = {
    "Effect": "Allow",
    "Principal": {"Service": CLOUDWATCH},
    "Action": "sns:Publish",
    "Resource": TOPIC,
    "Condition": {
        "StringEquals": {"aws:SourceAccount": "111122223333"},
        "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:eu-west-1:111122223333:alarm:app-*"},
    },
}


def tool_scenario(
    principal: str,
    action: str,
    resource: str,
    context: dict[str, str],
    *,
    identity_policies: list[dict[str, Any]] | None = None,
    resource_policy: dict[str, Any] | None = None,
) -> Scenario:
    """One hand-made request for the evaluator, outside any template."""
    simulation: dict[str, Any] = {
        "request": {
            "principal": principal,
            "action": action,
            "resource": {"resource": resource, "accountId": "111122223333"},
            "contextVariables": context,
        },
        "identityPolicies": identity_policies or [],
        "serviceControlPolicies": [],
        "resourceControlPolicies": [],
    }
    if resource_policy is not None:
        simulation["resourcePolicy"] = resource_policy
    return Scenario("tool", "tool", principal, action, resource, tuple(context.items()), ALLOWED, "", simulation)


def publish(policy: dict[str, Any], source_account: str = "111122223333") -> Scenario:
    context = {
        "aws:SecureTransport": "true",
        "aws:SourceAccount": source_account,
        "aws:SourceArn": f"arn:aws:cloudwatch:eu-west-1:{source_account}:alarm:app-DlqDepth",
    }
    return tool_scenario(CLOUDWATCH, "sns:Publish", TOPIC, context, resource_policy=policy)


def test_evaluator_answers_as_aws_for_a_topic_policy_with_and_without_cloudwatch() -> None:
    """A TLS-only topic policy refuses CloudWatch (AWS's behaviour); an allow with source conditions admits only its account."""
    with_allow = {**TLS_ONLY, "Statement": [*TLS_ONLY["Statement"], ALLOW_THIS_ACCOUNTS_ALARMS]}
    assert evaluate([publish(TLS_ONLY), publish(with_allow), publish(with_allow, "444455556666")]) == [
        "ImplicitlyDenied",
        "Allowed",
        "ImplicitlyDenied",
    ]


def test_evaluator_refuses_a_partial_secret_arn_under_a_suffix_wildcard_grant() -> None:
    """ECS requests a secret by its ValueFrom's ARN: a grant on "<name>-??????" admits the complete ARN only,
    so a partial ValueFrom (no suffix) is refused, as AWS refuses it at task start (aws-cdk#18555)."""
    secret = "arn:aws:secretsmanager:eu-west-1:111122223333:secret:team/notify"
    grant = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": f"{secret}-??????"}],
    }
    requests = [
        tool_scenario(
            "arn:aws:iam::111122223333:role/execution",
            "secretsmanager:GetSecretValue",
            requested,
            {"aws:SecureTransport": "true"},
            identity_policies=[{"name": "grant", "policy": grant}],
        )
        for requested in (secret, f"{secret}-Ab12Cd")
    ]
    assert evaluate(requests) == ["ImplicitlyDenied", "Allowed"]


def role_template(*statements: dict[str, Any]) -> ResolvedTemplate:
    """A resolved template holding one role per trust statement (R0, R1, ...)."""
    resources = {
        f"R{i}": {
            "Type": "AWS::IAM::Role",
            "Properties": {"AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [statement]}},
        }
        for i, statement in enumerate(statements)
    }
    return resolve_template({"Resources": resources}, stack_name="S")


def trusting(principal: dict[str, Any], condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement = {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}
    return {**statement, "Condition": condition} if condition else statement


def test_evaluator_evaluates_a_trust_policy_as_sts_does() -> None:
    """A role's trust policy is its resource policy for sts:AssumeRole: unconditioned, ECS acting for another account
    assumes it (the confused deputy), with aws:SourceAccount it cannot; only naming the account lets its admins in."""
    role = "arn:aws:iam::111122223333:role/r"

    def trust(statement: dict[str, Any]) -> dict[str, Any]:
        return {"Version": "2012-10-17", "Statement": [statement]}

    unconditioned = trust(trusting({"Service": "ecs-tasks.amazonaws.com"}))
    conditioned = trust(
        trusting({"Service": "ecs-tasks.amazonaws.com"}, {"StringEquals": {"aws:SourceAccount": "111122223333"}})
    )
    delegating = trust(trusting({"AWS": "arn:aws:iam::111122223333:root"}))

    def ecs_for(account: str, policy: dict[str, Any]) -> Scenario:
        context = {
            "aws:SecureTransport": "true",
            "aws:PrincipalServiceName": "ecs-tasks.amazonaws.com",
            "aws:PrincipalIsAWSService": "true",
            "aws:SourceAccount": account,
            "aws:SourceArn": f"arn:aws:ecs:eu-west-1:{account}:task/c/{TASK_ID}",
        }
        return tool_scenario("ecs-tasks.amazonaws.com", "sts:AssumeRole", role, context, resource_policy=policy)

    def admin(policy: dict[str, Any]) -> Scenario:
        context = {
            "aws:SecureTransport": "true",
            "aws:PrincipalArn": "arn:aws:iam::111122223333:role/admin",
            "aws:PrincipalAccount": "111122223333",
            "aws:PrincipalType": "AssumedRole",
        }
        identity = [{"name": "admin", "policy": ADMIN_POLICY}]
        arn = "arn:aws:sts::111122223333:assumed-role/admin/s"
        return tool_scenario(arn, "sts:AssumeRole", role, context, identity_policies=identity, resource_policy=policy)

    requests = [
        ecs_for(OTHER_ACCOUNT, unconditioned),
        ecs_for(OTHER_ACCOUNT, conditioned),
        ecs_for("111122223333", conditioned),
        admin(conditioned),
        admin(delegating),
    ]
    assert evaluate(requests) == ["Allowed", "ImplicitlyDenied", "Allowed", "ImplicitlyDenied", "Allowed"]


def test_trust_check_names_each_role_that_trusts_more_than_a_known_service() -> None:
    """An account, an unknown service or another action in a trust policy is a problem naming the role."""
    template = role_template(
        trusting({"Service": "ecs-tasks.amazonaws.com"}),
        trusting({"AWS": f"arn:aws:iam::{FAKE_ACCOUNT}:root"}),
        trusting({"Service": "ec2.amazonaws.com"}),
        {**trusting({"Service": "ecs-tasks.amazonaws.com"}), "Action": ["sts:AssumeRole", "sts:TagSession"]},
    )
    problems = trust_problems(template)
    assert [problem.split(" ")[1] for problem in problems] == ["R1", "R2", "R3"]
    assert "(ec2.amazonaws.com: add its confused-deputy source to TRUSTED_SERVICES)" in problems[1]


def test_evaluator_refuses_a_scenario_it_cannot_evaluate_rather_than_answering() -> None:
    """An action that does not exist is an error naming the scenario, never a result."""
    broken = publish(TLS_ONLY)
    broken.simulation["request"]["action"] = "sns:PublishEverything"
    with pytest.raises(RuntimeError, match=r"the evaluator refused scenarios:\ntool: cloudwatch.amazonaws.com"):
        evaluate([broken])


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"Resources": {"A": {"Type": "AWS::SQS::Queue", "Properties": {"X": {"Fn::Cidr": []}}}}}, "'Fn::Cidr'"),
        ({"Resources": {"A": {"Type": "AWS::SQS::Queue", "Properties": {"X": {"Ref": "Nope"}}}}}, "'Nope'"),
        (
            {"Resources": {"A": {"Type": "AWS::SQS::Queue", "Properties": {"X": {"Fn::GetAtt": ["A", "Color"]}}}}},
            "reference cycle",
        ),
        (
            {
                "Resources": {
                    "A": {"Type": "AWS::SQS::Queue", "Properties": {"X": {"Fn::GetAtt": ["B", "Color"]}}},
                    "B": {"Type": "AWS::SQS::Queue"},
                }
            },
            "'Color' of AWS::SQS::Queue",
        ),
        (
            {
                "Resources": {
                    "A": {"Type": "AWS::SQS::Queue", "Properties": {"X": {"Ref": "B"}}},
                    "B": {"Type": "AWS::Made::Up"},
                }
            },
            "the Ref of AWS::Made::Up",
        ),
        (
            {
                "Parameters": {"P": {"Type": "String"}},
                "Resources": {"A": {"Type": "AWS::SQS::Queue", "Properties": {"X": {"Ref": "P"}}}},
            },
            "parameter 'P'",
        ),
        ({"Transform": "AWS::Serverless-2016-10-31", "Resources": {}}, "Transform"),
    ],
    ids=["intrinsic", "ref", "cycle", "attribute", "type", "parameter", "section"],
)
def test_resolver_fails_loudly_on_what_it_does_not_know(template: dict[str, Any], message: str) -> None:
    """An unknown intrinsic, reference, attribute, resource type, parameter value or section is an error naming it."""
    with pytest.raises(ResolveError, match=message):
        resolve_template(template, stack_name="S")


def test_resolver_resolves_parameters_conditions_and_functions() -> None:
    """Parameters (given and default), Conditions, Fn::If, Sub, Join, Select, Split and NoValue resolve as CloudFormation does."""
    template = {
        "Parameters": {"Email": {"Type": "String"}, "Tier": {"Type": "String", "Default": "prod"}},
        "Conditions": {
            "IsProd": {"Fn::Equals": [{"Ref": "Tier"}, "prod"]},
            "IsDev": {"Fn::Not": [{"Condition": "IsProd"}]},
        },
        "Resources": {
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Fn::Sub": "${AWS::StackName}-source"}}},
            "Dev": {"Type": "AWS::SQS::Queue", "Condition": "IsDev"},
            "Topic": {
                "Type": "AWS::SNS::Topic",
                "Properties": {
                    "DisplayName": {"Fn::If": ["IsProd", {"Ref": "Email"}, {"Ref": "AWS::NoValue"}]},
                    "Tags": [
                        {
                            "Key": "queue",
                            "Value": {"Fn::Select": [5, {"Fn::Split": [":", {"Fn::GetAtt": ["Queue", "Arn"]}]}]},
                        },
                        {"Key": "url", "Value": {"Fn::Join": ["|", [{"Ref": "Queue"}, {"Ref": "AWS::Region"}]]}},
                    ],
                },
            },
        },
    }
    resolved = resolve_template(template, stack_name="S", parameters={"Email": "oncall@example.org"})
    assert "Dev" not in resolved.resources
    topic = resolved.resources["Topic"].properties
    assert topic["DisplayName"] == "oncall@example.org"
    assert topic["Tags"] == [
        {"Key": "queue", "Value": "S-source"},
        {"Key": "url", "Value": "https://sqs.eu-west-1.amazonaws.com/111122223333/S-source|eu-west-1"},
    ]
    assert (
        resolve_template(template, stack_name="S", parameters={"Email": "x", "Tier": "dev"})
        .resources["Topic"]
        .properties.get("DisplayName")
        is None
    )
