"""``make lock``: resolve the image's three locks in order, and say a conflict with the framework's lock in one line.

The image installs ``consumer/requirements.lock`` (the framework's runtime), ``consumer/examples/requirements.lock``
(the example handlers') and ``workers/requirements.lock`` (the team's) in one ``pip install --require-hashes``,
so the three must agree: each handler lock is resolved by pip-tools under the locks before it (``--constraint``).
A team pin that disagrees with one of them made pip-compile end in about 60 lines of resolver traceback that never
named the framework's lock as the other side. Here:

* before each resolution, a check without the network compares every requirement of the ``requirements.txt`` with
  the versions its constraint locks hold (a direct conflict: ``boto3==1.40.0`` against the framework's
  ``boto3==1.44.5``), and names both pins and their files;
* when pip-compile still fails, its resolver output is read for what conflicted (:func:`resolver_conflicts`: the
  requirement, and the package that needs it), and the message names the lock pin it conflicts with and what
  requires the other version (a transitive conflict: the team's ``awscli==1.32.0`` needs ``botocore==1.34.0``);
  anything else it cannot read is its ``ERROR`` line and the command that shows pip's whole output.

Development tooling (pip-tools is installed by ``make lock`` itself; ``packaging`` comes with it), not in the image.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from consumer.exit_codes import ExitCode

#: pip-compile's options for every lock (hashes for --require-hashes, no index URL or find-links in the file).
COMPILE_OPTIONS = (
    "--quiet",
    "--generate-hashes",
    "--allow-unsafe",
    "--strip-extras",
    "--no-emit-index-url",
    "--no-emit-find-links",
)
FRAMEWORK_LOCK, EXAMPLES_LOCK = "consumer/requirements.lock", "consumer/examples/requirements.lock"
#: What each lock is, in a message.
LOCK_ROLES = {FRAMEWORK_LOCK: "the framework's lock", EXAMPLES_LOCK: "the example handlers' lock, in the same image"}


@dataclass(frozen=True)
class Stage:
    """One ``requirements.txt`` resolved into the lock beside it, under the locks ``constraints`` (paths from the
    repository root); ``whose``: whose requirements they are, in a message."""

    requirements: str
    constraints: tuple[str, ...]
    whose: str

    @property
    def lock(self) -> str:
        return self.requirements.removesuffix(".txt") + ".lock"


#: The image's locks in the order each is resolved under the ones before it.
STAGES = (
    Stage("consumer/requirements.txt", (), "the framework's"),
    Stage("consumer/examples/requirements.txt", (FRAMEWORK_LOCK,), "the examples'"),
    Stage("workers/requirements.txt", (FRAMEWORK_LOCK, EXAMPLES_LOCK), "the team's"),
)


@dataclass(frozen=True)
class Pin:
    """A requirement as written in a file: its name, what it asks for, and where."""

    name: str  # canonical (PEP 503)
    text: str  # as written: boto3==1.40.0
    path: str
    line: int


def locked(path: Path, shown: str) -> dict[str, Pin]:
    """Every ``name==version`` entry of a pip-compile lock, by canonical name."""
    pins = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            name = canonicalize_name(match.group(1))
            pins[name] = Pin(name, f"{match.group(1)}=={match.group(2)}", shown, number)
    return pins


def requirements(path: Path, shown: str) -> list[tuple[Pin, Requirement]]:
    """The requirements of a ``requirements.txt``, each with where it is written (options and comments skipped; a
    line pip would refuse is left to pip-compile, which says so)."""
    found = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = re.sub(r"(^|\s)#.*$", "", raw).strip().rstrip("\\").strip()
        if not text or text.startswith("-"):
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        found.append((Pin(canonicalize_name(requirement.name), text, shown, number), requirement))
    return found


def _version(pin: Pin) -> str:
    return pin.text.partition("==")[2]


def _admits(requirement: Requirement, version: str) -> bool:
    """Whether ``requirement`` accepts ``version`` (prereleases too: a lock may hold one)."""
    if requirement.marker is not None and not requirement.marker.evaluate():
        return True  # not for this interpreter: nothing to agree on
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True  # not a version this check can compare: pip-compile decides


def _lock_side(pin: Pin, stage: Stage) -> str:
    role = LOCK_ROLES.get(pin.path, "a lock")
    return f"{pin.path} ({role}, a constraint for {stage.whose}) pins {pin.text}"


def _advice(name: str, pin: Pin) -> str:
    return (
        f"pin {pin.text} or remove the line (the lock decides it), since the image installs both locks in one pip"
        f" call; for another {name}, change {pin.path.removesuffix('.lock')}.txt (its pins), then make lock"
    )


def direct_conflicts(stage: Stage, root: Path) -> list[str]:
    """One line per requirement of ``stage`` that a constraint lock's version does not satisfy (no network)."""
    locks: dict[str, Pin] = {}
    for constraint in reversed(stage.constraints):  # the framework's lock named first when both hold it
        locks |= locked(root / constraint, constraint)
    lines = []
    for pin, requirement in requirements(root / stage.requirements, stage.requirements):
        lock = locks.get(pin.name)
        if lock is None or _admits(requirement, _version(lock)):
            continue
        verb = "pins" if str(requirement.specifier).startswith("==") else "asks for"
        lines.append(
            f"make lock: {pin.path} {verb} {pin.text} (line {pin.line}) but {_lock_side(lock, stage)}:"
            f" {_advice(requirement.name, lock)}"
        )
    return lines


@dataclass(frozen=True)
class Conflict:
    """One requirement pip's resolver could not satisfy (``SpecifierRequirement('urllib3<1.27,>=1.21.1')``), and
    the distribution that needs it (None: a requirement given to pip-compile itself)."""

    requirement: str
    parent: tuple[str, str] | None  # (name, version)


