"""Unit tests for cdk.json environment settings: every rule names the setting's path and value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.settings import PAGING_ENDPOINT_PATTERN, PRODUCER_RULE, load_environments, parse_environment
from infra.worker_settings import CONTEXT_KEY, SECRET_LIKE_RULE, SecretSource, SettingsError
from tests.reference import REPORT_JOB, reference_context

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "consumer.examples.notifications:handle"
PRODUCER_ARN = "arn:aws:iam::123456789012:role/orders-api"


def settings(**overrides: object) -> dict[str, object]:
    return {"handler": HANDLER, **overrides}


def error_for(name: str, raw: object) -> SettingsError:
    with pytest.raises(SettingsError) as raised:
        parse_environment(name, raw)
    return raised.value


def test_settings_shipped_environments_all_parse() -> None:
    """dev, staging, prod and demo as cdk.json shipped them (tests/reference.py) are valid; prod pages whom its deploy names; demo runs the demo handler."""
    context = reference_context()
    environments = {e.name: e for e in load_environments(context)}
    assert list(environments) == ["dev", "staging", "prod", "demo"]
    assert environments["demo"].handler == "consumer.examples.demo:handle"
    assert environments["prod"].require_paging and not environments["prod"].has_subscription
    assert [e.name for e in environments.values() if e.paging_from_parameter] == ["prod"]
    assert environments["dev"].retain_queues is False and environments["prod"].retain_queues is True


def test_settings_dev_and_demo_declare_the_notifications_dry_run() -> None:
    """The shipped dev and demo run the example without a webhook, so they declare its dry run; staging and prod do not."""
    context = reference_context()
    environments = {e.name: e for e in load_environments(context)}
    assert environments["dev"].handler_environment == {"NOTIFY_DRY_RUN": "true"}
    assert environments["demo"].handler_environment == {"NOTIFY_DRY_RUN": "true"}
    assert "NOTIFY_DRY_RUN" not in {
        **environments["staging"].handler_environment,
        **environments["prod"].handler_environment,
    }


def test_settings_defaults() -> None:
    """Only the handler is required; the rest has documented defaults."""
    env = parse_environment("qa", settings())
    assert (env.min_tasks, env.max_tasks, env.cpu, env.memory_mib) == (1, 2, 256, 512)
    assert (env.source_retention_days, env.dlq_retention_days, env.log_retention_days) == (4, 14, 30)
    assert env.stack_name == "SqsWorker-qa"


def test_settings_unknown_environment_is_rejected() -> None:
    """-c env=NAME must name an environment in cdk.json."""
    with pytest.raises(SettingsError) as raised:
        load_environments({CONTEXT_KEY: {"dev": settings()}}, "qa")
    assert str(raised.value) == "\"env\" must be one of the environments in cdk.json (dev): 'qa'"


def test_settings_missing_context_is_rejected() -> None:
    """Without the environments block there is nothing to synthesize."""
    with pytest.raises(SettingsError, match=f'"{CONTEXT_KEY}" must be an object'):
        load_environments({})


def test_settings_unknown_key_is_rejected_not_ignored() -> None:
    """A typo in a setting fails synth instead of being dropped."""
    error = error_for("dev", settings(min_task=3))
    assert error.parameter == f"{CONTEXT_KEY}.dev.min_task"
    assert "is not a known setting" in str(error) and error.value == 3


def test_settings_handler_is_required() -> None:
    """Each environment names the handler it deploys."""
    assert error_for("dev", {}).parameter == f"{CONTEXT_KEY}.dev.handler"


def test_settings_bad_handler_names_the_setting() -> None:
    """A handler that cannot be imported fails with the setting's path."""
    error = error_for("dev", settings(handler="nope.nothing:handle"))
    assert error.parameter == f"{CONTEXT_KEY}.dev.handler"
    assert "cannot be imported" in str(error)


def test_settings_accept_a_handler_outside_the_framework() -> None:
    """A handler outside the framework (a team package such as workers/) is read with its own declaration."""
    environment = parse_environment("team", settings(handler=REPORT_JOB))
    assert (environment.handler, environment.contract().max_duration_seconds) == (REPORT_JOB, 600)


