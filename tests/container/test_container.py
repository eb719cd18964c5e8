"""The consumer container as ECS runs it: image, user, read-only root, volumes, environment, stop timeout.

Every test starts the image the synthesized task definition names, with that definition's settings
(see conftest), against a local stack created from the same template.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from consumer.declaration import contract_of, load_handler
from consumer.local.harness import sample_event
from consumer.local.image import BuiltImage, Engine
from consumer.local.stack import LocalStack, local_client
from consumer.local.task import TaskContainer
from consumer.runtime.dead_letter import read_reason
from consumer.testing import wait_until
from tests.container.conftest import RunFactory, Webhook, depths, send
from tests.container.support import events
from tests.reference import repository_environments

ROOT = Path(__file__).resolve().parents[2]

#: Modules the image must carry (the runtime, the operator's DLQ tool, the example handlers and their dependency)
#: and must not (test and local tooling: the demo runner and local stack need moto and a cdk.out; the team
#: package's tests). Whatever the team package holds is checked against the repository itself below.
SHIPPED = [
    "consumer.runtime.consumer",
    "consumer.cli",
    "consumer.ops.commands",
    "consumer.examples.notifications",
    "consumer.examples.demo",
    "consumer.examples.webhooks",
    "jsonschema",
    "httpx",
]
#: Every handler the repository's cdk.json deploys, whatever the team made of it: each must load in the image.
DEPLOYED_HANDLERS = sorted(
    {
        worker.get("handler") or settings.get("handler")
        for settings in repository_environments().values()
        for worker in (settings.get("workers") or {"": settings}).values()
    }
)
#: The distributions the handler packages' requirements.txt name (the team package's and the examples').
REQUIREMENTS = [ROOT / "workers" / "requirements.txt", ROOT / "consumer" / "examples" / "requirements.txt"]
NOT_SHIPPED = ["consumer.local", "moto", "pytest", "tests", "infra", "bench", "aws_cdk", "workers.tests"]
#: moto's CloudFormation warns for each resource type it skips (policies, scaling, alarms); consumer.local
#: creates what matters from the template itself.
pytestmark = [pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")]

POISON_ID = "poison-000001"


def test_image_holds_the_runtime_and_no_test_or_local_tooling(engine: Engine, image: BuiltImage) -> None:
    probe = (
        "import importlib.util, json; "
        f"print(json.dumps({{n: importlib.util.find_spec(n) is not None for n in {SHIPPED + NOT_SHIPPED!r}}}))"
    )
    found = json.loads(engine("run", "--rm", *engine.run_options, image.tag, "python", "-c", probe).stdout)
    assert {n for n in SHIPPED if not found[n]} == set()
    assert {n for n in NOT_SHIPPED if found[n]} == set()
    # Every handler cdk.json deploys loads in the image as `consumer run` loads it (its dependencies installed),
    # with the declaration synth read on this machine; every distribution its package requires is installed.
    load = (
        "import json; from consumer.declaration import contract_of, load_handler;"
        f" print(json.dumps({{h: contract_of(load_handler(h)).max_duration_seconds for h in {DEPLOYED_HANDLERS!r}}}))"
    )
    loaded = json.loads(engine("run", "--rm", *engine.run_options, image.tag, "python", "-c", load).stdout)
    assert loaded == {h: contract_of(load_handler(h)).max_duration_seconds for h in DEPLOYED_HANDLERS}
    distributions = sorted(
        re.split(r"[\s=<>~!;\[]", line.strip(), maxsplit=1)[0]
        for path in REQUIREMENTS
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-"))
    )
    installed = (
        "import importlib.metadata as m, json\n"
        "def installed(name):\n"
        "    try:\n"
        "        m.distribution(name)\n"
        "        return True\n"
        "    except m.PackageNotFoundError:\n"
        "        return False\n"
        f"print(json.dumps([d for d in {distributions!r} if not installed(d)]))"
    )
    missing = json.loads(engine("run", "--rm", *engine.run_options, image.tag, "python", "-c", installed).stdout)
    assert distributions and missing == []
    # A local-only command says so in one line instead of a traceback.
    demo = engine("run", "--rm", *engine.run_options, image.tag, "python", "-m", "consumer", "demo", check=False)
    assert demo.returncode == 2
    assert demo.stderr.strip().splitlines() == [
        "consumer demo: local tooling, not in this installation (missing: consumer.local, moto); "
        "run it from a repository checkout after `make run` or `make test` has set it up"
    ]
    print(f"\nimage size: {image.size_bytes / 1e6:.0f} MB ({image.tag}, base {image.base})")


def test_task_processes_messages_and_dead_letters_a_poison_one_with_its_reason(
    run_task: RunFactory, stack: LocalStack, webhook: Webhook
) -> None:
    run = run_task()
    run.wait_for("consumer_started")
    valid = events("ok", 20)
    send(stack, [*valid.values(), json.dumps(sample_event(POISON_ID, 1, recipient=None))])

    wait_until(
        lambda: set(webhook.finished) >= set(valid) and depths(stack, "DLQ_URL") == (1, 0),
        timeout=60,
        what="20 events delivered and one in the DLQ",
    )
    wait_until(lambda: depths(stack, "QUEUE_URL") == (0, 0), timeout=30, what="the source queue empty (all deleted)")
    assert {k: n for k, n in webhook.finished.items() if n != 1} == {}
    assert POISON_ID not in webhook.started  # refused by the schema check, never posted

    sqs = local_client("sqs", stack.endpoint)
    (dead,) = sqs.receive_message(
        QueueUrl=stack.task_environment["DLQ_URL"], MessageAttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    reason = read_reason(dead["MessageAttributes"])
    assert reason is not None
    assert (reason["kind"], reason["reason"]) == ("poison", 'schema check failed at (root): required ["recipient"]')
    assert json.loads(dead["Body"])["event_id"] == POISON_ID

    code, _ = run.stop()
    assert code == 0


def test_task_runs_as_its_definition_says_and_writes_only_to_its_volumes(
    engine: Engine, task: TaskContainer, run_task: RunFactory, stack: LocalStack, webhook: Webhook, tmp_path: Path
) -> None:
    run = run_task()
    run.wait_for("consumer_started")
    valid = events("work", 10)
    send(stack, list(valid.values()))
    wait_until(lambda: set(webhook.finished) >= set(valid), timeout=60, what="10 events delivered")

    state = run.state()
    # PID 1 is the init process (InitProcessEnabled) or the consumer; either runs as the task's user.
    proc_status = engine("exec", run.name, "cat", "/proc/1/status").stdout
    status = dict(line.split(":", 1) for line in proc_status.splitlines())
    uid, gid = task.user.split(":")
    assert status["Uid"].split() == [uid] * 4 and status["Gid"].split() == [gid] * 4  # real, effective, saved, fs
    if task.definition["LinuxParameters"]["Capabilities"]["Drop"] == ["ALL"]:
        assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert state["HostConfig"]["ReadonlyRootfs"] is bool(task.definition["ReadonlyRootFilesystem"])
    # The definition's own liveness check (python -m consumer health), run in the container as ECS runs it.
    assert task.health_check is not None and task.health_check["Command"][1:] == ["python", "-m", "consumer", "health"]
    assert run.health_check_passes()

    code, _ = run.stop()
    assert code == 0
    # What changed in the container's file system beyond what the engine itself writes at start
    # (/etc/hosts and the like: a container that runs `true` shows the same).
    baseline = run_task(command=["true"])
    assert baseline.process is not None and baseline.process.wait(timeout=60) == 0
    changed = set(engine("diff", run.name).stdout.split("\n")) - set(engine("diff", baseline.name).stdout.split("\n"))
    assert changed == set()


def test_the_user_comes_from_the_task_definition_whatever_the_images_user(
    engine: Engine, image: BuiltImage, task: TaskContainer, run_task: RunFactory, tmp_path: Path
) -> None:
    """The image's own USER is 10001 too, so only an image whose USER differs shows that ``--user`` is passed."""
    as_root = f"{image.tag}-user-root"
    (tmp_path / "Dockerfile").write_text(f"FROM {image.tag}\nUSER 0:0\n")
    engine("build", *engine.build_options, "-t", as_root, str(tmp_path))
    probe = run_task(command=["python", "-c", "import os; print(f'{os.getuid()}:{os.getgid()}')"], other_image=as_root)
    assert probe.process is not None and probe.process.wait(timeout=60) == 0
    assert probe.log_path.read_text().split() == [task.user]


