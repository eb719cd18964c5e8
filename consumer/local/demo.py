"""The local demo (``python -m consumer demo``, the second half of ``make run``): the whole system on moto.

The demo runs a lane per worker of the ``demo`` stack, all at the same time (:mod:`consumer.local.demo_lane`),
whatever workers the stack has. Two handlers it ships a mix for: the notifications example under the demo
declaration (:mod:`consumer.local.demo_notifications`, steps 2-5 below, with the rolling restart and the outage:
features of that lane, run only when the stack has it) and the team's report job
(:mod:`consumer.local.demo_reports`: its own report store, fleet and mix of valid, transiently failing and
malformed report requests). Any other worker gets the samples its handler declares, or bodies built for it, and an
accounting read from its consumers' logs (:mod:`consumer.local.demo_samples`). What it does, with no AWS account:

1. provisions the ``demo`` stack from the synthesized ``cdk.out`` template on
   moto's server on 127.0.0.1 (:mod:`consumer.local.stack`), every worker's queue pair;
2. starts a downstream webhook on 127.0.0.1 that behaves per event: accepts,
   fails transiently (HTTP 503 once or twice), answers slower than the queue's
   visibility lease, rejects (HTTP 422), or is in an outage (HTTP 503 with
   ``Retry-After``) until step 5;
3. starts ``python -m consumer run`` processes with the task's environment, the
   handler being the notifications example under the demo declaration;
4. produces a realistic mix through ``consumer.producer`` (a noisy tenant and quiet ones,
   malformed events among them), and restarts one consumer halfway (SIGTERM, as an ECS
   deployment does); every consumer writes its own liveness file, and ``python -m consumer
   health`` runs for each after producing and before the stop;
5. once everything but the outage events is in its place (the outage events wait in the
   source: the consumers' circuits hand them back unspent, pause, probe), ends the outage;
   the next probe closes the circuits and they are delivered, with no operator step (a
   ``dlq redrive`` runs only for a late arrival, see :meth:`Demo._recover`);
6. stops every worker's consumers with SIGTERM and accounts for each worker's messages: delivered
   exactly once (at its downstream, or per the consumers' logs), or in the DLQ with a reason, nothing lost,
   nothing duplicated, and the SQS requests the consumers made per processed
   message (from their own EMF ``sqs_requests`` metric).

The exit code is 0 only if every worker's accounting balances: every produced event
is in exactly one final place, the one its kind calls for, no event was delivered
twice, the producer sent every event, every running consumer answered its health
check healthy, and every consumer exited 0 after SIGTERM.

moto is a development dependency; it is imported (through :mod:`consumer.local.stack`)
only when the demo runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from consumer.contract import HANDLER_ENV
from consumer.local.bill import bill_of_run
from consumer.local.demo_lane import DELIVERED, DemoResult, Lane
from consumer.local.demo_notifications import MIX, REDRIVE_FILTER, Downstream, build_mix
from consumer.local.demo_report import render_report
from consumer.local.demo_samples import SamplesLane, plan_for
from consumer.local.display import LiveDisplay
from consumer.local.harness import QUIET, TIMED_OUT, ConsumerProcess, Tick, demo_contract, quiet_seconds, settle
from consumer.local.samples import SamplesUnavailableError
from consumer.ops.progress import output_console
from consumer.runtime.heartbeat import METRICS_FLUSH_SECONDS

#: The handlers the demo ships a mix for: the notifications example under the demo declaration, whose lane carries
#: the rolling restart and the outage (the circuit), and the report job the repository ships in the team package
#: (its mix is imported only when a worker runs it: a team may change or remove workers/reports.py). Every other
#: handler, and a second worker of the notifications one, gets a lane of its declared samples.
NOTIFICATIONS_HANDLER, REPORTS_HANDLER = "consumer.examples.demo:handle", "workers.reports:handle"
POLL_SECONDS = 0.5
#: Nothing moving for this long with the sources empty means the run has settled: the demo contract's
#: lease plus its maximum backoff (10 + 4 s), and 6 s of slack. The report job's lease is 660 s, but its
#: lane waits on this too: with its source empty nothing of it is still on its way (a message held or
#: backing off counts as in flight, so the lane is busy, not quiet).
QUIET_SECONDS = quiet_seconds(demo_contract(), margin_seconds=6.0)
#: How often the operator step may run: once, plus again for events that reach the DLQ after it.
REDRIVE_ROUNDS = 3


@dataclass
class DemoOptions:
    template: Path
    messages: int = 120
    reports: int = 28
    samples: int = 10
    consumers: int = 2
    slow_seconds: float = 14.0
    produce_seconds: float = 10.0
    rolling_restart: bool = True
    timeout_seconds: float = 300.0
    log_dir: Path = Path(".demo")
    report: Path | None = None


class Demo:
    """One run of the demo; :meth:`run` returns the result the report is made from."""

    def __init__(self, options: DemoOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.phase = "provisioning"
        self.started = time.monotonic()
        self.lanes: list[Lane] = []
        #: The notifications example's lane (the outage, the rolling restart), when the stack runs it.
        self.notifications: Lane | None = None
        self._restart: threading.Thread | None = None

    def run(self) -> DemoResult:
        from consumer.local.stack import local_client, provision, start_server

        options = self.options
        options.log_dir.mkdir(parents=True, exist_ok=True)
        server, endpoint = start_server()
        try:
            local = provision(endpoint, options.template)
            sqs = local_client("sqs", endpoint)
            for name in local.workers:  # the stack's order: its first worker's result leads the JSON report
                self.lanes.append(self._lane(name, local.process_environment(name), sqs))
            self.console.print(
                f"local stack [bold]{local.stack_name}[/bold] on {endpoint} (from {options.template});"
                f" alarms: {len(local.alarms)}; workers: "
                + "; ".join(
                    f"{lane.worker} ({lane.handler}{' on Lambda' if lane.fleet.function else ''}: visibility"
                    f" {_visibility(sqs, lane.queue_url)} s, max receives {lane.env['CONSUMER_MAX_RECEIVE_COUNT']})"
                    for lane in self.lanes
                )
            )
            for lane in self.lanes:
                lane.start()
            return self._run()
        finally:
            for lane in self.lanes:
                lane.stop()
            server.stop()

    def _lane(self, worker: str, env: Mapping[str, str], sqs: Any) -> Lane:
        """The lane for ``worker``, chosen by its handler: a shipped mix, else its declared samples."""
        from consumer.local.stack import LocalProvisioningError

        handler, log_dir = env.get(HANDLER_ENV), self.options.log_dir / worker
        if handler == NOTIFICATIONS_HANDLER and self.notifications is None:
            plan = build_mix(self.options.messages)
            self.notifications = Lane(worker, MIX, plan, Downstream(plan, self.options.slow_seconds), env, sqs, log_dir)
            return self.notifications
        if handler == REPORTS_HANDLER:
            from consumer.local.demo_reports import REPORTS_MIX, ReportStore, build_report_mix

            plan = build_report_mix(self.options.reports)
            return Lane(worker, REPORTS_MIX, plan, ReportStore(plan), env, sqs, log_dir)
        try:
            plan, note = plan_for(worker, env, self.options.samples)
        except SamplesUnavailableError as error:
            raise LocalProvisioningError(f"worker {worker} of {self.options.template}: {error}") from error
        return SamplesLane(worker, plan, env, sqs, log_dir, note)

    def _run(self) -> DemoResult:
        options = self.options
        notifications = self.notifications
        others = [lane for lane in self.lanes if lane is not notifications]
        for lane in self.lanes:
            for _ in range(options.consumers):
                lane.fleet.start()
        deadline = time.monotonic() + options.timeout_seconds
        timed_out: str | None = None
        with self._display() as refresh:
            self.phase = "producing"
            if notifications is not None:
                halfway = self._start_deploy if options.rolling_restart else None
                notifications.start_producer(options.produce_seconds, halfway)
            for lane in others:
                lane.start_producer(options.produce_seconds)
            if notifications is not None:
                timed_out = self._outage(notifications, deadline, refresh)
            else:
                # Every producer done and every consumer started (one not started yet would skip its check); busy
                # while a producer runs (Lane.busy), so a long --produce-seconds never reads as quiet.
                def produced_and_started() -> bool:
                    return not any(
                        lane.producing() or not all(c.ready for c in lane.fleet.alive()) for lane in self.lanes
                    )

                stalled = self._wait(produced_and_started, self.lanes, deadline, refresh)
                self._check_health("after producing")
                timed_out = f"{stalled} while producing" if stalled else None
            for lane in others:
                self.phase = f"settling {lane.worker}"
                stalled = self._wait(lane.settled, [lane], deadline, refresh)
                if stalled and not timed_out:
                    timed_out = f"{stalled} before {lane.worker}'s events were all in their places"
            if self._restart is not None:
                self._restart.join()
            self._check_health("before the stop")
            self.phase = "stopping consumers (SIGTERM)"
            refresh()
            for lane in self.lanes:
                lane.fleet.stop_all(timeout=lane.stop_timeout)
                lane.fleet.read_logs()
            self.phase = "accounting"
            refresh()
        return DemoResult(
            workers=[lane.result() for lane in self.lanes],
            elapsed_seconds=round(time.monotonic() - self.started, 1),
            timed_out_phase=timed_out,
        )

    def _outage(self, notifications: Lane, deadline: float, refresh: Callable[[], None]) -> str | None:
        """The notifications lane's first pass (everything but the outage events in its place, a circuit open), its
        health check, then the outage's end (:meth:`_recover`); why it stopped short, or None."""
        outage = {p.event_id for p in notifications.plan if p.kind == "outage"}
        must_deliver_first = notifications.ids(DELIVERED, but={"outage"})
        expected_dlq = notifications.expected_dlq
        timed_out: str | None = None

        def settled_but_the_outage() -> bool:
            # Every event but the outage ones delivered or in the DLQ, and a circuit has opened: the outage
            # events wait in the source, handed back unspent. (A flaky event can end in the DLQ with its
            # 503 as reason when a receive nobody saw, a long poll left pending by a consumer that exited
            # at the rolling restart, spent one of its receives: the recovery's redrive takes it back.)
            dead = notifications.depths[2]
            delivered = len(must_deliver_first & notifications.delivered())
            return (
                not notifications.producing()
                and notifications.fleet.events["circuit_opened"] > 0
                and dead >= expected_dlq
                and delivered + dead >= len(notifications.plan) - len(outage)
            )

        stalled = self._wait(settled_but_the_outage, [notifications], deadline, refresh)
        self._check_health("after producing, circuit open")
        if stalled:
            timed_out = f"{stalled} in the first pass (outage events waiting behind the circuit)"
        if stalled is None or stalled.startswith(QUIET):
            stalled = self._recover(notifications, deadline, refresh)
            if stalled:
                timed_out = f"{stalled} after the outage ended"
        return timed_out

    # --- steps ----------------------------------------------------------------
    def _recover(self, notifications: Lane, deadline: float, refresh: Callable[[], None]) -> str | None:
        """End the outage: the circuits' next probe closes them and the outage events are delivered, no operator
        step. Only a late arrival (a flaky event in the DLQ, see settled_but_the_outage) gets a redrive, as an
        operator would run one: once the depths show it is all that is amiss (:meth:`Lane.late_arrivals`), or after
        a quiet wait with the DLQ over its count. None once every event is in its place."""
        self.phase = "downstream back: circuits probe and close"
        downstream = notifications.downstream
        assert isinstance(downstream, Downstream)
        downstream.outage.clear()

        def settled_or_late() -> bool:
            return notifications.settled() or notifications.late_arrivals() > 0

        stalled = self._wait(settled_or_late, [notifications], deadline, refresh)
        for _ in range(REDRIVE_ROUNDS):
            late = stalled is None and not notifications.settled()
            quiet = bool(stalled and stalled.startswith(QUIET))
            if not (late or (quiet and notifications.depths[2] > notifications.expected_dlq)):
                break
            self.phase = "operator: redriving a late arrival"
            again = self._redrive(notifications)
            redrive = notifications.redrive or {**again, "moved": 0, "rounds": 0}
            redrive["moved"] += again["moved"]
            redrive["exit_code"] = redrive["exit_code"] or again["exit_code"]
            redrive["rounds"] = redrive.get("rounds", 0) + 1
            notifications.redrive = redrive
            self.phase = "downstream back: circuits probe and close"
            if not again["moved"]:
                break  # what is over in the DLQ is not a late arrival (a second copy, say): no redrive will move it
            # Every redrive is waited on: what it moved back is the recovery's to deliver, not the closing report's.
            stalled = self._wait(settled_or_late, [notifications], deadline, refresh)
        if stalled is None and not notifications.settled():
            # What looked like late arrivals outlasted the redrives: the quiet wait names what is short.
            stalled = self._wait(notifications.settled, [notifications], deadline, refresh)
        return stalled

    def _check_health(self, phase: str) -> None:
        """ECS's container health check, ``python -m consumer health``, for every running consumer of every lane,
        each with its own environment (its own liveness file); the answers go to the display and the report."""
        self.phase = f"liveness: python -m consumer health ({phase})"

        def check(lane: Lane) -> None:
            lane.fleet.read_logs()  # a consumer that just logged consumer_started counts as ready
            lane.fleet.check_health(phase)

        with ThreadPoolExecutor(max_workers=len(self.lanes), thread_name_prefix="health") as lanes:
            list(lanes.map(check, self.lanes))  # side by side, as ECS checks its tasks; an error is raised here

    def _start_deploy(self) -> None:
        lane = self.notifications
        assert lane is not None  # the notifications lane's producer calls it
        self._restart = threading.Thread(target=self._deploy, args=(lane,), name="deploy")
        self._restart.start()

    def _deploy(self, lane: Lane) -> None:
        """An ECS rolling deployment: a new task starts and reports running, then the oldest gets SIGTERM."""
        fleet = lane.fleet
        old = fleet.alive()[0]
        new = fleet.start()
        deadline = time.monotonic() + 60
        while not new.ready and new.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the display's read_logs() marks it ready
        fleet.stop(old, timeout=lane.stop_timeout)

    def _redrive(self, lane: Lane) -> dict[str, Any]:
        """The operator's command, as a subprocess with the worker's queue binding."""
        command = [sys.executable, "-m", "consumer", "dlq", "redrive", "--filter", REDRIVE_FILTER]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | lane.env
        before = lane.look()[2]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        after = lane.look()[2]
        summary = [line for line in done.stdout.splitlines() if line.strip()]
        return {
            "command": "python -m consumer dlq redrive --filter " + REDRIVE_FILTER,
            "exit_code": done.returncode,
            "moved": before - after,
            "output": summary[-5:],
        }

    def _wait(
        self, done: Callable[[], bool], waiting_on: Sequence[Lane], deadline: float, refresh: Callable[[], None]
    ) -> str | None:
        """None once ``done()``; otherwise why the wait ended: timed out, a consumer died, or nothing moves.

        Every lane's depths are read once per tick (for ``done()`` and the display); the lanes in
        ``waiting_on`` decide whether anything is still busy or moving.
        """

        def look() -> Tick:
            for lane in self.lanes:
                lane.look()
            refresh()
            unsent = [lane.worker for lane in self.lanes if lane.unsent]
            if unsent:
                self.phase = f"the producer of {', '.join(unsent)} could not send every event: stopping"
                return Tick(None, True, stop=f"the producer of {', '.join(unsent)} could not send every event")
            crashed = [lane.worker for lane in self.lanes if lane.fleet.crashed()]
            if crashed:
                self.phase = f"a consumer of {', '.join(crashed)} exited on its own: stopping"
                return Tick(None, True, stop=f"a consumer of {', '.join(crashed)} exited on its own")
            state = tuple((lane.depths, sum(lane.fleet.events.values())) for lane in waiting_on)
            return Tick(state, any(lane.busy() for lane in waiting_on))

        stalled = settle(look, done, deadline=deadline, poll_seconds=POLL_SECONDS, quiet_seconds=QUIET_SECONDS)
        if stalled == QUIET:
            # Source empty and nothing logged for longer than any backoff or lease: it will not get there.
            short = "; ".join(f"{lane.worker}: {lane.shortfall()}" for lane in waiting_on if not lane.settled())
            return f"{QUIET} for {QUIET_SECONDS:.0f} s short of the expected places" + (f" ({short})" if short else "")
        if stalled == TIMED_OUT:
            return f"timed out after {self.options.timeout_seconds:.0f} s"
        return stalled

    # --- display --------------------------------------------------------------
    def _snapshot(self) -> Table:
        """The progress table: a column per worker."""
        table = Table(title=f"sqs-worker demo - {self.phase} - {time.monotonic() - self.started:.0f} s", min_width=60)
        table.add_column("worker", style="bold")
        for lane in self.lanes:
            table.add_column(lane.worker, justify="right")

        def row(label: str, value: Callable[[Lane], str]) -> None:
            table.add_row(label, *(value(lane) for lane in self.lanes))

        row("produced", lambda lane: f"{lane.produced} / {len(lane.plan)}")
        row("source queue: visible / in flight", lambda lane: f"{lane.depths[0]} / {lane.depths[1]}")
        row("dead-letter queue", lambda lane: str(lane.depths[2]))
        row("delivered (unique: downstream, else the consumers' logs)", lambda lane: str(len(lane.delivered())))
        row("processed / retried / poisoned", lambda lane: _triple(lane.fleet.events))
        # A consumer writes its metrics every METRICS_FLUSH_SECONDS and when it stops: until then this lags
        # behind the extensions made (the closing report counts after every consumer has stopped).
        row(
            f"heartbeat extensions (metric, written every {METRICS_FLUSH_SECONDS} s and at stop)",
            lambda lane: str(int(lane.fleet.metrics["visibility_extensions"])),
        )
        row(
            "circuit: opens / seconds open (closed)",
            lambda lane: _circuit(lane.fleet.events, lane.fleet.circuit_open_seconds),
        )
        row("consumer processes running", lambda lane: str(len(lane.fleet.alive())))
        row("liveness (python -m consumer health, last check)", lambda lane: _health(lane.fleet.processes))
        return table

    def _display(self) -> LiveDisplay:
        def read_logs() -> None:
            for lane in self.lanes:
                lane.fleet.read_logs()

        return LiveDisplay(self.console, self._snapshot, tick=read_logs)


