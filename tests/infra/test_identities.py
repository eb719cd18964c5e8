"""A worker's identity (infra/identities.py): never its place in ``workers``; no edit hands its resources to another
handler or to no worker. Checked on settings, without synthesizing (test_upgrades.py synthesizes a reordered stack)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from consumer.errors import ContractError
from infra.identities import DEFAULT_IDENTITY, LOCK_FILE, LOCK_PATH, IdentityLock, main, record_of
from infra.settings import EnvironmentSettings, load_environments
from infra.worker_settings import CONTEXT_KEY
from tests.reference import ROOT, reference_context, repository_environments

TEAM = "tests.team_handlers:invoices"


def environment(raw: dict[str, Any], lock: IdentityLock | None = None, name: str = "demo") -> EnvironmentSettings:
    (settings,) = load_environments({CONTEXT_KEY: {name: raw}}, name, lock)
    return settings


def identities(settings: EnvironmentSettings) -> dict[str, str | None]:
    return {w.name: w.identity for w in settings.workers}


def recorded_lock(tmp_path: Path, environments: dict[str, Any]) -> IdentityLock:
    """A lock in ``tmp_path`` recording ``environments`` as they are (the first synth of them), beside a cdk.json
    holding them."""
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {CONTEXT_KEY: environments}}))
    lock = IdentityLock(tmp_path / "workers.lock.json")
    for settings in load_environments({CONTEXT_KEY: environments}):
        lock.record(settings.name, settings.workers)
    lock.commit()
    return lock


def cdk_json(lock: IdentityLock, environments: dict[str, Any]) -> None:
    """``environments`` become the cdk.json beside ``lock`` (what ``accept`` and ``forget`` read)."""
    (lock.path.parent / "cdk.json").write_text(json.dumps({"context": {CONTEXT_KEY: environments}}))


def reordered(raw: dict[str, Any], how: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    items = list(raw["workers"].items())
    raw["workers"] = dict(reversed(items) if how == "reversed" else sorted(items))
    return raw


def multi_worker(environments: dict[str, Any]) -> list[str]:
    return [name for name, raw in environments.items() if len(raw.get("workers", {})) > 1]


@pytest.mark.parametrize("how", ["reversed", "key-sorted"])
@pytest.mark.parametrize("source", ["reference", "repository"])
def test_reordering_workers_keeps_every_identity(source: str, how: str, tmp_path: Path) -> None:
    """Once recorded, every environment with several workers gives each worker the same identity in any order, the
    one holding "default" first (the stack's unprefixed resources); for the repository's own cdk.json too."""
    environments = reference_context()[CONTEXT_KEY] if source == "reference" else repository_environments()
    names = multi_worker(environments)
    if not names:
        pytest.skip(f"the {source} cdk.json has no environment of several workers")
    lock = recorded_lock(tmp_path, environments)
    for name in names:
        before = environment(environments[name], lock, name)
        after = environment(reordered(environments[name], how), lock, name)
        assert identities(after) == identities(before), name
        assert after.workers[0].identity == before.workers[0].identity == DEFAULT_IDENTITY, name


def test_an_environment_never_recorded_gives_default_to_its_first_worker() -> None:
    """What every release before identities did, so a stack one deployed keeps its resources on the first synth."""
    raw = {"workers": {"b": {"handler": TEAM}, "a": {"handler": TEAM}}}
    assert identities(environment(raw)) == {"b": DEFAULT_IDENTITY, "a": "a"}
    assert identities(environment({"handler": TEAM}, name="prod")) == {"default": DEFAULT_IDENTITY}


def two_workers() -> dict[str, Any]:
    return {
        "workers": {
            "notifications": {"handler": "consumer.examples.demo:handle"},
            "reports": {"handler": TEAM},
        }
    }


@pytest.fixture
def lock(tmp_path: Path) -> IdentityLock:
    return recorded_lock(tmp_path, {"demo": two_workers()})


def test_the_record_holds_identity_worker_and_handler(lock: IdentityLock) -> None:
    assert lock.recorded("demo") == {
        "default": {"worker": "notifications", "handler": "consumer.examples.demo:handle"},
        "reports": {"worker": "reports", "handler": TEAM},
    }
    assert IdentityLock(lock.path).environments == lock.environments  # written, and read back


def test_a_removed_worker_is_refused_naming_it_and_what_to_do(lock: IdentityLock) -> None:
    raw = two_workers()
    del raw["workers"]["reports"]
    with pytest.raises(ContractError) as refused:
        environment(raw, lock)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith('"sqs-worker:environments.demo" must keep a worker on the queue SqsWorker-demo-reports-')
    assert f"gives worker reports (handler {TEAM})" in message
    assert "python -m infra.identities forget demo reports" in message


def test_a_renamed_worker_is_refused_unless_it_keeps_its_identity(lock: IdentityLock) -> None:
    raw = two_workers()
    raw["workers"]["summaries"] = raw["workers"].pop("reports")
    with pytest.raises(ContractError, match='give the worker meant to hold them "identity": "reports"'):
        environment(raw, lock)
    raw["workers"]["summaries"]["identity"] = "reports"
    assert identities(environment(raw, lock)) == {"notifications": DEFAULT_IDENTITY, "summaries": "reports"}


def test_a_worker_moved_to_another_handler_is_refused(lock: IdentityLock) -> None:
    """Swapping two workers' handlers (or names) hands each one's queues to the other's handler."""
    raw = two_workers()
    workers = raw["workers"]
    workers["notifications"]["handler"], workers["reports"]["handler"] = TEAM, "consumer.examples.demo:handle"
    with pytest.raises(ContractError) as refused:
        environment(raw, lock)
    message = str(refused.value)
    assert message.startswith('"sqs-worker:environments.demo.workers.notifications.handler" would hand the queue')
    assert "python -m infra.identities accept demo default" in message
    assert "a rename or a swap by mistake" in message


def test_one_identity_held_by_two_workers_is_refused() -> None:
    raw = two_workers()
    raw["workers"]["audit"] = {"handler": TEAM, "identity": "reports"}
    with pytest.raises(ContractError, match=r"workers\.audit\.identity\" must be held by one worker only: reports"):
        environment(raw)
    raw["workers"]["reports"] = raw["workers"].pop("reports")  # the same, listed last: the one named "reports" is
    with pytest.raises(ContractError, match=r"workers\.reports\.identity\" must .* give one of them another name"):
        environment(raw)


def test_the_workers_form_of_a_one_worker_environment_keeps_default_only_when_declared(tmp_path: Path) -> None:
    """The README's conversion: the top-level handler moves under a named worker, which must keep "default"."""
    lock = recorded_lock(tmp_path, {"prod": {"handler": TEAM}})
    converted = {"workers": {"invoices": {"handler": TEAM}}}
    with pytest.raises(ContractError, match=r'gives the environment\'s worker \(handler .*"identity": "default"'):
        environment(converted, lock, "prod")
    converted["workers"]["invoices"]["identity"] = DEFAULT_IDENTITY
    assert identities(environment(converted, lock, "prod")) == {"invoices": DEFAULT_IDENTITY}


def test_new_workers_are_recorded_and_old_ones_kept(lock: IdentityLock) -> None:
    raw = two_workers()
    raw["workers"] = {"audit": {"handler": TEAM}, **raw["workers"]}
    settings = environment(raw, lock)
    assert identities(settings) == {"notifications": DEFAULT_IDENTITY, "audit": "audit", "reports": "reports"}
    lock.record("demo", settings.workers)
    assert set(IdentityLock(lock.path).recorded("demo") or {}) == {DEFAULT_IDENTITY, "reports"}  # held till commit
    lock.commit()
    assert set(IdentityLock(lock.path).recorded("demo") or {}) == {DEFAULT_IDENTITY, "audit", "reports"}


def test_accept_and_forget_record_a_change_made_on_purpose(
    lock: IdentityLock, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = two_workers()
    raw["workers"]["reports"]["handler"] = "consumer.examples.webhooks:handle"
    cdk_json(lock, {"demo": raw})
    with pytest.raises(ContractError):
        environment(raw, IdentityLock(lock.path))
    assert main(["accept", "demo", "reports"], path=lock.path) == 0
    assert identities(environment(raw, IdentityLock(lock.path)))["reports"] == "reports"
    assert main(["forget", "demo", "reports"], path=lock.path) == 2  # still in cdk.json: forgetting would move it
    assert "worker reports of demo still holds reports" in capsys.readouterr().err
    del raw["workers"]["reports"]
    cdk_json(lock, {"demo": raw})
    with pytest.raises(ContractError):
        environment(raw, IdentityLock(lock.path))
    assert main(["forget", "demo", "reports"], path=lock.path) == 0
    assert identities(environment(raw, IdentityLock(lock.path))) == {"notifications": DEFAULT_IDENTITY}
    assert main(["forget", "demo", "reports"], path=lock.path) == 2
    assert "records no identity reports (it holds: default)" in capsys.readouterr().err
    assert main(["forget", "demo"], path=lock.path) == 0
    assert IdentityLock(lock.path).recorded("demo") is None


def test_a_rename_with_a_new_handler_is_accepted_by_its_identity(lock: IdentityLock) -> None:
    """The refusal names the identity, which ``accept`` finds on the renamed worker and records under its new name."""
    raw = two_workers()
    raw["workers"]["summaries"] = {"handler": "consumer.examples.webhooks:handle", "identity": "reports"}
    del raw["workers"]["reports"]
    cdk_json(lock, {"demo": raw})
    with pytest.raises(ContractError, match="accept demo reports"):
        environment(raw, IdentityLock(lock.path))
    assert main(["accept", "demo", "reports"], path=lock.path) == 0
    assert (IdentityLock(lock.path).recorded("demo") or {})["reports"] == {
        "worker": "summaries",
        "handler": "consumer.examples.webhooks:handle",
    }
    assert identities(environment(raw, IdentityLock(lock.path)))["summaries"] == "reports"


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        ('{"environments": {\n<<<<<<< HEAD\n', "must be JSON"),
        ('{"environments": {"demo": {"default": {"worker": "a"}}}}', "must be {"),
        ("[]", "must be {"),
    ],
)
def test_a_malformed_record_is_refused_in_one_line(tmp_path: Path, content: str, rule: str) -> None:
    path = tmp_path / "workers.lock.json"
    path.write_text(content)
    with pytest.raises(ContractError) as refused:
        IdentityLock(path)
    assert rule in str(refused.value) and "\n" not in str(refused.value)


