"""The consumer image, built here as ``cdk deploy`` builds it: ``make image`` (``python -m consumer.local.image``).

``cdk deploy`` builds ``consumer/Dockerfile`` with Docker and pushes the result as a container
asset. This module builds the same Dockerfile from the same context (the repository root through its
``.dockerignore``: the runtime and the team package ``workers/``; or the asset directory a synthesis wrote)
with Docker where its daemon answers and with podman otherwise.

The base is the Dockerfile's own ``BASE_IMAGE`` default (Python's slim image, pinned by digest).
Where that registry cannot be reached, the base is the same Debian release's own Python, built by
debootstrap and kept in the engine's image store under a tag that names its recipe, so a machine
builds it once. That base is for building and testing here only: what AWS runs is built from the
pinned default.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as host
import re
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any

import typer

#: The build context and the Dockerfile in it, as infra/service.py gives them to the CDK asset (consumer/ never
#: imports infra/, so both name them).
IMAGE_CONTEXT = Path(__file__).resolve().parents[2]
IMAGE_DOCKERFILE = "consumer/Dockerfile"
#: Where every locally built consumer image goes: ``:latest`` from make image, ``:<asset hash>`` from a task.
IMAGE_REPOSITORY = "localhost/sqs-worker-consumer"
DEFAULT_TAG = f"{IMAGE_REPOSITORY}:latest"
#: The task definition's default runtime platform (X86_64 Linux), which the CDK asset is built for too; a worker
#: with ``"architecture": "arm64"`` in cdk.json gets linux/arm64 (infra/service.py, IMAGE_PLATFORMS).
TASK_PLATFORM = "linux/amd64"
#: A build platform -> Debian's name of its architecture (debootstrap --arch, the engine's --arch).
DEBIAN_ARCHITECTURES = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
#: What ``uname -m`` says -> Debian's name: the architecture this machine runs without an emulator.
_MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
#: The first 20 bytes of an ELF executable of each architecture (e_machine 0x3e, 0xb7): what a binfmt_misc entry
#: must match for the kernel to hand that architecture's programs to an emulator.
#: https://docs.kernel.org/admin-guide/binfmt-misc.html
ELF_HEADERS = {
    "amd64": bytes.fromhex("7f454c4602010100000000000000000002003e00"),
    "arm64": bytes.fromhex("7f454c460201010000000000000000000200b700"),
}
BINFMT_MISC = Path("/proc/sys/fs/binfmt_misc")
BASE_REPOSITORY = "localhost/sqs-worker-base"
#: Where debootstrap downloads from; DEBIAN_MIRROR overrides it.
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: Bump to rebuild every cached Debian base (the tag also hashes the package list and CA bundle).
BASE_RECIPE_VERSION = "1"
PULL_TIMEOUT_SECONDS = 120
DEBOOTSTRAP_TIMEOUT_SECONDS = 900
BUILD_TIMEOUT_SECONDS = 900
#: Both, for an architecture this machine only emulates: debootstrap's second stage and pip's installs run under
#: qemu (measured on 2 shared cores: an arm64 base 7.6 min, the arm64 image 4.5 min; docs/deploy.md).
EMULATED_TIMEOUT_FACTOR = 2

_BASE_ARG = re.compile(r"^ARG BASE_IMAGE=(\S+)$", re.MULTILINE)
#: python:<major.minor>[.patch]-slim-<debian release>[@digest]
_PYTHON_SLIM = re.compile(r"python:(?P<python>\d+\.\d+)(?:\.\d+)?-slim-(?P<release>[a-z]+)")


class ContainerToolingUnavailable(Exception):
    """No engine can run containers here, or no base can be had; the message says why in one line."""


class ImageBuildError(Exception):
    """The engine ran the Dockerfile and it failed; the message carries the build's last lines."""


class EngineCommandError(Exception):
    """An engine command failed or did not finish in time; the message names the command and its last line."""


def _last_line(text: str, default: str = "no reason given") -> str:
    return (text.strip().splitlines() or [default])[-1]


