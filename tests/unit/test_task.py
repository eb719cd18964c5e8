"""consumer.local.task and consumer.local.image without an engine: a task definition read into the engine's run command."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

import consumer.local.image as image_module
from consumer.local.image import (
    ContainerToolingUnavailable,
    DebianBase,
    Engine,
    ImageBuildError,
    dockerfile_base,
    ensure_base,
)
from consumer.local.stack import _worker_environments
from consumer.local.task import EventNotLoggedError, LoggedProcess, TaskContainer, TaskDefinitionError
from tests.unit.support import DOCKERFILE, calls

PODMAN = Engine("podman", ("podman", "--runtime", "runc"), run_options=("--network", "host"))
ASSET = "ab" * 32
CONTAINER: dict[str, Any] = {
    "Command": ["python", "-m", "consumer", "run"],
    "Environment": [{"Name": "QUEUE_URL", "Value": {"Ref": "Queue"}}],
    "Secrets": [{"Name": "NOTIFY_WEBHOOK_URL", "ValueFrom": "arn:aws:ssm:::parameter/x"}],
    "Image": {"Fn::Sub": "${AWS::AccountId}.dkr.ecr.${AWS::Region}.${AWS::URLSuffix}/cdk-container-assets:" + ASSET},
    "User": "10001:10001",
    "ReadonlyRootFilesystem": True,
    "LinuxParameters": {"Capabilities": {"Drop": ["ALL"]}},
    "MountPoints": [{"ContainerPath": "/tmp", "ReadOnly": False, "SourceVolume": "tmp"}],
    "StopTimeout": 35,
    "HealthCheck": {"Command": ["CMD-SHELL", "python -m consumer health || exit 1"], "Interval": 10},
}


def assembly(
    tmp_path: Path, container: dict[str, Any], volume: dict[str, Any] | None = None, *, sidecars: int = 0
) -> Path:
    volumes = [volume or {"Name": "tmp"}]
    collectors = [{**COLLECTOR, "Name": f"collector-{n}"} for n in range(sidecars)]
    definition = {"Cpu": "256", "Memory": "512", "ContainerDefinitions": [*collectors, container], "Volumes": volumes}
    template = {"Resources": {"Task": {"Type": "AWS::ECS::TaskDefinition", "Properties": definition}}}
    (tmp_path / "S.template.json").write_text(json.dumps(template))
    assets = {"dockerImages": {ASSET: {"source": {"directory": f"asset.{ASSET}"}}}}
    (tmp_path / "S.assets.json").write_text(json.dumps(assets))
    return tmp_path


#: A tracing collector sidecar as infra/tracing.py adds one: not essential, not the consumer.
COLLECTOR = {"Name": "collector", "Essential": False, "Image": "public.ecr.aws/aws-observability/aws-otel-collector"}


def test_the_consumer_container_is_the_essential_one_beside_a_tracing_sidecar(tmp_path: Path) -> None:
    """A task definition with a collector sidecar (tracing on) runs its consumer container, never the sidecar; with
    no essential container, or two, it is refused in one line."""
    waits = {**CONTAINER, "DependsOn": [{"ContainerName": "collector-0", "Condition": "START"}]}  # as infra/tracing.py
    task = TaskContainer.from_assembly(assembly(tmp_path, waits, sidecars=1), "S")
    assert task.definition["Command"] == CONTAINER["Command"]
    unknown = {**CONTAINER, "DependsOn": [{"ContainerName": "database", "Condition": "HEALTHY"}]}
    with pytest.raises(TaskDefinitionError, match=r"^S: ContainerDefinitions\[1\] depends on \['database'\]"):
        TaskContainer.from_assembly(assembly(tmp_path, unknown, sidecars=1), "S")
    with pytest.raises(TaskDefinitionError, match=r"^S: expected one essential container .* found 0$"):
        TaskContainer.from_assembly(assembly(tmp_path, {**CONTAINER, "Essential": False}), "S")


def arguments(tmp_path: Path, container: dict[str, Any] = CONTAINER, engine: Engine = PODMAN, **run: Any) -> list[str]:
    task = TaskContainer.from_assembly(assembly(tmp_path, container), "S")
    options = {
        "name": "c",
        "environment": {"QUEUE_URL": "http://127.0.0.1:1/q"},
        "secrets": {"NOTIFY_WEBHOOK_URL": "http://127.0.0.1:2/notify"},
        "volumes": {"tmp": tmp_path},
    }
    return task.run_arguments(engine, **{**options, **run})


def test_every_setting_of_the_definition_reaches_the_run_command(tmp_path: Path) -> None:
    argv = arguments(tmp_path)
    pairs = set(zip(argv, argv[1:], strict=False))
    assert argv[:6] == ["podman", "--runtime", "runc", "run", "--name", "c"]
    assert argv[-5:] == [f"localhost/sqs-worker-consumer:{ASSET}", "python", "-m", "consumer", "run"]
    assert {("--user", "10001:10001"), ("--volume", f"{tmp_path}:/tmp:rw"), ("--stop-timeout", "35")} <= pairs
    assert {("--cpus", "0.25"), ("--memory", "512m"), ("--health-retries", "3")} <= pairs
    # podman without systemd cannot schedule the check (the container tier runs it on demand); Docker keeps its interval
    assert ("--health-interval", "disable") in pairs
    docker = arguments(tmp_path, engine=DOCKER)
    assert ("--health-interval", "10s") in set(zip(docker, docker[1:], strict=False))
    assert ("--health-cmd", "python -m consumer health || exit 1") in pairs
    assert {"--read-only", "--read-only-tmpfs=false", "--cap-drop=ALL"} <= set(argv)
    assert {
        ("--env", "QUEUE_URL=http://127.0.0.1:1/q"),
        ("--env", "NOTIFY_WEBHOOK_URL=http://127.0.0.1:2/notify"),
    } <= pairs


DOCKER = Engine("docker", ("docker",), run_options=("--network", "host"))


def test_docker_gets_the_entrypoint_as_one_executable_and_the_rest_before_the_command(tmp_path: Path) -> None:
    """docker/cli turns --entrypoint into a one-element list (podman parses a JSON array)."""
    container = {**CONTAINER, "EntryPoint": ["/usr/bin/tini", "--"]}
    argv = arguments(tmp_path, container, engine=DOCKER)
    pairs = set(zip(argv, argv[1:], strict=False))
    assert ("--entrypoint", "/usr/bin/tini") in pairs
    assert argv[-6:] == [f"localhost/sqs-worker-consumer:{ASSET}", "--", "python", "-m", "consumer", "run"]
    assert argv[:4] == ["docker", "run", "--name", "c"] and ("--network", "host") in pairs
    assert "--read-only" in argv and "--read-only-tmpfs=false" not in argv  # a podman-only option
    podman = arguments(tmp_path, container)
    assert ("--entrypoint", '["/usr/bin/tini", "--"]') in set(zip(podman, podman[1:], strict=False))


def test_docker_gets_an_exec_form_health_check_as_one_quoted_shell_command(tmp_path: Path) -> None:
    """docker/cli always stores --health-cmd as CMD-SHELL; podman takes the exec form as a JSON array."""
    container = {**CONTAINER, "HealthCheck": {"Command": ["CMD", "python", "-c", "print('ok')"]}}
    docker = arguments(tmp_path, container, engine=DOCKER)
    assert ("--health-cmd", "python -c 'print('\"'\"'ok'\"'\"')'") in set(zip(docker, docker[1:], strict=False))
    podman = arguments(tmp_path, container)
    assert ("--health-cmd", '["python", "-c", "print(\'ok\')"]') in set(zip(podman, podman[1:], strict=False))


def test_a_health_check_of_another_kind_names_the_stack(tmp_path: Path) -> None:
    with pytest.raises(
        TaskDefinitionError, match="^S: HealthCheck.Command must start with CMD or CMD-SHELL, got 'NONE'$"
    ):
        arguments(tmp_path, {**CONTAINER, "HealthCheck": {"Command": ["NONE"]}})


def test_docker_runs_on_the_hosts_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local endpoints listen on 127.0.0.1 only: Docker's default bridge network cannot reach them."""
    (tmp_path / "docker").write_text("#!/bin/sh\nexit 0\n")  # `docker info` answers: the daemon is up
    (tmp_path / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    engine = image_module.find_engine()
    assert (engine.name, engine.run_options, engine.build_options) == ("docker", ("--network", "host"), ())


def test_settings_the_definition_lacks_are_not_added(tmp_path: Path) -> None:
    bare = {k: v for k, v in CONTAINER.items() if k in ("Image", "Environment")}
    argv = arguments(tmp_path, bare, secrets={})
    assert not {"--user", "--read-only", "--cap-drop=ALL", "--health-cmd", "--volume"} & set(argv)
    assert ("--stop-timeout", "30") in set(zip(argv, argv[1:], strict=False))  # ECS's default
    assert argv[-1] == f"localhost/sqs-worker-consumer:{ASSET}"  # the image's own CMD


@pytest.mark.parametrize(
    ("run", "named"),
    [
        ({"environment": {}}, "no value for QUEUE_URL"),
        ({"secrets": {}}, "no value for NOTIFY_WEBHOOK_URL (secret)"),
        ({"volumes": {}}, "no value for volume tmp"),
        ({"secrets": {"NOTIFY_WEBHOOK_URL": "u", "OTHER": "v"}}, "secrets not in the task definition: ['OTHER']"),
    ],
)
def test_a_value_ecs_would_supply_and_the_caller_does_not_is_an_error(
    tmp_path: Path, run: dict[str, Any], named: str
) -> None:
    with pytest.raises(TaskDefinitionError, match="^" + re.escape(f"S: {named}")):
        arguments(tmp_path, **run)


def test_an_image_that_is_not_a_cdk_asset_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskDefinitionError, match="S: the container's Image is not a CDK container asset: 'nginx'"):
        arguments(tmp_path, {**CONTAINER, "Image": "nginx"})