def test_the_repository_ships_no_record() -> None:
    """workers.lock.json is the team's, written by its first synth of its own cdk.json: one shipped with the framework
    would record the example's environments and refuse (or misplace) a team's own on its first synth after an
    upgrade."""
    tracked = subprocess.run(["git", "ls-files", LOCK_FILE], cwd=ROOT, capture_output=True, text=True, check=True)
    assert tracked.stdout == ""
    assert LOCK_PATH == ROOT / LOCK_FILE


def test_the_dlq_tools_find_a_worker_s_outputs_by_what_the_stack_has() -> None:
    """``--worker NAME`` reads the outputs of NAME: unprefixed for the worker holding "default", whichever its name
    and wherever WorkerNames lists it, else prefixed with its name; the first listed without ``--worker``."""
    from consumer.ops.passes import UsageError
    from consumer.ops.queues import worker_output_prefix

    outputs = {"WorkerNames": "reports,audit", "QueueUrl": "q0", "AuditQueueUrl": "q1"}
    assert worker_output_prefix(outputs, "SqsWorker-demo", "reports") == ""
    assert worker_output_prefix(outputs, "SqsWorker-demo", "audit") == "Audit"
    assert worker_output_prefix(outputs, "SqsWorker-demo", None) == ""
    no_default = {"WorkerNames": "audit,reports", "AuditQueueUrl": "q1", "ReportsQueueUrl": "q2"}
    assert worker_output_prefix(no_default, "SqsWorker-demo", None) == "Audit"
    assert worker_output_prefix({}, "SqsWorker-prod", None) == ""  # a stack from before workers
    with pytest.raises(UsageError, match="one of the workers of SqsWorker-demo"):
        worker_output_prefix(outputs, "SqsWorker-demo", "webhooks")