def test_a_handler_can_write_a_temp_file_in_the_tasks_tmp_volume(run_task: RunFactory, task: TaskContainer) -> None:
    """Fargate's /tmp volume is root-owned 0755 unless the image declares VOLUME /tmp; uid 10001 must write there."""
    probe = run_task(
        command=["python", "-c", "import os, tempfile; f = tempfile.NamedTemporaryFile(); print(os.getuid(), f.name)"]
    )
    assert probe.process is not None
    code = probe.process.wait(timeout=60)
    output = probe.log_path.read_text()
    assert code == 0, output
    uid, written = output.split()
    assert (uid, str(Path(written).parent)) == (task.user.split(":")[0], "/tmp")


def test_sigterm_during_work_finishes_in_flight_and_exits_0_within_the_stop_timeout(
    task: TaskContainer, run_task: RunFactory, stack: LocalStack, webhook: Webhook
) -> None:
    """A deployment's stop: SIGTERM (``stop -t <StopTimeout>``) while deliveries are in flight."""
    slow, quick = events("slow", 8), events("quick", 16)
    webhook.pause.update(dict.fromkeys(slow, 4.0))
    old = run_task()
    old.wait_for("consumer_started")
    send(stack, [*slow.values(), *quick.values()])
    wait_until(lambda: webhook.in_flight() & set(slow), timeout=30, what="a slow delivery in flight")

    in_flight = webhook.in_flight()
    code, seconds = old.stop()
    assert code == 0 and old.state()["State"]["ExitCode"] == 0
    assert seconds < task.stop_timeout, f"exited {seconds:.1f} s after SIGTERM; stop timeout {task.stop_timeout} s"
    assert {k: webhook.finished[k] for k in in_flight} == dict.fromkeys(in_flight, 1)  # in flight: finished

    new = run_task()  # what is left is still in the queue: the next task delivers it, nothing twice
    wait_until(
        lambda: set(webhook.finished) >= set(slow) | set(quick) and depths(stack, "QUEUE_URL") == (0, 0),
        timeout=90,
        what="every event delivered by the old or the new task",
    )
    assert {k: n for k, n in webhook.finished.items() if n != 1} == {}
    assert depths(stack, "DLQ_URL") == (0, 0)
    code, _ = new.stop()
    assert code == 0
