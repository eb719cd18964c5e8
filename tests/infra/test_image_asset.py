"""The consumer image's asset hash follows the runtime and the team package only.

``cdk deploy`` rebuilds and pushes the image, and replaces every worker's task definition, whenever the asset
hash changes. The context is the repository root, so only its .dockerignore keeps an edit to the README, a test
or infra/ from doing that. Each test synthesizes a one-container app from a scratch copy of the context.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs

from consumer.local.task import TaskContainer
from infra.service import IMAGE_CONTEXT, consumer_image

#: What the scratch copy of the repository holds: the image's folders and its .dockerignore, plus files of the
#: repository the image must not depend on.
IMAGE_PARTS = ("consumer", "workers", ".dockerignore")
UNRELATED = {
    "README.md": "# readme\n",
    "infra/stack.py": "STACK = 1\n",
    "tests/unit/test_x.py": "def test_x() -> None: ...\n",
    "cdk.out/SqsWorker-dev.template.json": "{}\n",
    "consumer/local/extra.py": "LOCAL = 1\n",
    "workers/tests/test_extra.py": "def test_extra() -> None: ...\n",
    "workers/__pycache__/reports.cpython-311.pyc": "compiled\n",
}


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A copy of the image's part of the repository, with one unrelated file of each kind beside it."""
    root = tmp_path / "repository"
    for part in IMAGE_PARTS:
        source = IMAGE_CONTEXT / part
        if source.is_dir():
            shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))
        else:
            shutil.copy2(source, root / part)
    write(root, UNRELATED)
    return root


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def asset_hash(context: Path, outdir: Path) -> str:
    """The image asset hash of a task definition whose container runs :func:`consumer_image` of ``context``."""
    app = cdk.App(outdir=str(outdir), builtin_cloud_formation_validation=False)  # a hash, not a template
    stack = cdk.Stack(app, "Image")
    ecs.FargateTaskDefinition(stack, "Task").add_container("Consumer", image=consumer_image(context))
    app.synth()
    return TaskContainer.from_assembly(outdir, "Image").asset_hash


def test_asset_hash_ignores_files_outside_the_image(context: Path, tmp_path: Path) -> None:
    """Editing the README, infra/, tests, cdk.out, local tooling or bytecode leaves the hash as it was."""
    before = asset_hash(context, tmp_path / "before")
    write(context, {name: text + "# changed\n" for name, text in UNRELATED.items()})
    assert asset_hash(context, tmp_path / "after") == before


@pytest.mark.parametrize(
    "changed",
    ["workers/reports.py", "workers/requirements.lock", "consumer/runtime/consumer.py", "consumer/Dockerfile"],
)
def test_asset_hash_follows_the_runtime_the_team_package_and_the_dockerfile(
    context: Path, tmp_path: Path, changed: str
) -> None:
    """A change to what the image is built from is a new image (and the test above is not passing by accident)."""
    before = asset_hash(context, tmp_path / "before")
    write(context, {changed: (context / changed).read_text() + "\n# changed\n"})
    assert asset_hash(context, tmp_path / "after") != before
