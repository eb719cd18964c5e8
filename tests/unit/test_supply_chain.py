"""The image's supply chain: a base pinned by digest and every Python dependency locked with hashes.

No network: the lock is read as text, and its completeness is checked against the
dependency metadata of the packages installed in this environment (``make`` installs
the image's locks, hashes checked). The image installs three locks in one pip call: the framework's
runtime, the example handlers' dependencies and the team package's (``workers/``); each handler lock is
resolved under the runtime's pins.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "consumer" / "Dockerfile"
#: Every lock the image installs, as paths under the repository (the image has each at /app/<path>).
LOCKS = ("consumer/requirements.lock", "consumer/examples/requirements.lock", "workers/requirements.lock")
#: The image's platform: what the lock's environment markers are evaluated for.
IMAGE_ENVIRONMENT = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def locked(lock: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) for every entry of ``lock``."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in (ROOT / lock).read_text().splitlines():
        if match := _PIN.match(line):
            current = canonicalize_name(match[1])
            entries[current] = (match[2], [])
        elif current and (hashed := re.search(r"--hash=(sha256:[0-9a-f]{64})", line)):
            entries[current][1].append(hashed[1])
        elif not line.startswith(" "):
            current = None
    return entries


def top_level(lock: str) -> dict[str, str]:
    """The exact pins of the requirements.txt ``lock`` was resolved from."""
    source = (ROOT / lock).with_suffix(".txt")
    pins = {}
    for line in source.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{source} pins exact versions: {line!r}"
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_dockerfile_base_image_is_pinned_by_digest() -> None:
    """The image builds FROM a base named by its sha256 digest, never by a tag alone that can move."""
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert _DIGEST.search(base), base
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == ["${BASE_IMAGE}"]


def test_dockerfile_installs_only_the_hashed_locks_in_one_call() -> None:
    """The one pip install in the image reads every lock with --require-hashes, in one call, so pip resolves
    runtime and handlers as one set (two calls could let the second replace a version the first installed)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    installs = [args.split() for args in re.findall(r"pip install ([^\n&]*)", text)]
    assert installs == [["--require-hashes", *(part for lock in LOCKS for part in ("-r", f"/app/{lock}"))]]


def test_handler_locks_agree_with_the_runtime_lock() -> None:
    """A package in two locks has one version and the same hashes in both (make lock resolves each handler
    lock under the runtime's pins): pip would refuse the image's one install otherwise."""
    pins: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for lock in LOCKS:
        for name, (version, hashes) in locked(lock).items():
            pins.setdefault(name, set()).add((version, tuple(sorted(hashes))))
    assert {name: found for name, found in pins.items() if len(found) > 1} == {}


def test_the_framework_lock_carries_no_handler_dependency() -> None:
    """The framework's runtime lock holds what the runtime needs, not what a handler does: jsonschema is the
    example handlers' (consumer/examples/requirements.txt), Jinja2 the team package's."""
    assert {"jsonschema", "jinja2"} & set(locked(LOCKS[0])) == set()
    assert "jsonschema" in top_level(LOCKS[1]) and "jinja2" in top_level(LOCKS[2])


@pytest.mark.parametrize("lock", LOCKS)
def test_every_lock_entry_carries_hashes(lock: str) -> None:
    """Each locked package has at least one sha256 of its published files (pip refuses others)."""
    entries = locked(lock)
    assert entries
    assert {name for name, (_version, hashes) in entries.items() if not hashes} == set()


@pytest.mark.parametrize("lock", LOCKS)
def test_lock_holds_every_top_level_pin_at_its_version(lock: str) -> None:
    """The lock was resolved from the current requirements.txt beside it (re-run make lock after editing it)."""
    entries = locked(lock)
    pins = top_level(lock)
    assert {name: entries.get(name, ("missing", []))[0] for name in pins} == pins


@pytest.mark.parametrize("lock", LOCKS)
def test_lock_holds_every_transitive_dependency(lock: str) -> None:
    """Whatever a locked package requires on the image's platform is locked too, so --require-hashes installs."""
    entries = locked(lock)
    missing = set()
    for name in entries:
        for raw in metadata.requires(name) or []:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": ""}):
                if canonicalize_name(requirement.name) not in entries:
                    missing.add(f"{requirement.name} (required by {name})")
    assert missing == set()


@pytest.mark.parametrize("lock", LOCKS)
def test_this_environment_runs_the_locked_versions(lock: str) -> None:
    """Tests run on what the image installs: each locked package is installed here at the locked version."""
    entries = locked(lock)
    installed = {name: metadata.version(name) for name in entries}
    assert installed == {name: version for name, (version, _hashes) in entries.items()}
