"""Contract and settings variants: the template follows the declaration, invariants hold at synth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from consumer.contract import WorkerContract
from consumer.declaration import contract_of, load_handler
from infra.queues import WorkerQueues
from infra.worker_settings import CONTEXT_KEY, SettingsError
from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER, synthesize
from tests.reference import reference_context

ROOT = Path(__file__).resolve().parents[2]


def queue_template(contract: WorkerContract) -> Template:
    stack = cdk.Stack(cdk.App(), "QueuesOnly")
    WorkerQueues(stack, "Queues", contract=contract)
    return Template.from_stack(stack)


def source_queue(template: Template) -> dict[str, Any]:
    queues = template.find_resources("AWS::SQS::Queue")
    (source,) = [q["Properties"] for q in queues.values() if "RedrivePolicy" in q["Properties"]]
    return source


@pytest.mark.parametrize(
    ("handler", "visibility", "max_receives"),
    [
        ("consumer.examples.notifications:handle", 100, 7),
        ("tests.infra.handlers:five_minutes", 330, 5),
        ("tests.infra.handlers:two_hours", 900, 7),
        ("tests.reference:report_job", 660, 7),  # a handler outside the framework's package
    ],
)
def test_visibility_changes_with_declared_max_duration(handler: str, visibility: int, max_receives: int) -> None:
    """90 s -> 100 s, 5 min -> 330 s, 2 h -> the 900 s heartbeat lease; the redrive backstop follows max receives."""
    source = source_queue(queue_template(contract_of(load_handler(handler))))
    assert source["VisibilityTimeout"] == visibility
    assert source["RedrivePolicy"]["maxReceiveCount"] == max_receives


def test_fifo_contract_gives_a_fifo_pair() -> None:
    """A FIFO declaration makes both queues FIFO, with content-based deduplication."""
    template = queue_template(contract_of(load_handler("tests.infra.handlers:ordered")))
    for queue in template.find_resources("AWS::SQS::Queue").values():
        props = queue["Properties"]
        assert props["FifoQueue"] is True and props["ContentBasedDeduplication"] is True
        assert props["QueueName"].endswith(".fifo")


def test_invariants_checked_at_synth_catch_an_escape_hatch() -> None:
    """Overriding the L1 visibility or retention behind the contract's back fails synth."""
    app = cdk.App()
    stack = cdk.Stack(app, "Tampered")
    queues = WorkerQueues(stack, "Queues", contract=WorkerContract(max_duration_seconds=90))
    queues.queue.node.default_child.visibility_timeout = 30
    queues.queue.node.default_child.message_retention_period = 14 * 86_400
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    message = str(raised.value)
    assert "source visibility timeout is 30 s but the worker contract derives 100 s" in message
    assert "DLQ retention (1209600 s) must exceed the source queue's (1209600 s)" in message


def test_existing_vpc_and_cluster_are_used_without_lookups(tmp_path: Path) -> None:
    """With vpc and cluster_name in cdk.json, no VPC or cluster is created and synth stays offline; the existing VPC's
    default security group is its owner's: nothing strips it (restrictDefaultSecurityGroup acts on created VPCs)."""
    context = {
        CONTEXT_KEY: {"shared": {"handler": "consumer.examples.notifications:handle", **EXISTING_VPC_AND_CLUSTER}}
    }
    env = synthesize(tmp_path, context)["shared"]
    env.template.resource_count_is("AWS::EC2::VPC", 0)
    env.template.resource_count_is("AWS::ECS::Cluster", 0)
    env.template.resource_count_is("Custom::VpcRestrictDefaultSG", 0)
    env.template.resource_count_is("AWS::Lambda::Function", 0)
    (service,) = env.resources("AWS::ECS::Service").values()
    assert service["Properties"]["Cluster"] == "platform"
    subnets = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"]
    assert subnets == EXISTING_VPC_AND_CLUSTER["vpc"]["private_subnet_ids"]


