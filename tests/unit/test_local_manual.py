"""The manual local run's parts: `local up`'s default port, the env file, where `local send` looks, its events."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from consumer.local import stack
from consumer.local.cli import local_app
from consumer.local.harness import Planned
from consumer.local.manual import (
    read_env_file,
    send_environment,
    send_samples,
    worker_env_file,
    write_env_file,
)
from consumer.local.samples import body_plan
from consumer.local.stack import LocalProvisioningError

ROOT = Path(__file__).resolve().parents[2]

#: Values a shell would split, expand or cut, had the file not quoted them.
AWKWARD = {
    "SPACES": "two words",
    "QUOTE": "it's $HOME",
    "EMPTY": "",
    "LINES": "one\ntwo",
    "URL": "http://127.0.0.1:4750",
}


@pytest.fixture
def asked_ports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ports `local up` asks the server for; the server then refuses, so nothing binds."""
    asked: list[int] = []

    def start_server(port: int = 0) -> Any:
        asked.append(port)
        raise LocalProvisioningError("stopped here by the test")

    monkeypatch.setattr(stack, "start_server", start_server)
    return asked


def test_local_up_binds_port_4750_by_default(asked_ports: list[int]) -> None:
    """Without --port, `local up` asks for 4750, so the env file it writes stays valid across restarts."""
    result = CliRunner().invoke(local_app, ["up"])
    assert (result.exit_code, asked_ports) == (2, [4750])


def test_local_up_port_0_still_means_any_free_port(asked_ports: list[int]) -> None:
    """`--port 0` reaches the server as 0 (the OS picks a free port)."""
    CliRunner().invoke(local_app, ["up", "--port", "0"])
    assert asked_ports == [0]


def test_env_file_round_trips_values_a_shell_would_split(tmp_path: Path) -> None:
    """What write_env_file writes, read_env_file reads back unchanged, header comments skipped."""
    path = tmp_path / "local.env"
    write_env_file(path, AWKWARD, header="first line\nsecond line")
    assert read_env_file(path) == AWKWARD
    assert path.read_text().startswith("# first line\n# second line\n")