def test_prod_without_a_committed_subscription_takes_it_at_deploy() -> None:
    """prod must page someone, whatever require_paging says: with nothing in cdk.json, the PagingEndpoint parameter."""
    prod = parse_environment("prod", settings(require_paging=False))
    assert (prod.require_paging, prod.paging_from_parameter) == (True, True)
    committed = parse_environment("prod", settings(paging={"https": ["https://events.pagerduty.com/x/enqueue"]}))
    assert (committed.has_subscription, committed.paging_from_parameter) == (True, False)


def test_report_says_where_paging_comes_from_and_what_guards_apply() -> None:
    """`python -m infra.report` names prod's deploy parameter, each environment's secrets and who may send."""
    from infra.report import settings_rows

    context = reference_context()
    rows = {e.name: settings_rows(e) for e in load_environments(context)}
    assert rows["prod"] == {
        "paging subscriptions": "PagingEndpoint (deploy parameter)",
        "ticket subscriptions": "0",
        "pages go to": "paging",
        "secrets (ECS secrets)": "NOTIFY_WEBHOOK_URL",
        "who may send": "IAM decides",
        "traces (X-Ray)": "off",
    }
    assert rows["dev"]["paging subscriptions"] == "0" and rows["dev"]["secrets (ECS secrets)"] == "none"
    qa = parse_environment(
        "qa", settings(paging={"emails": ["a@corp.io", "b@corp.io"]}, producers=[PRODUCER_ARN], require_paging=True)
    )
    assert (settings_rows(qa)["paging subscriptions"], settings_rows(qa)["who may send"]) == (
        "2",
        "1 producers + consumer",
    )


def test_settings_require_paging_applies_to_any_environment() -> None:
    """Other environments can opt in to the same rule; without it nothing is asked at deploy."""
    assert parse_environment("staging", settings(require_paging=True)).paging_from_parameter is True
    assert parse_environment("staging", settings()).paging_from_parameter is False


PLACEHOLDERS = [
    ("emails", "oncall@example.com"),
    ("emails", "Oncall@EXAMPLE.ORG"),
    ("emails", "pager@ops.example.net"),
    ("emails", "oncall@corp.example"),
    ("emails", "oncall@corp.test"),
    ("emails", "oncall@pager.invalid"),
    ("emails", "root@ops.localhost"),
    ("https", "https://hooks.example.com/page"),
    ("https", "https://example.org"),
    ("https", "https://user:key@example.net/hook"),
    ("https", "https://pager.test:8443/hook"),
    ("https", "https://localhost/hook"),
]
REAL_ENDPOINTS = [
    ("emails", "oncall@corp.io"),
    ("emails", "ops@example.company.com"),
    ("emails", "oncall@notexample.com"),
    ("https", "https://events.pagerduty.com/integration/abc/enqueue"),
    ("https", "https://example.com.corp.io/hook"),
    ("https", "https://corp.io/hook?next=docs.example"),
]


@pytest.mark.parametrize(("kind", "endpoint"), PLACEHOLDERS)
def test_settings_required_paging_refuses_a_placeholder(kind: str, endpoint: str) -> None:
    """Where paging is required, a documentation or reserved domain fails synth, naming the key, rule and value."""
    error = error_for("prod", settings(paging={kind: [endpoint]}))
    assert (error.parameter, error.value) == (f"{CONTEXT_KEY}.prod.paging.{kind}", endpoint)
    assert error.rule.startswith(
        "must reach someone where paging is required (prod, or require_paging): example.com/.org/.net,"
        " their subdomains and the reserved .example, .test, .invalid and .localhost domains are placeholders;"
    )
    assert 'make deploy ENV=prod CDK_ARGS="--parameters SqsWorker-prod:PagingEndpoint=oncall@yourco.com"' in error.rule
    assert error_for("qa", settings(require_paging=True, paging={kind: [endpoint]})).parameter.endswith(kind)


@pytest.mark.parametrize(("kind", "endpoint"), PLACEHOLDERS)
def test_settings_placeholder_is_allowed_where_paging_is_not_required(kind: str, endpoint: str) -> None:
    """Elsewhere a placeholder stays a synth warning (the stack's), not an error."""
    env = parse_environment("qa", settings(paging={kind: [endpoint]}))
    assert (*env.paging_emails, *env.paging_https) == (endpoint,)


