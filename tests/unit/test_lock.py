"""`make lock` (consumer/local/lock.py): a team pin that conflicts with a lock it is resolved under is one short
message naming both pins and their files, directly (without the network) or from pip-compile's resolver output
(captured from pip-tools 7.6.2 with pip 23.2.1 in tests/unit/resolver_output/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from consumer.local.lock import (
    EXAMPLES_LOCK,
    FRAMEWORK_LOCK,
    STAGES,
    Conflict,
    direct_conflicts,
    failure_message,
    resolver_conflicts,
    transitive_message,
)

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = Path(__file__).parent / "resolver_output"
TEAM = STAGES[2]
#: A framework lock and an examples lock of this test's own (pip-compile's layout: a pin, its hashes, its "via").
LOCKS = {
    FRAMEWORK_LOCK: "boto3==1.44.5 \\\n    --hash=sha256:00\n    # via -r requirements.txt\n"
    "botocore==1.44.5 \\\n    --hash=sha256:01\n    # via boto3\nurllib3==2.8.0 \\\n    --hash=sha256:02\n",
    EXAMPLES_LOCK: "jsonschema==4.26.0 \\\n    --hash=sha256:03\n"
    'typing-extensions==4.16.0 ; python_version < "3.13" \\\n    --hash=sha256:04\n',
}


def layout(tmp_path: Path, team: str) -> Path:
    """A repository root with the locks above and the team's requirements.txt ``team``."""
    for lock, text in LOCKS.items():
        (tmp_path / lock).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / lock).write_text(text)
        (tmp_path / lock).with_suffix(".txt").write_text("")
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers/requirements.txt").write_text(team)
    return tmp_path


def test_direct_conflict_names_both_pins_their_files_and_what_to_do(tmp_path: Path) -> None:
    """boto3==1.40.0 in the team's file against the framework's boto3==1.44.5: one line, both sides, the way out."""
    root = layout(tmp_path, "# the team's\nJinja2==3.1.6\nboto3==1.40.0  # pinned for a reason\n")
    assert direct_conflicts(TEAM, root) == [
        "make lock: workers/requirements.txt pins boto3==1.40.0 (line 3) but consumer/requirements.lock (the"
        " framework's lock, a constraint for the team's) pins boto3==1.44.5: pin boto3==1.44.5 or remove the line"
        " (the lock decides it), since the image installs both locks in one pip call; for another boto3, change"
        " consumer/requirements.txt (its pins), then make lock"
    ]


def test_direct_conflict_reads_ranges_names_and_the_examples_lock(tmp_path: Path) -> None:
    """A range the lock's version is outside of, a name spelled otherwise, a pin of the examples' lock: each named;
    a pin the lock agrees with, or one for another interpreter, is not a conflict."""
    team = 'BotoCore>=1.45\njsonschema==4.17.0\nurllib3==2.8.0\nboto3<1.40 ; python_version < "3.0"\nrequests==2.32.3\n'
    lines = direct_conflicts(TEAM, layout(tmp_path, team))
    assert [line.split(" but ")[0] for line in lines] == [
        "make lock: workers/requirements.txt asks for BotoCore>=1.45 (line 1)",
        "make lock: workers/requirements.txt pins jsonschema==4.17.0 (line 2)",
    ]
    assert (
        "but consumer/examples/requirements.lock (the example handlers' lock, in the same image, a constraint"
        in (lines[1])
    )


def test_the_shipped_requirements_agree_with_the_locks_they_are_resolved_under() -> None:
    """Whatever a team pinned in workers/requirements.txt: no direct conflict with the repository's locks (else make
    lock refuses, and the image's one pip install would)."""
    assert [line for stage in STAGES for line in direct_conflicts(stage, ROOT)] == []


@pytest.mark.parametrize(
    ("captured", "conflicts"),
    [
        ("awscli-needs-another-botocore.txt", [Conflict("botocore==1.34.0", ("awscli", "1.32.0"))]),
        ("requests-extras-needs-another-urllib3.txt", [Conflict("urllib3<1.27,>=1.21.1", ("requests", "2.29.0"))]),
        (
            "team-pins-conflict-among-themselves.txt",
            [Conflict("idna==2.0", None), Conflict("idna<4,>=2.5", ("requests", "2.29.0"))],
        ),
        ("direct-pin-against-the-lock.txt", [Conflict("boto3==1.40.0", None)]),
    ],
)
def test_resolver_conflicts_are_read_from_pip_compiles_output(captured: str, conflicts: list[Conflict]) -> None:
    """The requirement pip could not satisfy and the distribution that needs it (a wheel, or one inside an extras
    candidate), from the ResolutionImpossible line among the traceback."""
    assert resolver_conflicts((OUTPUT / captured).read_text()) == conflicts