@pytest.mark.parametrize(
    ("container", "where", "unknown"),
    [
        (
            {**CONTAINER, "Ulimits": [], "WorkingDirectory": "/srv"},
            "ContainerDefinitions[0]",
            "['Ulimits', 'WorkingDirectory']",
        ),
        ({**CONTAINER, "Memory": 256}, "ContainerDefinitions[0]", "['Memory']"),
        ({**CONTAINER, "LinuxParameters": {"Tmpfs": []}}, "LinuxParameters", "['Tmpfs']"),
    ],
)
def test_a_container_setting_neither_run_nor_known_harmless_is_refused(
    tmp_path: Path, container: dict[str, Any], where: str, unknown: str
) -> None:
    with pytest.raises(
        TaskDefinitionError,
        match="^" + re.escape(f"S: {where} has keys that cannot be run here as ECS runs them: {unknown} (run here: ["),
    ):
        arguments(tmp_path, container)


def test_a_volume_that_is_not_a_bind_mount_is_refused(tmp_path: Path) -> None:
    outdir = assembly(tmp_path, CONTAINER, {"Name": "tmp", "EFSVolumeConfiguration": {}})
    with pytest.raises(
        TaskDefinitionError,
        match="^"
        + re.escape("S: Volumes['tmp'] has keys that cannot be run here as ECS runs them: ['EFSVolumeConfiguration']"),
    ):
        TaskContainer.from_assembly(outdir, "S")