def test_a_handler_outside_the_framework_synthesizes_nag_clean(tmp_path: Path) -> None:
    """An environment may deploy a handler of a package of the team's own (as workers.<module>:<function>): its
    own declaration sets the task's stop timeout, and the service runs it by name from the shared image."""
    context = {CONTEXT_KEY: {"team": {"handler": "tests.reference:report_job"}}}
    env = synthesize(tmp_path, context)["team"]
    (task,) = env.resources("AWS::ECS::TaskDefinition").values()
    (container,) = task["Properties"]["ContainerDefinitions"]
    environment = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert environment["CONSUMER_HANDLER"] == "tests.reference:report_job"
    assert (environment["CONSUMER_MAX_DURATION_SECONDS"], container["StopTimeout"]) == ("600", 120)


def test_handler_environment_cannot_override_the_binding(tmp_path: Path) -> None:
    """handler_environment may add variables but never replace the contract's or the queue binding."""
    context = {
        CONTEXT_KEY: {
            "dev": {
                "handler": "consumer.examples.notifications:handle",
                "handler_environment": {"QUEUE_URL": "https://elsewhere"},
            }
        }
    }
    with pytest.raises(SettingsError) as raised:
        synthesize(tmp_path, context)
    assert str(raised.value) == (
        f"\"{CONTEXT_KEY}.dev.handler_environment\" must not set variables the stack writes itself: 'QUEUE_URL'"
    )


def test_nag_reports_zero_open_findings_with_reasoned_acknowledgements(tmp_path: Path) -> None:
    """The real app passes AwsSolutions; exactly three findings are acknowledged, each with its reason. `-c env=prod`
    (not the first environment, so the selection shows) synthesizes prod's stack alone."""
    from infra.report import nag_results

    env = synthesize(tmp_path, {**reference_context(), "env": "prod"})["prod"]
    assert [p.name for p in tmp_path.glob("*.template.json")] == [f"{env.stack.stack_name}.template.json"]
    open_findings, acknowledged = nag_results(tmp_path, env.stack.stack_name)
    assert open_findings == []
    rules = [rule.split("[")[0] for rule, _ in acknowledged]
    assert rules == ["AwsSolutions-ECS2", "AwsSolutions-IAM5", "AwsSolutions-IAM5"]
    assert any(rule.endswith("[Resource::*]") for rule, _ in acknowledged)
    assert any(":task/<Cluster" in rule for rule, _ in acknowledged)
    assert all(len(reason) >= 40 for _, reason in acknowledged)


def test_nag_fails_synth_without_the_acknowledgements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cdk-nag really runs on the stack: dropping the acknowledgements makes synth fail on them."""
    import infra.worker  # the acknowledgements are made per worker

    monkeypatch.setattr(infra.worker, "acknowledge", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        synthesize(tmp_path, {**reference_context(), "env": "dev"})
    report = (tmp_path / "validation-report.json").read_text()
    for rule in ("AwsSolutions-ECS2", "AwsSolutions-IAM5"):
        assert rule in report


def test_acknowledgement_needs_a_real_reason() -> None:
    """A placeholder reason is refused before it reaches cdk-nag."""
    from infra.nag import acknowledge

    with pytest.raises(ValueError, match='"reason" must be at least 40 characters'):
        acknowledge(cdk.Stack(), "AwsSolutions-IAM5", "ok")


def test_unknown_environment_fails_synth_with_a_clear_message(tmp_path: Path) -> None:
    """-c env=qa names the environments that exist."""
    with pytest.raises(
        Exception, match=r"\"env\" must be one of the environments in cdk.json \(dev, staging, prod, demo\): 'qa'"
    ):
        synthesize(tmp_path, {**reference_context(), "env": "qa"})


def test_an_environment_with_its_account_and_region_synthesizes_nag_clean(tmp_path: Path) -> None:
    """With a concrete account and region, cdk-nag spells them literally in the task-protection finding's id, and the
    acknowledgement follows; before, only an environment-agnostic stack passed (an open finding fails the synth)."""
    environment = {
        "handler": "consumer.examples.notifications:handle",
        "handler_environment": {"NOTIFY_DRY_RUN": "true"},
        "account": "123456789012",
        "region": "eu-west-1",
    }
    (env,) = synthesize(tmp_path, {CONTEXT_KEY: {"qa": environment}, "env": "qa"}).values()
    assert (env.stack.account, env.stack.region) == ("123456789012", "eu-west-1")
