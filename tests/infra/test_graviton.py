"""Graviton per worker: ``"architecture": "arm64"`` in cdk.json runs that worker's task on ARM64 and builds its image
for linux/arm64 (infra/service.py), and nothing else in the stack changes.

Every variant is this module's own two-worker environment ``qa`` (never cdk.json's), synthesized by the real app, so
cdk-nag runs on each (an open finding fails its synth) and its findings are read back below. The image is the
container asset ``cdk deploy`` builds: its platform is read from the cloud assembly's ``<stack>.assets.json`` (what
cdk-assets builds with ``docker build --platform``), through the task definition's own image reference
(consumer/local/task.py, as the container tier reads it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from consumer.local.task import TaskContainer
from infra.report import nag_results
from infra.settings import parse_environment
from infra.worker_settings import CONTEXT_KEY
from tests.infra.conftest import Synthesized, synthesize_once
from tests.infra.contexts import HANDLER, TWO_WORKERS
from tests.unit.support import refusal  # the one line synth fails with, for environment qa

STACK = "SqsWorker-qa"
AT = f"{CONTEXT_KEY}.qa"
SPOT_LINK = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-capacity-providers.html"
#: Two workers, "fast" (the first) and "idle"; each variant sets the architecture of some of them.
BASE = TWO_WORKERS


def with_architecture(architectures: dict[str, str]) -> dict[str, Any]:
    return {name: {**settings, **({"architecture": architectures[name]} if name in architectures else {})}
            for name, settings in BASE.items()}  # fmt: skip


VARIANTS: dict[str, dict[str, Any]] = {
    "base": BASE,
    "x86_64": with_architecture({"fast": "x86_64"}),
    "arm64": with_architecture({"fast": "arm64"}),
    "all_arm64": with_architecture({"fast": "arm64", "idle": "arm64"}),
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """Each variant as environment ``qa`` (so every name is the same) in a cloud assembly of its own; plus ``solo``,
    one worker declared at the environment's top level with ``"architecture": "arm64"``."""
    contexts: dict[str, dict[str, Any]] = {name: {"workers": workers} for name, workers in VARIANTS.items()}
    contexts["solo"] = {"handler": HANDLER, "architecture": "arm64"}
    return {
        name: synthesize_once(tmp_path_factory, {CONTEXT_KEY: {"qa": context}})["qa"]
        for name, context in contexts.items()
    }


def runtime_platform(env: Synthesized, worker: str) -> dict[str, Any]:
    task = env.stack.workers[worker].consumer.task_definition
    platform: dict[str, Any] = env.json["Resources"][env.logical_id(task)]["Properties"]["RuntimePlatform"]
    return platform


def image(env: Synthesized, worker: str) -> TaskContainer:
    """The worker's container as the cloud assembly has it: its image asset's hash and build platform."""
    return TaskContainer.from_assembly(env.outdir, STACK, worker)


def docker_images(env: Synthesized) -> dict[str, Any]:
    images: dict[str, Any] = json.loads((env.outdir / f"{STACK}.assets.json").read_text())["dockerImages"]
    return images


def test_an_arm64_worker_runs_on_arm64_and_its_image_is_built_for_linux_arm64(
    variants: dict[str, Synthesized],
) -> None:
    env = variants["arm64"]
    assert runtime_platform(env, "fast") == {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}
    assert image(env, "fast").platform == "linux/arm64"


def test_a_sibling_without_the_setting_stays_x86_64_in_the_same_stack(variants: dict[str, Synthesized]) -> None:
    """Two platforms in one stack are two image assets of the same context, each built for its own platform (the
    platform is part of the CDK's asset hash), and each task definition names its own."""
    env = variants["arm64"]
    assert runtime_platform(env, "idle") == {"CpuArchitecture": "X86_64", "OperatingSystemFamily": "LINUX"}
    arm, x86 = image(env, "fast"), image(env, "idle")
    assert x86.platform == "linux/amd64" and arm.asset_hash != x86.asset_hash
    assert {h: i["source"]["platform"] for h, i in docker_images(env).items()} == {
        arm.asset_hash: "linux/arm64",
        x86.asset_hash: "linux/amd64",
    }
    # The same build context and Dockerfile: only the platform differs between the two builds.
    sources = [{k: v for k, v in i["source"].items() if k != "platform"} for i in docker_images(env).values()]
    assert [s.pop("directory") for s in sources] == [f"asset.{h}" for h in docker_images(env)]
    assert sources[0] == sources[1]
    # The x86_64 sibling's image is the one it had without an arm64 worker beside it.
    assert x86.asset_hash == image(variants["base"], "idle").asset_hash


def test_workers_of_one_platform_share_one_image(variants: dict[str, Synthesized]) -> None:
    """One asset per platform, whatever the number of workers on it: x86_64 by default, arm64 when all are."""
    for name, platform in (("base", "linux/amd64"), ("all_arm64", "linux/arm64")):
        env = variants[name]
        assert image(env, "fast").asset_hash == image(env, "idle").asset_hash, name
        assert [i["source"]["platform"] for i in docker_images(env).values()] == [platform], name
    assert runtime_platform(variants["all_arm64"], "idle")["CpuArchitecture"] == "ARM64"


