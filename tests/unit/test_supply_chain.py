"""The image's supply chain: a base pinned by digest and every Python dependency locked with hashes.

No network: the lock is read as text, and its completeness is checked against the
dependency metadata of the packages installed in this environment (``make`` installs
the runtime from the same lock, hashes checked).
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "consumer" / "Dockerfile"
LOCK = ROOT / "consumer" / "requirements.lock"
TOP_LEVEL = ROOT / "consumer" / "requirements.txt"
#: The image's platform: what the lock's environment markers are evaluated for.
IMAGE_ENVIRONMENT = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) for every entry of the lock."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in LOCK.read_text().splitlines():
        if match := _PIN.match(line):
            current = canonicalize_name(match[1])
            entries[current] = (match[2], [])
        elif current and (hashed := re.search(r"--hash=(sha256:[0-9a-f]{64})", line)):
            entries[current][1].append(hashed[1])
        elif not line.startswith(" "):
            current = None
    return entries


def top_level() -> dict[str, str]:
    pins = {}
    for line in TOP_LEVEL.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{TOP_LEVEL.name} pins exact versions: {line!r}"
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_dockerfile_base_image_is_pinned_by_digest() -> None:
    """The image builds FROM a base named by its sha256 digest, never by a tag alone that can move."""
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert _DIGEST.search(base), base
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == ["${BASE_IMAGE}"]


def test_dockerfile_installs_only_the_hashed_lock() -> None:
    """The one pip install in the image reads the lock with --require-hashes."""
    installs = [args.split() for args in re.findall(r"pip install ([^\n\\&]*)", DOCKERFILE.read_text())]
    assert installs == [["--require-hashes", "-r", "/app/consumer/requirements.lock"]]


def test_every_lock_entry_carries_hashes() -> None:
    """Each locked package has at least one sha256 of its published files (pip refuses others)."""
    entries = locked()
    assert entries
    assert {name for name, (_version, hashes) in entries.items() if not hashes} == set()


def test_lock_holds_every_top_level_pin_at_its_version() -> None:
    """The lock was resolved from the current requirements.txt (re-run make lock after editing it)."""
    entries = locked()
    assert {name: entries.get(name, ("missing", []))[0] for name in top_level()} == top_level()


def test_lock_holds_every_transitive_dependency() -> None:
    """Whatever a locked package requires on the image's platform is locked too, so --require-hashes installs."""
    entries = locked()
    missing = set()
    for name in entries:
        for raw in metadata.requires(name) or []:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": ""}):
                if canonicalize_name(requirement.name) not in entries:
                    missing.add(f"{requirement.name} (required by {name})")
    assert missing == set()


def test_this_environment_runs_the_locked_versions() -> None:
    """Tests run on what the image installs: each locked package is installed here at the locked version."""
    entries = locked()
    installed = {name: metadata.version(name) for name in entries}
    assert installed == {name: version for name, (version, _hashes) in entries.items()}