@pytest.mark.parametrize(("kind", "endpoint"), REAL_ENDPOINTS)
def test_settings_required_paging_accepts_a_real_endpoint(kind: str, endpoint: str) -> None:
    """A look-alike of a placeholder that is a real host is accepted."""
    env = parse_environment("prod", settings(paging={kind: [endpoint]}))
    assert (*env.paging_emails, *env.paging_https) == (endpoint,)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [(endpoint, False) for _, endpoint in PLACEHOLDERS]
    + [(endpoint, True) for _, endpoint in REAL_ENDPOINTS]
    + [("http://corp.io/hook", False), ("not-an-address", False), ("oncall@corp", False), ("", False)]
    # The scheme is lower case (the stack's protocol condition looks for "https://"); hosts are not case-sensitive.
    + [("HTTPS://events.pagerduty.com/x", False), ("Https://events.pagerduty.com/x", False)]
    + [("https://EVENTS.PagerDuty.com/x", True), ("https://Hooks.Example.COM/x", False), ("OnCall@Corp.IO", True)]
    # No ":" before an address's "@": neither a mailto: URL nor a scheme passes for an address.
    + [("mailto:oncall@corp.io", False), ("ops+https://@corp.io", False), ("a:b@corp.io", False)],
)
def test_paging_endpoint_pattern_is_the_deploy_time_rule(value: str, accepted: bool) -> None:
    """The PagingEndpoint parameter's AllowedPattern takes an email or a lower-case https:// URL, refuses placeholders."""
    assert (re.fullmatch(PAGING_ENDPOINT_PATTERN, value) is not None) is accepted


@pytest.mark.parametrize(
    ("overrides", "key", "rule"),
    [
        ({"min_tasks": -1}, "min_tasks", "must be between 0 and 100"),
        ({"min_tasks": 101}, "min_tasks", "must be between 0 and 100"),
        ({"min_tasks": 3, "max_tasks": 2}, "max_tasks", "must be between 3 and 100 (from min_tasks, and at least 1)"),
        ({"min_tasks": 0, "max_tasks": 0}, "max_tasks", "must be between 1 and 100 (from min_tasks, and at least 1)"),
        ({"cpu": 300}, "cpu", "must be one of Fargate's CPU sizes"),
        ({"cpu": 256, "memory_mib": 4096}, "memory_mib", "must be 512..2048 in steps of 512 for cpu 256"),
        ({"log_retention_days": 10}, "log_retention_days", "must be one of CloudWatch's"),
        ({"source_retention_days": 0}, "source_retention_days", "must be between 1 and 12"),
        ({"source_retention_days": 13}, "source_retention_days", "must be between 1 and 12"),
        ({"dlq_retention_days": 15}, "dlq_retention_days", "must be between 3 and 14"),
        ({"retain_queues": "yes"}, "retain_queues", "must be true or false"),
        ({"paging": {"emails": ["not-an-address"]}}, "paging.emails", "must be an email address"),
        ({"paging": {"https": ["http://insecure.example.com"]}}, "paging.https", "must be an https:// URL"),
        ({"paging": {"sms": ["+1"]}}, "paging", 'must be an object with "emails" and/or "https" lists'),
        ({"cluster_name": "shared"}, "cluster_name", "needs an existing vpc too"),
        (
            {"vpc": {"vpc_id": "abc", "availability_zones": ["a"], "private_subnet_ids": ["s"]}},
            "vpc.vpc_id",
            "must be a VPC id",
        ),
        (
            {"vpc": {"vpc_id": "vpc-1", "availability_zones": ["a", "b"], "private_subnet_ids": ["s"]}},
            "vpc.private_subnet_ids",
            "one subnet per availability zone",
        ),
        ({"handler_environment": {"lower": "x"}}, "handler_environment", "must map UPPER_CASE names to string values"),
        ({"nat_gateways": 4}, "nat_gateways", "must be between 0 and 3"),
    ],
)
def test_settings_rules(overrides: dict, key: str, rule: str) -> None:
    """Each rule names the setting's full path and states the rule."""
    error = error_for("dev", settings(**overrides))
    assert error.parameter == f"{CONTEXT_KEY}.dev.{key}"
    assert rule in str(error)


