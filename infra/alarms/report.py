"""What ``python -m infra.alarms scenarios`` prints and draws: the time-to-page table, the scaling table, the plots.

The markdown forms are what docs/alarms.md (the time to page per alarm) and docs/evidence/alarms.md (the rest) carry
between their generated markers (``python -m infra.alarms scenarios --write-docs`` rewrites them;
tests/alarms/test_catalogue.py fails when the committed text differs from a fresh run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.alarms.catalogue import Outcome
from infra.alarms.definitions import ALARM, INSUFFICIENT_DATA, OK
from infra.alarms.scaling import Load, ScalingPolicy, simulate, summary
from infra.alarms.scenarios import Scenario
from infra.alarms.wake_up import WakeUp, woken_fleet
from infra.alarms.world import WorkerFacts, World
from infra.capacity_settings import TASK_START_SECONDS, WAKE_UP_SECONDS

#: The burst the scaling table shows: ten times the usual rate for 15 minutes, the usual rate being half of what the
#: minimum fleet clears (infra/alarms/scaling_bridge.py uses the same).
BURST_FACTOR, BURST_MINUTES, BURST_ONSET_MINUTE, HORIZON_MINUTES = 10, 15, 10, 90


def _minutes(value: float) -> str:
    if abs(value) >= 60 * 24:
        return f"{value / 60 / 24:.2f} d"
    if abs(value) >= 120:
        return f"{value / 60:.1f} h"
    return f"{value:g} min"


def _signed(minutes: float) -> str:
    return f"{'+' if minutes >= 0 else ''}{_minutes(minutes)}"


def outcome_cells(outcome: Outcome) -> tuple[str, str]:
    """(notifications, verdict) as the table shows them: ``DlqDepth → ALARM +1 min (page)``; an alarm the scenario
    says recurs shows each of its notifications once, with how often and the last time: ``×7, the last +6.38 d``."""
    row = outcome.row()
    recurring = outcome.scenario.recurring
    kinds: dict[tuple[str, str, str], list[float]] = {}
    for n in row["notifications"]:
        kinds.setdefault((n["alarm"], n["to"], n["to_topic"]), []).append(n["minutes"])
    shown = []
    for n in row["notifications"]:
        times = kinds[(n["alarm"], n["to"], n["to_topic"])]
        if n["alarm"] not in recurring:
            shown.append(f"{n['alarm']} → {n['to']} {_signed(n['minutes'])} ({n['to_topic']})")
        elif n["minutes"] == times[0]:
            again = f" ×{len(times)}, the last {_signed(times[-1])}" if len(times) > 1 else ""
            shown.append(f"{n['alarm']} → {n['to']} {_signed(n['minutes'])}{again} ({n['to_topic']})")
    shown += [
        f"wake-up {'+' if w['acted'] >= 0 else ''}{_minutes(w['acted'])}, task "
        + ("never runs" if w["ran"] is None else f"runs {'+' if w['ran'] >= 0 else ''}{_minutes(w['ran'])}")
        + " (scaling)"
        for w in row["wake_ups"]
    ]
    verdict = "yes" if outcome.intended else "NO: " + "; ".join(outcome.problems)
    return ("<br>".join(shown) or "none", verdict)


def skipped_markdown(skipped: Sequence[tuple[Scenario, str]]) -> str:
    """The line under an environment's table naming the scenarios it does not run, grouped by rule."""
    rules: dict[str, list[str]] = {}
    for scenario, reason in skipped:
        rules.setdefault(reason, []).append(scenario.name)
    return "".join(f"\nNot run here: {', '.join(names)} ({reason}).\n" for reason, names in rules.items())


