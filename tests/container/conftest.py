"""The container tier: the consumer image, built as ``cdk deploy`` builds it, run as ECS runs the task (and as Lambda
runs a lambda worker's function: test_function.py).

The image is built from the synthesized container asset (``cdk.out/asset.<hash>``, the directory
``cdk deploy`` would build) and started with the synthesized task definition's own settings
(:mod:`consumer.local.task`) against a local stack provisioned from the same template (:mod:`consumer.local.stack`).

If no container engine can run here, every test of this tier is skipped with one line saying why,
and the rest of the suite runs; with ``CONTAINER_TIER_REQUIRED=1`` (``.ci/run`` sets it once it has
an engine) that is a failure instead. A Dockerfile that does not build is a failure, never a skip.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from consumer.local.harness import LoopbackWebhook
from consumer.local.image import BuiltImage, ContainerToolingUnavailable, Engine, find_engine
from consumer.local.stack import LocalStack, local_client, provision_fresh, start_server
from consumer.local.task import TaskContainer, TaskRun
from consumer.testing import QueueDepth, depth
from infra.worker_settings import CONTEXT_KEY
from tests.reference import reference_context

#: The environment whose task definition the tier runs: the one `make run` deploys locally.
ENVIRONMENT = "demo"
STACK = f"SqsWorker-{ENVIRONMENT}"
#: The worker whose task the tier runs: the demo stack's first, the notifications example (its samples, its webhook).
WORKER = "notifications"
#: The environment the tier's lambda worker runs in (tests/container/test_function.py): see :func:`assembly`.
FUNCTION_ENVIRONMENT = "function"
FUNCTION_STACK = f"SqsWorker-{FUNCTION_ENVIRONMENT}"


#: Set by .ci/run where it has installed an engine: then the tier must run, never skip.
REQUIRED_ENV = "CONTAINER_TIER_REQUIRED"


def unavailable(why: ContainerToolingUnavailable) -> None:
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"container tier required ({REQUIRED_ENV}=1) but cannot run: {why}", pytrace=False)
    pytest.skip(f"container tier: {why}")


@pytest.fixture(scope="session")
def engine() -> Engine:
    try:
        return find_engine()
    except ContainerToolingUnavailable as why:
        unavailable(why)
        raise


def lambda_worker() -> tuple[str, str]:
    """The first reference environment with a worker Lambda can run, and that worker."""
    from tests.infra.function_checks import lambda_ready

    ready = lambda_ready(reference_context()[CONTEXT_KEY])
    assert ready is not None, "no reference worker can run on Lambda"
    return ready


@pytest.fixture(scope="session")
def assembly(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One app synthesized by the real app code (nag included), after the engine (without one the tier skips before
    synthesizing): the reference demo environment (tests/reference.py), and ``FUNCTION_ENVIRONMENT``, a copy of
    :func:`lambda_worker`'s environment with that worker switched to ``"target": "lambda"``."""
    from infra.app import build_app
    from tests.infra.function_checks import move_to_lambda

    environments = reference_context()[CONTEXT_KEY]
    original, worker = lambda_worker()
    switched = move_to_lambda(environments[original], worker)
    context = {CONTEXT_KEY: {ENVIRONMENT: environments[ENVIRONMENT], FUNCTION_ENVIRONMENT: switched}}
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build_app(outdir=str(outdir), context=context)
    app.synth()
    return outdir


@pytest.fixture(scope="session")
def task(assembly: Path) -> TaskContainer:
    """The demo environment's task's container."""
    return TaskContainer.from_assembly(assembly, STACK, WORKER)


@pytest.fixture(scope="session")
def image(engine: Engine, task: TaskContainer) -> BuiltImage:
    """The asset directory built as the image the task definition names (ImageBuildError fails the tier)."""
    try:
        built = task.build(engine)
    except ContainerToolingUnavailable as why:
        unavailable(why)
        raise
    print(f"\n{built.tag}: {built.size_bytes / 1e6:.0f} MB, base {built.base}, built by {built.engine}")
    return built


@pytest.fixture(scope="session")
def endpoint() -> Iterator[str]:
    server, url = start_server()
    yield url
    server.stop()


@pytest.fixture
def stack(task: TaskContainer, endpoint: str) -> LocalStack:
    """The demo stack created from the synthesized template on moto's server, reset first."""
    return provision_fresh(endpoint, task.asset_directory.parent / f"{STACK}.template.json")


class Webhook(LoopbackWebhook):
    """The downstream the example handler POSTs to: 200 for every event, after ``pause[event]`` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.pause: dict[str, float] = {}
        self.started: Counter[str] = Counter()
        self.finished: Counter[str] = Counter()
        self._lock = threading.Lock()

    def respond(self, key: str, path: str) -> int:
        with self._lock:
            self.started[key] += 1
        time.sleep(self.pause.get(key, 0.0))
        with self._lock:
            self.finished[key] += 1
        return 200

    def in_flight(self) -> set[str]:
        with self._lock:
            return {k for k, n in self.started.items() if n > self.finished[k]}


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.start()
    yield hook
    hook.stop()


RunFactory = Callable[..., TaskRun]


@pytest.fixture
def run_task(
    engine: Engine, task: TaskContainer, image: BuiltImage, stack: LocalStack, webhook: Webhook, tmp_path: Path
) -> Iterator[RunFactory]:
    """Start the task's container (more than one: a deployment's old and new task) on the local stack;
    ``command`` and ``other_image`` replace the definition's, as a probe in the same set-up.

    The environment is the task definition's, resolved to the local stack, plus what ECS would supply
    (region, credentials: here the local endpoint's) and ``NOTIFY_WEBHOOK_URL``: the demo environment
    declares a dry run, which only logs; the loopback webhook makes each delivery, and a delivery in
    flight, observable (staging and prod inject that URL as a secret).
    """
    runs: list[TaskRun] = []

    def start(command: list[str] | None = None, other_image: str | None = None, **overrides: str) -> TaskRun:
        name = f"consumer-test-{uuid.uuid4().hex[:8]}"
        tag = other_image or image.tag
        volumes = task.volume_directories(engine, tmp_path / f"{name}-volumes", tag)
        environment = {**stack.process_environment(), "NOTIFY_WEBHOOK_URL": webhook.url, **overrides}
        run = TaskRun(
            engine, task, tmp_path / f"{name}.log", name=name, environment=environment, volumes=volumes,
            command=command, image=tag,
        )  # fmt: skip
        runs.append(run.start())
        return run

    yield start
    for run in runs:
        run.remove()


def send(stack: LocalStack, bodies: list[str]) -> None:
    sqs = local_client("sqs", stack.endpoint)
    for first in range(0, len(bodies), 10):
        entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[first : first + 10])]
        assert not sqs.send_message_batch(QueueUrl=stack.task_environment["QUEUE_URL"], Entries=entries).get("Failed")


def depths(stack: LocalStack, url_key: str) -> QueueDepth:
    """(visible, in flight) of the queue whose URL the task receives as ``url_key``."""
    return depth(local_client("sqs", stack.endpoint), stack.task_environment[url_key])
