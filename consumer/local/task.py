"""Run a synthesized ECS task definition's container here, as ECS on Fargate starts it.

Everything about the container comes from the cloud assembly, never restated: the image (the
container asset the task definition names, built from the asset directory by :mod:`consumer.local.image`),
command, user, read-only root file system, volumes and mount points, Linux capabilities, init
process, CPU and memory, environment and secret names, stop timeout and health check.

What ECS supplies from outside the template is passed in by the caller: the environment values
resolved to a local stack (as ``consumer local up`` resolves them, plus the endpoint and
credentials a local process needs), the secrets' values, and a host directory for each task
volume (Fargate's ephemeral storage, made as Fargate makes it by
:meth:`TaskContainer.volume_directories`). A name the task definition declares and the caller does not
supply is an error, so the container never starts with less than ECS would give it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.local.image import IMAGE_REPOSITORY, BuiltImage, Engine, build_image
from consumer.stack_outputs import consumer_container, task_definitions

#: ECS's stop timeout when the container definition sets none (Fargate).
ECS_DEFAULT_STOP_TIMEOUT_SECONDS = 30
#: ECS's health check defaults (seconds; retries).
ECS_HEALTH_DEFAULTS = {"Interval": 30, "Timeout": 5, "Retries": 3, "StartPeriod": 0}
#: Container definition keys :meth:`TaskContainer.run_arguments` turns into the engine's options.
RUN_KEYS = frozenset(
    {"Command", "EntryPoint", "Environment", "Secrets", "Image", "User", "ReadonlyRootFilesystem", "LinuxParameters",
     "MountPoints", "StopTimeout", "HealthCheck"}
)  # fmt: skip
#: Keys with nothing to reproduce here: one container is always essential, the name is ECS's, and the
#: awslogs driver ships the stdout this module writes to a file.
HARMLESS_KEYS = frozenset({"Essential", "Name", "LogConfiguration"})
RUN_LINUX_PARAMETERS = frozenset({"Capabilities", "InitProcessEnabled"})
#: A Fargate task volume with only a name is a bind mount on the task's ephemeral storage.
RUN_VOLUME_KEYS = frozenset({"Name"})
#: The mode of a fresh Fargate bind-mount volume (root-owned), when the image declares no VOLUME at its path.
ECS_VOLUME_MODE = 0o755
#: Where the copy of an image's declared VOLUME path is mounted in the container that makes it.
_VOLUME_TARGET = "/ecs-volume"


def _refuse_dependencies(
    stack_name: str, index: int, container: Mapping[str, Any], containers: list[Mapping[str, Any]]
) -> None:
    """The consumer may wait for a sidecar ECS starts first (the tracing collector, not essential): run here without
    it, its spans have nowhere to go, which a local run turns off (consumer/local/stack.py). A dependency on anything
    else is a container this tier does not run, refused like any setting it cannot reproduce."""
    sidecars = {c.get("Name") for c in containers if not c.get("Essential", True)}
    others = [d.get("ContainerName") for d in container.get("DependsOn", []) if d.get("ContainerName") not in sidecars]
    if others:
        raise TaskDefinitionError(
            f"{stack_name}: ContainerDefinitions[{index}] depends on {others!r}, which are not sidecars (non-essential"
            " containers) this tier may run without"
        )


class TaskDefinitionError(Exception):
    """The assembly does not hold what running its container needs; the message names what and where."""


class EventNotLoggedError(Exception):
    """A started process did not log the awaited event in time (or ended first); the message ends with its log."""


@dataclass(frozen=True)
class Mount:
    volume: str
    container_path: str
    read_only: bool


@dataclass(frozen=True)
class TaskContainer:
    """The consumer container of one worker's task definition in a stack (its one essential container; a tracing
    collector sidecar is not run), with the image asset it runs."""

    stack_name: str
    definition: Mapping[str, Any]
    volumes: tuple[str, ...]
    cpu_units: int
    memory_mib: int
    asset_hash: str
    asset_directory: Path
    dockerfile: str
    build_args: Mapping[str, str]
    platform: str | None

    @classmethod
    def from_assembly(cls, outdir: Path, stack_name: str, worker: str | None = None) -> TaskContainer:
        """The container of ``worker``'s task definition in ``stack_name`` (picked by its ``sqs-worker:worker``
        metadata); ``worker`` may be left out when the stack has one task definition."""
        template = read_json(outdir / f"{stack_name}.template.json")
        properties = _task_definition(template, stack_name, worker)["Properties"]
        # The consumer's container: a tracing collector sidecar (not essential) is not run here; without its
        # collector the consumer's spans go nowhere, which the consumer logs and survives.
        try:
            container = consumer_container({"Properties": properties})
        except ValueError as error:
            raise TaskDefinitionError(f"{stack_name}: {error}") from None
        index = properties["ContainerDefinitions"].index(container)
        _refuse_unknown(
            stack_name, f"ContainerDefinitions[{index}]", container, RUN_KEYS | HARMLESS_KEYS | {"DependsOn"}
        )
        _refuse_dependencies(stack_name, index, container, properties["ContainerDefinitions"])
        _refuse_unknown(stack_name, "LinuxParameters", container.get("LinuxParameters", {}), RUN_LINUX_PARAMETERS)
        for volume in properties.get("Volumes", []):
            _refuse_unknown(stack_name, f"Volumes[{volume.get('Name')!r}]", volume, RUN_VOLUME_KEYS)
        asset_hash = image_asset_hash(container.get("Image"), stack_name)
        images = read_json(outdir / f"{stack_name}.assets.json").get("dockerImages", {})
        if asset_hash not in images:
            raise TaskDefinitionError(f"{stack_name}: the image tag {asset_hash} is not a container asset of the stack")
        source = images[asset_hash]["source"]
        return cls(
            stack_name=stack_name,
            definition=container,
            volumes=tuple(v["Name"] for v in properties.get("Volumes", [])),
            cpu_units=int(_required(properties, "Cpu", stack_name)),
            memory_mib=int(_required(properties, "Memory", stack_name)),
            asset_hash=asset_hash,
            asset_directory=outdir / source["directory"],
            dockerfile=source.get("dockerFile", "Dockerfile"),
            build_args=dict(source.get("dockerBuildArgs", {})),
            platform=source.get("platform"),
        )

    def build(self, engine: Engine) -> BuiltImage:
        """Build the asset directory as ``cdk deploy`` would (its Dockerfile, build args and platform)."""
        return build_image(
            self.asset_directory, self.image_tag, self.dockerfile, dict(self.build_args), engine, self.platform
        )

    # ----------------------------------------------------------------- what the definition says

    @property
    def image_tag(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.asset_hash}"

    @property
    def user(self) -> str | None:
        return self.definition.get("User")

    @property
    def stop_timeout(self) -> int:
        return int(self.definition.get("StopTimeout", ECS_DEFAULT_STOP_TIMEOUT_SECONDS))

    @property
    def mounts(self) -> tuple[Mount, ...]:
        return tuple(
            Mount(m["SourceVolume"], m["ContainerPath"], bool(m.get("ReadOnly", False)))
            for m in self.definition.get("MountPoints", [])
        )

    @property
    def environment_names(self) -> tuple[str, ...]:
        return tuple(e["Name"] for e in self.definition.get("Environment", []))

    @property
    def secret_names(self) -> tuple[str, ...]:
        return tuple(s["Name"] for s in self.definition.get("Secrets", []))

    @property
    def health_check(self) -> Mapping[str, Any] | None:
        check = self.definition.get("HealthCheck")
        return {**ECS_HEALTH_DEFAULTS, **check} if check else None

    def volume_directories(self, engine: Engine, root: Path, image: str | None = None) -> dict[str, Path]:
        """A fresh host directory under ``root`` per task volume, as Fargate makes its bind mounts.

        ECS's bind mounts page (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/bind-mounts.html):
        "By default, the volume permissions are set to 0755 and the owner as root", and "the Amazon ECS
        data plane looks for a VOLUME directive. If the absolute path that's specified in the VOLUME
        directive is the same as the containerPath that's specified in the task definition, the data in the
        VOLUME directive path is copied to the data volume." So each directory starts empty with mode 0755,
        owned by the user running this (root here; a rootless engine maps that user to the container's
        root), and where ``image`` declares a VOLUME at a mount's container path, that path's contents and
        mode are copied in from the image.
        """
        image = image or self.image_tag
        declared = engine.image_volumes(image)
        directories: dict[str, Path] = {}
        for volume in self.volumes:
            directory = root / volume
            directory.mkdir(parents=True)
            directory.chmod(ECS_VOLUME_MODE)
            directories[volume] = directory
        for mount in self.mounts:
            if mount.container_path in declared:
                _copy_image_path(engine, image, mount.container_path, directories[mount.volume])
        return directories

    # ----------------------------------------------------------------- as an engine's run command

    def run_arguments(
        self,
        engine: Engine,
        *,
        name: str,
        environment: Mapping[str, str],
        secrets: Mapping[str, str] | None = None,
        volumes: Mapping[str, Path],
        image: str | None = None,
        command: list[str] | None = None,
    ) -> list[str]:
        """``<engine> run ...`` for this container; ``environment`` must hold every declared name.

        ``command`` replaces the definition's (a probe in the same container set-up), as ECS's
        container overrides do.
        """
        secrets = secrets or {}
        missing = [n for n in self.environment_names if n not in environment]
        missing += [f"{n} (secret)" for n in self.secret_names if n not in secrets]
        missing += [f"volume {v}" for v in self.volumes if v not in volumes]
        if missing:
            raise TaskDefinitionError(f"{self.stack_name}: no value for {', '.join(missing)}")
        undeclared = sorted(set(secrets) - set(self.secret_names))
        if undeclared:
            raise TaskDefinitionError(f"{self.stack_name}: secrets not in the task definition: {undeclared}")
        definition = self.definition
        arguments = [*engine.command, "run", "--name", name, *engine.run_options]
        arguments += ["--cpus", f"{self.cpu_units / 1024:g}", "--memory", f"{self.memory_mib}m"]
        if self.user:
            arguments += ["--user", self.user]
        if definition.get("ReadonlyRootFilesystem"):
            arguments.append("--read-only")
            if engine.name == "podman":
                arguments.append("--read-only-tmpfs=false")  # podman adds writable /tmp, /run otherwise
        for mount in self.mounts:
            mode = "ro" if mount.read_only else "rw"
            arguments += ["--volume", f"{volumes[mount.volume]}:{mount.container_path}:{mode}"]
        linux = definition.get("LinuxParameters", {})
        arguments += [f"--cap-drop={c}" for c in linux.get("Capabilities", {}).get("Drop", [])]
        arguments += [f"--cap-add={c}" for c in linux.get("Capabilities", {}).get("Add", [])]
        if linux.get("InitProcessEnabled"):
            arguments.append("--init")
        arguments += _health_arguments(self.health_check, engine, self.stack_name)
        arguments += ["--stop-timeout", str(self.stop_timeout)]
        for key, value in {**environment, **secrets}.items():
            arguments += ["--env", f"{key}={value}"]
        command = list(definition.get("Command", []) if command is None else command)
        options, after_image = entry_point_arguments(engine, list(definition.get("EntryPoint", [])), command)
        return [*arguments, *options, image or self.image_tag, *after_image]


def entry_point_arguments(engine: Engine, entry_point: list[str], command: list[str]) -> tuple[list[str], list[str]]:
    """The engine's options replacing the image's ENTRYPOINT with ``entry_point`` (none when it is empty: the image's
    own), and the arguments after the image (``command``, replacing its CMD), as ECS's and Lambda's overrides do."""
    if entry_point and engine.name == "docker":
        # Docker's --entrypoint is one executable (docker/cli: Entrypoint = []string{value}): the rest of the
        # EntryPoint goes first among the arguments, which Docker appends to it, as the Command is.
        return ["--entrypoint", entry_point[0]], [*entry_point[1:], *command]
    if entry_point:
        return ["--entrypoint", json.dumps(entry_point)], command  # podman takes the whole list as a JSON array
    return [], command


def _health_arguments(check: Mapping[str, Any] | None, engine: Engine, stack_name: str) -> list[str]:
    if not check:
        return []
    kind, *command = check["Command"]
    if kind == "CMD-SHELL":
        health_command = command[0]
    elif kind == "CMD" and engine.name == "docker":
        # Docker's --health-cmd is always CMD-SHELL (docker/cli: Test = {"CMD-SHELL", value}): quote the exec
        # form so the shell runs exactly those arguments.
        health_command = shlex.join(command)
    elif kind == "CMD":
        health_command = json.dumps(command)  # podman runs a JSON array in exec form
    else:
        raise TaskDefinitionError(f"{stack_name}: HealthCheck.Command must start with CMD or CMD-SHELL, got {kind!r}")
    # podman schedules a check with a systemd timer; without systemd (containers here) it prints two errors into
    # the container's output instead. "disable" sets no timer: TaskRun.health_check_passes runs the check on
    # demand (`podman healthcheck run`), which is how the container tier sees it anyway.
    interval = "disable" if engine.name == "podman" else f"{check['Interval']}s"
    return [
        "--health-cmd", health_command,
        "--health-interval", interval,
        "--health-timeout", f"{check['Timeout']}s",
        "--health-retries", str(check["Retries"]),
        "--health-start-period", f"{check['StartPeriod']}s",
    ]  # fmt: skip


def _task_definition(template: Mapping[str, Any], stack_name: str, worker: str | None) -> Mapping[str, Any]:
    """The task definition ``worker`` runs, by the metadata :class:`infra.worker.Worker` sets; the only one when
    ``worker`` is None; else a :class:`TaskDefinitionError` listing the workers there are."""
    definitions = task_definitions(template["Resources"])
    if not definitions:
        raise TaskDefinitionError(f"{stack_name}: expected an AWS::ECS::TaskDefinition, found none")
    if worker is None and len(definitions) == 1:
        return definitions[0][1]
    by_worker = dict(definitions)
    if worker is not None and worker in by_worker:
        return by_worker[worker]
    workers = ", ".join(name or "(unnamed)" for name in by_worker)
    rule = "name one" if worker is None else "must be one of them"
    raise TaskDefinitionError(
        f'{stack_name}: "worker" {rule}: {len(definitions)} task definition(s), for the workers {workers}: {worker!r}'
    )


def _required(properties: Mapping[str, Any], key: str, stack_name: str) -> Any:
    if key not in properties:
        raise TaskDefinitionError(f"{stack_name}: the task definition has no {key} (Fargate requires it)")
    return properties[key]


def _refuse_unknown(stack_name: str, where: str, definition: Mapping[str, Any], known: frozenset[str]) -> None:
    """A key this module neither runs nor knows to be harmless would be dropped silently: refuse it instead."""
    unknown = sorted(set(definition) - known)
    if unknown:
        raise TaskDefinitionError(
            f"{stack_name}: {where} has keys that cannot be run here as ECS runs them: {unknown} "
            f"(run here: {sorted(known)})"
        )


def _copy_image_path(engine: Engine, image: str, path: str, directory: Path) -> None:
    """Copy ``path`` of ``image`` (contents, owners and the directory's own mode) into ``directory``."""
    engine(
        "run", "--rm", *engine.run_options, "--user", "0:0", "--entrypoint", "cp",
        "--volume", f"{directory}:{_VOLUME_TARGET}", image, "-a", f"{path.rstrip('/')}/.", f"{_VOLUME_TARGET}/",
    )  # fmt: skip


def image_asset_hash(image: Any, stack_name: str) -> str:
    """The tag of a CDK container asset's image reference: ``{"Fn::Sub": "...container-assets-...:<hash>"}``."""
    reference = image.get("Fn::Sub") if isinstance(image, dict) else image
    if not isinstance(reference, str) or "container-assets" not in reference:
        raise TaskDefinitionError(f"{stack_name}: the container's Image is not a CDK container asset: {image!r}")
    return reference.rsplit(":", 1)[-1]


def read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise TaskDefinitionError(f"{path} does not exist; synthesize first (python app.py)")
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def container_state(engine: Engine, name: str) -> dict[str, Any]:
    """``<engine> inspect`` of a container: its State and HostConfig among the rest."""
    state: dict[str, Any]
    (state,) = json.loads(engine("container", "inspect", name).stdout)
    return state


def remove(engine: Engine, name: str) -> None:
    """Remove the container ``name`` if it exists, running or not."""
    engine("rm", "--force", name, check=False)


class LoggedProcess:
    """A process whose stdout (JSON log lines) goes to a file: started, watched for events, stopped by SIGTERM."""

    def __init__(self, arguments: list[str], log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.arguments, self.log_path, self.env = arguments, log_path, env
        self.name = Path(arguments[0]).name
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> LoggedProcess:
        self.started_at = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.arguments, stdout=log, stderr=subprocess.STDOUT, env=None if self.env is None else dict(self.env)
            )
        return self

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (EMF and other lines skipped)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith('{"timestamp"') and '"event"' in line]

    def wait_for(self, event: str, timeout: float = 60.0) -> float:
        """Seconds from start until ``event`` was logged; EventNotLoggedError if not in time or the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("event") == event for e in self.events()):
                return time.monotonic() - self.started_at
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log_path.read_text(errors="replace")[-3000:]
        raise EventNotLoggedError(f"{self.name}: {event} not logged in {timeout:.0f} s; log ends:\n{tail}")

    def stop(self, timeout: float = 120.0) -> tuple[int, float]:
        """SIGTERM, then wait. Returns (exit code, seconds from the signal to the exit)."""
        assert self.process is not None
        began = time.monotonic()
        self.process.terminate()
        return self.process.wait(timeout=timeout), time.monotonic() - began

    def remove(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)


class TaskRun(LoggedProcess):
    """The container of a :class:`TaskContainer` started as ECS starts it: stdout to a log file (the
    awslogs driver's view); stopped as ECS stops it, SIGTERM then SIGKILL past the stop timeout."""

    def __init__(self, engine: Engine, task: TaskContainer, log_path: Path, **run: Any) -> None:
        super().__init__(task.run_arguments(engine, **run), log_path)
        self.engine, self.task = engine, task
        self.name: str = run["name"]

    def start(self) -> TaskRun:
        remove(self.engine, self.name)
        super().start()
        return self

    def stop(self, timeout: float = 60.0) -> tuple[int, float]:
        """``<engine> stop -t <StopTimeout>``. Returns (exit code, seconds from the signal to the exit)."""
        began = time.monotonic()
        self.engine("stop", "-t", str(self.task.stop_timeout), self.name, timeout=self.task.stop_timeout + timeout)
        assert self.process is not None
        return self.process.wait(timeout=timeout), time.monotonic() - began

    def state(self) -> dict[str, Any]:
        return container_state(self.engine, self.name)

    def health_check_passes(self) -> bool:
        """Whether the definition's health check passes. podman runs it on demand (``healthcheck run``: its own
        schedule needs systemd timers); Docker runs it on its own schedule, so this waits for Docker's verdict
        as long as the check's start period, retries and timeout allow."""
        if self.engine.name == "podman":
            return self.engine("healthcheck", "run", self.name, check=False).returncode == 0
        check = self.task.health_check
        if check is None:
            raise TaskDefinitionError(f"{self.task.stack_name}: the task definition has no HealthCheck")
        waited = check["StartPeriod"] + (check["Interval"] + check["Timeout"]) * (check["Retries"] + 1)
        deadline = time.monotonic() + waited
        while time.monotonic() < deadline:
            status = (self.state()["State"].get("Health") or {}).get("Status")
            if status in ("healthy", "unhealthy"):
                return bool(status == "healthy")
            time.sleep(0.5)
        return False

    def remove(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.engine("kill", self.name, check=False)
            self.process.wait(timeout=60)
        remove(self.engine, self.name)