RETENTION_RULE = (
    "must exceed source_retention_days ({source}) by at least 2 days, because a message keeps its original"
    " enqueue time in the DLQ, and the DLQ age page (half the gap after a move) must come at least a day before it"
    " can expire"
)


@pytest.mark.parametrize(("source", "dlq"), [(7, 7), (4, 4), (3, 1), (3, 4), (12, 13)])
def test_settings_retention_relation_is_said_in_days(source: int, dlq: int) -> None:
    """A DLQ retention not two days above the source's (one day above included) fails in the unit the user wrote,
    before the 3..14 bound."""
    error = error_for("dev", settings(source_retention_days=source, dlq_retention_days=dlq))
    assert str(error) == (f'"{CONTEXT_KEY}.dev.dlq_retention_days" {RETENTION_RULE.format(source=source)}: {dlq}')


@pytest.mark.parametrize(("source", "dlq"), [(3, 5), (1, 3), (12, 14)])
def test_settings_retention_two_days_above_the_source_is_enough(source: int, dlq: int) -> None:
    """The other edge: a DLQ kept exactly two days longer than the source parses (down to 1 and 3, up to 12 and 14)."""
    env = parse_environment("dev", settings(source_retention_days=source, dlq_retention_days=dlq))
    assert (env.source_retention_days, env.dlq_retention_days) == (source, dlq)


def test_settings_contract_applies_environment_retention() -> None:
    """The environment's retention replaces the contract's defaults; the handler's timings stay."""
    contract = parse_environment("dev", settings(source_retention_days=1, dlq_retention_days=7)).contract()
    assert (contract.source_retention_seconds, contract.dlq_retention_seconds) == (86_400, 604_800)
    assert contract.max_duration_seconds == 90


def test_settings_tickets_and_routing() -> None:
    """A ticket topic's subscribers and pages_to_tickets are read; the shipped dev sends its pages to tickets."""
    env = parse_environment("qa", settings(tickets={"emails": ["team@corp.io"]}, pages_to_tickets=True))
    assert (env.ticket_emails, env.ticket_https, env.pages_to_tickets) == (("team@corp.io",), (), True)
    context = reference_context()
    routing = {e.name: e.pages_to_tickets for e in load_environments(context)}
    assert routing == {"dev": True, "staging": False, "prod": False, "demo": True}


def test_settings_prod_cannot_send_its_pages_to_tickets() -> None:
    """An environment that must page someone refuses pages_to_tickets."""
    error = error_for("prod", settings(paging={"emails": ["oncall@corp.io"]}, pages_to_tickets=True))
    assert error.parameter == f"{CONTEXT_KEY}.prod.pages_to_tickets"


def test_settings_ticket_subscription_must_be_an_email() -> None:
    """tickets.emails is checked like paging.emails, naming the setting and the value."""
    error = error_for("qa", settings(tickets={"emails": ["not-an-email"]}))
    assert (error.parameter, error.value) == (f"{CONTEXT_KEY}.qa.tickets.emails", "not-an-email")


@pytest.mark.parametrize("url", ["http://wiki/runbook.md", "https://example.com/runbook.md#dlq-depth", ""])
def test_settings_runbook_url_must_be_https_without_an_anchor(url: str) -> None:
    """Alarm descriptions append #section themselves; the base must be an https:// URL (or the default path)."""
    error = error_for("qa", settings(runbook_url=url))
    assert error.parameter == f"{CONTEXT_KEY}.qa.runbook_url"


SECRET_ARN = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:qa/signing-Zz98Yy"


