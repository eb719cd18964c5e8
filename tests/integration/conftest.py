"""Fixtures for integration tests: real boto3 against moto, in-process (``sqs``) and over HTTP on 127.0.0.1 (``server_sqs``).

Rule for this folder: no hand-written fakes; every SQS call goes through boto3
to moto, either in-process (``mock_aws``) or to moto's server on loopback.
Queue names are unique per test.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from filelock import FileLock
from moto import mock_aws
from moto.server import ThreadedMotoServer

from consumer.contract import WorkerContract
from consumer.lambda_target import LAMBDA_MIN_MEMORY_MIB, LambdaTarget
from consumer.local.moto_atomic import serialize_moto_sqs
from consumer.local.stack import LOCAL_LOG_LEVEL
from infra.worker_settings import CONTEXT_KEY
from tests.conftest import machine_path
from tests.integration.recorder import runtime_call_recorder
from tests.reference import reference_context, shipped_demo

REGION = "eu-west-1"
ROOT = Path(__file__).resolve().parents[2]
RECORDER_DIR = Path(runtime_call_recorder.__file__).parent
#: The test that checks the recorded runtime calls against tests/infra/runtime_calls.json: it runs last.
RUNTIME_CALLS_TEST = "test_runtime_calls_listed.py::test_every_runtime_call_is_listed_for_the_permissions_tier"
CALL_FIELDS = ("operation", "action", "resource")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the runtime-calls check to the end of the run, after every test that could make a call."""
    last = [item for item in items if item.nodeid.endswith(RUNTIME_CALLS_TEST)]
    items[:] = [item for item in items if item not in last] + last


