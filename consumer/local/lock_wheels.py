"""The image's locks install on both architectures a worker may declare (cdk.json ``architecture``: x86_64, arm64).

The image installs its three locks (consumer/local/lock.py, STAGES) with ``pip install --require-hashes``: pip takes
only a file whose sha256 the lock lists, so a package whose lock lists no file for the image's platform cannot be
installed there. pip-compile writes the hash of every file of a release, yet nothing in a lock says which file a hash
is: :data:`RECORD` does, one entry per pin (file name -> sha256, from the index's JSON simple API, PEP 691), and :func:`problems` checks,
without the network, that

* the record describes exactly the locks' pins and hashes (a lock changed without ``record`` is named), and
* every pin has, among its locked files, one pip installs on CPython 3.11 on Debian bookworm (glibc 2.36, the base
  image's release) for each of linux/amd64 and linux/arm64: a wheel with a matching tag (a manylinux one, or a pure
  Python ``py3-none-any``); a package with an sdist only is refused, since the slim image has no compiler.

``python -m consumer.local.lock_wheels record`` rewrites the record (``make lock`` runs it after resolving; needs the
package index); ``... check`` is the same check against the index itself: ``pip download --only-binary=:all:
--require-hashes`` of the locks for each platform (needs the index; docs/configuration.md, "Graviton").
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from consumer.local.lock import STAGES

ROOT = Path(__file__).resolve().parents[2]
#: The locks the Dockerfile installs, in its order.
LOCKS = tuple(stage.lock for stage in STAGES)
RECORD = "consumer/local/lock_files.json"
#: The image's interpreter and C library: python:3.11-slim-bookworm (consumer/Dockerfile), Debian 12's glibc 2.36.
PYTHON = (3, 11)
GLIBC_MINOR = 36
#: A build platform (infra/service.py, IMAGE_PLATFORMS) -> the machine name in its wheel tags.
PLATFORMS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
#: The legacy manylinux names (PEP 600): manylinux2014 is manylinux_2_17, and so on.
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
#: The index's project page in JSON (PEP 691), which pip reads too: every file of every release, with its hashes.
INDEX_PROJECT = "https://pypi.org/simple/{name}/"
INDEX_JSON = "application/vnd.pypi.simple.v1+json"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def lock_hashes(path: Path) -> dict[str, set[str]]:
    """``name==version`` (canonical name) -> the sha256 hashes the lock lists for it."""
    pins: dict[str, set[str]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = f"{canonicalize_name(match.group(1))}=={match.group(2)}"
            pins[current] = set()
        elif not line.startswith(" "):
            current = None
        if current is not None:
            pins[current].update(_HASH.findall(line))
    return pins


def locked(root: Path = ROOT) -> dict[str, tuple[str, set[str]]]:
    """Every pin of the image's locks: ``name==version`` -> (the lock it is in, its hashes)."""
    return {pin: (lock, hashes) for lock in LOCKS for pin, hashes in lock_hashes(root / lock).items()}


def platform_tags(machine: str) -> set[Tag]:
    """The wheel tags pip accepts for CPython 3.11 on glibc 2.36 on ``machine`` (x86_64, aarch64)."""
    platforms = []
    for minor in range(GLIBC_MINOR, 4, -1):
        platforms.append(f"manylinux_2_{minor}_{machine}")
        if minor in _LEGACY:
            platforms.append(f"{_LEGACY[minor]}_{machine}")
    return set(cpython_tags(PYTHON, platforms=platforms)) | set(compatible_tags(PYTHON, "cp311", platforms))


def installable(files: Iterable[str], machine: str) -> str | None:
    """A file of ``files`` pip installs on ``machine`` without building anything, or None."""
    tags = platform_tags(machine)
    for name in sorted(files):
        if name.endswith(".whl") and parse_wheel_filename(name)[3] & tags:
            return name
    return None


