"""The main job's local demo, shortened: provisioned from the demo as cdk.json shipped it (``make run``'s: the
notifications example, the team package's report job, the async webhooks example and the team package's batch audit
handler, tests/reference.py), every worker's consumers, real HTTP downstreams for the first two. It does not read the team's cdk.json: the demo of any other worker a team adds is tested on a stack of
the tests' own in tests/integration/test_team_workers.py.

The tests of a shipped mix find its lane by handler and skip, saying why, where the repository no longer has that
handler (a team deleted workers/reports.py, say)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from consumer import DownstreamUnavailable
from consumer.declaration import load_handler, samples_of
from consumer.examples.notifications import WebhookUnavailable, deliver
from consumer.local.demo_notifications import OUTAGE_RETRY_AFTER, Downstream
from consumer.local.harness import Planned
from consumer.message import PoisonMessage
from consumer.stack_outputs import WORKER_NAMES_OUTPUT, consumer_container, task_definitions, worker_functions
from tests.integration.conftest import SHIPPED_DEMO_STACK, run_module
from tests.reference import shipped_demo


@pytest.fixture(scope="module")
def short_run(
    shipped_demo_out: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m consumer demo` in its short form (18 events, 8 report requests, one consumer per worker and the
    rolling restart's second beside the first, on the notifications lane), with a JSON report. The one consumer per
    worker keeps the run to the fewest processes (each a consumer's start and two health checks), so a loaded
    machine starves none of them past the demo's 10 s lease; the rolling restart still runs two at once."""
    workdir = tmp_path_factory.mktemp("demo")
    report = workdir / "report.json"
    done = run_module(
        "consumer",
        "demo",
        "--template",
        str(shipped_demo_out / f"{SHIPPED_DEMO_STACK}.template.json"),
        "--messages",
        "18",
        "--reports",
        "8",
        "--consumers",
        "1",
        "--produce-seconds",
        "2",
        "--slow-seconds",
        "12",
        "--timeout",
        "150",
        "--logs",
        str(workdir / "logs"),
        "--report",
        str(report),
        timeout=240,
    )
    return done, json.loads(report.read_text()) if report.exists() else {}


#: The handlers the demo has a mix of its own for (consumer/local/demo.py).
NOTIFICATIONS_HANDLER, REPORTS_HANDLER = "consumer.examples.demo:handle", "workers.reports:handle"
#: The shipped handlers of the other two shapes, which the demo runs on their declared samples: the async example and
#: the team package's batch handler.
WEBHOOKS_HANDLER, AUDIT_HANDLER = "consumer.examples.webhooks:handle", "workers.audit:handle"


def lane(report: dict[str, Any], handler: str) -> dict[str, Any]:
    """The result of the demo's (first) worker running ``handler``; the test skips, saying why, when the shipped demo
    has none here (this repository no longer has that handler)."""
    found = [w for w in report["workers"].values() if w["handler"] == handler]
    if not found:
        why = shipped_demo()[1].get(handler, "the shipped demo runs no such worker")
        pytest.skip(f"the shipped example's worker running {handler} is not in this repository: {why}")
    return found[0]


def report_job() -> Any:
    """The team package's report job (workers.reports), or a skip saying the repository no longer has it."""
    return pytest.importorskip("workers.reports", reason="the shipped example's report job is not in this repository")


def stack_workers(cdk_out: Path) -> dict[str, str]:
    """The demo template's workers and their handlers, ECS tasks' and Lambda functions', in the stack's order."""
    template = json.loads((cdk_out / f"{SHIPPED_DEMO_STACK}.template.json").read_text())
    handlers = {}
    for name, definition in task_definitions(template["Resources"]):
        container = consumer_container(definition)
        handlers[name] = {e["Name"]: e["Value"] for e in container["Environment"]}["CONSUMER_HANDLER"]
    for name, function in worker_functions(template["Resources"]):
        handlers[name] = function["Properties"]["Environment"]["Variables"]["CONSUMER_HANDLER"]
    order = template["Outputs"][WORKER_NAMES_OUTPUT]["Value"].split(",")
    return {name: handlers[name] for name in order if name in handlers}