def shared_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every pytest-xdist worker of this run sees (their base temps' parent), else the session's base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


#: Each worker's runtime calls (in-process and its subprocesses'), written when its session ends; the check reads them.
WORKER_CALLS = "runtime-calls-of-workers"
#: This process's subprocess record directory, once the fixture below made it.
_record_dir: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def runtime_calls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Records the runtime's AWS calls for the whole session, here and in every subprocess it starts.

    In this process every botocore client gets the recorder's hook; subprocesses inherit
    ``PYTHONPATH`` with the recorder's ``sitecustomize.py`` and write to the yielded directory.
    """
    directory = tmp_path_factory.mktemp("runtime-calls")
    _record_dir.append(directory)
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", runtime_call_recorder.RECORD_DIR_ENV)}
    original = runtime_call_recorder.install(botocore.session.Session)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(RECORDER_DIR), saved["PYTHONPATH"]) if p)
    os.environ[runtime_call_recorder.RECORD_DIR_ENV] = str(directory)
    yield directory
    botocore.session.Session.create_client = original
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand what its tests' runtime made over to the check, which runs last on another worker
    and waits for every worker's file (written whole, then renamed: its presence means the worker is done)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    made = runtime_call_recorder.recorded()
    for directory in _record_dir:
        made |= runtime_call_recorder.recorded_by_subprocesses(directory)
    out = shared_directory(session.config._tmp_path_factory) / WORKER_CALLS  # type: ignore[attr-defined]
    out.mkdir(exist_ok=True)
    partial = out / f"{worker}.partial"
    partial.write_text("".join(json.dumps(dict(zip(CALL_FIELDS, c, strict=True))) + "\n" for c in sorted(made)))
    partial.rename(out / f"{worker}.jsonl")


def run_module(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m <args>`` from the repository root as a user would run it: no AWS_ or CONSUMER_ settings
    inherited from the test session (the module starts its own local endpoint); output captured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_"))}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


#: The reference environments (``tests/reference.py``) the tests of a local stack provision: dev (``local up``'s
#: default, the README's manual run) and demo (the chaos suite's). Staging and prod differ from dev in settings the
#: synth checks in process (tests/infra), not in what a local stack runs, so the one real synth leaves them out.
LOCAL_REFERENCE_ENVIRONMENTS = ("dev", "demo")
#: Beside them in the one real synth: the demo as cdk.json shipped it, under a name of its own (the reference demo is
#: ``demo``), and a team's own stack.
SHIPPED_DEMO_STACK = "SqsWorker-shipped-demo"
#: A stack of a team's own: two workers whose handlers the framework does not know (tests/team_handlers.py), no
#: example; ``invoices`` declares samples, ``ledger`` (the stack's first worker) none.
TEAM_STACK = "SqsWorker-team"
TEAM_WORKERS = {"ledger": "tests.team_handlers:ledger", "invoices": "tests.team_handlers:invoices"}
TEAM_ENVIRONMENT: dict[str, Any] = {
    "retain_queues": False,
    "pages_to_tickets": True,
    "source_retention_days": 1,
    "dlq_retention_days": 7,
    "workers": {
        "ledger": {"handler": TEAM_WORKERS["ledger"], "max_tasks": 2},
        "invoices": {
            "handler": TEAM_WORKERS["invoices"],
            "max_tasks": 2,
            "handler_environment": {"INVOICES_BOOK": "eu"},
        },
    },
}


def synthesized_environments() -> dict[str, Any]:
    """What :func:`app_py` synthesizes: the reference dev and demo, the shipped demo and the team's stack."""
    reference = reference_context()[CONTEXT_KEY]
    environments = {name: reference[name] for name in LOCAL_REFERENCE_ENVIRONMENTS}
    environments["shipped-demo"] = shipped_demo()[0]
    environments["team"] = TEAM_ENVIRONMENT
    return environments


#: ``python app.py`` as a user's shell runs it, reporting whether the consumer's boto3 runtime was imported.
APP_PY_PROBE = (
    "import runpy, sys\n"
    "try:\n"
    "    runpy.run_path('app.py', run_name='__main__')\n"
    "except SystemExit as exit:  # app.py exits with main()'s status\n"
    "    sys.stdout.flush()\n"
    "    if exit.code:\n"
    "        raise\n"
    "print('boto3 loaded' if 'boto3' in sys.modules else 'boto3 absent')"
)


@dataclass(frozen=True)
class Synthesis:
    """The one real ``python app.py`` run of the session: its cloud assembly, exit code, stdout and stderr."""

    outdir: Path
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def app_py(tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    """The session's one real synth: ``python app.py`` (run by :data:`APP_PY_PROBE`, which says whether boto3 was
    imported) in a shell's environment (the machine's PATH without the pinned Node, no CDK_ or JSII_ setting), given
    :func:`synthesized_environments` as the CDK CLI gives context (``CDK_CONTEXT_JSON``). aws-cdk-lib's built-in
    CloudFormation validation is left off (``CDK_VALIDATION=false``, as ``cdk synth --no-validation``): it is
    CDK's own plugin, run in process on every whole app the tests hold (``tests/infra/conftest.py``), where any
    finding fails the test, and here it would add 6 to 10 s of CPU to the synth (9 s without it) for nothing
    a fresh interpreter shows. The first xdist worker to need it synthesizes, the others wait for it and read the same
    directory and outcome."""
    shared = shared_directory(tmp_path_factory)
    outdir, outcome = shared / "cdk.out", shared / "cdk.out.outcome.json"
    with FileLock(shared / "cdk.out.lock"):
        if not outcome.is_file():
            partial = shared / "cdk.out.partial"
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CDK_", "JSII_"))}
            env.update(
                {
                    "CDK_DISABLE_CLI_TELEMETRY": "true",
                    "AWS_EC2_METADATA_DISABLED": "true",
                    "CI": "true",
                    "PATH": machine_path(),
                    "CDK_OUTDIR": str(partial),
                    "CDK_VALIDATION": "false",
                    "CDK_CONTEXT_JSON": json.dumps({CONTEXT_KEY: synthesized_environments()}),
                }
            )
            done = subprocess.run(
                [sys.executable, "-c", APP_PY_PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
            )
            if done.returncode == 0:
                partial.rename(outdir)
            outcome.write_text(json.dumps([done.returncode, done.stdout, done.stderr]))
    returncode, stdout, stderr = json.loads(outcome.read_text())
    return Synthesis(outdir, returncode, stdout, stderr)


@pytest.fixture(scope="session")
def cdk_out(app_py: Synthesis) -> Path:
    """The cloud assembly of :func:`app_py`: a stack per reference environment of :data:`LOCAL_REFERENCE_ENVIRONMENTS`
    (as cdk.json shipped them, never the team's cdk.json), ``SqsWorker-shipped-demo`` and ``SqsWorker-team``."""
    assert app_py.returncode == 0, app_py.stderr[-3000:]
    return app_py.outdir


@pytest.fixture(scope="session")
def shipped_demo_out(cdk_out: Path) -> Path:
    """The assembly holding the demo as cdk.json shipped it (``tests.reference.shipped_demo``: the notifications
    example, the team package's report job, the async webhooks example and the team package's batch audit handler,
    whatever cdk.json now holds) as :data:`SHIPPED_DEMO_STACK`: :func:`cdk_out`."""
    return cdk_out


@pytest.fixture(scope="session")
def team_cdk_out(cdk_out: Path) -> Path:
    """The assembly holding :data:`TEAM_ENVIRONMENT` (as ``team``, :data:`TEAM_STACK`): :func:`cdk_out`."""
    return cdk_out


@pytest.fixture
def process_guard() -> Iterator[list[subprocess.Popen[str]]]:
    """The consumer processes a test starts (append them): any still running at its end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def consumer_run_environment(endpoint: str, **variables: str) -> dict[str, str]:
    """The environment of a ``python -m consumer run`` subprocess on the local endpoint ``endpoint``: this process's
    less any AWS, consumer or queue setting, with dummy credentials, the local runs' DEBUG log level, and
    ``variables`` (QUEUE_URL, CONSUMER_HANDLER...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CONSUMER_", "QUEUE_URL", "DLQ_URL"))}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            **LOCAL_LOG_LEVEL,  # as every local run: message_processed is a DEBUG line
            **variables,
        }
    )
    return env


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials so nothing ever reaches a real account."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's server on 127.0.0.1 with a free port; yields its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _moto_sqs_atomic() -> None:
    """moto's SQS backend takes no lock: two receives at once could both take one message, and a receive reading a
    FIFO queue's in-flight groups raised RuntimeError while another thread deleted (each seen in fresh-clone CI
    runs). Every test here runs on moto made atomic per call, as the local tooling's server is
    (consumer/local/moto_atomic.py; tests/integration/test_moto_atomic.py shows the first race without it)."""
    serialize_moto_sqs()


@pytest.fixture
def sqs(aws_credentials: None) -> Iterator[Any]:
    """A boto3 SQS client against moto in-process (``mock_aws``): botocore builds, signs and parses every request as
    over the wire, only the socket is left out. What a test asserts about the runtime's calls and each message's
    place shows here; a test whose point needs the socket (a subprocess, an endpoint taken away, a connection
    refused) asks for :func:`server_sqs` and says why."""
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


@pytest.fixture
def server_sqs(moto_server: str) -> Any:
    """A boto3 SQS client over HTTP to moto's server on 127.0.0.1 (:func:`moto_server`), for a test that needs the
    endpoint itself: a ``python -m consumer run`` subprocess shares the queues with the test through it."""
    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_server)


@dataclass(frozen=True)
class QueuePair:
    queue_url: str
    dlq_url: str


def create_pair(sqs: Any, contract: WorkerContract, **source_overrides: str) -> QueuePair:
    """Create a pair shaped like the stack's (test helper; the local run uses the synthesized template)."""
    suffix = ".fifo" if contract.fifo else ""
    name = f"t-{uuid.uuid4().hex[:12]}"
    pair = contract.queue_attributes()
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq{suffix}", Attributes=pair.dead_letter.to_sqs())["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attributes = pair.source.to_sqs(dead_letter_target_arn=dlq_arn)
    attributes.update(source_overrides)
    attributes = {k: v for k, v in attributes.items() if v != ""}
    queue_url = sqs.create_queue(QueueName=f"{name}-source{suffix}", Attributes=attributes)["QueueUrl"]
    return QueuePair(queue_url=queue_url, dlq_url=dlq_url)


def create_lambda_pair(sqs: Any, contract: WorkerContract) -> QueuePair:
    """A pair shaped like the stack's for a Lambda worker of ``contract``: the source's visibility the Lambda target
    derives (consumer/lambda_target.py), which the function checks at its cold start."""
    target = LambdaTarget(contract=contract, max_tasks=1, memory_mib=LAMBDA_MIN_MEMORY_MIB)
    return create_pair(sqs, contract, VisibilityTimeout=str(target.queue_visibility_seconds))


@dataclass(frozen=True)
class RunResult:
    """What an in-process ``python -m consumer run`` ended with: its exit code, its stdout (the JSON log) and stderr."""

    exit_code: int
    stdout: str
    stderr: str

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines it wrote, in order."""
        lines = [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]
        return [line for line in lines if "event" in line]


@pytest.fixture
def consumer_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``python -m consumer run`` in this process (its typer app under typer's CliRunner): the same start-up, checks
    and refusals as the command, without an interpreter's start. Call it with the environment's ``endpoint`` and
    variables (as :func:`consumer_run_environment`), ``unset`` keys to remove and, for a run that gets as far as
    consuming, ``stop_when``: once it holds, the run is asked to stop as its SIGTERM handler would ask. The signal
    handlers and logging set-up the command installs are put back afterwards."""
    from typer.testing import CliRunner

    import consumer.runtime.cli
    from consumer.cli import build_app

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    saved_handlers = {handler: getattr(handler, "stream", None) for handler in root.handlers}
    levels = (root.level, logging.getLogger("consumer").level)
    switches = (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing)  # noqa: SLF001
    made: list[consumer.runtime.cli.StopOnSignal] = []

    class RecordedStop(consumer.runtime.cli.StopOnSignal):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(consumer.runtime.cli, "StopOnSignal", RecordedStop)

    def stop_once(condition: Callable[[], bool], done: threading.Event) -> None:
        while not done.is_set():
            if made and made[0].consumer is not None and condition():
                made[0].consumer.request_stop()
                return
            time.sleep(0.05)

    def run(
        endpoint: str, *, unset: tuple[str, ...] = (), stop_when: Callable[[], bool] | None = None, **variables: str
    ) -> RunResult:
        environment = consumer_run_environment(endpoint, **variables)
        for key in unset:
            environment.pop(key, None)
        for key in [key for key in os.environ if key not in environment]:
            monkeypatch.delenv(key)
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        done = threading.Event()
        stopper = threading.Thread(target=stop_once, args=(stop_when, done), daemon=True) if stop_when else None
        if stopper:
            stopper.start()
        try:
            result = CliRunner().invoke(build_app("run"), ["run"], catch_exceptions=False)
        finally:
            done.set()
        return RunResult(result.exit_code, result.stdout, result.stderr)

    yield run
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    for handler in [handler for handler in root.handlers if handler not in saved_handlers]:
        root.removeHandler(handler)
    for handler, stream in saved_handlers.items():
        if stream is not None and isinstance(handler, logging.StreamHandler):
            handler.setStream(stream)
    root.setLevel(levels[0])
    logging.getLogger("consumer").setLevel(levels[1])
    logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing = switches  # noqa: SLF001


@pytest.fixture
def virtual(aws_credentials: None) -> Any:
    """A run on the simulated clock for the test's body (tests/integration/virtual.py): the real consumer and moto's
    SQS, both on virtual time, so a backoff or a lease passes at once."""
    from tests.integration.virtual import Virtual

    return Virtual()
