"""`make diff` and `make deploy` without AWS credentials: one line saying what is missing, before any synthesis.

The real targets run from the repository root in a new terminal's environment with nothing to find: an empty
HOME, no AWS_ variable, and the instance metadata address pointed at a local port that refuses (the Makefile
lets diff and deploy use an instance role, so on an EC2 runner the real address would answer). Where a source
is wanted, it is moto's server (its instance metadata) or dummy keys; nothing here reaches AWS.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from consumer.exit_codes import ExitCode
from consumer.local import credentials
from consumer.local.credentials import METADATA_ATTEMPTS, METADATA_TIMEOUT_SECONDS
from tests.integration.conftest import ROOT

#: What the check's line says, in its words: what is missing, and both usual ways to provide it.
MISSING = "no AWS credentials found"
WAYS = ("AWS_PROFILE=<name>", "aws configure sso", "aws sso login", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


#: make, never remaking the venv or the CLI this suite runs on (-o: "old", up to date whatever its prerequisites'
#: times): a requirements file newer than the stamp would otherwise have make rebuild .venv with the bare PATH's
#: python3, which may be another Python than the venv's.
MAKE = ["make", "-o", ".venv/.installed", "-o", "node_modules/.installed"]


def environments() -> list[str]:
    """The environments the repository's cdk.json declares (the check runs before anything reads them)."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    return list(context["sqs-worker:environments"])


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port bound but not listening: every connection to it is refused at once."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def hanging_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers (a metadata address that drops requests)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    accepted.append(server.accept()[0])

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        yield server.getsockname()[1]
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()


def bare_environment(home: Path, metadata_url: str, **extra: str) -> dict[str, str]:
    """A terminal with no AWS settings: ``home`` empty, instance metadata at ``metadata_url``, plus ``extra``."""
    home.mkdir(exist_ok=True)
    base = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata_url,
    }
    return base | extra


@pytest.fixture
def check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``python -m consumer.local.credentials WHAT...`` (its ``main``) in this process, in exactly ``environment``:
    every other variable is unset for the call. The make tests run the module as make does, a process of its own."""

    def run(environment: dict[str, str], *what: str) -> subprocess.CompletedProcess[str]:
        for key in list(os.environ):
            monkeypatch.delenv(key)
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = credentials.main(list(what))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["consumer.local.credentials", *what], code, out.out, out.err)

    return run


@pytest.mark.real
@pytest.mark.parametrize(("target", "pick"), [("deploy", 0), ("diff", -1)])
def test_make_without_credentials_says_what_is_missing_in_one_line(
    tmp_path: Path, refusing_port: int, target: str, pick: int
) -> None:
    """`make deploy ENV=<first>` and `make diff ENV=<last>`: the check's one line and make's own, exit status
    CONFIG; no "Unable to resolve AWS account", no cdk command started, nothing synthesized.
    Real: the check's exit code as make sees it, in an environment with no credentials at all."""
    out = tmp_path / "cdk.out"
    environment = bare_environment(tmp_path / "home", f"http://127.0.0.1:{refusing_port}/")
    command = [*MAKE, target, f"ENV={environments()[pick]}", f"CDK_ARGS=--output={out}"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    check_line, make_line = done.stderr.splitlines()
    assert check_line.startswith(f"make {target}: {MISSING} (")
    assert all(way in check_line for way in WAYS), check_line
    assert "EC2" in check_line and "ECS" in check_line
    assert make_line.startswith("make: *** [") and make_line.endswith(f"{target}] Error {int(ExitCode.CONFIG)}")
    assert done.returncode != 0
    assert "Unable to resolve AWS account" not in done.stdout + done.stderr
    assert "cdk" not in done.stdout  # make echoes the cdk command only when it starts it
    assert not out.exists()
    assert seconds < 30, f"{seconds:.1f} s: a synthesis alone takes longer"


def test_check_passes_with_keys_in_the_environment(tmp_path: Path, refusing_port: int, check: Any) -> None:
    """Dummy AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: exit 0, nothing printed."""
    environment = bare_environment(
        tmp_path / "home",
        f"http://127.0.0.1:{refusing_port}/",
        AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
        AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    )
    done = check(environment, "make", "deploy")
    assert (done.returncode, done.stdout, done.stderr) == (ExitCode.OK, "", "")


def test_check_passes_with_a_role_profile_without_calling_sts(tmp_path: Path, refusing_port: int, check: Any) -> None:
    """A profile that assumes a role passes without its credentials being fetched: every AWS endpoint points at a
    port that refuses, so an STS call would have failed the check."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "config").write_text(
        "[profile deployer]\nrole_arn = arn:aws:iam::123456789012:role/deploy\nsource_profile = base\n"
    )
    (home / ".aws" / "credentials").write_text(
        "[base]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY\n"
    )
    refusing = f"http://127.0.0.1:{refusing_port}/"
    environment = bare_environment(home, refusing, AWS_PROFILE="deployer", AWS_ENDPOINT_URL=refusing)
    done = check(environment, "make", "deploy")
    assert (done.returncode, done.stderr) == (ExitCode.OK, "")


def test_check_names_a_profile_that_does_not_exist(tmp_path: Path, refusing_port: int, check: Any) -> None:
    """AWS_PROFILE naming no profile: the one line says so (botocore's words), then both ways."""
    environment = bare_environment(tmp_path / "home", f"http://127.0.0.1:{refusing_port}/", AWS_PROFILE="nobody")
    done = check(environment, "make", "diff")
    (line,) = done.stderr.splitlines()
    assert line.startswith("make diff: AWS credentials cannot be read (The config profile (nobody) could not be found)")
    assert all(way in line for way in WAYS)
    assert done.returncode == ExitCode.CONFIG


def test_check_is_bounded_where_the_metadata_address_hangs(tmp_path: Path, hanging_port: int, check: Any) -> None:
    """Instance metadata that never answers costs one try of METADATA_TIMEOUT_SECONDS per request (a token, then
    the role): about 2 s, even where the environment asks botocore for 30 s and 3 tries."""
    environment = bare_environment(
        tmp_path / "home",
        f"http://127.0.0.1:{hanging_port}/",
        AWS_METADATA_SERVICE_TIMEOUT="30",
        AWS_METADATA_SERVICE_NUM_ATTEMPTS="3",
    )
    started = time.monotonic()
    done = check(environment, "make", "deploy")
    seconds = time.monotonic() - started
    assert done.returncode == ExitCode.CONFIG and MISSING in done.stderr
    # Two requests of one attempt each, and slack for a loaded machine.
    assert seconds < 2 * METADATA_TIMEOUT_SECONDS * METADATA_ATTEMPTS + 8, f"{seconds:.1f} s"


@pytest.mark.real
def test_an_instance_role_counts_under_make(tmp_path: Path, moto_server: str) -> None:
    """The Makefile exports AWS_EC2_METADATA_DISABLED=true for everything else; for diff the check still asks the
    instance metadata (here moto's), finds its role and lets the cdk command start (`--app false`: no synthesis).
    Real: the check's exit code as make sees it, in an environment with no credentials at all."""
    environment = bare_environment(tmp_path / "home", f"{moto_server}/", AWS_EC2_METADATA_DISABLED="true")
    command = [*MAKE, "diff", f"ENV={environments()[0]}", "CDK_ARGS=--app false"]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert MISSING not in done.stderr
    assert " diff --no-notices " in done.stdout  # the cdk command started
