"""The README and its reference stay true: the configuration table is the code's, the commands are the ones CI runs."""

from __future__ import annotations

from pathlib import Path

from consumer.declaration import contract_of, load_handler
from infra.report import EXAMPLE_HANDLER, formula_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# The reference a newcomer does not need first lives in docs/; the README links it.
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def test_configuration_table_is_generated_from_the_contract() -> None:
    """docs/configuration.md holds exactly what `python -m infra.report --markdown` prints."""
    assert formula_table(contract_of(load_handler(EXAMPLE_HANDLER))) in CONFIGURATION


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command, `make test`, then the image builds the README names
    (`make test-images`) after providing their container engine."""
    assert "make test   #" in README and "make run    #" in README and "make test-images" in README
    commands = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert commands == ["make test", "source .ci/container-engine", "make test-images"]


def test_readme_fits_in_ten_kilobytes() -> None:
    """The README is the one page a new user reads first: what it is, `make run` and `make test`, what you get and
    where to go next, at most 10 KB; detail lives in docs/ and the evidence in docs/evidence/."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 10 * 1024, f"README.md is {size} bytes, over 10,240: move detail to the docs page it belongs in"


def test_the_longest_modules_first_are_modules_of_the_suite() -> None:
    """tests/conftest.py's LONGEST_FIRST names test modules that exist (a renamed one would silently fall back to
    pytest-xdist's order), each once."""
    from tests.conftest import LONGEST_FIRST

    assert [path for path in LONGEST_FIRST if not (ROOT / path).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
