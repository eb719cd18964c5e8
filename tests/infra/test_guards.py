"""Production guards: paging that cannot be a placeholder, secrets, the senders allowed, task hardening."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match

from consumer.contract import WorkerContract
from infra.queues import WorkerQueues
from infra.service import ConsumerService
from infra.settings import PAGING_ENDPOINT_PATTERN
from infra.shared import SharedResources
from infra.worker_settings import CONTEXT_KEY, SecretSource, SettingsError, WorkerSettings
from tests.infra.checks import TEMPLATE_CHECKS
from tests.infra.conftest import Synthesized, synthesize, synthesize_once
from tests.infra.resolve import resolve_template

HANDLER = "consumer.examples.notifications:handle"
PRODUCERS = ["arn:aws:iam::123456789012:role/orders-api", "arn:aws:iam::210987654321:user/ci"]
#: A secret named by its complete ARN, in a region that is not the stack's.
SIGNING_SECRET_ARN = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:qa/signing-Zz98Yy"
#: Settings variants, synthesized once: prod with a real committed address; qa with a placeholder where
#: paging is optional, every kind of secret and a producers list.
VARIANTS = {
    CONTEXT_KEY: {
        "prod": {"handler": HANDLER, "paging": {"emails": ["oncall@corp.io"]}},
        "qa": {
            "handler": HANDLER,
            "paging": {"emails": ["oncall@example.com"]},
            "secrets": {
                "DB_PASSWORD": "secretsmanager:qa/db-Ab12Cd#password",
                "DB_URL": "secretsmanager:qa/db-Ab12Cd",
                "SIGNING_KEY": f"secretsmanager:{SIGNING_SECRET_ARN}",
                "HOOK_URL": "ssm:/qa/hook-url",
            },
            "producers": PRODUCERS,
        },
    }
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    return synthesize_once(tmp_path_factory, VARIANTS)


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
        "must be an email address (no ':' before the '@') or an https:// URL (the scheme in lower case), not on a"
        " placeholder: example.com/.org/.net, their subdomains and the reserved .example, .test, .invalid and"
        " .localhost domains"
    )


@pytest.mark.parametrize(
    ("endpoint", "protocol"),
    [
        ("oncall@corp.io", "email"),
        ("OnCall+pages@Corp.IO", "email"),
        ("https://events.pagerduty.com/integration/abc/enqueue", "https"),
        ("https://EVENTS.PagerDuty.com/integration/abc/enqueue", "https"),
        ("https://corp.io/hook?to=oncall@corp.io", "https"),
    ],
)
def test_paging_endpoint_subscribes_with_the_protocol_its_value_needs(
    prod: Synthesized, endpoint: str, protocol: str
) -> None:
    """The subscription's protocol is https for an https:// value, email otherwise, by a CloudFormation condition
    (evaluated by the permissions tier's resolver, as CloudFormation would with this parameter value)."""
    assert re.fullmatch(prod.json["Parameters"]["PagingEndpoint"]["AllowedPattern"], endpoint)
    resolved = resolve_template(prod.json, stack_name=prod.stack.stack_name, parameters={"PagingEndpoint": endpoint})
    (subscription,) = resolved.of_type("AWS::SNS::Subscription")
    topic = resolved.resources[prod.logical_id(prod.stack.paging.topic)]
    assert subscription.properties == {"Protocol": protocol, "Endpoint": endpoint, "TopicArn": topic.ref}


@pytest.mark.parametrize(
    "endpoint",
    [
        "HTTPS://events.pagerduty.com/x",
        "Https://events.pagerduty.com/x",
        "mailto:oncall@corp.io",
        "ops+https://@corp.io",
    ],
)
def test_paging_endpoint_refuses_what_the_protocol_condition_would_misread(prod: Synthesized, endpoint: str) -> None:
    """An upper-case scheme or a ":" before the "@" would be subscribed as email, and SNS would refuse it mid-deploy:
    AllowedPattern refuses it before anything is created."""
    assert re.fullmatch(prod.json["Parameters"]["PagingEndpoint"]["AllowedPattern"], endpoint) is None


@pytest.mark.parametrize("name", ["dev", "staging", "demo"])
def test_environments_without_required_paging_ask_nothing_at_deploy(
    reference: dict[str, Synthesized], name: str
) -> None:
    """Only an environment that requires paging and commits no subscription declares PagingEndpoint."""
    env = reference[name]
    assert set(env.json["Parameters"]) == {"BootstrapVersion"}
    assert "Conditions" not in env.json


def test_committed_subscription_needs_no_parameter_and_a_placeholder_elsewhere_warns(
    variants: dict[str, Synthesized],
) -> None:
    """prod with a real committed address takes no parameter; a placeholder where paging is optional is a warning."""
    prod, qa = variants["prod"], variants["qa"]
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


def arn(value: Any) -> str:
    """A synthesized ARN as one readable string: ``arn:<AWS::Partition>:ssm:<AWS::Region>:...``."""
    if isinstance(value, str):
        return value
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(arn(part) for part in parts)
    ((function, argument),) = value.items()
    if function == "Ref":
        return f"<{argument}>"
    if function == "Fn::GetAtt":
        return f"<{'.'.join(argument)}>"
    return f"<{function}>"


def container(env: Synthesized, worker: str | None = None) -> dict[str, Any]:
    return env.container(worker)


def execution_role_statements(env: Synthesized, worker: str | None = None) -> list[dict[str, Any]]:
    consumer = env.stack.workers[worker].consumer if worker else env.stack.consumer
    role = {"Ref": env.logical_id(consumer.task_definition.obtain_execution_role())}
    (policy,) = [p for p in env.resources("AWS::IAM::Policy").values() if role in p["Properties"]["Roles"]]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def secret_grants(env: Synthesized, worker: str | None = None) -> dict[str, list[str]]:
    """Execution role grants on SSM and Secrets Manager: resource ARN -> sorted actions."""
    grants: dict[str, list[str]] = {}
    for statement in execution_role_statements(env, worker):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(a.split(":")[0] in {"ssm", "secretsmanager", "kms"} for a in actions):
            assert statement["Effect"] == "Allow" and "Condition" not in statement
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            for resource in resources:
                grants[arn(resource)] = sorted(actions)
    return grants


ACCOUNT_ARN = "arn:<AWS::Partition>:{service}:<AWS::Region>:<AWS::AccountId>:{resource}"
SSM_READ = ["ssm:DescribeParameters", "ssm:GetParameter", "ssm:GetParameterHistory", "ssm:GetParameters"]
SECRET_READ = ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]


