"""consumer.local.image for an arm64 worker's image, without an engine: whether this machine can run another
architecture's programs (binfmt_misc, read from a directory of this test's own shaped as the kernel's), said in one
line where it cannot; and the Debian base built and labelled for the platform asked for."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from consumer.local.image import ContainerToolingUnavailable, DebianBase, Engine, emulation_missing, ensure_base
from tests.unit.support import DOCKERFILE, calls

#: Debian bookworm's qemu-user-static entry for arm64, as /proc/sys/fs/binfmt_misc/qemu-aarch64 shows it.
QEMU_AARCH64 = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: PF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""
#: Entries of other kinds the directory also holds (an extension entry, another machine's emulator).
JAR = "enabled\ninterpreter /usr/bin/jexec\nflags: \nextension .jar\n"
QEMU_RISCV64 = QEMU_AARCH64.replace("aarch64", "riscv64").replace("0200b700", "0200f300")
REGISTER = "on Debian, as root: apt-get install qemu-user-static binfmt-support"


@pytest.fixture(autouse=True)
def x86_64_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever machine runs the test: an x86_64 Linux one, for which arm64 is foreign."""
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(sys, "platform", "linux")


def binfmt(tmp_path: Path, entries: dict[str, str], status: str | None = "enabled") -> Path:
    directory = tmp_path / "binfmt_misc"
    directory.mkdir()
    if status is not None:
        (directory / "status").write_text(f"{status}\n")
        (directory / "register").write_text("")
    for name, text in entries.items():
        (directory / name).write_text(text)
    return directory


def test_the_machines_own_platform_needs_no_emulator(tmp_path: Path) -> None:
    assert emulation_missing("linux/amd64", tmp_path / "absent") is None
    assert emulation_missing(None, tmp_path / "absent") is None


def test_debians_qemu_entry_runs_arm64_programs_in_containers(tmp_path: Path) -> None:
    assert emulation_missing("linux/arm64", binfmt(tmp_path, {"jar": JAR, "qemu-aarch64": QEMU_AARCH64})) is None


@pytest.mark.parametrize(
    ("entries", "status", "missing"),
    [
        (
            {},
            None,
            "linux/arm64 needs an emulator but {dir} is not mounted (no binfmt_misc; as root: mount -t binfmt_misc"
            " binfmt_misc {dir}, then apt-get install qemu-user-static binfmt-support)",
        ),
        ({"qemu-aarch64": QEMU_AARCH64}, "disabled", "linux/arm64 needs an emulator but binfmt_misc is disabled"),
        (
            {"jar": JAR, "qemu-riscv64": QEMU_RISCV64},
            "enabled",
            f"linux/arm64 needs an emulator and no binfmt_misc entry runs arm64 programs ({REGISTER})",
        ),
        (
            {"qemu-aarch64": QEMU_AARCH64.replace("flags: PF", "flags: ")},
            "enabled",
            "linux/arm64 needs an emulator: {dir}/qemu-aarch64 (/usr/libexec/qemu-binfmt/aarch64-binfmt-P) is"
            f" registered without the F flag, which a container cannot use ({REGISTER}, which registers it with F)",
        ),
        (
            {"qemu-aarch64": QEMU_AARCH64.replace("enabled", "disabled", 1)},
            "enabled",
            "linux/arm64 needs an emulator: {dir}/qemu-aarch64 (/usr/libexec/qemu-binfmt/aarch64-binfmt-P) is"
            f" disabled, which a container cannot use ({REGISTER}, which registers it with F)",
        ),
    ],
)
def test_what_is_missing_for_arm64_is_one_line(
    tmp_path: Path, entries: dict[str, str], status: str | None, missing: str
) -> None:
    directory = binfmt(tmp_path, entries, status)
    found = emulation_missing("linux/arm64", directory)
    assert found is not None and found.startswith(missing.format(dir=directory)) and "\n" not in found


def test_an_unknown_platform_is_named() -> None:
    with pytest.raises(ContainerToolingUnavailable, match="^no Debian architecture known for platform 'linux/s390x'"):
        emulation_missing("linux/s390x")


def test_the_debian_base_is_built_and_labelled_for_the_platform_asked_for(
    stub_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """debootstrap --arch=arm64, the import labelled arm64, a tag of its own beside the machine's base."""
    monkeypatch.setenv("IMPORT_OK", "1")
    debootstrap = tmp_path / "bin" / "debootstrap"
    debootstrap.write_text(
        debootstrap.read_text().replace("#!/bin/sh\n", '#!/bin/sh\necho "debootstrap $*" >> "$STUB_LOG"\n')
    )
    tag = ensure_base(stub_engine, DOCKERFILE, log=lambda _: None, platform="linux/arm64")
    assert tag.startswith("localhost/sqs-worker-base:bookworm-python3.11-arm64-")
    pull, bootstrapped, imported = [c for c in calls(tmp_path) if c.split()[0] in ("pull", "debootstrap", "import")]
    assert pull.startswith("pull --platform linux/arm64 python:3.11")
    assert " --arch=arm64 bookworm " in bootstrapped
    assert imported.startswith("import --change ENV PIP_BREAK_SYSTEM_PACKAGES=1 --arch arm64 - " + tag)
    assert DebianBase.like("python:3.11-slim-bookworm").tag(b"") != DebianBase.like(
        "python:3.11-slim-bookworm", "linux/arm64"
    ).tag(b"")