@dataclass(frozen=True)
class Engine:
    """A container engine's command line: ``docker`` or ``podman`` with the options this machine needs."""

    name: str
    command: tuple[str, ...]
    #: Options every ``run`` takes here: the host's network, since the local endpoints listen on 127.0.0.1 only.
    run_options: tuple[str, ...] = ()
    #: Options every ``build`` takes here.
    build_options: tuple[str, ...] = ()

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True, stdin: IO[Any] | int | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``<engine> *args``; EngineCommandError if it times out, or (with ``check``) exits non-zero."""
        command = [*self.command, *args]
        shown = " ".join(command[:4] + (["..."] if len(command) > 4 else []))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=stdin)
        except subprocess.TimeoutExpired as expired:
            raise EngineCommandError(f"`{shown}` did not finish in {timeout:g} s") from expired
        if check and done.returncode != 0:
            raise EngineCommandError(f"`{shown}` exited {done.returncode}: {_last_line(done.stderr or done.stdout)}")
        return done

    def has_image(self, reference: str) -> bool:
        return self("image", "inspect", reference, check=False).returncode == 0

    def image_size(self, reference: str) -> int:
        return int(self("image", "inspect", "--format", "{{.Size}}", reference).stdout.strip())

    def image_architecture(self, reference: str) -> str:
        return self("image", "inspect", "--format", "{{.Architecture}}", reference).stdout.strip()

    def image_volumes(self, reference: str) -> set[str]:
        """The paths the image declares with ``VOLUME`` (its ``Config.Volumes``)."""
        declared = json.loads(self("image", "inspect", "--format", "{{json .Config.Volumes}}", reference).stdout)
        return set(declared or {})


#: The container's process (thread) limit: the consumer needs concurrency + pollers + a few threads. Stated
#: because podman's default asks for more than an unprivileged host allows (this one refuses 65535).
NPROC_LIMIT = 4096


def _ulimit_options() -> tuple[str, ...]:
    """Limits no higher than this process's own: podman's defaults ask for more, which some hosts refuse."""
    options: list[str] = []
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    if resource.RLIM_INFINITY not in nofile:
        options += ["--ulimit", f"nofile={nofile[0]}:{nofile[1]}"]
    nproc = min([NPROC_LIMIT, *(n for n in resource.getrlimit(resource.RLIMIT_NPROC) if n != resource.RLIM_INFINITY)])
    return (*options, "--ulimit", f"nproc={nproc}:{nproc}")


def _why_not(command: list[str]) -> str | None:
    """None if ``command`` exits 0; otherwise its first line of complaint."""
    if shutil.which(command[0]) is None:
        return f"{command[0]} is not installed"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return f"`{' '.join(command)}` did not answer in 20 s"
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"`{' '.join(command)}` exited {done.returncode}"


HOST_NETWORK = ("--network", "host")


def find_engine() -> Engine:
    """Docker if its daemon answers, else podman; ContainerToolingUnavailable says why neither can run."""
    docker = _why_not(["docker", "info"])
    if docker is None:
        # Docker's daemon sets its own limits and builds on its own network; runs need the host's (Docker
        # Desktop: host networking enabled in its settings).
        return Engine("docker", ("docker",), run_options=HOST_NETWORK)
    podman = _why_not(["podman", "info"])
    if podman is None:
        # runc where installed: crun (podman's usual default) refuses some hybrid cgroup layouts.
        runtime = ("--runtime", "runc") if shutil.which("runc") else ()
        options = (*_ulimit_options(), *HOST_NETWORK)  # podman build's RUN steps ask for limits too
        return Engine("podman", ("podman", *runtime), run_options=options, build_options=options)
    raise ContainerToolingUnavailable(
        f"no container engine: docker: {docker}; podman: {podman} "
        "(on Debian: apt-get install podman runc debootstrap, as .ci/run does)"
    )


def dockerfile_base(dockerfile: Path) -> str:
    """The ``ARG BASE_IMAGE`` default of ``dockerfile``: the base AWS builds from."""
    found: list[str] = _BASE_ARG.findall(dockerfile.read_text())
    if len(found) != 1:
        raise ImageBuildError(f"{dockerfile}: expected one `ARG BASE_IMAGE=<image>` line, found {len(found)}")
    return found[0]


def host_architecture() -> str:
    """This machine's architecture in Debian's name (amd64, arm64), or what ``uname -m`` says if neither."""
    machine = host.machine()
    return _MACHINES.get(machine.lower(), machine)


def emulated(architecture: str) -> bool:
    """Whether this machine runs ``architecture``'s programs (Debian's name) only through an emulator."""
    return architecture != host_architecture()


def architecture_of(platform: str | None) -> str:
    """Debian's name of a build platform's architecture; None: this machine's."""
    if platform is None:
        return host_architecture()
    if platform not in DEBIAN_ARCHITECTURES:
        raise ContainerToolingUnavailable(
            f"no Debian architecture known for platform {platform!r} (one of {', '.join(DEBIAN_ARCHITECTURES)})"
        )
    return DEBIAN_ARCHITECTURES[platform]