@pytest.mark.parametrize("name", ["staging", "prod"])
def test_webhook_url_reaches_the_container_as_an_ecs_secret(reference: dict[str, Synthesized], name: str) -> None:
    """NOTIFY_WEBHOOK_URL is read from the environment's SecureString at task start, never written in plain text."""
    env = reference[name]
    parameter = ACCOUNT_ARN.format(service="ssm", resource=f"parameter/sqs-worker/{name}/notify-webhook-url")
    secrets = {s["Name"]: arn(s["ValueFrom"]) for s in container(env)["Secrets"]}
    assert secrets == {"NOTIFY_WEBHOOK_URL": parameter}
    assert "NOTIFY_WEBHOOK_URL" not in {e["Name"] for e in container(env)["Environment"]}
    assert secret_grants(env) == {parameter: SSM_READ}


@pytest.mark.parametrize("name", ["dev", "demo"])
def test_without_secrets_the_execution_role_reads_none(reference: dict[str, Synthesized], name: str) -> None:
    """No secrets setting: no Secrets in any worker's container and no SSM, Secrets Manager or KMS grant."""
    env = reference[name]
    assert len(env.stack.workers) == {"dev": 1, "demo": 2}[name]
    for worker in env.stack.workers:
        assert "Secrets" not in container(env, worker)
        assert secret_grants(env, worker) == {}


def test_execution_role_is_granted_exactly_the_declared_secrets(variants: dict[str, Synthesized]) -> None:
    """Secrets Manager (by complete name or ARN, whole or one JSON key) and SSM: each container secret by its
    complete ARN, and read on exactly those ARNs, no "-??????" wildcard, nothing more."""
    env = variants["qa"]
    secret = ACCOUNT_ARN.format(service="secretsmanager", resource="secret:{}")
    parameter = ACCOUNT_ARN.format(service="ssm", resource="parameter/qa/hook-url")
    assert {s["Name"]: arn(s["ValueFrom"]) for s in container(env)["Secrets"]} == {
        "DB_PASSWORD": secret.format("qa/db-Ab12Cd:password::"),
        "DB_URL": secret.format("qa/db-Ab12Cd"),
        "SIGNING_KEY": SIGNING_SECRET_ARN,
        "HOOK_URL": parameter,
    }
    # ECS requests the ValueFrom's ARN as written, so the grant must name that same complete ARN.
    assert secret_grants(env) == {
        secret.format("qa/db-Ab12Cd"): SECRET_READ,
        SIGNING_SECRET_ARN: SECRET_READ,
        parameter: SSM_READ,
    }


