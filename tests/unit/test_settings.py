"""Unit tests for cdk.json environment settings: every rule names the setting's path and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.settings import CONTEXT_KEY, SettingsError, load_environments, parse_environment

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "consumer.examples.notifications:handle"


def settings(**overrides: object) -> dict[str, object]:
    return {"handler": HANDLER, **overrides}


def error_for(name: str, raw: object) -> SettingsError:
    with pytest.raises(SettingsError) as raised:
        parse_environment(name, raw)
    return raised.value


def test_settings_cdk_json_environments_all_parse() -> None:
    """dev, staging, prod and demo in cdk.json are valid; prod pages someone; demo runs the demo handler."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    environments = {e.name: e for e in load_environments(context)}
    assert list(environments) == ["dev", "staging", "prod", "demo"]
    assert environments["demo"].handler == "consumer.examples.demo:handle"
    assert environments["prod"].require_paging and environments["prod"].has_subscription
    assert environments["dev"].retain_queues is False and environments["prod"].retain_queues is True


def test_settings_dev_and_demo_declare_the_notifications_dry_run() -> None:
    """dev and demo run the example without a webhook, so they declare its dry run; staging and prod do not."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
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


def test_prod_refuses_to_synth_without_paging_subscription() -> None:
    """prod must page someone, whatever require_paging says."""
    error = error_for("prod", settings(require_paging=False))
    assert error.parameter == f"{CONTEXT_KEY}.prod.paging"
    assert "needs at least one email or https subscription" in str(error)
    assert parse_environment("prod", settings(paging={"https": ["https://events.example.net/hook"]}))


def test_settings_require_paging_applies_to_any_environment() -> None:
    """Other environments can opt in to the same rule."""
    assert error_for("staging", settings(require_paging=True)).parameter == f"{CONTEXT_KEY}.staging.paging"


@pytest.mark.parametrize(
    ("overrides", "key", "rule"),
    [
        ({"min_tasks": 0}, "min_tasks", "must be between 1 and 100 (backlog-per-task scaling divides by running tasks"),
        ({"min_tasks": 101}, "min_tasks", "must be between 1 and 100"),
        ({"min_tasks": 3, "max_tasks": 2}, "max_tasks", "must be between 3 and 100 (from min_tasks)"),
        ({"cpu": 300}, "cpu", "must be one of Fargate's CPU sizes"),
        ({"cpu": 256, "memory_mib": 4096}, "memory_mib", "must be 512..2048 in steps of 512 for cpu 256"),
        ({"log_retention_days": 10}, "log_retention_days", "must be one of CloudWatch's"),
        ({"source_retention_days": 0}, "source_retention_days", "must be between 1 and 13"),
        ({"dlq_retention_days": 15}, "dlq_retention_days", "must be between 2 and 14"),
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


def test_settings_retention_checked_against_handler_contract() -> None:
    """A DLQ retention not a day above the source's fails with the setting's path."""
    error = error_for("dev", settings(source_retention_days=7, dlq_retention_days=7))
    assert error.parameter == f"{CONTEXT_KEY}.dev.dlq_retention_days"
    assert '"dlq_retention_seconds" must exceed source_retention_seconds' in str(error)
    assert error.value == 7


def test_settings_contract_applies_environment_retention() -> None:
    """The environment's retention replaces the contract's defaults; the handler's timings stay."""
    contract = parse_environment("dev", settings(source_retention_days=1, dlq_retention_days=7)).contract()
    assert (contract.source_retention_seconds, contract.dlq_retention_seconds) == (86_400, 604_800)
    assert contract.max_duration_seconds == 90


def test_settings_tickets_and_routing() -> None:
    """A ticket topic's subscribers and pages_to_tickets are read; dev in cdk.json sends its pages to tickets."""
    env = parse_environment("qa", settings(tickets={"emails": ["team@corp.io"]}, pages_to_tickets=True))
    assert (env.ticket_emails, env.ticket_https, env.pages_to_tickets) == (("team@corp.io",), (), True)
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
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


def test_settings_handler_raising_on_import_names_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler module that raises when imported fails synth in one line with the setting's path."""
    (tmp_path / "settings_raises_on_import.py").write_text('raise KeyError("DATABASE_URL")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    error = error_for("dev", settings(handler="settings_raises_on_import:handle"))
    assert str(error) == (
        f"\"{CONTEXT_KEY}.dev.handler\" names a module that raised KeyError when imported ('DATABASE_URL'):"
        " 'settings_raises_on_import:handle'"
    )
