"""The bill reads what the stack deploys: the template reader (consumer/local/bill.py) gives, for a synthesized
environment, the plan its cdk.json settings describe (tests/unit/test_bill.py prices that plan by hand); and
docs/targets.md holds what ``python -m consumer local targets`` prints for the shipped example."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer.local.bill import EnvironmentPlan, load_environments
from consumer.local.targets_docs import markdown
from infra.settings import parse_environment
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import EXISTING_VPC_AND_CLUSTER, Synthesized, synthesize
from tests.unit.support import ENVIRONMENT, ORDERED, plan_of

#: The unit test's two workers (arm64 at two tasks; x86_64 with Spot beyond one on-demand task, at three), a FIFO
#: worker in the one-worker form that scales to zero, one without NAT (its tasks in public subnets) and traced (two
#: containers a task), and one in an existing VPC and cluster.
ENVIRONMENTS = {
    "test": ENVIRONMENT,
    "zero": {"handler": ORDERED, "min_tasks": 0, "max_tasks": 2, "nat_gateways": 2},
    "nonat": {"handler": ORDERED, "nat_gateways": 0, "tracing": {"sample_ratio": 0.1}},
    "existing": {"handler": ORDERED, **EXISTING_VPC_AND_CLUSTER},
}


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's environments, synthesized once (cdk-nag included)."""
    path = tmp_path_factory.mktemp("cdk.out")
    synthesize(path, {CONTEXT_KEY: ENVIRONMENTS})
    return path


@pytest.fixture(scope="module")
def plans(outdir: Path) -> dict[str, EnvironmentPlan]:
    return {plan.environment: plan for plan in load_environments(outdir)}


@pytest.mark.parametrize("name", sorted(ENVIRONMENTS))
def test_bill_reads_each_worker_as_its_settings_describe_it(plans: dict[str, EnvironmentPlan], name: str) -> None:
    """Tasks at min_tasks, CPU, memory, architecture, the Spot strategy, the handler and its contract: from the
    template, equal to the settings'."""
    expected = plan_of(parse_environment(name, ENVIRONMENTS[name]))

    assert plans[name].workers == expected.workers


@pytest.mark.parametrize(("name", "nat_gateways"), [("test", 1), ("zero", 2), ("nonat", 0), ("existing", 0)])
def test_bill_counts_the_environment_s_nat_gateways_and_their_addresses(
    plans: dict[str, EnvironmentPlan], name: str, nat_gateways: int
) -> None:
    """One NAT gateway per ``nat_gateways``, each with its public IPv4 address."""
    assert (plans[name].nat_gateways, plans[name].public_ipv4) == (nat_gateways, nat_gateways)


def test_bill_reads_where_the_tasks_run_and_their_containers(plans: dict[str, EnvironmentPlan]) -> None:
    """Tasks without NAT run with a public IP; a traced task has two containers; behind NAT or in an existing VPC, no
    public IP."""
    found = {name: [(w.public_ip, w.containers) for w in plan.workers] for name, plan in plans.items()}

    assert found == {
        "test": [(False, 1), (False, 1)],
        "zero": [(False, 1)],
        "nonat": [(True, 2)],
        "existing": [(False, 1)],
    }


def test_bill_counts_container_insights_on_the_cluster_the_stack_creates(plans: dict[str, EnvironmentPlan]) -> None:
    """Container Insights is counted where the stack creates the cluster with it; an existing cluster's is unknown."""
    assert {name: plan.container_insights for name, plan in plans.items()} == {
        "test": True,
        "zero": True,
        "nonat": True,
        "existing": False,
    }


def test_bill_counts_every_alarm_metric_composite_dashboard_and_key(plans: dict[str, EnvironmentPlan]) -> None:
    """Each alarm is billed for at least one metric; composites, the dashboard and the key are counted."""
    plan = plans["zero"]

    assert plan.alarm_metrics > 0
    assert plan.high_resolution_alarm_metrics == 0  # SQS publishes one-minute metrics: no alarm looks closer
    assert (plan.composite_alarms > 0, plan.dashboards, plan.kms_keys) == (True, 1, 1)


def test_shipped_example_targets_doc_holds_what_local_targets_prints(reference: dict[str, Synthesized]) -> None:
    """docs/targets.md holds exactly what `python -m consumer local targets --environment prod` prints for prod as
    cdk.json shipped it (a test of the shipped example: the reference environments, whatever cdk.json became)."""
    assert markdown(reference["prod"].outdir, "prod") in (ROOT / "docs" / "targets.md").read_text()


def test_local_targets_refuses_an_environment_without_a_stack(reference: dict[str, Synthesized]) -> None:
    """An environment cdk.out has no stack for is one line naming the parameter, the rule and the value."""
    outdir = reference["prod"].outdir

    with pytest.raises(ValueError) as raised:
        markdown(outdir, "qa")

    assert str(raised.value) == f'"environment" must name a stack in {outdir}: qa'