def test_execution_role_keeps_only_its_image_and_log_grants_besides(prod: Synthesized) -> None:
    """Apart from the secrets: pull the asset image and write the consumer's log group. Nothing else."""
    others = {}
    for statement in execution_role_statements(prod):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if not actions[0].startswith("ssm:"):
            others[tuple(actions)] = arn(statement["Resource"])
    log_group = prod.logical_id(prod.stack.consumer.log_group)
    assert others == {
        ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"): (
            "arn:<AWS::Partition>:ecr:<AWS::Region>:<AWS::AccountId>:repository/<Fn::Sub>"
        ),
        ("ecr:GetAuthorizationToken",): "*",
        ("logs:CreateLogStream", "logs:PutLogEvents"): f"<{log_group}.Arn>",
    }


def test_ecs2_acknowledgement_says_how_secrets_travel(reference: dict[str, Synthesized]) -> None:
    """The reason cdk-nag records for plain environment variables names the secrets path and the name check."""
    from infra.report import nag_results

    staging = reference["staging"]
    _, acknowledged = nag_results(staging.outdir, staging.stack.stack_name)
    (reason,) = [reason for rule, reason in acknowledged if rule == "AwsSolutions-ECS2"]
    assert "refuses secret-like names" in reason and "Secrets travel as ECS secrets (the secrets setting)" in reason


@pytest.mark.parametrize(
    ("handler_environment", "secret_name", "message"),
    [
        ({"QUEUE_URL": "x"}, "HOOK_URL", '"handler_environment" must not set variables the construct sets: QUEUE_URL'),
        ({}, "QUEUE_URL", '"secrets" must not set variables the construct sets: QUEUE_URL'),
        (
            {"HOOK_URL": "x"},
            "HOOK_URL",
            '"secrets" must not repeat a handler_environment variable (one source per variable): HOOK_URL',
        ),
    ],
)
def test_service_construct_refuses_a_variable_with_two_sources(
    handler_environment: dict[str, str], secret_name: str, message: str
) -> None:
    """Used without cdk.json's settings, ConsumerService still gives each variable one source, and says which clash."""
    stack = cdk.Stack(cdk.App(), "Direct")
    contract = WorkerContract(max_duration_seconds=90)
    topic = sns.Topic(stack, "Topic")
    cluster = ecs.Cluster(stack, "Cluster", vpc=ec2.Vpc(stack, "Vpc"))
    settings = WorkerSettings(
        name="direct",
        handler=HANDLER,
        handler_environment=handler_environment,
        secrets={secret_name: SecretSource(service="ssm", name="/qa/hook")},
    )
    with pytest.raises(ValueError) as raised:
        ConsumerService(
            stack,
            "Consumer",
            queues=WorkerQueues(stack, "Queues", contract=contract),
            contract=contract,
            settings=settings,
            shared=SharedResources(cluster=cluster, page_topic=topic, ticket_topic=topic),
        )
    assert str(raised.value) == message


def source_policy_statements(env: Synthesized) -> list[dict[str, Any]]:
    return queue_policy_statements(env, env.stack.queues.queue)


def queue_policy_statements(env: Synthesized, queue: Any) -> list[dict[str, Any]]:
    ref = {"Ref": env.logical_id(queue)}
    (policy,) = [p for p in env.resources("AWS::SQS::QueuePolicy").values() if p["Properties"]["Queues"] == [ref]]
    return policy["Properties"]["PolicyDocument"]["Statement"]


