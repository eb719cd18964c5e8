"""What ``python -m infra.alarms scenarios`` prints and draws: the time-to-page table, the scaling table, the plots.

The markdown forms are what docs/alarms.md carries between its generated markers (``make alarms-docs`` rewrites
them; tests/alarms/test_catalogue.py fails when the committed text differs from a fresh run).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.alarms.catalogue import Outcome
from infra.alarms.definitions import ALARM, INSUFFICIENT_DATA, OK
from infra.alarms.scaling import Load, ScalingPolicy, simulate, summary
from infra.alarms.world import WorkerFacts

#: The burst the scaling table shows: ten times the usual rate for 15 minutes, the usual rate being half of what the
#: minimum fleet clears (infra/alarms/scaling_bridge.py uses the same).
BURST_FACTOR, BURST_MINUTES, BURST_ONSET_MINUTE, HORIZON_MINUTES = 10, 15, 10, 90


def _minutes(value: float) -> str:
    if abs(value) >= 60 * 24:
        return f"{value / 60 / 24:.2f} d"
    if abs(value) >= 120:
        return f"{value / 60:.1f} h"
    return f"{value:g} min"


def outcome_cells(outcome: Outcome) -> tuple[str, str]:
    """(notifications, verdict) as the table shows them: ``DlqDepth → ALARM +1 min (page)``."""
    row = outcome.row()
    shown = [
        f"{n['alarm']} → {n['to']} {'+' if n['minutes'] >= 0 else ''}{_minutes(n['minutes'])} ({n['to_topic']})"
        for n in row["notifications"]
    ]
    verdict = "yes" if outcome.intended else "NO: " + "; ".join(outcome.problems)
    return ("<br>".join(shown) or "none", verdict)


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
    usual = 0.5 * facts.min_tasks * facts.per_task_per_minute
    arrivals = [
        usual * (BURST_FACTOR if BURST_ONSET_MINUTE <= m < BURST_ONSET_MINUTE + BURST_MINUTES else 1)
        for m in range(HORIZON_MINUTES)
    ]
    return Load(arrivals, facts.per_task_per_minute)


def scaling_markdown(environment: str, policy: ScalingPolicy, facts: WorkerFacts, task_start_seconds: int = 60) -> str:
    """The burst on the synthesized target-tracking policy, minute by minute, with its summary."""
    load = burst_load(facts)
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
        f" {result['scale_outs']}, scale-ins {result['scale_ins']}, flaps {result['flaps']}.\n"
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


STATE_LEVEL = {OK: 0, INSUFFICIENT_DATA: 1, ALARM: 2}


def plot(outcome: Outcome, path: Path) -> None:
    """One PNG: the series the notifying alarms read (top), each alarm's state (bottom), notifications marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=[2, 1])
    onset = outcome.timeline.onset
    for key, points in sorted(outcome.series.points.items()):
        namespace, metric, dimensions = key
        if metric not in {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "dead_lettered",
                          "circuit_opens", "RunningTaskCount", "NumberOfMessagesDeleted"} or not points:  # fmt: skip
            continue
        queue = dict(dimensions).get("QueueName", dict(dimensions).get("Queue", ""))
        label = f"{metric} {queue.rsplit('-', 1)[-1] if queue else ''}".strip()
        top.step([(t - onset) / 60 for t, _ in points], [v for _, v in points], where="post", label=label, linewidth=1)
    top.set_yscale("symlog")
    top.legend(fontsize=6, loc="upper left")
    top.set_title(f"{outcome.scenario.name}: {outcome.scenario.title} ({outcome.scenario.source})", fontsize=9)
    names = sorted({c.alarm for c in outcome.changes})
    for index, name in enumerate(names):
        xs, ys = [(outcome.timeline.created - onset) / 60], [index + 0.4 * STATE_LEVEL[INSUFFICIENT_DATA] / 2]
        for change in (c for c in outcome.changes if c.alarm == name):
            xs.append((change.t - onset) / 60)
            ys.append(index + 0.4 * STATE_LEVEL[change.to_state] / 2)
            if change.actions and change.to_state == ALARM:
                bottom.annotate("page" if "page" in outcome.routes.values() else "notify", (xs[-1], ys[-1]), fontsize=6)
        xs.append((outcome.timeline.end - onset) / 60)
        ys.append(ys[-1])
        bottom.step(xs, ys, where="post", linewidth=1.5)
    bottom.set_yticks(range(len(names)), [outcome.short_names.get(n, n) for n in names], fontsize=6)
    bottom.set_xlabel("minutes after onset (state: low OK, middle INSUFFICIENT_DATA, high ALARM)")
    for axis in (top, bottom):
        axis.axvline(0, color="grey", linestyle=":")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