def lambda_workers(cdk_out: Path) -> set[str]:
    """The demo template's workers deployed as Lambda functions."""
    template = json.loads((cdk_out / f"{SHIPPED_DEMO_STACK}.template.json").read_text())
    return {name for name, _ in worker_functions(template["Resources"])}


@pytest.mark.real
def test_demo_short_form_exits_0_and_balances(short_run: tuple[subprocess.CompletedProcess, dict]) -> None:
    """Every event of every worker ends in its place: nothing lost, nothing in two places, nothing left in the
    source; the first worker's result is also at the top of the JSON report. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    done, report = short_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for accounting in [report["accounting"], *(w["accounting"] for w in report["workers"].values())]:
        assert accounting["balanced"] is True
        assert (accounting["lost"], accounting["misplaced"], accounting["in_two_places"]) == ([], [], [])
        assert accounting["left_in_source"] == 0
        produced = sum(accounting["produced"].values())
        assert accounting["delivered"] + sum(accounting["dead_lettered"].values()) == produced
    assert report["worker"] == next(iter(report["workers"]))


@pytest.mark.real
def test_demo_short_form_runs_every_worker_of_the_stack_balanced(
    short_run: tuple[subprocess.CompletedProcess, dict], shipped_demo_out: Path
) -> None:
    """Every worker of the demo stack ran, with its handler, each balanced, duplicate-free and with every consumer
    exiting 0. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    workers = report["workers"]
    assert {name: w["handler"] for name, w in workers.items()} == stack_workers(shipped_demo_out)
    assert {(w["accounting"]["balanced"], w["accounting"]["duplicates"], w["ok"]) for w in workers.values()} == {
        (True, 0, True)
    }
    assert all(c["exit_code"] == 0 for w in workers.values() for c in w["consumers"])
    assert report["ok"] is True


@pytest.mark.real
def test_demo_short_form_reports_dlq_holds_exactly_the_malformed_requests(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """The reports DLQ ends holding exactly the malformed requests, each with the report job's poison reason, and the
    bodies that are not JSON, kind non_retryable (the JSONDecodeError its @worker declares) at their first receive. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    reports = lane(report, REPORTS_HANDLER)
    accounting = reports["accounting"]
    produced = accounting["produced"]
    assert accounting["dead_lettered"] == {"malformed": produced["malformed"], "not_json": produced["not_json"]}
    by_kind = {"poison": 0, "non_retryable": 0}
    for reason, count in accounting["dlq_reasons"].items():
        kind, _, text = reason.partition(": ")
        assert kind == "poison" or text.startswith("JSONDecodeError: "), reason
        by_kind[kind] += count
    assert by_kind == {"poison": produced["malformed"], "non_retryable": produced["not_json"]}
    assert reports["retried"] == produced["transient"]  # nothing dead-lettered was retried first
    assert (accounting["lost"], accounting["misplaced"], accounting["unknown_in_dlq"]) == ([], [], [])


@pytest.mark.real
def test_demo_short_form_uploads_every_valid_report_once(short_run: tuple[subprocess.CompletedProcess, dict]) -> None:
    """Valid and transiently refused reports are each uploaded exactly once; each transient one was retried once. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    reports = lane(report, REPORTS_HANDLER)
    accounting = reports["accounting"]
    produced = accounting["produced"]
    assert (accounting["delivered"], accounting["duplicates"]) == (produced["valid"] + produced["transient"], 0)
    assert reports["downstream_refusals"] == {"503": produced["transient"]}
    assert reports["retried"] == produced["transient"]
    assert reports["processed"] - reports["duplicates_skipped"] == accounting["delivered"]


@pytest.mark.real
@pytest.mark.parametrize("handler", [WEBHOOKS_HANDLER, AUDIT_HANDLER], ids=["async", "batch"])
def test_demo_short_form_runs_the_async_and_batch_workers_on_their_samples(
    short_run: tuple[subprocess.CompletedProcess, dict], handler: str
) -> None:
    """The async example and the team package's batch handler run beside the others, each on its declared samples:
    every valid one processed once (the consumers' logs), every poison one in the DLQ with the handler's reason. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    worker = lane(report, handler)
    accounting = worker["accounting"]
    produced = accounting["produced"]
    assert set(produced) == {"sample", "poison"}
    assert (accounting["delivered"], accounting["dead_lettered"]) == (
        produced["sample"],
        {"poison": produced["poison"]},
    )
    assert all(reason.startswith("poison: ") for reason in accounting["dlq_reasons"])
    assert sum(accounting["dlq_reasons"].values()) == produced["poison"]
    assert worker["ok"] and accounting["duplicates"] == 0


@pytest.mark.real
def test_demo_short_form_gives_each_consumer_a_tmp_of_its_own(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """In ECS each task has its own /tmp: the batch handler's database, a path under /tmp in its task environment,
    is a file in each consumer's own directory beside its log (never the machine's /tmp, shared by the fleet), and
    together they hold each valid sample's event. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    worker = lane(report, AUDIT_HANDLER)
    (settings,) = [w for w in shipped_demo()[0]["workers"].values() if w["handler"] == AUDIT_HANDLER]
    name = PurePosixPath(settings["handler_environment"]["AUDIT_DATABASE_PATH"]).relative_to("/tmp")
    databases = [Path(c["log"]).with_suffix(".tmp") / name for c in worker["consumers"]]
    stored = set()
    for database in (d for d in databases if d.exists()):
        with closing(sqlite3.connect(database)) as connection:
            stored |= {row[0] for row in connection.execute("SELECT event_id FROM audit_events")}
    valid = [json.loads(s.body)["event_id"] for s in samples_of(load_handler(AUDIT_HANDLER)) if not s.poison]
    assert stored == set(valid)