def problems(root: Path = ROOT, record: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """One line per pin the record does not describe, or that has no installable file for a platform."""
    if record is None:
        record = json.loads((root / RECORD).read_text())
    pins = locked(root)
    found = []
    redo = f"run `python -m consumer.local.lock_wheels record` (make lock does) and commit {RECORD}"
    for pin in sorted(set(record) - set(pins)):
        found.append(f"{RECORD} lists {pin}, which no lock pins: {redo}")
    for pin, (lock, hashes) in sorted(pins.items()):
        files = record.get(pin)
        if files is None:
            found.append(f"{lock} pins {pin}, which {RECORD} does not list: {redo}")
            continue
        if set(files.values()) != hashes:
            found.append(f"{lock}'s hashes of {pin} are not the files {RECORD} lists for it: {redo}")
            continue
        for platform, machine in PLATFORMS.items():
            if installable(files, machine) is None:
                found.append(
                    f"{lock} pins {pin}, which has no file pip installs on {platform} (CPython"
                    f" {PYTHON[0]}.{PYTHON[1]}, glibc 2.{GLIBC_MINOR}, no compiler in the image) among its locked"
                    f" files: {', '.join(sorted(files))}; pin a version that publishes such a wheel, then make lock"
                )
    return found


def fetch_files(pin: str, hashes: set[str]) -> dict[str, str]:
    """The files of ``pin``'s project on the index whose sha256 the lock lists: file name -> sha256."""
    request = urllib.request.Request(INDEX_PROJECT.format(name=pin.partition("==")[0]), headers={"Accept": INDEX_JSON})
    with urllib.request.urlopen(request, timeout=60) as response:
        project = json.load(response)
    return {f["filename"]: f["hashes"]["sha256"] for f in project["files"] if f["hashes"].get("sha256") in hashes}


def record(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """Write :data:`RECORD` for the locks as they are (needs the package index)."""
    files = {pin: fetch_files(pin, hashes) for pin, (_, hashes) in sorted(locked(root).items())}
    (root / RECORD).write_text(json.dumps(files, indent=1, sort_keys=True) + "\n")
    return files


def download_command(platform: str, destination: Path, root: Path = ROOT) -> list[str]:
    """pip downloading every locked file for ``platform``, binaries only, each checked against the lock's hashes."""
    machine = PLATFORMS[platform]
    return [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary=:all:", "--require-hashes", "--implementation", "cp",
        "--python-version", f"{PYTHON[0]}.{PYTHON[1]}", "--abi", f"cp{PYTHON[0]}{PYTHON[1]}",
        "--platform", f"manylinux_2_{GLIBC_MINOR}_{machine}", "--platform", f"manylinux2014_{machine}",
        "--dest", str(destination), *(a for lock in LOCKS for a in ("-r", str(root / lock))),
    ]  # fmt: skip


def check_index(root: Path = ROOT) -> list[str]:
    """The check against the index: one line per platform pip cannot download every locked package for."""
    failures = []
    for platform in PLATFORMS:
        with tempfile.TemporaryDirectory(prefix="lock-wheels-") as scratch:
            done = subprocess.run(download_command(platform, Path(scratch), root), capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or [done.stderr.strip()]
            failures.append(f"pip download of the locks for {platform} failed: {errors[0]}")
    return failures


class Action(str, Enum):
    VERIFY = "verify"
    RECORD = "record"
    CHECK = "check"


app = typer.Typer(add_completion=False)


@app.command()
def main(
    action: Annotated[
        Action,
        typer.Argument(
            help="verify: the record against the locks, offline; record: rewrite it from the index; check: pip"
            " download of the locks for both platforms."
        ),
    ] = Action.VERIFY,
) -> None:
    """Whether every locked package installs on linux/amd64 and linux/arm64 (make lock runs ``record``)."""
    if action is Action.RECORD:
        files = record()
        print(f"{RECORD}: {len(files)} pins, {sum(len(f) for f in files.values())} files")
    found = check_index() if action is Action.CHECK else problems()
    for line in found:
        print(line, file=sys.stderr)
    if found:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
