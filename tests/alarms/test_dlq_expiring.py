"""DlqExpiring pages only for a message really at risk of expiring: never for a trickle of fresh poison messages into
a DLQ drained every day, always a day ahead for a message held that long, whatever the operator's reads did to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.alarms.catalogue import Outcome, run_catalogue
from infra.alarms.definitions import ALARM
from infra.alarms.scenarios import CATALOGUE, Scenario, _dlq_messages
from infra.alarms.world import DAY, HOUR, MINUTE, Timeline, World
from infra.settings import EnvironmentSettings, load_environments
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import synthesize
from tests.reference import NOTIFICATIONS

#: One worker always awake, a day of source retention and a week of DLQ retention: DlqExpiring at 3 days.
CONTEXT = {
    CONTEXT_KEY: {
        "expiry": {
            "handler": NOTIFICATIONS,
            "min_tasks": 1,
            "max_tasks": 2,
            "source_retention_days": 1,
            "dlq_retention_days": 7,
        }
    }
}
STACK = "SqsWorker-expiry"


@pytest.fixture(scope="module")
def expiry(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, EnvironmentSettings]:
    """The worker's synthesized template and its settings, once for the module."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    synthesize(outdir, CONTEXT)
    (environment,) = load_environments(CONTEXT)
    return outdir / f"{STACK}.template.json", environment


def run(expiry: tuple[Path, EnvironmentSettings], *scenarios: Scenario) -> list[Outcome]:
    return run_catalogue(*expiry, scenarios)


def catalogued(name: str) -> Scenario:
    (found,) = [s for s in CATALOGUE if s.name == name]
    return found


def pages(outcome: Outcome, alarm: str) -> list[float]:
    """Minutes after the onset of each notification of ``alarm`` going to ALARM."""
    return [n["minutes"] for n in outcome.row()["notifications"] if n["alarm"] == alarm and n["to"] == ALARM]


def test_dlq_expiring_never_pages_on_a_trickle_drained_every_morning(
    expiry: tuple[Path, EnvironmentSettings],
) -> None:
    """One poison an hour for a week, the DLQ emptied every morning: no message is ever a day old, so DlqExpiring
    never pages (the DLQ held a message in every hour, which is what paged before); DlqDepth pages at once."""
    (outcome,) = run(expiry, catalogued("dlq-trickle"))
    assert pages(outcome, "DlqExpiring") == []
    assert pages(outcome, "DlqDepth")[0] <= 2
    assert outcome.problems == []


@pytest.mark.parametrize("name", ["dlq-untouched", "dlq-inspected", "backstop-move"])
def test_dlq_expiring_still_pages_a_day_before_a_held_message_expires(
    expiry: tuple[Path, EnvironmentSettings], name: str
) -> None:
    """A message left in the DLQ (untouched, read three times, or moved by SQS's backstop near the source's
    retention) pages by the time dlq_age_alarm_seconds has passed, a day or more before it can expire."""
    (outcome,) = run(expiry, catalogued(name))
    (environment,) = load_environments(CONTEXT)
    threshold_minutes = environment.contract(environment.workers[0]).dlq_age_alarm_seconds / MINUTE
    assert 0 < pages(outcome, "DlqExpiring")[0] <= threshold_minutes
    assert outcome.problems == []


def leased_every_day(world: World) -> Timeline:
    """One poison message left in the DLQ; every day the operator polls it in the console, which holds it for the
    lease (30 s) across a minute's end, so some of that hour's samples count it in flight and none visible."""
    facts = world.facts
    onset = 30 * MINUTE
    retention = facts.contract.dlq_retention_seconds
    end = onset + retention + 2 * HOUR
    world.set_tasks(0, facts.awake_tasks)
    world.steady(0, end, 0.2)
    (moved,) = _dlq_messages(world, onset, 1)
    for day in range(retention // DAY):
        world.dlq_read(onset + day * DAY + 3 * HOUR + 45, [moved], release=False)
    return Timeline(onset=onset, end=end, expiries=[onset + 2 + retention])


def test_dlq_expiring_pages_a_message_the_operator_leases_every_day(expiry: tuple[Path, EnvironmentSettings]) -> None:
    """A daily read that leaves the message in flight across a sample is still a message held: the hourly rule
    counts the most in flight, so each read's hour stays held and the page comes a day before the expiry (the age
    metric is blind from the third read on, and the least in flight would drop every read's hour)."""
    scenario = Scenario(
        "dlq-leased",
        "a DLQ message polled in the console every day",
        "modeled",
        True,
        leased_every_day,
        ("DlqDepth", "DlqExpiring"),
    )
    (outcome,) = run(expiry, scenario)
    assert pages(outcome, "DlqExpiring") != []
    assert outcome.problems == []