@pytest.mark.real
def test_demo_short_form_dead_letters_only_poison_with_reasons(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """The DLQ ends holding exactly the malformed and rejected events, each with a poison reason. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    accounting = lane(report, NOTIFICATIONS_HANDLER)["accounting"]
    assert accounting["dead_lettered"] == {
        "malformed": accounting["produced"]["malformed"],
        "rejected": accounting["produced"]["rejected"],
    }
    assert all(reason.startswith("poison: ") for reason in accounting["dlq_reasons"])
    assert sum(accounting["dlq_reasons"].values()) == sum(accounting["dead_lettered"].values())


@pytest.mark.real
def test_demo_short_form_delivers_the_outage_events_behind_the_circuit(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """The outage opened the consumers' circuits, none of its events reached the DLQ, and the report says how
    long the circuits were open; no redrive ran for them (test_demo_short_form_exits_0_and_balances: each was
    delivered once).

    Only a flaky event may be redriven: a receive lost to a long poll pending at the rolling restart can
    exhaust its two 503s into the DLQ with that reason (a late arrival, which the demo's operator redrives). Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    notifications = lane(report, NOTIFICATIONS_HANDLER)
    accounting, circuit = notifications["accounting"], notifications["circuit"]
    assert "outage" not in accounting["dead_lettered"]
    assert circuit["opens"] >= 1 and circuit["closes"] >= 1
    assert 0 < circuit["longest_open_seconds"] <= circuit["open_seconds"]
    assert notifications["redrive"].get("moved", 0) <= accounting["produced"].get("flaky", 0)


@pytest.mark.real
def test_demo_short_form_no_duplicates_despite_slow_deliveries(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """A delivery slower than the 10 s lease is kept invisible by the heartbeat: extended, delivered once. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    notifications = lane(report, NOTIFICATIONS_HANDLER)
    assert notifications["accounting"]["duplicates"] == 0
    assert notifications["heartbeat_extensions"] >= notifications["accounting"]["produced"]["slow"]
    assert notifications["retried"] >= notifications["accounting"]["produced"]["flaky"]


@pytest.mark.real
def test_demo_short_form_rolling_restart_and_shutdown_exit_0(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """A consumer replaced halfway, as an ECS deployment replaces a task (the new one running before the old one's
    SIGTERM): two processes, both stopped by SIGTERM with exit 0. Every event the
    webhook received was processed once by a handler: the consumers' processed count less the copies the idempotency
    store skipped (a second copy of an event, which the endpoint can cause: docs/evidence/CHAOS.md). Real: read from the one
    short run (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    notifications = lane(report, NOTIFICATIONS_HANDLER)
    assert [(c["number"], c["exit_code"]) for c in notifications["consumers"]] == [(1, 0), (2, 0)]
    assert notifications["sqs_requests"] > 0
    handled = notifications["processed"] - notifications["duplicates_skipped"]
    assert handled == notifications["accounting"]["delivered"]


@pytest.mark.real
def test_demo_short_form_counts_each_tenant_from_the_consumers_logs(
    short_run: tuple[subprocess.CompletedProcess, dict],
) -> None:
    """The producer (consumer.producer) sent each notification under its tenant; per tenant, the consumers logged as
    many message_processed lines under that message_group_id, less the duplicate_skipped ones, as the webhook received
    events of it, and no more. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    notifications = lane(report, NOTIFICATIONS_HANDLER)
    tenants = notifications["tenants"]
    assert "tenant-noisy" in tenants and len(tenants) >= 3
    assert sum(t["produced"] for t in tenants.values()) == sum(notifications["accounting"]["produced"].values())
    assert {name: t["processed"] - t["duplicates_skipped"] for name, t in tenants.items()} == {
        name: t["delivered"] for name, t in tenants.items()
    }
    assert tenants["tenant-noisy"]["produced"] == max(t["produced"] for t in tenants.values())
    assert notifications["unsent"] == []
    assert all(w["tenants"] == {} for w in report["workers"].values() if w["handler"] != NOTIFICATIONS_HANDLER)


@pytest.mark.real
def test_demo_short_form_checks_each_consumer_s_liveness_with_its_own_file(
    short_run: tuple[subprocess.CompletedProcess, dict], shipped_demo_out: Path
) -> None:
    """python -m consumer health ran for the running consumers of every worker, after producing (with the
    notifications example in the stack: once its circuits opened) and before the stop, each against its own
    liveness file, and every answer was healthy. Real: read from the one short run
    (`python -m consumer demo`: its consumer processes, their signals and moto's server, on the wall clock)."""
    _, report = short_run
    example = any(w["handler"] == NOTIFICATIONS_HANDLER for w in report["workers"].values())
    first = "after producing, circuit open" if example else "after producing"
    functions = lambda_workers(shipped_demo_out)
    for name, worker in report["workers"].items():
        if name in functions:  # a Lambda function has no container health check
            assert [c["health"] for c in worker["consumers"]] == [[]] * len(worker["consumers"])
            continue
        checks = [(c["number"], h["phase"], h["healthy"]) for c in worker["consumers"] for h in c["health"]]
        assert {phase for _, phase, _ in checks} == {first, "before the stop"}, checks
        assert all(healthy for _, _, healthy in checks) and worker["unhealthy"] == []
        assert all(h["line"].startswith("healthy: ") for c in worker["consumers"] for h in c["health"])
        files = {Path(c["log"]).with_suffix(".liveness.json") for c in worker["consumers"] if c["health"]}
        assert files and all(f.exists() for f in files)


def test_demo_without_a_template_exits_2_naming_the_fix(tmp_path: Path) -> None:
    """No cdk.out: exit 2 with the command that creates it, and no traceback."""
    from typer.testing import CliRunner

    from consumer.cli import build_app

    done = CliRunner().invoke(build_app("demo"), ["demo", "--template", str(tmp_path / "missing.template.json")])
    assert done.exit_code == 2, done.output
    assert "synthesize first (python app.py or make run)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    plan = [
        Planned("evt-flaky", "flaky", "{}", transient_failures=2),
        Planned("evt-rejected", "rejected", "{}"),
        Planned("evt-outage", "outage", "{}"),
        Planned("evt-good", "good", "{}"),
    ]
    server = Downstream(plan, slow_seconds=0.01)
    server.start()
    yield server
    server.stop()


def event(event_id: str) -> dict[str, Any]:
    return {"event_id": event_id, "channel": "email"}


def test_downstream_fails_a_flaky_event_exactly_its_transient_failures(downstream: Downstream) -> None:
    """Over real HTTP, the example's deliver() sees two 503s (retry) and then a 200, counted once."""
    for _ in range(2):
        with pytest.raises(WebhookUnavailable, match="HTTP 503"):
            deliver(event("evt-flaky"), downstream.url)
    deliver(event("evt-flaky"), downstream.url)
    assert (downstream.attempts["evt-flaky"], downstream.successes["evt-flaky"]) == (3, 1)


def test_downstream_rejection_is_poison_to_the_example_handler(downstream: Downstream) -> None:
    """HTTP 422 is permanent: deliver() raises PoisonMessage and nothing counts as delivered."""
    with pytest.raises(PoisonMessage, match="HTTP 422"):
        deliver(event("evt-rejected"), downstream.url)
    assert downstream.delivered() == set()


def test_downstream_outage_lasts_until_cleared(downstream: Downstream) -> None:
    """An outage event gets 503 with Retry-After (the circuit's signal) until the outage flag is cleared, then 200."""
    with pytest.raises(DownstreamUnavailable) as raised:
        deliver(event("evt-outage"), downstream.url)
    assert raised.value.retry_after_seconds == float(OUTAGE_RETRY_AFTER)
    downstream.outage.clear()
    deliver(event("evt-outage"), downstream.url)
    assert downstream.delivered() == {"evt-outage"}
    assert dict(downstream.refusals) == {503: 1}


@pytest.fixture
def store() -> Iterator[Any]:
    report_job()
    from consumer.local.demo_reports import ReportStore  # imports the report job

    server = ReportStore([Planned("rpt-demo-00000", "valid", "{}"), Planned("rpt-demo-00001", "transient", "{}", 1)])
    server.start()
    yield server
    server.stop()


def test_report_store_fails_a_transient_report_once_then_counts_its_upload(store: Any) -> None:
    """Over real HTTP, the report job's upload() sees one 503 (retry), then the PUT is counted once."""
    upload = report_job().upload
    with pytest.raises(report_job().ReportStoreUnavailable, match="HTTP 503"):
        upload("rpt-demo-00001", "<p>page</p>", store.url)
    upload("rpt-demo-00001", "<p>page</p>", store.url)
    upload("rpt-demo-00000", "<p>page</p>", store.url)
    assert (dict(store.attempts), store.delivered()) == (
        {"rpt-demo-00001": 2, "rpt-demo-00000": 1},
        {"rpt-demo-00000", "rpt-demo-00001"},
    )


def test_report_store_counts_a_second_upload_as_a_duplicate(store: Any) -> None:
    """Two successful PUTs of one report are two successes, which the accounting counts as a duplicate."""
    for _ in range(2):
        report_job().upload("rpt-demo-00000", "<p>page</p>", store.url)
    assert store.successes["rpt-demo-00000"] == 2


def test_report_store_refuses_an_unplanned_report_as_permanent(store: Any) -> None:
    """A PUT for a report the plan does not hold is a 404: the report job raises PoisonMessage, nothing counted."""
    with pytest.raises(PoisonMessage, match="HTTP 404"):
        report_job().upload("rpt-stranger-0", "<p>page</p>", store.url)
    assert (store.delivered(), dict(store.refusals)) == (set(), {404: 1})


@pytest.mark.real
def test_demo_short_form_runs_a_lambda_worker_as_lambda_would(
    short_run: tuple[subprocess.CompletedProcess, dict], shipped_demo_out: Path
) -> None:
    """The shipped demo's worker deployed as a Lambda function (webhooks) runs as `python -m consumer local function`
    processes beside the ECS workers' consumers: each played a mapping and invoked the function's entry point (its
    mapping_invoked lines), never started a container consumer, and exited 0 on SIGTERM; its lane balances (the
    balance tests above). A test of the shipped example: it skips where cdk.json deploys no worker on Lambda. Real:
    read from the one short run."""
    _, report = short_run
    functions = lambda_workers(shipped_demo_out)
    if not functions:
        pytest.skip("the shipped demo deploys no worker as a Lambda function")
    for name in functions:
        worker = report["workers"][name]
        logs = [Path(c["log"]).read_text().splitlines() for c in worker["consumers"]]
        events = [json.loads(line).get("event") for log in logs for line in log if line.startswith("{")]
        assert (events.count("mapping_invoked") > 0, "consumer_started" in events) == (True, False)
        assert [c["exit_code"] for c in worker["consumers"]] == [0] * len(worker["consumers"])
        assert worker["ok"]
