"""The consumer image as Lambda runs it: a lambda worker's synthesized function, its ImageConfig's entry point
(``python -m awslambdaric consumer.lambda_entry.handler``) against a Runtime API on the host, Lambda's user, a read-only
root with a writable /tmp, its memory and variables (tests/container/function.py).

Each test starts one execution environment of the function the tier's assembly holds (conftest's ``assembly``) on
queues created from the same template; the event source mapping around it is consumer/local/mapping.py's model of
Lambda's: it receives with every attribute, invokes the function through the Runtime API and deletes what the answer
does not list.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from consumer.limits import SQS_MAX_BATCH
from consumer.local.harness import sample_event
from consumer.local.image import BuiltImage, Engine
from consumer.local.mapping import EventSourceMapping, Invoked
from consumer.local.runtime_api import RuntimeApi
from consumer.local.stack import LOCAL_REGION, local_client
from consumer.local.task import TaskContainer, container_state
from consumer.runtime.dead_letter import read_reason
from consumer.testing import depth
from tests.container.conftest import FUNCTION_STACK, lambda_worker
from tests.container.function import LAMBDA_USER, FunctionContainer, FunctionRun, provision_function
from tests.container.support import events

pytestmark = [pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")]

POISON_ID = "poison-000001"
#: The errno of a write to a read-only file system.
EROFS = 30


@pytest.fixture(scope="module")
def function(assembly: Path) -> FunctionContainer:
    return FunctionContainer.from_assembly(assembly, FUNCTION_STACK, lambda_worker()[1])


@pytest.fixture
def variables(function: FunctionContainer, endpoint: str) -> dict[str, str]:
    """The function's variables, resolved to its queues and table created fresh on moto's server."""
    return provision_function(endpoint, function)


@pytest.fixture
def runtime_api() -> Iterator[RuntimeApi]:
    with RuntimeApi() as api:
        yield api


@pytest.fixture
def environment(
    engine: Engine,
    image: BuiltImage,
    function: FunctionContainer,
    endpoint: str,
    variables: dict[str, str],
    runtime_api: RuntimeApi,
    tmp_path: Path,
) -> Iterator[FunctionRun]:
    """One execution environment of the function, started (its runtime waits on the Runtime API for an event). The
    image is the one the function names, which ``image`` built as the task's (test_function_runs_the_image_the_task_runs)."""
    name = f"consumer-function-{uuid.uuid4().hex[:8]}"
    lambda_variables = function.lambda_variables(
        engine, runtime_api=runtime_api.address, endpoint=endpoint, image=function.image_tag
    )
    run = FunctionRun(
        engine, function, tmp_path / f"{name}.log", name=name, environment={**variables, **lambda_variables},
        image=function.image_tag,
    )  # fmt: skip
    run.start()
    yield run
    run.remove()


def mapping_of(
    function: FunctionContainer, endpoint: str, variables: Mapping[str, str], api: RuntimeApi, answers: list[Any]
) -> EventSourceMapping:
    """The template's mapping, invoking the function through ``api`` within its timeout and keeping each answer in
    ``answers`` (an error answer or none in time is a function error, as Lambda counts it)."""

    def invoke(event: Mapping[str, Any], context: Any) -> Any:
        answer = api.invoke(event, timeout_seconds=function.timeout_seconds)
        answers.append(answer.body)
        if answer.kind != "response":
            raise RuntimeError(f"{answer.kind}: {answer.body}")
        return answer.body

    return EventSourceMapping(
        client=local_client("sqs", endpoint),
        queue_url=variables["QUEUE_URL"],
        queue_arn=variables["QUEUE_ARN"],
        region=LOCAL_REGION,
        function=invoke,
        batch_size=int(function.mapping.get("BatchSize", SQS_MAX_BATCH)),
        timeout_seconds=function.timeout_seconds,
    )