def test_a_task_definition_without_cpu_says_so(tmp_path: Path) -> None:
    outdir = assembly(tmp_path, CONTAINER)
    template = json.loads((outdir / "S.template.json").read_text())
    del template["Resources"]["Task"]["Properties"]["Cpu"]
    (outdir / "S.template.json").write_text(json.dumps(template))
    with pytest.raises(TaskDefinitionError, match="^S: the task definition has no Cpu \\(Fargate requires it\\)$"):
        TaskContainer.from_assembly(outdir, "S")


def test_a_process_that_ends_without_logging_the_event_raises_its_own_error(tmp_path: Path) -> None:
    process = LoggedProcess([sys.executable, "-c", "print('bye')"], tmp_path / "p.log").start()
    with pytest.raises(EventNotLoggedError, match="^python[0-9.]*: consumer_started not logged in 5 s; log ends:\nbye"):
        process.wait_for("consumer_started", timeout=5)


def test_the_base_comes_from_the_dockerfiles_own_default() -> None:
    base = dockerfile_base(DOCKERFILE)
    recipe = DebianBase.like(base)
    assert base.startswith("python:3.11") and (recipe.release, recipe.python) == ("bookworm", "3.11")
    assert recipe.packages[0] == "python3.11"


def test_a_base_with_no_debian_equivalent_and_a_dockerfile_without_one_say_why(tmp_path: Path) -> None:
    with pytest.raises(ContainerToolingUnavailable, match="'alpine:3' cannot be pulled and is not python"):
        DebianBase.like("alpine:3")
    (tmp_path / "Dockerfile").write_text("FROM python:3.11\n")
    with pytest.raises(ImageBuildError, match="expected one `ARG BASE_IMAGE=<image>` line, found 0"):
        dockerfile_base(tmp_path / "Dockerfile")


# ------------------------------------------------------------------ the base, with stub commands on PATH

STUB_TAR = '#!/bin/sh\necho "tar: ./etc: Cannot open: Permission denied" >&2\nexit 2\n'


