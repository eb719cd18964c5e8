"""A worker's identity (infra/identities.py): never its place in ``workers``; no edit hands its resources to another
handler or to no worker. Checked on settings, without synthesizing (test_upgrades.py synthesizes a reordered stack)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from consumer.errors import ContractError
from infra.identities import DEFAULT_IDENTITY, LOCK_PATH, IdentityLock, main, record_of
from infra.settings import CONTEXT_KEY, EnvironmentSettings, load_environments
from tests.reference import ROOT, reference_context, repository_environments

TEAM = "tests.team_handlers:invoices"


def environment(raw: dict[str, Any], lock: IdentityLock | None = None, name: str = "demo") -> EnvironmentSettings:
    (settings,) = load_environments({CONTEXT_KEY: {name: raw}}, name, lock)
    return settings


def identities(settings: EnvironmentSettings) -> dict[str, str | None]:
    return {w.name: w.identity for w in settings.workers}


def recorded_lock(tmp_path: Path, environments: dict[str, Any]) -> IdentityLock:
    """A lock in ``tmp_path`` recording ``environments`` as they are (the first synth of them)."""
    lock = IdentityLock(tmp_path / "workers.lock.json")
    for settings in load_environments({CONTEXT_KEY: environments}):
        lock.record(settings.name, settings.workers)
    return lock


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
    assert "held by worker reports, which cdk.json no longer has" in message
    assert "SqsWorker-demo-reports-source" in message
    assert "python -m infra.identities forget demo reports" in message


def test_a_renamed_worker_is_refused_unless_it_keeps_its_identity(lock: IdentityLock) -> None:
    raw = two_workers()
    raw["workers"]["summaries"] = raw["workers"].pop("reports")
    with pytest.raises(ContractError, match='give its new name "identity": "reports"'):
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
    assert "python -m infra.identities accept demo notifications" in message


def test_one_identity_held_by_two_workers_is_refused() -> None:
    raw = two_workers()
    raw["workers"]["audit"] = {"handler": TEAM, "identity": "reports"}
    with pytest.raises(ContractError, match=r"workers\.audit\.identity\" must be held by one worker only: reports"):
        environment(raw)


def test_the_workers_form_of_a_one_worker_environment_keeps_default_only_when_declared(tmp_path: Path) -> None:
    """The README's conversion: the top-level handler moves under a named worker, which must keep "default"."""
    lock = recorded_lock(tmp_path, {"prod": {"handler": TEAM}})
    converted = {"workers": {"invoices": {"handler": TEAM}}}
    with pytest.raises(ContractError, match='"identity": "default"'):
        environment(converted, lock, "prod")
    converted["workers"]["invoices"]["identity"] = DEFAULT_IDENTITY
    assert identities(environment(converted, lock, "prod")) == {"invoices": DEFAULT_IDENTITY}


def test_new_workers_are_recorded_and_old_ones_kept(lock: IdentityLock) -> None:
    raw = two_workers()
    raw["workers"] = {"audit": {"handler": TEAM}, **raw["workers"]}
    settings = environment(raw, lock)
    assert identities(settings) == {"notifications": DEFAULT_IDENTITY, "audit": "audit", "reports": "reports"}
    lock.record("demo", settings.workers)
    assert set(IdentityLock(lock.path).recorded("demo") or {}) == {DEFAULT_IDENTITY, "audit", "reports"}


def test_accept_and_forget_record_a_change_made_on_purpose(
    lock: IdentityLock, capsys: pytest.CaptureFixture[str]
) -> None:
    cdk_json = lock.path.parent / "cdk.json"
    raw = two_workers()
    raw["workers"]["reports"]["handler"] = "consumer.examples.webhooks:handle"
    cdk_json.write_text(json.dumps({"context": {CONTEXT_KEY: {"demo": raw}}}))
    with pytest.raises(ContractError):
        environment(raw, IdentityLock(lock.path))
    assert main(["accept", "demo", "reports"], path=lock.path) == 0
    assert identities(environment(raw, IdentityLock(lock.path)))["reports"] == "reports"
    del raw["workers"]["reports"]
    with pytest.raises(ContractError):
        environment(raw, IdentityLock(lock.path))
    assert main(["forget", "demo", "reports"], path=lock.path) == 0
    assert identities(environment(raw, IdentityLock(lock.path))) == {"notifications": DEFAULT_IDENTITY}
    assert main(["forget", "demo", "reports"], path=lock.path) == 2
    assert "records no worker reports" in capsys.readouterr().err


def test_the_repository_records_its_cdk_json() -> None:
    """workers.lock.json, committed beside cdk.json, records exactly what cdk.json's environments hold: a synth
    (python app.py) writes it, and a change left uncommitted would leave the next clone without its protection."""
    assert LOCK_PATH.parent == ROOT
    lock = IdentityLock()
    for settings in load_environments({CONTEXT_KEY: repository_environments()}, lock=lock):
        assert lock.recorded(settings.name) == record_of(settings.workers), settings.name


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
