"""Run the scenario catalogue against an environment's synthesized template and judge each outcome.

For each scenario: the world's calls and counts go through the publishing rules into a series, the template's alarms
are evaluated on it, and the changes are read as the on-call person meets them: which alarm notified, when (minutes
after the onset), where (the paging or the ticket topic), and whether that is what the scenario must give.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infra.alarms.definitions import ALARM, OK, CompositeAlarm, MetricAlarm, Series
from infra.alarms.engine import Transition, evaluate
from infra.alarms.events import SqsEvent
from infra.alarms.lambda_model import invocation_emf_series, lambda_series
from infra.alarms.lambda_scenarios import LAMBDA_CATALOGUE, lambda_skipped
from infra.alarms.publishers import container_insights_series, emf_series
from infra.alarms.scaling import policies_from_template
from infra.alarms.scenarios import CATALOGUE, USUAL_PER_MINUTE, WAKE_DELAYED, Scenario
from infra.alarms.sqs_model import QueueSpec, sqs_series
from infra.alarms.template import load_template, read_alarms
from infra.alarms.wake_up import WakeUp, wake_up_from_template, wake_ups_from_template
from infra.alarms.world import CREATED_SECONDS, DAY, Timeline, WorkerFacts, World
from infra.capacity_settings import WAKE_UP_SECONDS
from infra.identities import DEFAULT_IDENTITY
from infra.settings import EnvironmentSettings
from infra.worker_settings import LAMBDA, lambda_target_of

#: The recorded runs the recorded scenarios read (``NAME.json``), as the lab's recorder writes them
#: (``python -m bench.alarm_recording``): data, read here; nothing of the recorder is imported.
RECORDINGS = Path(__file__).resolve().parent / "recordings"
#: A DLQ message must page at least this long before it could expire.
EXPIRY_WARNING_SECONDS = DAY


def worker_facts(environment: EnvironmentSettings) -> list[WorkerFacts]:
    """Every worker's queues, service and contract, named as the synthesized template names them."""
    stack = environment.stack_name
    facts = []
    for worker in environment.workers:
        # A worker's resources follow its identity (infra/identities.py); "default" holds the unprefixed ones.
        identity = worker.identity or worker.name
        prefix = stack if identity == DEFAULT_IDENTITY else f"{stack}-{identity}"
        on_lambda = worker.target == LAMBDA
        facts.append(
            WorkerFacts(
                source=f"{prefix}-source" + (".fifo" if environment.contract(worker).fifo else ""),
                dlq=f"{prefix}-dlq" + (".fifo" if environment.contract(worker).fifo else ""),
                cluster="",
                service="",
                contract=environment.contract(worker),
                min_tasks=worker.min_tasks,
                max_tasks=worker.max_tasks,
                function=_function_name(prefix) if on_lambda else None,
                target=lambda_target_of(worker, environment.contract(worker)) if on_lambda else None,
                prefix=prefix,
            )
        )
    return facts


def _function_name(prefix: str) -> str:
    """A lambda worker's function name, as infra/function.py's ``function_name_of`` gives it (not imported: that
    module loads the CDK, which the evaluator never does; tests/alarms/test_lambda_catalogue.py keeps them equal)."""
    return f"{prefix}-consumer"


def _service_dimensions(alarms: Sequence[MetricAlarm]) -> list[tuple[str, str]]:
    """(cluster, service) of every RunningTaskCount the alarms read, in template order (one per worker)."""
    found: list[tuple[str, str]] = []
    for alarm in alarms:
        for key in sorted(alarm.metric_keys()):
            if key[1] == "RunningTaskCount":
                dimensions = dict(key[2])
                pair = (dimensions.get("ClusterName", ""), dimensions.get("ServiceName", ""))
                if pair not in found:
                    found.append(pair)
    return found