def test_python_app_py_checks_and_records_cdk_json_s_environments_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python app.py`` (infra.app.main) records what a passing synth built, refuses an edit the record refuses in
    one line, and leaves the record alone for environments given other than by cdk.json (CDK_CONTEXT_JSON, -c)."""
    from infra.app import CDK_JSON
    from infra.app import main as app_main

    path = tmp_path / LOCK_FILE
    (tmp_path / "cdk.json").write_text(CDK_JSON.read_text())
    environments = repository_environments()
    name = next(iter(environments))

    def synth(context: dict[str, Any]) -> int:
        return app_main(IdentityLock(path), {"env": name, **context}, str(tmp_path / "out"))

    assert synth({}) == 0
    assert IdentityLock(path).environments == {name: record_of(environment(environments[name], None, name).workers)}

    lock = IdentityLock(path)
    moved = next(iter(lock.environments[name]))
    lock.environments[name][moved]["handler"] = "some.other:handler"
    lock.save()
    assert synth({}) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"python -m infra.identities accept {name} {moved}" in error

    before = path.read_text()
    assert synth({CONTEXT_KEY: {name: {**SHARED_TEST_ENVIRONMENT, "handler": TEAM}}}) == 0
    assert path.read_text() == before


SHARED_TEST_ENVIRONMENT = {"retain_queues": False, "source_retention_days": 1, "dlq_retention_days": 7}