TLS_DENY = {"Effect": "Deny", "Action": "sqs:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}


def test_producers_alone_may_send_besides_the_consumer(variants: dict[str, Synthesized]) -> None:
    """With producers set: they are allowed SendMessage, everyone else but the task role is denied; TLS deny stays."""
    qa = variants["qa"]
    queue_arn = {"Fn::GetAtt": [qa.logical_id(qa.stack.queues.queue), "Arn"]}
    task_role_arn = {"Fn::GetAtt": [qa.logical_id(qa.stack.consumer.task_role), "Arn"]}
    tls, allow, deny = source_policy_statements(qa)
    assert {k: tls[k] for k in TLS_DENY} == TLS_DENY
    assert allow == {
        "Sid": "AllowProducersToSend",
        "Effect": "Allow",
        "Principal": {"AWS": PRODUCERS},
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
    }
    assert deny == {
        "Sid": "DenyOtherSenders",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": [*PRODUCERS, task_role_arn]}},
    }


def test_only_the_consumer_may_send_to_the_dlq_where_producers_are_named(variants: dict[str, Synthesized]) -> None:
    """With producers set, the DLQ's policy denies SendMessage to all but the task role (nothing planted there can be
    redriven past the producers' list); its TLS deny stays."""
    qa = variants["qa"]
    dlq_arn = {"Fn::GetAtt": [qa.logical_id(qa.stack.queues.dead_letter_queue), "Arn"]}
    task_role_arn = {"Fn::GetAtt": [qa.logical_id(qa.stack.consumer.task_role), "Arn"]}
    tls, deny = queue_policy_statements(qa, qa.stack.queues.dead_letter_queue)
    assert {k: tls[k] for k in TLS_DENY} == TLS_DENY
    assert deny == {
        "Sid": "DenySendersButTheConsumer",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "sqs:SendMessage",
        "Resource": dlq_arn,
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": [task_role_arn]}},
    }


def test_without_producers_each_dlq_holds_only_the_tls_deny(reference: dict[str, Synthesized]) -> None:
    """Every worker of every reference environment (none names producers): same-account IAM decides who sends to its
    DLQ, as to its source (the documented default)."""
    unrestricted = [env for env in reference.values() if not env.stack.settings.producers]
    for env in unrestricted:
        for worker in env.stack.workers.values():
            (tls,) = queue_policy_statements(env, worker.queues.dead_letter_queue)
            assert {k: tls[k] for k in TLS_DENY} == TLS_DENY


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "demo"])
def test_without_producers_iam_alone_decides_who_sends(reference: dict[str, Synthesized], name: str) -> None:
    """Unset producers: the source's policy holds only the TLS deny, and IAM alone decides who sends."""
    (tls,) = source_policy_statements(reference[name])
    assert {k: tls[k] for k in TLS_DENY} == TLS_DENY


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "demo"])
def test_container_drops_every_linux_capability(reference: dict[str, Synthesized], name: str) -> None:
    """Every worker's container keeps none of Docker's default capabilities (Fargate allows any drop)."""
    env = reference[name]
    for worker in env.stack.workers:
        assert container(env, worker)["LinuxParameters"] == {"Capabilities": {"Drop": ["ALL"]}}


def test_idempotency_table_has_no_deletion_protection_even_where_data_is_retained(
    reference: dict[str, Synthesized],
) -> None:
    """DeletionProtectionEnabled false on every worker's table of every environment, retain_queues or not.

    A protected table "cannot be deleted by any user or process", CloudFormation's rollback of the deploy that
    created it included: a failed first deploy would end in ROLLBACK_FAILED instead of a clean retry. The table is
    kept by RetainExceptOnCreate + UpdateReplacePolicy Retain where the data is retained (test_first_deploy.py),
    and the task role may not DeleteTable (test_permissions.py).
    """
    for name, env in reference.items():
        for worker in env.stack.workers.values():
            table = env.json["Resources"][env.logical_id(worker.consumer.idempotency_table)]
            assert table["Properties"]["DeletionProtectionEnabled"] is False, (name, worker.name)


@pytest.mark.parametrize("check", list(TEMPLATE_CHECKS))
def test_framework_checks_hold_on_the_guard_variants(variants: dict[str, Synthesized], check: str) -> None:
    """The checks the repository's own cdk.json passes (tests/infra/checks.py) hold where paging is committed and
    where producers, every kind of secret and a placeholder subscription are set, settings cdk.json may not have."""
    for env in variants.values():
        TEMPLATE_CHECKS[check](env)