def test_settings_secrets_name_their_source() -> None:
    """ssm:<parameter>, secretsmanager:<complete name> or :<complete ARN>, each secret optionally #<json key>."""
    env = parse_environment(
        "qa",
        settings(
            secrets={
                "HOOK_URL": "ssm:/qa/hook-url",
                "DB_URL": "secretsmanager:qa/db-Ab12Cd",
                "DB_PASSWORD": "secretsmanager:qa/db-Ab12Cd#password",
                "SIGNING_KEY": f"secretsmanager:{SECRET_ARN}",
                "SIGNING_KID": f"secretsmanager:{SECRET_ARN}#kid",
            }
        ),
    )
    assert env.secrets == {
        "HOOK_URL": SecretSource(service="ssm", name="/qa/hook-url"),
        "DB_URL": SecretSource(service="secretsmanager", name="qa/db-Ab12Cd"),
        "DB_PASSWORD": SecretSource(service="secretsmanager", name="qa/db-Ab12Cd", json_key="password"),
        "SIGNING_KEY": SecretSource(service="secretsmanager", name="qa/signing-Zz98Yy", arn=SECRET_ARN),
        "SIGNING_KID": SecretSource(service="secretsmanager", name="qa/signing-Zz98Yy", json_key="kid", arn=SECRET_ARN),
    }


def test_settings_shipped_staging_and_prod_read_the_webhook_url_from_ssm() -> None:
    """The example's NOTIFY_WEBHOOK_URL (webhook URLs often carry a token) is a SecureString per environment."""
    context = reference_context()
    secrets = {e.name: e.secrets for e in load_environments(context) if e.secrets}
    assert secrets == {
        name: {"NOTIFY_WEBHOOK_URL": SecretSource(service="ssm", name=f"/sqs-worker/{name}/notify-webhook-url")}
        for name in ("staging", "prod")
    }


SOURCE_RULE = (
    'must be "ssm:<parameter name>", "secretsmanager:<secret name>-<6-character suffix>" or'
    ' "secretsmanager:<complete secret ARN>", a secret optionally followed by "#<json key>"'
)
NAME_RULE = f"{SOURCE_RULE}; a secret name is 1 to 512 letters, digits and / _ + = . @ -"
ARN_RULE = (
    f"{SOURCE_RULE}; a complete ARN is arn:aws:secretsmanager:<region>:<12-digit account>:secret:<name>-<6 letters"
    " or digits>, as Secrets Manager shows it: aws secretsmanager describe-secret --secret-id NAME --query ARN"
)
KEY_RULE = f"{SOURCE_RULE}; a JSON key is not empty and has no ':' or spaces"


def incomplete(name: str) -> str:
    return (
        "must name the secret completely, with the '-' and six letters or digits its ARN ends with (ECS reads a"
        " secret only by its complete ARN; a partial one is refused access at task start): find it with"
        f" aws secretsmanager describe-secret --secret-id {name} --query ARN"
    )