_INFORMATION = "RequirementInformation(requirement=SpecifierRequirement('"
#: A distribution's file in a candidate's repr: ``.../requests-2.29.0-py3-none-any.whl`` or an sdist.
_DISTRIBUTION = re.compile(r"/(?P<name>[A-Za-z0-9][A-Za-z0-9._]*)-(?P<version>[^-/]+?)(?:-[^/]*\.whl|\.tar\.gz|\.zip)")


def resolver_conflicts(output: str) -> list[Conflict]:
    """What pip's resolver reported it could not satisfy, from pip-compile's output: the ``ResolutionImpossible``
    list of ``RequirementInformation`` (pip 23's repr), each parent named from its file's URL (a ``LinkCandidate``,
    or one inside an ``ExtrasCandidate``)."""
    line = next((line for line in output.splitlines() if "ResolutionImpossible: [" + _INFORMATION in line), "")
    conflicts = []
    for chunk in line.split(_INFORMATION)[1:]:
        requirement, _, rest = chunk.partition("')")
        parent = None if rest.startswith(", parent=None") else _DISTRIBUTION.search(rest)
        name = (canonicalize_name(parent.group("name")), parent.group("version")) if parent else None
        conflicts.append(Conflict(requirement, name))
    return conflicts


def transitive_message(stage: Stage, root: Path, output: str) -> str | None:
    """The lines naming, for each conflict pip-compile reported, the lock pin it breaks (or the team's own pin) and
    the package that requires the other version; None when the output names no conflict this can place."""
    locks: dict[str, Pin] = {}
    for constraint in reversed(stage.constraints):
        locks |= locked(root / constraint, constraint)
    own = {pin.name: pin for pin, _ in requirements(root / stage.requirements, stage.requirements)}
    lines = []
    for conflict in resolver_conflicts(output):
        try:
            needed = Requirement(conflict.requirement)
        except InvalidRequirement:
            continue
        name = canonicalize_name(needed.name)
        if conflict.parent is None:
            continue  # the top-level side: the pre-check has named it if a lock holds it
        parent, version = conflict.parent
        where = f" ({own[parent].path} line {own[parent].line}: {own[parent].text})" if parent in own else ""
        asker = f"{parent} {version}{where} requires {conflict.requirement}"
        if name in locks and not _admits(needed, _version(locks[name])):
            lines.append(
                f"make lock: {asker}, but {_lock_side(locks[name], stage)}: choose a version of {parent} that accepts"
                f" {needed.name} {_version(locks[name])}, or drop {parent}; for another {needed.name}, change"
                f" {locks[name].path.removesuffix('.lock')}.txt (its pins), then make lock"
            )
        elif name in own:
            lines.append(
                f"make lock: {asker}, but {own[name].path} pins {own[name].text} (line {own[name].line}): change one"
                " of the two"
            )
    return "\n".join(lines) or None


def compile_command(stage: Stage) -> list[str]:
    """pip-compile for ``stage``, run in its directory (paths relative to it, as the lock's header records them)."""
    here = Path(stage.requirements).parent
    constraints = [f"--constraint={Path(*['..'] * len(here.parts), c)}" for c in stage.constraints]
    return [
        sys.executable,
        "-m",
        "piptools",
        "compile",
        *COMPILE_OPTIONS,
        *constraints,
        "--output-file",
        "requirements.lock",
        "requirements.txt",
    ]


def resolve(stage: Stage, root: Path) -> str | None:
    """Pre-check, then pip-compile ``stage``; None when its lock is written, else the short message."""
    direct = direct_conflicts(stage, root)
    if direct:
        return "\n".join(direct)
    command = compile_command(stage)
    done = subprocess.run(command, cwd=root / Path(stage.requirements).parent, capture_output=True, text=True)
    return None if done.returncode == 0 else failure_message(stage, root, done.stdout + done.stderr)


def failure_message(stage: Stage, root: Path, output: str) -> str:
    """What to say when pip-compile failed for ``stage`` with ``output``: the conflicts placed against the locks
    (:func:`transitive_message`), else pip's ERROR line and the command that shows its whole output."""
    if "No module named piptools" in output:
        return "make lock: pip-tools is not installed in this interpreter (make lock installs it first)"
    placed = transitive_message(stage, root, output)
    if placed:
        return placed
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    error = next((line for line in lines if line.startswith("ERROR:")), lines[-1] if lines else "no output")
    shown = " ".join(["python", *compile_command(stage)[1:]])
    under = ", ".join(stage.constraints) or "no lock"
    return (
        f"make lock: pip-compile could not resolve {stage.requirements} under {under}: {error}"
        f" (pip's whole output: cd {Path(stage.requirements).parent} && {shown})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Resolve every lock in order; the first one that cannot be resolved stops it with its message (exit 2)."""
    parser = argparse.ArgumentParser(prog="python -m consumer.local.lock", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="The repository root (default: here).")
    root = parser.parse_args(argv).root
    # Every direct conflict first, offline, against the locks as they are (a team editing workers/requirements.txt
    # leaves the others unchanged): seconds, where resolving the locks before it would take the network and a minute.
    direct = [line for stage in STAGES for line in direct_conflicts(stage, root)]
    if direct:
        print("\n".join(direct), file=sys.stderr)
        return ExitCode.CONFIG
    for stage in STAGES:
        message = resolve(stage, root)
        if message:
            print(message, file=sys.stderr)
            return ExitCode.CONFIG
    print(f"make lock: {', '.join(s.lock for s in STAGES)} resolved; commit each with its requirements.txt")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
