"""Every runbook link in an alarm description points at a heading that exists in docs/runbook.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.infra.checks import wake_up_alarms
from tests.infra.conftest import Synthesized

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
LINK = re.compile(r"Runbook: (\S+)#([a-z0-9-]+)$")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def anchors() -> set[str]:
    return {slug(line.lstrip("#")) for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")}


def descriptions(env: Synthesized) -> dict[str, str]:
    return {
        logical_id: resource["Properties"]["AlarmDescription"]
        for logical_id, resource in env.json["Resources"].items()
        if resource["Type"] in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
    }


def test_runbook_slug_matches_githubs_anchor_rule() -> None:
    """'DLQ new arrivals' becomes #dlq-new-arrivals, as GitHub renders it."""
    assert slug(" DLQ new arrivals") == "dlq-new-arrivals"
    assert slug("Consumer: stalled!") == "consumer-stalled"


def test_every_alarm_links_to_an_existing_runbook_section(reference: dict[str, Synthesized]) -> None:
    """Each alarm description ends with `Runbook: docs/runbook.md#<section>`, and that section exists."""
    sections = anchors()
    for env in reference.values():
        for logical_id, text in descriptions(env).items():
            link = LINK.search(text)
            assert link is not None, f"{env.stack.stack_name} {logical_id} has no runbook link: {text!r}"
            assert link.group(1) == "docs/runbook.md"
            assert link.group(2) in sections, f"{logical_id} links to #{link.group(2)}, not a heading of {RUNBOOK}"


def test_the_wake_up_alarm_links_the_step_that_covers_it(reference: dict[str, Synthesized]) -> None:
    """The wake-up alarm pages nobody, but whoever finds it in ALARM gets to consumer-stalled's wake-up step."""
    linked = {
        LINK.search(descriptions(env)[logical_id]).group(2)  # type: ignore[union-attr]
        for env in reference.values()
        for logical_id in wake_up_alarms(env)
    }
    assert linked == {"consumer-stalled"}
    assert "A worker that scales to zero (`min_tasks: 0`) did not wake up." in RUNBOOK.read_text()


def test_every_paging_alarm_has_its_own_runbook_section(prod: Synthesized) -> None:
    """The six alarms that notify someone each have a section: depth, new arrivals, age, backlog, stalled, downstream."""
    linked = {LINK.search(descriptions(prod)[prod.logical_id(a)]).group(2) for a in prod.stack.alarms.paging_alarms}
    assert (
        linked
        == {
            "dlq-depth",
            "dlq-new-arrivals",
            "dlq-expiring",
            "backlog-age",
            "consumer-stalled",
            "downstream-unavailable",
        }
        <= anchors()
    )


def test_composite_inputs_link_their_composites_section(prod: Synthesized) -> None:
    """An input alarm (no actions) links the section of the composite it feeds: DlqExpiring's #dlq-expiring, which exists."""
    text = descriptions(prod)
    linked = {LINK.search(text[prod.logical_id(a)]).group(2) for a in prod.stack.alarms.dlq_expiring_inputs}
    assert linked == {"dlq-expiring"} <= anchors()
    stalled = {LINK.search(text[prod.logical_id(a)]).group(2) for a in prod.stack.alarms.stalled_inputs}
    assert stalled == {"consumer-stalled"} <= anchors()


def test_alarm_descriptions_name_the_first_commands(prod: Synthesized) -> None:
    """DLQ alarms say which `python -m consumer dlq` command to run first, for this stack."""
    text = descriptions(prod)
    for alarm in (prod.stack.alarms.dlq_depth, prod.stack.alarms.dlq_new_arrivals):
        assert "python -m consumer dlq peek --stack SqsWorker-prod" in text[prod.logical_id(alarm)]
    assert (
        "python -m consumer dlq export --stack SqsWorker-prod" in text[prod.logical_id(prod.stack.alarms.dlq_expiring)]
    )


def test_alarm_descriptions_fit_cloudwatchs_limit(reference: dict[str, Synthesized]) -> None:
    """AlarmDescription holds at most 1,024 characters."""
    for env in reference.values():
        for logical_id, text in descriptions(env).items():
            assert len(text) <= 1024, logical_id