def _binfmt_entry(text: str) -> dict[str, str]:
    """A binfmt_misc entry's file ("enabled", "interpreter /path", "flags: PF", "offset 0", "magic ..", "mask ..")."""
    entry: dict[str, str] = {}
    for line in text.splitlines():
        if line in ("enabled", "disabled"):
            entry["state"] = line
        else:
            key, _, value = line.partition(" ")
            entry[key.rstrip(":")] = value.strip()
    return entry


def _matches(entry: Mapping[str, str], header: bytes) -> bool:
    """Whether the kernel would hand a program starting with ``header`` to this entry (its offset, magic and mask)."""
    if "magic" not in entry:
        return False  # an extension entry (jar, and the like)
    magic = bytes.fromhex(entry["magic"])
    mask = bytes.fromhex(entry["mask"]) if entry.get("mask") else b"\xff" * len(magic)
    window = header[int(entry.get("offset", "0")) :][: len(magic)]
    return len(window) == len(magic) and all(b & m == g & m for b, m, g in zip(window, mask, magic, strict=True))


def emulation_missing(platform: str | None, binfmt: Path = BINFMT_MISC) -> str | None:
    """None if this machine can run ``platform``'s programs in a container: they are its own, or a binfmt_misc entry
    hands them to an emulator with the F flag (the kernel opens the emulator once, so it runs inside any container's
    file system); else what is missing, in one line. Docker Desktop (not Linux) brings its own emulation."""
    architecture = architecture_of(platform)
    if not emulated(architecture) or sys.platform != "linux":
        return None
    if architecture not in ELF_HEADERS:
        return f"no ELF header known for {architecture}, so its emulation cannot be checked"
    fix = "on Debian, as root: apt-get install qemu-user-static binfmt-support"
    if not (binfmt / "status").is_file():
        return (
            f"{platform} needs an emulator but {binfmt} is not mounted (no binfmt_misc; as root: mount -t"
            f" binfmt_misc binfmt_misc {binfmt}, then {fix.removeprefix('on Debian, as root: ')})"
        )
    if (binfmt / "status").read_text().strip() != "enabled":
        return f"{platform} needs an emulator but binfmt_misc is disabled ({binfmt}/status)"
    found = [
        (path.name, _binfmt_entry(path.read_text()))
        for path in sorted(binfmt.iterdir())
        if path.name not in ("status", "register") and path.is_file()
    ]
    matching = [(name, entry) for name, entry in found if _matches(entry, ELF_HEADERS[architecture])]
    usable = [name for name, entry in matching if entry.get("state") == "enabled" and "F" in entry.get("flags", "")]
    if usable:
        return None
    if matching:
        name, entry = matching[0]
        state = "disabled" if entry.get("state") != "enabled" else "registered without the F flag"
        return (
            f"{platform} needs an emulator: {binfmt}/{name} ({entry.get('interpreter')}) is {state}, which a container"
            f" cannot use ({fix}, which registers it with F)"
        )
    return f"{platform} needs an emulator and no binfmt_misc entry runs {architecture} programs ({fix})"