def test_the_top_level_form_takes_the_architecture_too(variants: dict[str, Synthesized]) -> None:
    env = variants["solo"]
    (worker,) = env.stack.workers
    assert runtime_platform(env, worker)["CpuArchitecture"] == "ARM64"
    assert image(env, worker).platform == "linux/arm64"


def test_x86_64_written_out_is_the_default_template_byte_for_byte(variants: dict[str, Synthesized]) -> None:
    """``"architecture": "x86_64"`` is the default: the template and the asset manifest are the same files."""
    for name in (f"{STACK}.template.json", f"{STACK}.assets.json"):
        assert (variants["x86_64"].outdir / name).read_bytes() == (variants["base"].outdir / name).read_bytes(), name


def test_arm64_changes_that_workers_task_definition_only(variants: dict[str, Synthesized]) -> None:
    """Against the same stack without it: one resource differs, the worker's task definition, and in it only the
    runtime platform and the image's asset hash; the service, its scaling and alarms are untouched."""
    before, after = variants["base"].json, variants["arm64"].json
    assert {k: v for k, v in before.items() if k != "Resources"} == {k: v for k, v in after.items() if k != "Resources"}
    old, new = before["Resources"], after["Resources"]
    assert set(old) == set(new)
    task_id = variants["arm64"].logical_id(variants["arm64"].stack.workers["fast"].consumer.task_definition)
    assert {k for k in old if old[k] != new[k]} == {task_id}
    old_hash, new_hash = image(variants["base"], "fast").asset_hash, image(variants["arm64"], "fast").asset_hash
    rewritten = json.loads(json.dumps(new[task_id]).replace(new_hash, old_hash))
    rewritten["Properties"]["RuntimePlatform"]["CpuArchitecture"] = "X86_64"
    assert rewritten == old[task_id]


@pytest.mark.parametrize("variant", ["arm64", "all_arm64", "solo"])
def test_arm64_variants_pass_cdk_nag(variants: dict[str, Synthesized], variant: str) -> None:
    """cdk-nag's AwsSolutions report no open finding on a stack with arm64 workers (one or two image assets), and
    acknowledge no rule or reason that the x86_64 stack does not (one worker acknowledges fewer times than two)."""
    open_findings, acknowledged = nag_results(variants[variant].outdir, STACK)
    assert open_findings == []
    assert set(acknowledged) == set(nag_results(variants["base"].outdir, STACK)[1])


@pytest.mark.parametrize("value", ["aarch64", "ARM64", "amd64", 1, True])
def test_an_unknown_architecture_is_refused_naming_its_path_the_rule_and_the_value(value: object) -> None:
    rule = "must be one of arm64, x86_64"
    assert refusal({"handler": HANDLER, "architecture": value}) == f'"{AT}.architecture" {rule}: {value!r}'
    under_workers = {"workers": {**BASE, "idle": {"handler": HANDLER, "architecture": value}}}
    assert refusal(under_workers) == f'"{AT}.workers.idle.architecture" {rule}: {value!r}'


def test_spot_with_arm64_is_refused_since_fargate_spot_runs_no_arm64_task() -> None:
    spot = {"spot_weight": 1}
    rule = f"needs architecture x86_64: Fargate Spot runs no ARM64 task ({SPOT_LINK})"
    assert refusal({"handler": HANDLER, "architecture": "arm64", "spot": spot}) == f"\"{AT}.spot\" {rule}: 'arm64'"
    workers = {"workers": {**BASE, "fast": {"handler": HANDLER, "architecture": "arm64", "spot": spot}}}
    assert refusal(workers) == f"\"{AT}.workers.fast.spot\" {rule}: 'arm64'"
    # The same spot on the x86_64 sibling is accepted: the rule is per worker.
    mixed = parse_environment(
        "qa",
        {
            "workers": {
                "fast": {"handler": HANDLER, "architecture": "arm64"},
                "idle": {"handler": HANDLER, "spot": spot},
            }
        },
    )
    assert [(w.architecture, w.spot is not None) for w in mixed.workers] == [("arm64", False), ("x86_64", True)]


def test_the_outdir_holds_one_build_directory_per_image(variants: dict[str, Synthesized]) -> None:
    """``cdk deploy`` builds each asset directory the manifest names; both are copies of the same context."""
    env = variants["arm64"]
    directories = sorted(Path(env.outdir / i["source"]["directory"]) for i in docker_images(env).values())
    assert len(directories) == 2 and all((d / "consumer" / "Dockerfile").is_file() for d in directories)
    assert sorted(p.relative_to(directories[0]) for p in directories[0].rglob("*.lock")) == sorted(
        p.relative_to(directories[1]) for p in directories[1].rglob("*.lock")
    )