@pytest.mark.parametrize(
    ("secrets", "parameter", "message"),
    [
        (["HOOK"], "secrets", """must map UPPER_CASE names to "ssm:..." or "secretsmanager:..." sources: ['HOOK']"""),
        (
            {"hook": "ssm:/a"},
            "secrets",
            """must map UPPER_CASE names to "ssm:..." or "secretsmanager:..." sources: 'hook'""",
        ),
        ({"HOOK": 7}, "secrets", """must map UPPER_CASE names to "ssm:..." or "secretsmanager:..." sources: 'HOOK'"""),
        ({"QUEUE_URL": "ssm:/a"}, "secrets", "must not set variables the stack writes itself: 'QUEUE_URL'"),
        (
            {"CONSUMER_MAX_DURATION_SECONDS": "ssm:/a"},
            "secrets",
            "must not set variables the stack writes itself: 'CONSUMER_MAX_DURATION_SECONDS'",
        ),
        (
            {"LOG_FORMAT": "ssm:/a"},
            "secrets",
            "must not repeat a handler_environment name (one source per variable): 'LOG_FORMAT'",
        ),
        ({"HOOK": "vault:/a"}, "secrets.HOOK", f"{SOURCE_RULE}: 'vault:/a'"),
        ({"HOOK": "/a/b"}, "secrets.HOOK", f"{SOURCE_RULE}: '/a/b'"),
        (
            {"HOOK": "ssm:/a//b"},
            "secrets.HOOK",
            f"{SOURCE_RULE}; a parameter name is letters, digits, _ . - in at most 15 /-separated levels: 'ssm:/a//b'",
        ),
        (
            {"HOOK": "ssm:"},
            "secrets.HOOK",
            f"{SOURCE_RULE}; a parameter name is letters, digits, _ . - in at most 15 /-separated levels: 'ssm:'",
        ),
        ({"HOOK": "secretsmanager:qa db-Ab12Cd"}, "secrets.HOOK", f"{NAME_RULE}: 'secretsmanager:qa db-Ab12Cd'"),
        ({"HOOK": "secretsmanager:"}, "secrets.HOOK", f"{NAME_RULE}: 'secretsmanager:'"),
        (
            {"HOOK": "secretsmanager:" + "a" * 513 + "-Ab12Cd"},
            "secrets.HOOK",
            f"{NAME_RULE}: 'secretsmanager:{'a' * 513}-Ab12Cd'",
        ),
        (
            {"HOOK": "secretsmanager:qa/db"},
            "secrets.HOOK",
            f"{incomplete('qa/db')}: 'secretsmanager:qa/db'",
        ),
        (
            {"HOOK": "secretsmanager:qa/db-a1B2c#password"},
            "secrets.HOOK",
            f"{incomplete('qa/db-a1B2c')}: 'secretsmanager:qa/db-a1B2c#password'",
        ),
        (
            {"HOOK": "secretsmanager:qa/db-a1B2c3:password"},
            "secrets.HOOK",
            f"{SOURCE_RULE}; a JSON key follows '#', not ':': 'secretsmanager:qa/db-a1B2c3:password'",
        ),
        (
            {"HOOK": "secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:qa/db"},
            "secrets.HOOK",
            f"{ARN_RULE}: 'secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:qa/db'",
        ),
        (
            {"HOOK": "secretsmanager:arn:aws:ssm:eu-west-1:123456789012:secret:qa/db-a1B2c3"},
            "secrets.HOOK",
            f"{ARN_RULE}: 'secretsmanager:arn:aws:ssm:eu-west-1:123456789012:secret:qa/db-a1B2c3'",
        ),
        (
            {"HOOK": "secretsmanager:arn:aws:secretsmanager:eu-west-1:12345678901:secret:qa/db-a1B2c3"},
            "secrets.HOOK",
            f"{ARN_RULE}: 'secretsmanager:arn:aws:secretsmanager:eu-west-1:12345678901:secret:qa/db-a1B2c3'",
        ),
        (
            {"HOOK": f"secretsmanager:{SECRET_ARN}:password::"},
            "secrets.HOOK",
            f"{ARN_RULE}: 'secretsmanager:{SECRET_ARN}:password::'",
        ),
        ({"HOOK": "secretsmanager:qa/db-a1B2c3#"}, "secrets.HOOK", f"{KEY_RULE}: 'secretsmanager:qa/db-a1B2c3#'"),
        (
            {"HOOK": "secretsmanager:qa/db-a1B2c3#a:b"},
            "secrets.HOOK",
            f"{KEY_RULE}: 'secretsmanager:qa/db-a1B2c3#a:b'",
        ),
        (
            {"HOOK": f"secretsmanager:{SECRET_ARN}#a b"},
            "secrets.HOOK",
            f"{KEY_RULE}: 'secretsmanager:{SECRET_ARN}#a b'",
        ),
    ],
)
def test_settings_secrets_rules(secrets: object, parameter: str, message: str) -> None:
    """Each secrets rule names the setting's path, the rule and the value received."""
    error = error_for("qa", settings(secrets=secrets, handler_environment={"LOG_FORMAT": "json"}))
    assert str(error) == f'"{CONTEXT_KEY}.qa.{parameter}" {message}'