def test_env_file_loads_unchanged_in_a_posix_shell(tmp_path: Path) -> None:
    """`set -a; . FILE; set +a` exports every value exactly as written (the docs' second command)."""
    path = tmp_path / "local.env"
    write_env_file(path, AWKWARD, header="h")
    shown = subprocess.run(
        [
            "sh",
            "-c",
            f'set -a; . "{path}"; set +a; exec python3 -c "import json, os; print(json.dumps(dict(os.environ)))"',
        ],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    environment = json.loads(shown.stdout)
    assert {key: environment.get(key) for key in AWKWARD} == AWKWARD


def test_read_env_file_refuses_what_is_not_an_assignment(tmp_path: Path) -> None:
    """A word without KEY= is named, with the file."""
    path = tmp_path / "local.env"
    path.write_text("QUEUE_URL=x\nexport FOO=1\n")
    with pytest.raises(LocalProvisioningError) as raised:
        read_env_file(path)
    assert str(raised.value) == f"{path} must hold only KEY=value assignments: 'export'"


def test_send_environment_prefers_the_named_env_file(tmp_path: Path) -> None:
    """--env-file wins over QUEUE_URL in the environment."""
    path = tmp_path / "named.env"
    write_env_file(path, {"QUEUE_URL": "from-file"}, header="h")
    assert send_environment({"QUEUE_URL": "from-env"}, path, tmp_path / "default.env") == (
        {"QUEUE_URL": "from-file"},
        str(path),
    )


def test_send_environment_takes_the_environment_before_the_default_file(tmp_path: Path) -> None:
    """Without --env-file, a shell that loaded the file (QUEUE_URL set) is used as it is."""
    default = tmp_path / "default.env"
    write_env_file(default, {"QUEUE_URL": "from-file"}, header="h")
    assert send_environment({"QUEUE_URL": "from-env"}, None, default) == ({"QUEUE_URL": "from-env"}, "the environment")
    assert send_environment({}, None, default) == ({"QUEUE_URL": "from-file"}, str(default))


def test_send_environment_without_file_or_queue_says_what_to_start(tmp_path: Path) -> None:
    """Neither QUEUE_URL nor the file: the error names both and the command that writes the file."""
    default = tmp_path / ".local.env"
    with pytest.raises(LocalProvisioningError) as raised:
        send_environment({}, None, default)
    assert str(raised.value) == (
        f'"--env-file" must name the file `local up` wrote: {default} does not exist (and "QUEUE_URL" is not set);'
        " start `python -m consumer local up` first"
    )


@pytest.mark.parametrize("endpoint", ["", "https://sqs.eu-west-1.amazonaws.com", "http://10.0.0.5:4750"])
def test_send_samples_refuses_an_endpoint_that_is_not_loopback(endpoint: str) -> None:
    """`local send` never sends to AWS or another host: only 127.0.0.1, localhost or ::1."""
    environment = {"QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/q", "AWS_ENDPOINT_URL": endpoint}
    with pytest.raises(LocalProvisioningError) as raised:
        send_samples(environment, [Planned("evt-1", "sample", "{}")])
    assert str(raised.value) == (
        '"AWS_ENDPOINT_URL" must be a local endpoint (127.0.0.1 or localhost; `local send` never sends to AWS):'
        f" {endpoint!r}"
    )


def test_worker_env_files_sit_next_to_the_env_file_and_git_ignores_them(tmp_path: Path) -> None:
    """`.local.env` -> `.local.reports.env` (still ending in .env); git ignores it and its partial copy."""
    assert worker_env_file(Path(".local.env"), "reports") == Path(".local.reports.env")
    assert worker_env_file(tmp_path / "local.env", "order-emails") == tmp_path / "local.order-emails.env"
    names = [".local.env", ".local.reports.env", ".local.reports.env.partial", ".local.order-emails.env"]
    ignored = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True, check=False)
    assert ignored.stdout.split() == names


def test_send_environment_with_a_worker_reads_that_workers_file(tmp_path: Path) -> None:
    """--worker reads .local.<worker>.env, before QUEUE_URL in the environment."""
    default = tmp_path / ".local.env"
    write_env_file(worker_env_file(default, "reports"), {"QUEUE_URL": "reports-queue"}, header="h")
    assert send_environment({"QUEUE_URL": "from-env"}, None, default, "reports") == (
        {"QUEUE_URL": "reports-queue"},
        str(tmp_path / ".local.reports.env"),
    )


def test_send_environment_with_an_unknown_worker_names_the_workers_there_are(tmp_path: Path) -> None:
    """An unknown worker: one line naming the workers `local up` wrote a file for."""
    default = tmp_path / ".local.env"
    for worker in ("reports", "notifications"):
        write_env_file(worker_env_file(default, worker), {"QUEUE_URL": worker}, header="h")
    with pytest.raises(LocalProvisioningError) as raised:
        send_environment({}, None, default, "nope")
    assert str(raised.value) == (
        f'"--worker" must be one of the workers `local up` wrote an env file for next to {default}'
        " (notifications, reports): 'nope'"
    )


def test_body_plan_sends_the_body_as_given_with_a_new_key_each() -> None:
    """`local send --body TEXT`: every message carries TEXT unchanged, each under its own idempotency key."""
    plan = body_plan(3, "not json {")
    assert [p.body for p in plan] == ["not json {"] * 3
    assert len({p.event_id for p in plan}) == 3


def test_local_send_refuses_a_body_with_poison() -> None:
    """A given body is sent as it is, so --poison beside it is refused in one line, exit 2, nothing sent."""
    result = CliRunner().invoke(local_app, ["send", "--body", "x", "--poison"])
    assert result.exit_code == 2
    assert '"--body" must not come with "--poison"' in result.output
