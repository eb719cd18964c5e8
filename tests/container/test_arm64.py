"""An arm64 worker's image (cdk.json ``"architecture": "arm64"``): built for linux/arm64 from the asset a synthesis
wrote, as ``cdk deploy`` builds it (the same Dockerfile and hashed locks), and run as ECS runs that worker's task.

On an x86_64 machine that takes an emulator: qemu registered in binfmt_misc with the F flag (Debian's
qemu-user-static and binfmt-support; ``.ci/container-engine`` installs them where it can). Where this machine cannot
run arm64 programs the module skips with one line naming what is missing (binfmt_misc not mounted, no emulator
registered); with ``CONTAINER_ARM64_REQUIRED=1`` (``.ci/container-engine`` sets it once emulation works) that is a
failure instead. Under emulation the base (debootstrap's second stage) and pip's installs take minutes (measured in
docs/deploy.md), so the container tier runs apart from ``make test``: ``make test-images``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumer.local.image import BuiltImage, ContainerToolingUnavailable, Engine, emulation_missing
from consumer.local.stack import LocalStack, provision_fresh
from consumer.local.task import TaskContainer, TaskRun
from consumer.testing import wait_until
from infra.worker_settings import CONTEXT_KEY
from tests.container.conftest import ENVIRONMENT, STACK, WORKER, Webhook, depths, send
from tests.container.support import events
from tests.reference import reference_context

PLATFORM = "linux/arm64"
#: Set by .ci/container-engine where it made arm64 emulation work: then this module must run, never skip.
REQUIRED_ENV = "CONTAINER_ARM64_REQUIRED"
pytestmark = [
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]


def unavailable(why: str) -> None:
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"arm64 container tier required ({REQUIRED_ENV}=1) but cannot run: {why}", pytrace=False)
    pytest.skip(f"container tier, arm64: {why}")


@pytest.fixture(scope="module")
def arm64_engine(engine: Engine) -> Engine:
    """The tier's engine, running containers for linux/arm64 (else podman warns that the image is not the host's);
    the module skips here, before synthesizing, where no emulator can run arm64 programs."""
    missing = emulation_missing(PLATFORM)
    if missing is not None:
        unavailable(missing)
    return dataclasses.replace(engine, run_options=(*engine.run_options, "--platform", PLATFORM))


@pytest.fixture(scope="module")
def arm64_task(arm64_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> TaskContainer:
    """The reference demo environment with its notifications worker on arm64, synthesized by the real app (nag
    included): that worker's task definition and its image asset."""
    from infra.app import build_app

    context = reference_context()
    context[CONTEXT_KEY][ENVIRONMENT]["workers"][WORKER]["architecture"] = "arm64"
    outdir = tmp_path_factory.mktemp("cdk.out-arm64")
    app, _ = build_app(outdir=str(outdir), context={**context, "env": ENVIRONMENT})
    app.synth()
    task = TaskContainer.from_assembly(outdir, STACK, WORKER)
    assert task.platform == PLATFORM
    return task


@pytest.fixture(scope="module")
def arm64_image(arm64_engine: Engine, arm64_task: TaskContainer) -> BuiltImage:
    try:
        built = arm64_task.build(arm64_engine)
    except ContainerToolingUnavailable as why:
        unavailable(str(why))
        raise
    print(f"\n{built.tag}: {built.size_bytes / 1e6:.0f} MB, base {built.base}, built in {built.seconds:.0f} s")
    return built


def run(engine: Engine, image: BuiltImage, *command: str) -> str:
    return engine("run", "--rm", *engine.run_options, image.tag, *command, timeout=300).stdout


def test_the_image_is_arm64_and_its_compiled_packages_are_aarch64_builds(
    arm64_engine: Engine, arm64_image: BuiltImage
) -> None:
    """The image's architecture, the interpreter's machine, and every compiled module the handlers load: the locked
    aarch64 wheels (rpds-py through jsonschema, markupsafe through jinja2), installed with --require-hashes."""
    assert arm64_engine.image_architecture(arm64_image.tag) == "arm64"
    probe = (
        "import json, platform, sys, jsonschema, jinja2, markupsafe._speedups, rpds;"
        " from consumer.declaration import load_handler;"
        " [load_handler(h) for h in ('consumer.examples.notifications:handle', 'consumer.examples.webhooks:handle')];"
        " so = sorted({m.__file__.rsplit('/', 1)[1] for m in list(sys.modules.values())"
        " if (getattr(m, '__file__', None) or '').endswith('.so')});"
        " print(json.dumps({'machine': platform.machine(), 'so': so}))"
    )
    found = json.loads(run(arm64_engine, arm64_image, "python", "-c", probe))
    assert found["machine"] == "aarch64"
    assert found["so"] and all("aarch64-linux-gnu" in name for name in found["so"]), found["so"]
    assert any(name.startswith("rpds.") for name in found["so"]), found["so"]
    assert "Consume QUEUE_URL" in run(arm64_engine, arm64_image, "python", "-m", "consumer", "--help")


@pytest.fixture
def arm64_stack(arm64_task: TaskContainer, endpoint: str) -> LocalStack:
    return provision_fresh(endpoint, arm64_task.asset_directory.parent / f"{STACK}.template.json")


@pytest.fixture
def arm64_run(
    arm64_engine: Engine, arm64_task: TaskContainer, arm64_image: BuiltImage, arm64_stack: LocalStack,
    webhook: Webhook, tmp_path: Path,
) -> Iterator[TaskRun]:  # fmt: skip
    """The arm64 task's container as conftest's run_task starts the x86_64 one: the definition's settings, the local
    stack's environment, the loopback webhook."""
    name = f"consumer-arm64-{uuid.uuid4().hex[:8]}"
    volumes = arm64_task.volume_directories(arm64_engine, tmp_path / f"{name}-volumes", arm64_image.tag)
    environment = {**arm64_stack.process_environment(), "NOTIFY_WEBHOOK_URL": webhook.url}
    task_run = TaskRun(
        arm64_engine, arm64_task, tmp_path / f"{name}.log", name=name, environment=environment, volumes=volumes,
        image=arm64_image.tag,
    )  # fmt: skip
    yield task_run.start()
    task_run.remove()


def test_the_arm64_task_processes_messages_and_drains_on_sigterm(
    arm64_run: TaskRun, arm64_task: TaskContainer, arm64_stack: LocalStack, webhook: Webhook
) -> None:
    """The consumer under emulation: started as ECS starts it, it delivers every event once, deletes them, and exits
    0 within the stop timeout on SIGTERM."""
    arm64_run.wait_for("consumer_started", timeout=180)
    valid = events("arm", 10)
    send(arm64_stack, list(valid.values()))
    wait_until(lambda: set(webhook.finished) >= set(valid), timeout=180, what="10 events delivered by the arm64 task")
    wait_until(lambda: depths(arm64_stack, "QUEUE_URL") == (0, 0), timeout=60, what="the source queue empty")
    assert {k: n for k, n in webhook.finished.items() if n != 1} == {}
    code, seconds = arm64_run.stop()
    assert code == 0 and seconds < arm64_task.stop_timeout