def test_settings_secret_names_at_the_bounds_are_accepted() -> None:
    """A 512-character secret name with its suffix (by name and in an ARN), a one-character name and a 15-level
    parameter are valid; a name ending in '-' and five characters lacks its suffix and is refused."""
    name, levels = "a" * 512 + "-Ab12Cd", "/" + "/".join(["level"] * 15)
    long_arn = f"arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:{name}"
    env = parse_environment(
        "qa",
        settings(
            secrets={
                "LONG": f"secretsmanager:{name}",
                "LONG_ARN": f"secretsmanager:{long_arn}",
                "SHORT": "secretsmanager:d-a1B2c3",
                "DEEP": f"ssm:{levels}",
            }
        ),
    )
    assert [(s.name, s.arn) for s in env.secrets.values()] == [
        (name, None),
        (name, long_arn),
        ("d-a1B2c3", None),
        (levels, None),
    ]
    error = error_for("qa", settings(secrets={"SHORT": "secretsmanager:db-a1B2c"}))
    assert str(error) == f"\"{CONTEXT_KEY}.qa.secrets.SHORT\" {incomplete('db-a1B2c')}: 'secretsmanager:db-a1B2c'"
    error = error_for("qa", settings(secrets={"DEEP": f"ssm:{levels}/sixteenth"}))
    assert error.parameter == f"{CONTEXT_KEY}.qa.secrets.DEEP" and "at most 15 /-separated levels" in error.rule


@pytest.mark.parametrize(
    "name",
    [
        "API_TOKEN",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "MYSQL_PASSWD",
        "GPG_PASSPHRASE",
        "SIGNING_SECRET",
        "CLIENT_SECRET_ID",
        "DB_CREDENTIALS",
        "SSH_PRIVATE_KEY",
        "STRIPE_API_KEY",
        "MAPS_APIKEY",
        "AWS_ACCESS_KEY_ID",
        "NOTIFY_WEBHOOK_URL",
        "SLACK_WEBHOOK",
    ],
)
def test_settings_handler_environment_refuses_secret_like_names(name: str) -> None:
    """A name that looks like a secret is refused and pointed at "secrets"; its value never appears in the error."""
    error = error_for("qa", settings(handler_environment={"LOG_FORMAT": "json", name: "hunter2"}))
    assert str(error) == f'"{CONTEXT_KEY}.qa.handler_environment" {SECRET_LIKE_RULE}: {name!r}'
    assert 'declare it in "secrets"' in SECRET_LIKE_RULE
    assert "hunter2" not in str(error)


def test_settings_handler_environment_keeps_plain_names() -> None:
    """Names without a secret marker pass, so the example's dry-run switch can still be declared here."""
    plain = {"NOTIFY_DRY_RUN": "true", "ORDERS_API_URL": "https://orders.corp.io", "LOG_FORMAT": "json"}
    assert parse_environment("qa", settings(handler_environment=plain)).handler_environment == plain


def test_settings_handler_environment_error_never_shows_values() -> None:
    """A malformed entry is reported by its name only: the value may be a secret."""
    error = error_for("qa", settings(handler_environment={"lower": "hunter2"}))
    assert str(error) == f"\"{CONTEXT_KEY}.qa.handler_environment\" must map UPPER_CASE names to string values: 'lower'"