@dataclass(frozen=True)
class DebianBase:
    """The recipe of a base with the same Debian release and Python minor version as the real one, for the
    ``architecture`` (Debian's name) the image is built for."""

    release: str
    python: str
    architecture: str = field(default_factory=host_architecture)
    mirror: str = field(default_factory=lambda: os.environ.get("DEBIAN_MIRROR", DEBIAN_MIRROR))

    @classmethod
    def like(cls, real_base: str, platform: str | None = None) -> DebianBase:
        match = _PYTHON_SLIM.search(real_base)
        if not match:
            raise ContainerToolingUnavailable(
                f"BASE_IMAGE {real_base!r} cannot be pulled and is not python:<version>-slim-<debian release>, "
                "so no Debian equivalent can be built here"
            )
        return cls(release=match["release"], python=match["python"], architecture=architecture_of(platform))

    @property
    def packages(self) -> tuple[str, ...]:
        # python-is-python3: the slim image's `python`; ca-certificates: pip's TLS.
        return (f"python{self.python}", "python3-pip", "python-is-python3", "ca-certificates")

    def tag(self, ca_bundle: bytes) -> str:
        recipe = "\n".join([BASE_RECIPE_VERSION, self.release, self.architecture, self.mirror, *self.packages])
        digest = hashlib.sha256(recipe.encode() + ca_bundle).hexdigest()[:12]
        return f"{BASE_REPOSITORY}:{self.release}-python{self.python}-{self.architecture}-{digest}"


def _host_ca_bundle() -> bytes:
    """This machine's CA bundle: pip inside the build must trust what pip here trusts."""
    path = os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile
    return Path(path).read_bytes() if path and Path(path).is_file() else b""


def ensure_base(
    engine: Engine, dockerfile: Path, log: Callable[[str], None] = print, platform: str | None = None
) -> str:
    """The BASE_IMAGE to build with for ``platform`` (None: this machine's): the pinned default if in the store for
    that architecture, else a Debian base already built here (a machine that built one could not pull, so it does
    not wait for the registry again), else the pinned default pulled, else a Debian base built now. A pull that fails
    or times out falls back."""
    real = dockerfile_base(dockerfile)
    architecture = architecture_of(platform)
    if engine.has_image(real) and engine.image_architecture(real) == architecture:
        return real
    ca_bundle = _host_ca_bundle()
    recipe = DebianBase.like(real, platform) if _PYTHON_SLIM.search(real) else None
    if recipe is not None and engine.has_image(cached := recipe.tag(ca_bundle)):
        return cached
    try:
        engine("pull", *(["--platform", platform] if platform else []), real, timeout=PULL_TIMEOUT_SECONDS)
        return real
    except EngineCommandError as error:
        why = str(error)
    recipe = recipe or DebianBase.like(real, platform)  # says why there is no Debian equivalent
    tag = recipe.tag(ca_bundle)
    took = "minutes: its set-up runs emulated" if emulated(recipe.architecture) else "about a minute"
    log(f"# {real} cannot be pulled ({why}); building {tag} with debootstrap ({took}, once)")
    _build_debian_base(engine, recipe, ca_bundle, tag)
    return tag


