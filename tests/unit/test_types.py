"""The type checker passes: mypy, strict, over what pyproject.toml's [tool.mypy] names (public API, runtime, infra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_is_clean() -> None:
    """`mypy` with the project's config reports no error (the pinned mypy and stubs from requirements-dev.txt)."""
    command = [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shipped_code_imports_without_the_type_stubs() -> None:
    """The image carries no stubs: every module it ships imports with the mypy_boto3_* packages refused."""
    code = (
        "import importlib, pkgutil, sys\n"
        "class RefuseStubs:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('mypy_boto3'):\n"
        "            raise ImportError(f'the image has no {name}')\n"
        "sys.meta_path.insert(0, RefuseStubs())\n"
        "import consumer\n"
        "shipped = [m.name for m in pkgutil.walk_packages(consumer.__path__, 'consumer.')]\n"
        "for name in shipped:\n"
        "    if not name.startswith('consumer.local'):  # dev only, left out of the image\n"
        "        importlib.import_module(name)\n"
        "print(len(shipped))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 10  # the walk found the package's modules, not an empty path
