"""The type checker passes: mypy, strict, over what pyproject.toml's [tool.mypy] names (public API, runtime, infra)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
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


def aws_cdk_imports(roots: list[str]) -> set[str]:
    """The aws_cdk modules the code under ``roots`` (files or folders) imports: ``aws_cdk`` itself and each submodule
    named in ``from aws_cdk import aws_x`` or ``from aws_cdk.aws_x import ...``."""
    found: set[str] = set()
    for root in roots:
        path = ROOT / root
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text())):
                if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("aws_cdk"):
                    continue
                found.add(node.module or "")
                if node.module == "aws_cdk":
                    found |= {f"aws_cdk.{a.name}" for a in node.names if importlib.util.find_spec(f"aws_cdk.{a.name}")}
    return found


def test_mypy_follows_exactly_the_aws_cdk_modules_the_checked_code_imports() -> None:
    """pyproject.toml skips aws_cdk's modules but those the checked code imports: a module imported and not listed
    would be typed Any unseen, one listed and no longer imported costs the cold run its minute again."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    followed = [o for o in config["overrides"] if o.get("follow_imports") == "normal"]
    skipped = [o for o in config["overrides"] if o.get("follow_imports") == "skip"]
    assert [o["module"] for o in skipped] == ["aws_cdk.*"]
    (listed,) = [o["module"] for o in followed]
    assert sorted(listed) == sorted(aws_cdk_imports(config["files"]))