def _build_debian_base(engine: Engine, recipe: DebianBase, ca_bundle: bytes, tag: str) -> None:
    if shutil.which("debootstrap") is None:
        raise ContainerToolingUnavailable("the pinned base cannot be pulled and debootstrap is not installed")
    if os.geteuid() != 0:
        raise ContainerToolingUnavailable("the pinned base cannot be pulled and debootstrap needs root")
    with tempfile.TemporaryDirectory(prefix="sqs-worker-base-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        # A foreign --arch: debootstrap runs its second stage (the packages' scripts) through binfmt_misc's emulator.
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
                   f"--arch={recipe.architecture}", recipe.release, str(rootfs), recipe.mirror]  # fmt: skip
        timeout = DEBOOTSTRAP_TIMEOUT_SECONDS * (EMULATED_TIMEOUT_FACTOR if emulated(recipe.architecture) else 1)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            raise ContainerToolingUnavailable(
                f"debootstrap {recipe.release} ({recipe.architecture}) from {recipe.mirror} did not finish in"
                f" {timeout} s"
            ) from expired
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            raise ContainerToolingUnavailable(f"debootstrap {recipe.release} from {recipe.mirror} failed: {tail}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / cache, ignore_errors=True)
        if ca_bundle:
            with (rootfs / "etc/ssl/certs/ca-certificates.crt").open("ab") as bundle:
                bundle.write(b"\n" + ca_bundle)
        _import_rootfs(engine, rootfs, tag, recipe.architecture)


def _import_rootfs(engine: Engine, rootfs: Path, tag: str, architecture: str) -> None:
    """``tar -c rootfs | <engine> import - tag``; ContainerToolingUnavailable if either side fails."""
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert tar.stdout is not None and tar.stderr is not None
    failure: EngineCommandError | None = None
    try:
        # Debian marks its Python externally managed; the image installs into it on purpose, as the slim image does.
        # Labelled with its architecture (an import is labelled the host's otherwise): docker import takes a platform.
        label = ["--platform", f"linux/{architecture}"] if engine.name == "docker" else ["--arch", architecture]
        engine("import", "--change", "ENV PIP_BREAK_SYSTEM_PACKAGES=1", *label, "-", tag, stdin=tar.stdout,
               timeout=300)  # fmt: skip
    except EngineCommandError as error:
        failure = error
    finally:
        tar.stdout.close()  # an import that stopped reading must not leave tar blocked on a full pipe
        tar_code = tar.wait()
    if tar_code != 0 and (failure is None or tar_code != -13):  # -13: SIGPIPE, because the import failed first
        why = _last_line(tar.stderr.read().decode(errors="replace"))
        raise ContainerToolingUnavailable(f"tar of the Debian base's root file system exited {tar_code}: {why}")
    if failure is not None:
        raise ContainerToolingUnavailable(f"importing the Debian base as {tag} failed: {failure}") from failure


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    engine: str
    base: str
    size_bytes: int
    seconds: float


def build_image(
    context: Path = IMAGE_CONTEXT,
    tag: str = DEFAULT_TAG,
    dockerfile: str = IMAGE_DOCKERFILE,
    build_args: dict[str, str] | None = None,
    engine: Engine | None = None,
    platform: str | None = None,
    log: Callable[[str], None] = print,
) -> BuiltImage:
    """Build ``context`` (its ``dockerfile``) as ``tag`` for ``platform``; ImageBuildError if the Dockerfile fails,
    ContainerToolingUnavailable if this machine cannot run ``platform``'s programs (no emulator: what is missing)."""
    engine = engine or find_engine()
    missing = emulation_missing(platform)
    if missing is not None:
        raise ContainerToolingUnavailable(missing)
    base = ensure_base(engine, context / dockerfile, log=log, platform=platform)
    arguments = {**(build_args or {}), "BASE_IMAGE": base}
    started = time.monotonic()
    try:
        built = engine(
            "build", *engine.build_options, *(f"--build-arg={k}={v}" for k, v in arguments.items()),
            *(["--platform", platform] if platform else []),
            "-f", str(context / dockerfile), "-t", tag, str(context),
            timeout=BUILD_TIMEOUT_SECONDS * (EMULATED_TIMEOUT_FACTOR if emulated(architecture_of(platform)) else 1),
            check=False,
        )  # fmt: skip
    except EngineCommandError as error:
        raise ImageBuildError(f"{engine.name} build of {context / dockerfile}: {error}") from error
    if built.returncode != 0:
        tail = "\n".join((built.stdout + built.stderr).strip().splitlines()[-12:])
        raise ImageBuildError(f"{engine.name} build of {context / dockerfile} failed:\n{tail}")
    return BuiltImage(tag, engine.name, base, engine.image_size(tag), time.monotonic() - started)


app = typer.Typer(add_completion=False)


@app.command()
def main(
    context: Path = typer.Option(IMAGE_CONTEXT, help="Build context (the CDK asset's source)."),
    tag: str = typer.Option(DEFAULT_TAG, help="Tag of the built image."),
    platform: Annotated[
        str, typer.Option(help=f"Build platform, as a worker's architecture asks: {', '.join(DEBIAN_ARCHITECTURES)}.")
    ] = TASK_PLATFORM,
) -> None:
    """Build the consumer image with Docker or podman (make image)."""
    try:
        image = build_image(context, tag, platform=platform)
    except (ContainerToolingUnavailable, ImageBuildError, EngineCommandError) as error:
        print(f"make image: {error}", file=sys.stderr)
        raise typer.Exit(1) from error
    print(
        f"built {image.tag} with {image.engine} in {image.seconds:.1f} s: {image.size_bytes / 1e6:.0f} MB, "
        f"base {image.base}"
    )


if __name__ == "__main__":
    app()
