"""Fixtures more than one unit test module uses: a stub container engine for the image tooling."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import consumer.local.image as image_module
from consumer.local.image import Engine

#: A stand-in for the engine's command line: logs its arguments, answers `image inspect` for the Debian base
#: only when BASE_CACHED=1, hangs on `pull`, and refuses `import` (reading its input first, as an engine does).
STUB_ENGINE = """#!/bin/sh
echo "$*" >> "$STUB_LOG"
case "$1" in
  image) case "$3" in *sqs-worker-base*) [ "$BASE_CACHED" = 1 ] && exit 0;; esac; exit 1;;
  pull) sleep 10;;
  import) cat > /dev/null; [ "$IMPORT_OK" = 1 ] && exit 0; echo "Error: no space left on device" >&2; exit 125;;
esac
exit 0
"""


#: debootstrap that makes an empty root file system (its last argument but one, before the mirror) and succeeds.
STUB_DEBOOTSTRAP = '#!/bin/sh\nfor a; do rootfs=$previous; previous=$a; done\nmkdir -p "$rootfs/etc/ssl/certs"\n'


@pytest.fixture
def stub_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in {"engine": STUB_ENGINE, "debootstrap": STUB_DEBOOTSTRAP}.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("STUB_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setattr(image_module, "PULL_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(image_module.os, "geteuid", lambda: 0)  # debootstrap is a stub: no root needed
    return Engine("stub", (str(bin_dir / "engine"),))