def catalogue_markdown(environment: str, outcomes: Sequence[Outcome]) -> str:
    lines = [
        f"#### {environment}",
        "",
        "| scenario | source | something wrong | notifications (minutes after onset; where) | intended |",
        "|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        notes, verdict = outcome_cells(outcome)
        scenario = outcome.scenario
        wrong = "yes" if scenario.wrong else "no"
        lines.append(f"| {scenario.name}: {scenario.title} | {scenario.source} | {wrong} | {notes} | {verdict} |")
    return "\n".join(lines) + "\n"


def burst_load(facts: WorkerFacts) -> Load:
    usual = 0.5 * facts.awake_tasks * facts.per_task_per_minute
    arrivals = [
        usual * (BURST_FACTOR if BURST_ONSET_MINUTE <= m < BURST_ONSET_MINUTE + BURST_MINUTES else 1)
        for m in range(HORIZON_MINUTES)
    ]
    return Load(arrivals, facts.per_task_per_minute)


def scaling_markdown(
    environment: str,
    policy: ScalingPolicy,
    facts: WorkerFacts,
    task_start_seconds: int = 60,
    wake_up: WakeUp | None = None,
) -> str:
    """The burst on the synthesized target-tracking policy, minute by minute, with its summary; a worker that scales
    to zero starts at zero tasks and is woken by its wake-up (its alarm evaluated on the burst's SQS datapoints)."""
    load = burst_load(facts)
    woken = ""
    if wake_up is not None:
        task_start_seconds = TASK_START_SECONDS
        minutes, wakes = woken_fleet(World(facts, created=0), load.arrivals_per_minute, policy, wake_up)
        first = next(m for m, rate in enumerate(load.arrivals_per_minute) if rate > 0) * 60.0
        woken = _woken_line(facts, wakes, first)
    else:
        minutes = simulate(policy, load, task_start_seconds=task_start_seconds)
    result: dict[str, Any] = summary(minutes, load, policy)
    head = (
        f"#### {environment}: min {policy.min_tasks}, max {policy.max_tasks} tasks, target {policy.target:g} messages"
        f" per task, {facts.per_task_per_minute:g} messages per task-minute, tasks start in {task_start_seconds} s\n\n"
        f"Burst: {load.arrivals_per_minute[BURST_ONSET_MINUTE]:g}/min for {BURST_MINUTES} minutes from minute"
        f" {BURST_ONSET_MINUTE} over a usual {load.arrivals_per_minute[0]:g}/min. Time to drain:"
        f" {result['time_to_drain_minutes']} min (ideal, max_tasks from the start: {result['ideal_time_to_drain_minutes']}"
        f" min); oldest message at most {result['max_oldest_age_seconds']:.0f} s (ideal"
        f" {result['ideal_max_oldest_age_seconds']:.0f} s); most tasks {result['max_running']}; scale-outs"
        f" {result['scale_outs']}, scale-ins {result['scale_ins']}, flaps {result['flaps']}.\n" + woken
    )
    rows = [
        "| minute | arrivals | backlog | running | desired | backlog per task | oldest age (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for minute in minutes:
        if minute.t < BURST_ONSET_MINUTE - 1 or minute.t > BURST_ONSET_MINUTE + BURST_MINUTES + 25:
            continue
        per_task = "-" if minute.backlog_per_task is None else f"{minute.backlog_per_task:.0f}"
        rows.append(
            f"| {minute.t} | {minute.arrivals:.0f} | {minute.backlog:.0f} | {minute.running} | {minute.desired} |"
            f" {per_task} | {minute.oldest_age_seconds:.0f} |"
        )
    return head + "\n" + "\n".join(rows) + "\n"


def _woken_line(facts: WorkerFacts, wakes: Sequence[tuple[float, float | None]], first: float) -> str:
    """The wake-ups of a burst from zero tasks (``first``: the first message's minute start, s), and the goal they are
    held to: acceptable_latency + WAKE_UP_SECONDS (the alarms' allowance). A wake-up over WAKE_UP_SECONDS is said
    loudly, never absorbed."""
    goal = facts.contract.acceptable_latency_seconds + WAKE_UP_SECONDS
    shown = [f"alarm at minute {acted / 60:g}, task running at minute {ran / 60:g}" for acted, ran in wakes if ran]
    over = [ran for _, ran in wakes if ran is None or ran - first > WAKE_UP_SECONDS]
    verdict = (
        f"**OVER the {WAKE_UP_SECONDS} s the alarms allow: raise WAKE_UP_SECONDS or keep min_tasks >= 1**"
        if over or not wakes
        else f"within the {WAKE_UP_SECONDS} s the alarms allow"
    )
    return (
        f"\nAt zero tasks (min_tasks 0) the first messages wait for the wake-up: {'; '.join(shown) or 'none'} ({verdict});"
        f" the latency goal at zero is acceptable_latency + WAKE_UP_SECONDS = {goal} s.\n"
    )


STATE_LEVEL = {OK: 0, INSUFFICIENT_DATA: 1, ALARM: 2}


def plot(outcome: Outcome, path: Path) -> None:
    """One PNG: for each metric alarm that went to ALARM, the value it compared (metric or math result) with its
    threshold and its ALARM minutes shaded; then every alarm's state, notifications marked page or ticket."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from infra.alarms.engine import alarm_values

    onset, end = outcome.timeline.onset, outcome.timeline.end
    alarmed = {c.alarm for c in outcome.changes if c.to_state == ALARM}
    drawn = [a for a in outcome.alarms if a.name in alarmed] or list(outcome.alarms[:1])
    names = sorted({c.alarm for c in outcome.changes})
    step = 60 if end - onset <= 2 * 86_400 else 600

    def minutes(t: float) -> float:
        return (t - onset) / 60

    figure, axes = plt.subplots(
        len(drawn) + 1, 1, figsize=(10, 1.6 * len(drawn) + 2.4), sharex=True, squeeze=False,
        height_ratios=[1.0] * len(drawn) + [max(1.0, 0.25 * len(names))],
    )  # fmt: skip
    figure.suptitle(f"{outcome.scenario.name}: {outcome.scenario.title} ({outcome.scenario.source})", fontsize=9)
    for axis, alarm in zip(axes[:-1, 0], drawn, strict=True):
        values = alarm_values(alarm, outcome.series, end=end, step=step)
        axis.step([minutes(t) for t, _ in values], [float("nan") if v is None else v for _, v in values],
                  where="post", linewidth=1, label="value (missing: gap)")  # fmt: skip
        axis.axhline(alarm.threshold, color="red", linestyle="--", linewidth=0.8,
                     label=f"threshold {alarm.comparison} {alarm.threshold:g}")  # fmt: skip
        state, since = INSUFFICIENT_DATA, float(outcome.timeline.created)
        for change in [c for c in outcome.changes if c.alarm == alarm.name] + [None]:
            until = float(end) if change is None else float(change.t)
            if state == ALARM:
                axis.axvspan(minutes(since), minutes(until), color="red", alpha=0.12, linewidth=0)
            if change is not None:
                state, since = change.to_state, float(change.t)
        short = outcome.short_names.get(alarm.name, alarm.name)
        axis.set_title(f"{short}: {alarm.period // 60} min periods, {alarm.datapoints_to_alarm} of"
                       f" {alarm.evaluation_periods} (ALARM shaded)", fontsize=7, loc="left")  # fmt: skip
        axis.legend(fontsize=6, loc="upper right")
        axis.tick_params(labelsize=6)
    bottom = axes[-1, 0]
    for index, name in enumerate(names):
        xs, ys = [minutes(outcome.timeline.created)], [index + 0.4 * STATE_LEVEL[INSUFFICIENT_DATA] / 2]
        for change in (c for c in outcome.changes if c.alarm == name):
            xs.append(minutes(change.t))
            ys.append(index + 0.4 * STATE_LEVEL[change.to_state] / 2)
            if change.actions and change.to_state == ALARM:
                where = ", ".join(sorted({outcome.routes.get(a, a) for a in change.actions}))
                bottom.annotate(where, (xs[-1], ys[-1]), fontsize=6)
        xs.append(minutes(end))
        ys.append(ys[-1])
        bottom.step(xs, ys, where="post", linewidth=1.5)
    bottom.set_yticks(range(len(names)), [outcome.short_names.get(n, n) for n in names], fontsize=6)
    bottom.set_xlabel("minutes after onset (state: low OK, middle INSUFFICIENT_DATA, high ALARM)", fontsize=7)
    for axis in axes[:, 0]:
        axis.axvline(0, color="grey", linestyle=":")
    figure.tight_layout()
    figure.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(figure)


def first_pages(outcomes: Sequence[Outcome]) -> dict[str, list[tuple[float, str]]]:
    """Each notifying alarm's first ALARM notification after the onset in each scenario where something is wrong:
    ``{alarm: [(minutes after onset, scenario), ...]}`` (an alarm already in ALARM at the onset is not counted, nor
    one the scenario says recurs unless it must page from the onset: its first page answers a later occurrence)."""
    found: dict[str, list[tuple[float, str]]] = {}
    for outcome in outcomes:
        scenario = outcome.scenario
        if not scenario.wrong:
            continue
        seen = {alarm for alarm in scenario.recurring if alarm not in scenario.pages}
        for notification in outcome.row()["notifications"]:
            alarm, minutes = notification["alarm"], notification["minutes"]
            if notification["to"] == ALARM and minutes >= 0 and alarm not in seen:
                seen.add(alarm)
                found.setdefault(alarm, []).append((minutes, outcome.scenario.name))
    return found


def _span(pages: Sequence[tuple[float, str]]) -> str:
    low, high = min(m for m, _ in pages), max(m for m, _ in pages)
    return _minutes(low) if low == high else f"{_minutes(low)} to {_minutes(high)}"


def time_to_page_markdown(outcomes: Mapping[str, Sequence[Outcome]]) -> str:
    """Per alarm and environment: the first notification's time after the onset, least to most over the scenarios
    where it notifies, and those scenarios."""
    by_env = {environment: first_pages(found) for environment, found in outcomes.items()}
    alarms = sorted({alarm for pages in by_env.values() for alarm in pages})
    # The alarms each environment's template has: "-" where it has none of that name (a lambda worker's alarms in an
    # environment without one), "never" where it has it and no scenario paged it.
    present = {
        e: {short for outcome in found for short in outcome.short_names.values()} for e, found in outcomes.items()
    }
    lines = [
        "The first notification of each alarm after the onset, least to most over the scenarios where something is"
        " wrong (a notification before the onset, a negative time in the per-scenario tables"
        " ([evidence](evidence/alarms.md#time-to-page-per-scenario)), is an alarm already in ALARM when the scenario"
        " starts, as in recorded-operator, which begins on a paged DLQ: not counted here); - where the environment has"
        " no such alarm (a lambda worker's, in an environment without one).",
        "",
        "| alarm | " + " | ".join(by_env) + " | scenarios |",
        "|---|" + "---|" * len(by_env) + "---|",
    ]
    for alarm in alarms:
        cells = [
            _span(by_env[e][alarm]) if alarm in by_env[e] else "never" if alarm in present[e] else "-" for e in by_env
        ]
        scenarios = sorted({name for pages in by_env.values() for _, name in pages.get(alarm, [])})
        lines.append(f"| {alarm} | " + " | ".join(cells) + " | " + ", ".join(scenarios) + " |")
    return "\n".join(lines) + "\n"


def runbook_line(alarm: str, outcomes: Mapping[str, Sequence[Outcome]]) -> str:
    """One sentence for the alarm's runbook section: its time to page per environment, from the catalogue."""
    spans: dict[str, list[str]] = {}
    scenarios: set[str] = set()
    for environment, found in outcomes.items():
        pages = first_pages(found).get(alarm)
        spans.setdefault(_span(pages) if pages else "never", []).append(environment)
        scenarios |= {name for _, name in pages or []}
    parts = [f"{span} ({', '.join(environments)})" for span, environments in spans.items()]
    return (
        f"Time to page after the onset, from the scenario catalogue ([alarms.md](alarms.md#time-to-page-per-alarm)):"
        f" {'; '.join(parts)}; scenarios: {', '.join(sorted(scenarios))}.\n"
    )