def invoke_with(mapping: EventSourceMapping, bodies: list[str]) -> Invoked:
    """Send ``bodies`` to the source, receive them all with every attribute, and invoke the function with them."""
    sqs = mapping.client
    for body in bodies:
        sqs.send_message(QueueUrl=mapping.queue_url, MessageBody=body)
    messages: list[dict[str, Any]] = []
    while len(messages) < len(bodies):
        messages += sqs.receive_message(
            QueueUrl=mapping.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
    return mapping.invoke(messages)


def test_function_runs_the_image_the_task_runs(function: FunctionContainer, task: TaskContainer) -> None:
    """The function and the task name one container asset, so the tier builds and runs one image."""
    assert function.asset_hash == task.asset_hash


def test_function_answers_and_settles_each_record_across_two_invocations_of_one_environment(
    function: FunctionContainer, endpoint: str, variables: dict[str, str], runtime_api: RuntimeApi,
    environment: FunctionRun,
) -> None:  # fmt: skip
    """A good record processed and a poison one in the DLQ with its reason, neither listed; then a second event to the
    same environment (one cold start), its record processed too."""
    answers: list[Any] = []
    mapping = mapping_of(function, endpoint, variables, runtime_api, answers)
    good, again = events("good", 1), events("again", 1)
    poison = json.dumps(sample_event(POISON_ID, 1, recipient=None))

    first = invoke_with(mapping, [*good.values(), poison])
    second = invoke_with(mapping, list(again.values()))

    log = environment.log_path.read_text(errors="replace")[-3000:]
    assert answers == [{"batchItemFailures": []}, {"batchItemFailures": []}], log
    assert (first.failed_whole, sorted(first.deleted), second.deleted) == (
        None,
        sorted(first.message_ids),
        second.message_ids,
    )
    sqs = mapping.client
    assert depth(sqs, variables["QUEUE_URL"]) == (0, 0)
    (dead,) = sqs.receive_message(QueueUrl=variables["DLQ_URL"], MessageAttributeNames=["All"], MaxNumberOfMessages=10)[
        "Messages"
    ]
    reason = read_reason(dead["MessageAttributes"])
    assert reason is not None
    assert (reason["kind"], reason["reason"]) == ("poison", 'schema check failed at (root): required ["recipient"]')
    assert json.loads(dead["Body"])["event_id"] == POISON_ID
    logged = environment.events()
    processed = [e["event_id"] for e in logged if e.get("event") == "notification_dry_run"]
    assert processed == [*good, *again]
    assert [e.get("event") for e in logged].count("function_started") == 1  # the environment reused


def test_function_runs_as_lambdas_user_on_a_read_only_root_with_a_writable_tmp_and_its_memory(
    engine: Engine, function: FunctionContainer, endpoint: str, variables: dict[str, str], runtime_api: RuntimeApi,
    environment: FunctionRun,
) -> None:  # fmt: skip
    """The runtime's process is Lambda's user (not root, not the image's USER); only /tmp, of the function's ephemeral
    storage, can be written; the container has the function's memory."""
    mapping = mapping_of(function, endpoint, variables, runtime_api, [])
    assert invoke_with(mapping, list(events("warm", 1).values())).failed_whole is None  # the runtime is up
    probe = (
        "import json, os, tempfile\n"
        "def written(directory):\n"
        "    try:\n"
        "        tempfile.NamedTemporaryFile(dir=directory).close()\n"
        "        return 0\n"
        "    except OSError as error:\n"
        "        return error.errno\n"
        "tmp = os.statvfs('/tmp')\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'app': written(os.getcwd()), 'root': written('/'),"
        " 'tmp': written('/tmp'), 'tmp_mib': tmp.f_blocks * tmp.f_frsize // 2**20}))"
    )
    found = json.loads(engine("exec", environment.name, "python", "-c", probe).stdout)
    proc_status = engine("exec", environment.name, "cat", "/proc/1/status").stdout
    status = dict(line.split(":", 1) for line in proc_status.splitlines())
    uid, gid = LAMBDA_USER.split(":")
    assert status["Uid"].split() == [uid] * 4 and status["Gid"].split() == [gid] * 4  # real, effective, saved, fs
    assert found == {
        "uid": int(uid),
        "gid": int(gid),
        "app": EROFS,
        "root": EROFS,
        "tmp": 0,
        "tmp_mib": function.ephemeral_storage_mib,
    }
    assert container_state(engine, environment.name)["HostConfig"]["Memory"] == function.memory_mib * 2**20