def test_a_cached_debian_base_is_used_without_waiting_for_the_registry(
    stub_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASE_CACHED", "1")
    assert ensure_base(stub_engine, DOCKERFILE, log=pytest.fail).startswith("localhost/sqs-worker-base:bookworm-")
    assert [c.split()[0] for c in calls(tmp_path)] == ["image", "image"]  # the pinned base, then the cached one


def test_a_pull_that_times_out_falls_back_to_building_the_debian_base(
    stub_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMPORT_OK", "1")
    logged: list[str] = []
    tag = ensure_base(stub_engine, DOCKERFILE, log=logged.append)
    assert tag.startswith("localhost/sqs-worker-base:bookworm-python3.11-")
    assert [c.split()[0] for c in calls(tmp_path)] == ["image", "image", "pull", "import"]
    assert "did not finish in 0.5 s); building" in logged[0]


def test_a_failed_import_of_the_debian_base_says_why_in_one_line(stub_engine: Engine) -> None:
    with pytest.raises(ContainerToolingUnavailable) as raised:
        ensure_base(stub_engine, DOCKERFILE, log=lambda _: None)
    assert re.fullmatch(
        r"importing the Debian base as localhost/sqs-worker-base:\S+ failed: `\S+ import --change ENV PIP_BREAK_"
        r"SYSTEM_PACKAGES=1 \.\.\.` exited 125: Error: no space left on device",
        str(raised.value),
    )


def test_a_tar_that_fails_stops_the_debian_base(
    stub_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMPORT_OK", "1")
    (tmp_path / "bin" / "tar").write_text(STUB_TAR)
    (tmp_path / "bin" / "tar").chmod(0o755)
    with pytest.raises(
        ContainerToolingUnavailable,
        match="^tar of the Debian base's root file system exited 2: tar: ./etc: Cannot open: Permission denied$",
    ):
        ensure_base(stub_engine, DOCKERFILE, log=lambda _: None)


def test_make_image_reports_a_failure_in_one_line_and_exits_1(
    stub_engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(image_module, "find_engine", lambda: stub_engine)
    with pytest.raises(typer.Exit) as exited:
        image_module.main(context=DOCKERFILE.parents[1], tag="localhost/t:latest")  # the image's context: the root
    assert exited.value.exit_code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("make image: importing the Debian base as localhost/sqs-worker-base:")


def two_workers(tmp_path: Path) -> Path:
    """An assembly shaped as the demo's: two task definitions, each naming its worker in its metadata."""
    outdir = assembly(tmp_path, CONTAINER)
    template = json.loads((outdir / "S.template.json").read_text())
    first = template["Resources"].pop("Task")
    reports = json.loads(json.dumps(first))
    reports["Properties"]["ContainerDefinitions"][0]["StopTimeout"] = 120
    template["Resources"] = {
        "DefaultTask": {**first, "Metadata": {"sqs-worker:worker": "notifications"}},
        "ReportsTask": {**reports, "Metadata": {"sqs-worker:worker": "reports"}},
    }
    (outdir / "S.template.json").write_text(json.dumps(template))
    return outdir


def test_a_stack_of_several_workers_runs_the_named_workers_task_definition(tmp_path: Path) -> None:
    """The worker's task definition is picked by its sqs-worker:worker metadata."""
    outdir = two_workers(tmp_path)
    stop_timeouts = [TaskContainer.from_assembly(outdir, "S", w).stop_timeout for w in ("notifications", "reports")]
    assert stop_timeouts == [35, 120]


@pytest.mark.parametrize(
    ("worker", "rule"), [(None, "name one"), ("nope", "must be one of them")], ids=["no worker", "unknown worker"]
)
def test_a_stack_of_several_workers_without_a_known_worker_lists_them(
    tmp_path: Path, worker: str | None, rule: str
) -> None:
    """Without a worker, or with one the stack lacks, the error names the workers there are."""
    with pytest.raises(TaskDefinitionError) as raised:
        TaskContainer.from_assembly(two_workers(tmp_path), "S", worker)
    assert str(raised.value) == (
        f'S: "worker" {rule}: 2 task definition(s), for the workers notifications, reports: {worker!r}'
    )


def test_a_local_stack_traced_on_aws_runs_its_consumer_untraced() -> None:
    """A traced environment's consumer exports to its task's collector sidecar (CONSUMER_TRACING=otlp): a local run has
    none, so its environment says "off" (the rest as the task definition says); the sidecar is not a worker."""
    environment = [{"Name": "CONSUMER_TRACING", "Value": "otlp"}, {"Name": "OTEL_SERVICE_NAME", "Value": "S"}]
    definition = {
        "Type": "AWS::ECS::TaskDefinition",
        "Properties": {"ContainerDefinitions": [COLLECTOR, {**CONTAINER, "Environment": environment}]},
    }
    workers = _worker_environments({"Task": definition}, {}, "http://127.0.0.1:1")
    assert workers == {"default": {"CONSUMER_TRACING": "off", "OTEL_SERVICE_NAME": "S"}}