@dataclass
class Outcome:
    scenario: Scenario
    timeline: Timeline
    changes: list[Transition]
    routes: Mapping[str, str]
    short_names: Mapping[str, str]
    series: Series
    problems: list[str] = field(default_factory=list)
    #: The template's metric alarms, for plots of what each compared with its threshold.
    alarms: Sequence[MetricAlarm] = ()
    #: The first worker's wake-up (min_tasks 0), else None: its alarm's action scales, it notifies nobody.
    wake_up: WakeUp | None = None
    facts: WorkerFacts | None = None
    #: Every wake-up alarm of the template (any worker's): their actions scale, they notify nobody.
    scaling_alarms: frozenset[str] = frozenset()

    @property
    def intended(self) -> bool:
        return not self.problems

    def notifications(self) -> list[tuple[Transition, str]]:
        """Changes that notified someone, with where (page / ticket / the topic as written); the wake-up alarm's
        action is a scaling policy, not a notification."""
        return [
            (change, ", ".join(sorted({self.routes.get(a, a) for a in change.actions})))
            for change in self.changes
            if change.actions and change.alarm not in self.scaling_alarms
        ]

    def wake_up_actions(self) -> list[Transition]:
        """The wake-up alarm's changes to ALARM after the onset (each invokes its scaling policy)."""
        name = self.wake_up.alarm.name if self.wake_up is not None else None
        return [c for c in self.changes if c.alarm == name and c.to_state == ALARM and c.t >= self.timeline.onset]

    def bound(self) -> float | None:
        """The first page's bound, minutes after the onset: the scenario's, plus the wake-up time for a worker that
        scales to zero where the paging alarm's threshold carries it (ConsumerStalled, BacklogAge)."""
        scenario = self.scenario
        if scenario.bound is not None and self.facts is not None:
            return scenario.bound(self.facts)
        if scenario.within_minutes is None:
            return None
        wake = WAKE_UP_SECONDS / 60 if self.wake_up is not None and scenario.pages[0] in WAKE_DELAYED else 0
        return scenario.within_minutes + wake

    def row(self) -> dict[str, Any]:
        onset = self.timeline.onset
        pages = [
            {
                "alarm": self.short_names.get(change.alarm, change.alarm),
                "to": change.to_state,
                "minutes": round((change.t - onset) / 60, 1),
                "to_topic": where,
            }
            for change, where in self.notifications()
            if not (change.t == self.timeline.created and change.to_state == OK)
        ]
        wake_ups = [
            {"acted": round((acted - onset) / 60, 1), "ran": None if ran is None else round((ran - onset) / 60, 1)}
            for acted, ran in self.timeline.wake_ups
        ]
        return {
            "scenario": self.scenario.name,
            "wake_ups": wake_ups,
            "title": self.scenario.title,
            "source": self.scenario.source,
            "wrong": self.scenario.wrong,
            "notifications": pages,
            "intended": self.intended,
            "problems": self.problems,
        }


def judge(outcome: Outcome) -> list[str]:
    """The goals (docs/alarms.md): every real failure pages in its bound; nothing wrong means no page and no flap;
    a DLQ message pages at least a day before it could expire; the wake-up never lowers the desired count, and a
    fleet the load holds keeps it."""
    scenario, onset = outcome.scenario, outcome.timeline.onset
    problems = []
    alarms_to = [
        (c, outcome.short_names.get(c.alarm, c.alarm)) for c, _ in outcome.notifications() if c.to_state == ALARM
    ]
    for change, name in alarms_to:
        if name in scenario.tickets:
            continue
        if not scenario.wrong or name not in (*scenario.pages, *scenario.may_page):
            problems.append(f"{name} notified ALARM at {(change.t - onset) / 60:+.1f} min: unintended")
    if scenario.quiet_after_onset:
        problems += [
            f"{name} went to ALARM at {(c.t - onset) / 60:+.1f} min, after the onset"
            for c, name in alarms_to
            if c.t > onset
        ]
    for name in scenario.pages:
        first = next((c for c, n in alarms_to if n == name and c.t >= onset), None)
        if first is None:
            problems.append(f"{name} never paged")
        elif (bound := outcome.bound()) is not None and name == scenario.pages[0]:
            late = (first.t - onset) / 60
            if late > bound:
                problems.append(f"{name} paged {late:.1f} min after onset, over the {bound:g} min bound")
    if scenario.wake_ups is not None and len(outcome.wake_up_actions()) != scenario.wake_ups:
        problems.append(f"the wake-up acted {len(outcome.wake_up_actions())} times, not {scenario.wake_ups}")
    problems += [
        f"the wake-up lowered the desired count from {cut} to {to} at {(t - onset) / 60:+.1f} min"
        for t, cut, to, by_wake_up in outcome.timeline.scale_ins
        if by_wake_up
    ]
    if scenario.holds_fleet:
        problems += [
            f"the desired count fell from {cut} to {to} at {(t - onset) / 60:+.1f} min, under load"
            for t, cut, to, _ in outcome.timeline.scale_ins
            if t >= onset
        ]
    if scenario.wake_ups:  # the thresholds allow WAKE_UP_SECONDS from the first waiting message to a running task
        problems += [
            f"the woken task ran {(ran - onset) / 60:.1f} min after the first message, over WAKE_UP_SECONDS"
            f" ({WAKE_UP_SECONDS / 60:g} min) that the alarms allow"
            for _, ran in outcome.timeline.wake_ups
            if ran is not None and ran - onset > WAKE_UP_SECONDS
        ]
    for expiry in outcome.timeline.expiries:
        warned = [c for c, n in alarms_to if n == "DlqExpiring" and c.t <= expiry - EXPIRY_WARNING_SECONDS]
        if not warned:
            problems.append(f"no DlqExpiring page a day before the expiry at {expiry / DAY:.2f} d")
    seen: dict[str, list[str]] = {}
    for change in outcome.changes:
        seen.setdefault(change.alarm, []).append(change.to_state)
    for alarm, states in seen.items():
        flapped = any(
            a == ALARM and b == OK and c == ALARM for a, b, c in zip(states, states[1:], states[2:], strict=False)
        )
        short = outcome.short_names.get(alarm, alarm)
        if flapped and short not in scenario.recurring and any(short == n for _, n in alarms_to):
            problems.append(f"{short} flapped ALARM → OK → ALARM")
    return problems


