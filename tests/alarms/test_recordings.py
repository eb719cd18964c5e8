"""The recorded runs the evaluator reads (``infra/alarms/recordings/``, made by the lab's ``python -m
bench.alarm_recording``; its own tests are tests/integration/test_alarm_recording.py): each reads back event for
event, and the catalogue's recorded scenarios and the stored files name each other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.alarms.catalogue import RECORDINGS
from infra.alarms.scenarios import CATALOGUE
from tests.alarms.recordings import check_document

STORED = sorted(RECORDINGS.glob("*.json"))


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.stem)
def test_a_stored_recording_round_trips_through_sqs_event(path: Path) -> None:
    """Each recording reads back event for event, as the recorder wrote it."""
    check_document(json.loads(path.read_text()), path.stem)


def test_every_recorded_scenario_has_its_recording_and_every_recording_a_scenario() -> None:
    recorded = {scenario.recording for scenario in CATALOGUE if scenario.source == "recorded"}
    assert None not in recorded
    assert sorted(p.stem for p in STORED) == sorted(recorded)