def test_transitive_conflict_names_the_lock_pin_and_what_requires_the_other_version(tmp_path: Path) -> None:
    """awscli 1.32.0 (the team's line) needs botocore==1.34.0, the framework's lock pins 1.44.5: one line."""
    root = layout(tmp_path, "Jinja2==3.1.6\nawscli==1.32.0\n")
    output = (OUTPUT / "awscli-needs-another-botocore.txt").read_text()
    assert len(output.splitlines()) > 50  # what the user saw before
    assert failure_message(TEAM, root, output) == (
        "make lock: awscli 1.32.0 (workers/requirements.txt line 2: awscli==1.32.0) requires botocore==1.34.0, but"
        " consumer/requirements.lock (the framework's lock, a constraint for the team's) pins botocore==1.44.5: choose"
        " a version of awscli that accepts botocore 1.44.5, or drop awscli; for another botocore, change"
        " consumer/requirements.txt (its pins), then make lock"
    )


def test_transitive_conflict_through_extras_and_among_the_teams_own_pins(tmp_path: Path) -> None:
    """requests[socks] needs an urllib3 the framework's lock does not hold; requests needs an idna the team pinned
    otherwise (no lock involved): each named with its side."""
    extras = transitive_message(
        TEAM,
        layout(tmp_path, "requests[socks]==2.29.0\n"),
        (OUTPUT / "requests-extras-needs-another-urllib3.txt").read_text(),
    )
    assert extras is not None and extras.startswith(
        "make lock: requests 2.29.0 (workers/requirements.txt line 1: requests[socks]==2.29.0) requires"
        " urllib3<1.27,>=1.21.1, but consumer/requirements.lock (the framework's lock, a constraint for the team's)"
        " pins urllib3==2.8.0: "
    )
    (tmp_path / "workers/requirements.txt").write_text("requests==2.29.0\nidna==2.0\n")
    own = transitive_message(TEAM, tmp_path, (OUTPUT / "team-pins-conflict-among-themselves.txt").read_text())
    assert own == (
        "make lock: requests 2.29.0 (workers/requirements.txt line 1: requests==2.29.0) requires idna<4,>=2.5, but"
        " workers/requirements.txt pins idna==2.0 (line 2): change one of the two"
    )


def test_an_unplaced_failure_is_pips_error_line_and_the_command_for_the_rest(tmp_path: Path) -> None:
    """Output naming no conflict against a lock or a team pin: pip's ERROR line, not its traceback, and how to see it."""
    root = layout(tmp_path, "boto3==1.44.5\n")
    message = failure_message(TEAM, root, (OUTPUT / "direct-pin-against-the-lock.txt").read_text())
    assert message == (
        "make lock: pip-compile could not resolve workers/requirements.txt under consumer/requirements.lock,"
        " consumer/examples/requirements.lock: ERROR: Cannot install boto3==1.40.0 because these package versions"
        " have conflicting dependencies. (pip's whole output: cd workers && python -m piptools compile --quiet"
        " --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links"
        " --constraint=../consumer/requirements.lock --constraint=../consumer/examples/requirements.lock"
        " --output-file requirements.lock requirements.txt)"
    )


def test_make_lock_stops_at_a_direct_conflict_before_resolving_anything(tmp_path: Path) -> None:
    """`python -m consumer.local.lock` (what `make lock` runs): exit 2 and the one line, offline, no lock touched."""
    root = layout(tmp_path, "boto3==1.40.0\n")
    before = {lock: (root / lock).read_text() for lock in LOCKS}
    done = subprocess.run(
        [sys.executable, "-m", "consumer.local.lock", "--root", str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [direct_conflicts(TEAM, root)[0]]
    assert {lock: (root / lock).read_text() for lock in LOCKS} == before and not (
        root / "workers/requirements.lock"
    ).exists()