def _series_of(
    world: World, timeline: Timeline, facts: Sequence[WorkerFacts], services: Sequence[tuple[str, str]]
) -> Series:
    """Every published datapoint of the scenario: the queues', each ECS worker's task counts (the subject's from the
    world, the others' steady), the subject's function metrics if it is on Lambda, and its EMF counts."""
    specs = []
    for worker in facts:
        contract = worker.contract
        specs.append(
            QueueSpec(worker.source, contract.fifo, contract.source_retention_seconds, worker.visibility_seconds)
        )
        specs.append(QueueSpec(worker.dlq, contract.fifo, contract.dlq_retention_seconds, 30))
    series = sqs_series(world.events, specs, start=0, end=timeline.end, idle_since=timeline.idle_since)
    # The template's services in template order are its ECS workers' in cdk.json's order.
    for worker, (cluster, service) in zip([f for f in facts if f.function is None], services, strict=False):
        is_subject = worker is facts[0]
        counts = world.tasks if is_subject else [(0.0, worker.awake_tasks, worker.awake_tasks)]
        late = world.late_task_counts if is_subject else None
        series.merge(
            container_insights_series(counts, cluster=cluster, service=service, start=0, end=timeline.end, late=late)
        )
    subject = facts[0]
    if subject.function is not None:
        series.merge(
            lambda_series(world.invocations, world.throttles, function=subject.function, start=0, end=timeline.end)
        )
        series.merge(invocation_emf_series(world.counts, queue=subject.source))
    else:
        series.merge(emf_series(world.counts, queue=subject.source))
    return series


def run_scenario(
    scenario: Scenario,
    alarms: Sequence[MetricAlarm],
    composites: Sequence[CompositeAlarm],
    facts: Sequence[WorkerFacts],
    routes: Mapping[str, str],
    short_names: Mapping[str, str],
    policy: object = None,
    wake_up: WakeUp | None = None,
    scaling_alarms: frozenset[str] = frozenset(),
) -> Outcome:
    world = World(facts[0])
    world.policy = policy
    world.wake_up = wake_up
    services = _service_dimensions(alarms)
    if scenario.recording is not None:
        timeline = load_recording(RECORDINGS / f"{scenario.recording}.json", world)
    else:
        timeline = scenario.build(world)
    series = _series_of(world, timeline, facts, services)
    changes = evaluate(alarms, composites, series, end=timeline.end, created=timeline.created)
    outcome = Outcome(
        scenario,
        timeline,
        changes,
        routes,
        short_names,
        series,
        alarms=alarms,
        wake_up=wake_up,
        facts=facts[0],
        scaling_alarms=scaling_alarms | ({wake_up.alarm.name} if wake_up is not None else set()),
    )
    outcome.problems = judge(outcome)
    return outcome