@pytest.mark.parametrize(
    "arn",
    [
        PRODUCER_ARN,
        "arn:aws:iam::123456789012:role/team/orders/api",
        "arn:aws:iam::123456789012:user/ci",
        "arn:aws-cn:iam::123456789012:role/svc+name=x,y.z@a-b_c",
        "arn:aws-us-gov:iam::123456789012:user/ci",
    ],
)
def test_settings_producers_take_role_and_user_arns(arn: str) -> None:
    """producers lists the IAM roles and users allowed to send, paths included."""
    assert parse_environment("qa", settings(producers=[arn])).producers == (arn,)


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:role/*",
        "arn:aws:iam::123456789012:role/team/*",
        "arn:aws:sts::123456789012:assumed-role/orders-api/session",
        "arn:aws:iam::123456789012:root",
        "arn:aws:iam::123456789012:group/devs",
        "arn:aws:iam::12345678901:role/orders-api",
        "arn:aws:iam::123456789012:role/",
        "arn:aws:iam::123456789012:role/team/",
        "123456789012",
        "arn:aws:sns:eu-west-1:123456789012:topic",
        "arn:aws:iam::123456789012:role/équipe",
    ],
)
def test_settings_producers_refuse_anything_but_a_role_or_user_arn(arn: str) -> None:
    """A wildcard, a session, the root user, a group, an account id or a service resource is refused with the rule."""
    error = error_for("qa", settings(producers=[PRODUCER_ARN, arn]))
    assert str(error) == f'"{CONTEXT_KEY}.qa.producers" {PRODUCER_RULE}: {arn!r}'


def test_settings_producers_empty_or_absent() -> None:
    """Absent = same-account IAM decides (every shipped environment); an empty list is refused as ambiguous."""
    context = reference_context()
    assert {e.name: e.producers for e in load_environments(context)} == dict.fromkeys(
        ("dev", "staging", "prod", "demo"), ()
    )
    error = error_for("qa", settings(producers=[]))
    assert str(error) == (
        f'"{CONTEXT_KEY}.qa.producers" must list at least one role or user ARN (leave it out to let IAM alone decide): []'
    )
    assert error_for("qa", settings(producers="arn:aws:iam::123456789012:user/ci")).rule == "must be a list of strings"


def test_settings_handler_raising_on_import_names_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler module that raises when imported fails synth in one line with the setting's path."""
    (tmp_path / "settings_raises_on_import.py").write_text('raise KeyError("DATABASE_URL")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    error = error_for("dev", settings(handler="settings_raises_on_import:handle"))
    assert str(error) == (
        f"\"{CONTEXT_KEY}.dev.handler\" names a module that raised KeyError when imported ('DATABASE_URL'):"
        " 'settings_raises_on_import:handle'"
    )


def workers(**entries: object) -> dict[str, object]:
    return {"workers": entries}


def test_settings_workers_each_take_their_own_knobs() -> None:
    """An environment lists workers by name; each has its handler, tasks and size; the first is first."""
    env = parse_environment(
        "qa", workers(notify={"handler": HANDLER}, exports={"handler": HANDLER, "max_tasks": 6, "cpu": 512})
    )
    assert [(w.name, w.max_tasks, w.cpu, w.memory_mib) for w in env.workers] == [
        ("notify", 2, 256, 512),
        ("exports", 6, 512, 1024),
    ]
    assert env.first_worker.name == "notify"


def test_settings_handler_form_is_one_default_worker() -> None:
    """Today's top-level handler means one worker named "default"."""
    env = parse_environment("qa", settings(max_tasks=3))
    assert [(w.name, w.handler, w.max_tasks) for w in env.workers] == [("default", HANDLER, 3)]


@pytest.mark.parametrize(
    ("raw", "parameter", "rule"),
    [
        (workers(exports={"cpu": 256}), "workers.exports.handler", 'must be set to "package.module:function"'),
        (workers(exports={"handler": HANDLER, "cpu": 300}), "workers.exports.cpu", "must be one of Fargate's CPU"),
        (workers(exports={"handler": HANDLER, "vpc": {}}), "workers.exports.vpc", "is not a per-worker setting"),
        ({**workers(exports={"handler": HANDLER}), "max_tasks": 3}, "max_tasks", "is a per-worker setting"),
        (workers(Exports={"handler": HANDLER}), "workers.Exports", "lowercase words of letters and digits"),
        (workers(**{"a-1": {"handler": HANDLER}}), "workers.a-1", "each word starting with a letter"),
        (workers(**{"a" * 21: {"handler": HANDLER}}), "workers." + "a" * 21, "at most 20 characters"),
        (workers(**{"dead-letter": {"handler": HANDLER}}), "workers.dead-letter", 'must not end in "dead-letter"'),
        (workers(x={"handler": HANDLER, "identity": "x-dead-letter"}), "workers.x.identity", "DeadLetterQueueUrl"),
        ({"workers": {}}, "workers", "must be an object of workers"),
        (
            {"workers": {f"w{i}": {"handler": HANDLER} for i in range(18)}},
            "workers",
            "must list at most 17 workers",
        ),
    ],
)
def test_settings_workers_rules(raw: dict, parameter: str, rule: str) -> None:
    """Each workers rule names the setting's full path and states the rule."""
    error = error_for("qa", raw)
    assert error.parameter == f"{CONTEXT_KEY}.qa.{parameter}"
    assert rule in str(error)


def test_settings_worker_name_at_the_bound_is_accepted() -> None:
    """A 20-character name of hyphen-joined words is a valid worker name."""
    name = "order-emails-to-send"
    assert len(name) == 20
    assert parse_environment("qa", workers(**{name: {"handler": HANDLER}})).workers[0].name == name