def _triple(events: Mapping[str, int]) -> str:
    return (
        f"{events.get('message_processed', 0)} / {events.get('message_backoff', 0)}"
        f" / {events.get('moved_to_dlq:poison', 0)}"
    )


def _circuit(events: Mapping[str, int], open_seconds: Sequence[float]) -> str:
    return f"{events.get('circuit_opened', 0)} / {sum(open_seconds):.1f} s ({len(open_seconds)})"


def _visibility(sqs: Any, queue_url: str) -> str:
    """The source queue's visibility timeout as the stack made it (a Lambda worker's is the Lambda target's)."""
    return str(
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["VisibilityTimeout"])["Attributes"][
            "VisibilityTimeout"
        ]
    )


def _health(consumers: Sequence[ConsumerProcess]) -> str:
    """Each checked consumer's last ``python -m consumer health`` answer: ``#1 healthy; #2 UNHEALTHY`` (a plain progress
    line separates its rows with commas)."""
    last = [(c.number, c.health[-1].healthy) for c in consumers if c.health]
    return "; ".join(f"#{n} {'healthy' if ok else 'UNHEALTHY'}" for n, ok in last) or "not checked yet"


def run_demo(options: DemoOptions, console: Console | None = None) -> int:
    """Run the demo, print the report, write ``options.report`` (JSON) if set; returns the exit code."""
    console = console or output_console()
    result = Demo(options, console).run()
    render_report(result, console, bill_of_run(result, options.template.parent))
    if options.report is not None:
        options.report.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return 0 if result.ok else 1