def load_recording(path: Path, world: World) -> Timeline:
    """A recorded run, after ``CREATED_SECONDS`` of modeled steady history (so the alarms exist before it starts, as
    for a stack that has run a while), its queue names mapped onto the environment's first worker (source first,
    then the DLQ). The fleet keeps its last running count after the recording's teardown."""
    document = json.loads(path.read_text())
    shift = float(CREATED_SECONDS)
    world.set_tasks(0, world.facts.awake_tasks)
    world.steady(0, shift - 60, USUAL_PER_MINUTE)
    queues = [q["name"] for q in document["queues"]]
    names = dict(zip(queues, (world.facts.source, world.facts.dlq), strict=False))
    for raw in document["events"]:
        event = SqsEvent.from_json(raw)
        world.events.append(replace(event, t=event.t + shift, queue=names.get(event.queue, event.queue)))
    for t, metric, value in document["emf"]["points"]:
        world.counts.append((t + shift, metric, value))
    running = [row for row in document["tasks"] if row[1] > 0]
    world.tasks.extend((t + shift, r, d) for t, r, d in document["tasks"] if t <= running[-1][0])
    end = shift + float(document["end"])
    return Timeline(onset=shift + float(document["onset"]), end=end)


def topic_routes(template: Mapping[str, Any]) -> dict[str, str]:
    """Each SNS topic's role: the stack's paging topic pages, its ticket topic files a ticket (by logical id, as
    infra/paging.py names them); any other topic keeps its logical id."""
    routes = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::SNS::Topic":
            routes[logical_id] = (
                "page"
                if logical_id.startswith("Paging")
                else "ticket"
                if logical_id.startswith("Tickets")
                else logical_id
            )
    return routes


def subjects(facts: Sequence[WorkerFacts]) -> list[list[WorkerFacts]]:
    """The workers the catalogue runs on, each with the environment's others after it: the first worker, and the
    first of the other target if there is one (an ECS worker runs :data:`CATALOGUE`, a lambda worker
    :data:`LAMBDA_CATALOGUE`)."""
    found = [list(facts)]
    other = next((f for f in facts if (f.function is None) != (facts[0].function is None)), None)
    if other is not None:
        found.append([other, *(f for f in facts if f is not other)])
    return found


def run_catalogue(
    template_path: Path, environment: EnvironmentSettings, scenarios: Sequence[Scenario] | None = None
) -> list[Outcome]:
    """Every scenario of each subject worker (:func:`subjects`): :data:`CATALOGUE` on an ECS worker,
    :data:`LAMBDA_CATALOGUE` on a lambda worker, or ``scenarios`` on every subject."""
    template = load_template(template_path)
    alarms, composites = read_alarms(template, environment.stack_name)
    routes = topic_routes(template)
    policies = list(policies_from_template(template).values())
    scaling = frozenset(w.alarm.name for w in wake_ups_from_template(template, alarms))
    outcomes = []
    for facts in subjects(worker_facts(environment)):
        subject = facts[0]
        names = [a.name for a in alarms] + [c.name for c in composites]
        short = {name: name.removeprefix(f"{subject.prefix}-") for name in names}
        if subject.function is not None:
            chosen, policy, wake_up = scenarios or LAMBDA_CATALOGUE, None, None
            run = [s for s in chosen if lambda_skipped(s, subject) is None]
        else:
            chosen = scenarios or CATALOGUE
            policy, wake_up = policies[0] if policies else None, wake_up_from_template(template, alarms)
            run = [s for s in chosen if s.skipped(wake_up is not None) is None]
        outcomes += [run_scenario(s, alarms, composites, facts, routes, short, policy, wake_up, scaling) for s in run]
    return outcomes


def skipped_scenarios(template_path: Path, scenarios: Sequence[Scenario] = CATALOGUE) -> list[tuple[Scenario, str]]:
    """The scenarios the catalogue does not run on this template's first ECS worker, each with its rule
    (:meth:`Scenario.skipped`); none on a template without one."""
    template = load_template(template_path)
    alarms, _ = read_alarms(template, "")
    if not policies_from_template(template) and not any(
        key[1] == "RunningTaskCount" for a in alarms for key in a.metric_keys()
    ):
        return []
    zero = wake_up_from_template(template, alarms) is not None
    return [(s, reason) for s in scenarios if (reason := s.skipped(zero)) is not None]
