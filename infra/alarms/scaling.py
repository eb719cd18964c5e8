"""The service's target tracking policy simulated on the alarm evaluator's minute clock, as Application Auto Scaling
and ECS document it: how many tasks run, how deep the backlog gets and how old its oldest message, minute by minute.

What the template holds is read, never assumed: the ScalableTarget's MinCapacity and MaxCapacity and the policy's
TargetValue and cooldowns (:func:`policies_from_template`), and what one task processes a minute from its task
definition's contract (:func:`per_task_per_minute`). Each rule simulated is a constant or a branch below with its
link; where the documentation gives no number, the docstring says so and where the number comes from.

- How target tracking works, its cooldowns, considerations and scale-in behaviour:
  https://docs.aws.amazon.com/autoscaling/application/userguide/target-tracking-scaling-policy-overview.html
  (the guide's source as last published on GitHub:
  https://github.com/awsdocs/application-auto-scaling-user-guide/blob/04798a9f7b18bda27a43c0b9d0650db335308565/doc_source/application-auto-scaling-target-tracking.md)
- Metric math in a target tracking policy:
  https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-target-tracking-metric-math.html
- ECS task scale-in protection: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from consumer.contract import WorkerContract
from consumer.errors import ContractError
from infra.alarms.definitions import ALARM, INSUFFICIENT_DATA, MISSING
from infra.alarms.metric_alarm import evaluation_range, next_state
from infra.alarms.scaling_template import check_step_policy
from infra.alarms.scaling_template import resource_type as _type
from infra.alarms.scaling_template import scalable_target as _scalable_target
from infra.alarms.step_scaling import StepPolicy, StepScaling

PERIOD_SECONDS = 60
#: AlarmHigh, the scale-out alarm target tracking creates: the metric above TargetValue (GreaterThanThreshold) for
#: 3 of 3 one-minute datapoints. The user guide names the two alarms it creates (AlarmHigh, AlarmLow: "returns the
#: ARNs and names of the two CloudWatch alarms created on your behalf",
#: https://docs.aws.amazon.com/autoscaling/application/userguide/create-target-tracking-policy-cli.html) but not
#: their datapoints; 3 of 3 at 60 s is what the alarms show on AWS, as reported for ECS services in
#: https://github.com/aws/copilot-cli/issues/4233 and https://github.com/hashicorp/terraform-provider-aws/issues/42553.
HIGH_DATAPOINTS = 3
#: AlarmLow, the scale-in alarm: the metric below LOW_THRESHOLD_RATIO x TargetValue (LessThanThreshold) for 15 of 15
#: one-minute datapoints; observed, not documented (https://github.com/aws/copilot-cli/issues/4233,
#: https://github.com/aws-samples/amazon-aurora-labs-for-mysql/issues/3: "15 data points ... 3 data points").
LOW_DATAPOINTS = 15
#: The guide: scale-in happens "only when utilization passes a threshold that is far enough below the target value
#: (usually more than 10% lower)" (overview, "Supporting application availability during high utilization
#: periods"); ECS services show AlarmLow at 90% of the target (target 30, AlarmLow < 27).
LOW_THRESHOLD_RATIO = 0.9
#: Both alarms keep CloudWatch's default TreatMissingData, ``missing`` (as they show on AWS).
ALARM_TREAT_MISSING = MISSING
#: "Application Auto Scaling provides a default value of 300 for ... ECS services" (ScaleOutCooldown and
#: ScaleInCooldown), https://docs.aws.amazon.com/autoscaling/application/APIReference/API_TargetTrackingScalingPolicyConfiguration.html
DEFAULT_COOLDOWN_SECONDS = 300
#: A reading, not a documented number: a new Fargate task pulls its image, starts and begins polling within about a
#: minute (the consumer image is small; its health check start period is 60 s). Pass what you measure.
DEFAULT_TASK_START_SECONDS = 60
#: A flap is a scale-out within this many minutes of a scale-in: AlarmLow's own window, the minutes of low load that
#: justified the scale-in. A fleet cut and grown back within that time was cut on load that had not gone.
FLAP_WINDOW_MINUTES = LOW_DATAPOINTS

BACKLOG_METRIC = ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
TASKS_METRIC = ("ECS/ContainerInsights", "RunningTaskCount")
#: Statistics for which one sample a minute gives the metric's value (anything else is refused, not guessed).
_GAUGE_STATS = {
    BACKLOG_METRIC: ("Sum", "Average", "Minimum", "Maximum"),
    TASKS_METRIC: ("Average", "Minimum", "Maximum"),
}


@dataclass(frozen=True)
class ScalingPolicy:
    """A target tracking policy on backlog per task, with its scalable target's bounds (cooldowns in seconds)."""

    min_tasks: int
    max_tasks: int
    target: float
    scale_out_cooldown: int
    scale_in_cooldown: int


@dataclass(frozen=True)
class Load:
    """Messages arriving each minute (spread evenly over it), and what one running task processes a minute
    (concurrency x 60 / average duration: :func:`per_task_per_minute`)."""

    arrivals_per_minute: Sequence[float]
    per_task_per_minute: float


@dataclass(frozen=True)
class Minute:
    """Minute ``t`` ([60t, 60t + 60) s) as CloudWatch and ECS see it at its end, when the alarms are evaluated.

    ``backlog``: visible messages left; ``running``: tasks consuming once the minute's decision took effect (protected
    ones ECS could not stop included); ``desired``: the service's desired count after it; ``backlog_per_task``: the
    policy's metric math datapoint (None when it has no value); ``oldest_age_seconds``: the oldest visible message's
    age (0 when none); ``alarm_high``, ``alarm_low``: the two alarms' states; ``stepped``: what a step policy invoked
    at the minute's end changed the desired count by (0: not invoked, or it changed nothing).
    """

    t: int
    arrivals: float
    backlog: float
    running: int
    desired: int
    backlog_per_task: float | None
    oldest_age_seconds: float
    processed: float
    alarm_high: str = INSUFFICIENT_DATA
    alarm_low: str = INSUFFICIENT_DATA
    stepped: int = 0


# --- the template ------------------------------------------------------------------------------------------------


def policies_from_template(template: Mapping[str, Any]) -> dict[str, ScalingPolicy]:
    """Every ScalingPolicy of the template, keyed by its logical id, with its ScalableTarget's bounds.

    A StepScaling policy is left to :mod:`infra.alarms.wake_up` (check_step_policy refuses any but the wake-up's
    shape).
    Refused with a ValueError naming the policy: a type other than TargetTrackingScaling, a predefined or
    single-metric specification, metric math other than ``<ApproximateNumberOfMessagesVisible> /
    <RunningTaskCount>``, DisableScaleIn, and a target that is not an ECS service's desired count.
    """
    resources: Mapping[str, Any] = template.get("Resources", {})
    policies = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::ApplicationAutoScaling::ScalingPolicy":
            continue
        properties = resource.get("Properties", {})
        where = f"scaling policy {logical_id}"
        if properties.get("PolicyType") == "StepScaling":
            check_step_policy(template, logical_id)  # the one step policy modeled: the wake-up
            continue
        if properties.get("PolicyType") != "TargetTrackingScaling":
            raise ValueError(
                f"{where}: PolicyType {properties.get('PolicyType')!r} is not modeled (TargetTrackingScaling)"
            )
        config = properties.get("TargetTrackingScalingPolicyConfiguration") or {}
        _check_metric(where, config)
        if config.get("DisableScaleIn"):
            raise ValueError(f"{where}: DisableScaleIn is not modeled")
        target = _scalable_target(where, resources, properties)
        policies[logical_id] = ScalingPolicy(
            min_tasks=int(target["MinCapacity"]),
            max_tasks=int(target["MaxCapacity"]),
            target=float(config["TargetValue"]),
            scale_out_cooldown=int(config.get("ScaleOutCooldown", DEFAULT_COOLDOWN_SECONDS)),
            scale_in_cooldown=int(config.get("ScaleInCooldown", DEFAULT_COOLDOWN_SECONDS)),
        )
    return policies


def per_task_per_minute(template: Mapping[str, Any], policy: str | None = None) -> float:
    """Messages one task processes a minute, concurrency x 60 / average duration, read from the template itself:
    the policy's ScalableTarget names the ECS service, whose task definition carries the worker contract in its
    environment (``CONSUMER_CONCURRENCY``, ``CONSUMER_AVERAGE_DURATION_SECONDS``, rebuilt and checked by
    :meth:`WorkerContract.from_env`). ``policy`` is the policy's logical id, needed when the template has several.
    """
    resources: Mapping[str, Any] = template.get("Resources", {})
    ids = sorted(policies_from_template(template))
    if policy is None:
        if len(ids) != 1:
            raise ValueError(f"the template has {len(ids)} scaling policies ({', '.join(ids)}): name one")
        policy = ids[0]
    if policy not in ids:
        raise ValueError(f"scaling policy {policy}: not in the template ({', '.join(ids) or 'none'})")
    where = f"scaling policy {policy}"
    target = _scalable_target(where, resources, resources[policy]["Properties"])
    services = [r for r in _referenced(target.get("ResourceId")) if _type(resources, r) == "AWS::ECS::Service"]
    if len(services) != 1:
        raise ValueError(f"{where}: its ScalableTarget's ResourceId names no single ECS service of the template")
    task_definition = resources[services[0]]["Properties"].get("TaskDefinition")
    definitions = [r for r in _referenced(task_definition) if _type(resources, r) == "AWS::ECS::TaskDefinition"]
    if len(definitions) != 1:
        raise ValueError(f"{where}: service {services[0]} has no task definition in the template")
    for container in resources[definitions[0]]["Properties"].get("ContainerDefinitions", []):
        environment = {
            e["Name"]: e["Value"] for e in container.get("Environment", []) if isinstance(e.get("Value"), str)
        }
        if "CONSUMER_CONCURRENCY" not in environment:
            continue
        try:
            contract = WorkerContract.from_env(environment)
        except ContractError as error:
            raise ValueError(f"{where}: task definition {definitions[0]}: {error}") from None
        return contract_per_task_per_minute(contract)
    raise ValueError(f"{where}: task definition {definitions[0]} has no container with the worker contract")


def contract_per_task_per_minute(contract: WorkerContract) -> float:
    """concurrency x 60 / average duration: the rate the scaling target assumes (one task clears ``target`` messages
    in acceptable_latency)."""
    assert contract.average_duration_seconds is not None  # resolved by the contract
    return contract.concurrency * 60 / contract.average_duration_seconds


def _check_metric(where: str, config: Mapping[str, Any]) -> None:
    spec = config.get("CustomizedMetricSpecification")
    if config.get("PredefinedMetricSpecification") or not spec or "Metrics" not in spec:
        raise ValueError(
            f"{where}: only a metric math specification (CustomizedMetricSpecification.Metrics) is modeled"
        )
    queries = {q.get("Id"): q for q in spec["Metrics"]}
    returned = [q for q in spec["Metrics"] if q.get("ReturnData", True)]
    expression = returned[0].get("Expression", "") if len(returned) == 1 else ""
    operands = [part.strip() for part in expression.split("/")]
    if len(operands) != 2:
        raise ValueError(f"{where}: metric math {expression!r} is not modeled (backlog / tasks)")
    for query_id, metric in zip(operands, (BACKLOG_METRIC, TASKS_METRIC), strict=True):
        stat = queries.get(query_id, {}).get("MetricStat", {})
        found = (stat.get("Metric", {}).get("Namespace"), stat.get("Metric", {}).get("MetricName"))
        if found != metric or stat.get("Stat") not in _GAUGE_STATS[metric]:
            raise ValueError(
                f"{where}: metric math {expression!r}: {query_id!r} is {'/'.join(map(str, found))} {stat.get('Stat')},"
                f" not modeled (expected {'/'.join(metric)} with one of {', '.join(_GAUGE_STATS[metric])})"
            )


def _referenced(value: object) -> list[str]:
    """Logical ids a property value points at (Ref, Fn::GetAtt), wherever they sit in it (Fn::Join, lists)."""
    if isinstance(value, Mapping):
        if "Ref" in value and isinstance(value["Ref"], str):
            return [value["Ref"]]
        if "Fn::GetAtt" in value and isinstance(value["Fn::GetAtt"], list):
            return [str(value["Fn::GetAtt"][0])]
        return [found for item in value.values() for found in _referenced(item)]
    if isinstance(value, list):
        return [found for item in value for found in _referenced(item)]
    return []


# --- the simulation ------------------------------------------------------------------------------------------------


class _Queue:
    """Visible messages in arrival cohorts, each spread evenly over its minute, consumed oldest first: the oldest
    message's age is then exact while the backlog drains in order (a standard queue is only roughly FIFO)."""

    def __init__(self) -> None:
        self.cohorts: deque[list[float]] = deque()  # [first arrival s, last arrival s, messages]

    def arrive(self, start: float, count: float) -> None:
        if count > 0:
            self.cohorts.append([start, start + PERIOD_SECONDS, count])

    def consume(self, capacity: float) -> float:
        done = 0.0
        while self.cohorts and capacity - done > 1e-9:
            cohort = self.cohorts[0]
            taken = min(cohort[2], capacity - done)
            done += taken
            if taken >= cohort[2] - 1e-9:
                self.cohorts.popleft()
            else:  # the oldest part of the cohort went first
                cohort[0] += (cohort[1] - cohort[0]) * taken / cohort[2]
                cohort[2] -= taken
        return done

    @property
    def backlog(self) -> float:
        return sum(cohort[2] for cohort in self.cohorts)

    def oldest_age(self, now: float) -> float:
        return now - self.cohorts[0][0] if self.cohorts else 0.0


class _Scaler:
    """Application Auto Scaling's side: the two alarms, the capacity each invocation asks for, the cooldowns."""

    def __init__(self, policy: ScalingPolicy, desired: int) -> None:
        self.policy = policy
        self.desired = desired
        self.history: list[float | None] = []
        self.high, self.low = INSUFFICIENT_DATA, INSUFFICIENT_DATA
        self.scale_out_until = -math.inf
        self.scale_out_base = desired
        self.scale_in_until = -math.inf

    def evaluate(self, datapoint: float | None) -> None:
        """The two alarms at the end of a minute, by the evaluator's rules (infra.alarms.metric_alarm.next_state)."""
        self.history.append(datapoint)
        self.high = self._alarm(HIGH_DATAPOINTS, self.policy.target, "GreaterThanThreshold", self.high)
        self.low = self._alarm(LOW_DATAPOINTS, LOW_THRESHOLD_RATIO * self.policy.target, "LessThanThreshold", self.low)

    def _alarm(self, periods: int, threshold: float, comparison: str, current: str) -> str:
        span = evaluation_range(periods)
        points = ([None] * span + self.history)[-span:]  # a period before the simulation is missing data
        return next_state(
            points,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            threshold=threshold,
            comparison=comparison,
            treat_missing=ALARM_TREAT_MISSING,
            current=current,
        )

    def decide(self, now: float) -> None:
        """Invoke the policy for whichever alarm is in ALARM. CloudWatch repeats Auto Scaling actions for as long as
        the alarm stays in ALARM ("Except for Auto Scaling actions, the actions happen only on state transitions",
        https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-actions.html), so every minute.
        INSUFFICIENT_DATA invokes nothing: "A target tracking scaling policy does not scale in when the state of the
        alarm is INSUFFICIENT_DATA" (overview, "Considerations").
        """
        metric = next((value for value in reversed(self.history) if value is not None), None)
        if metric is None:
            return
        if self.high == ALARM:
            self._scale_out(now, metric)
        elif self.low == ALARM and now >= self.scale_in_until:
            self._scale_in(now, metric)

    def _capacity(self, current: int, metric: float) -> int:
        """New capacity in proportion to the metric, ceil(current x metric / target), within [MinCapacity,
        MaxCapacity]. Rounding up is the documented conservative rounding ("Application Auto Scaling always acts
        conservatively by rounding up or down ... This prevents it from adding insufficient capacity or removing too
        much capacity", overview, "Considerations"): it adds at least what the metric asks and removes at most it.
        The current capacity is the service's desired count (the scalable dimension), the metric's denominator the
        running tasks: while new tasks start, the two differ and the policy asks for more than the backlog needs.
        """
        wanted = math.ceil(current * metric / self.policy.target - 1e-9)
        return max(self.policy.min_tasks, min(self.policy.max_tasks, wanted))

    def _scale_out(self, now: float, metric: float) -> None:
        """ScaleOutCooldown: "The scaling policy won't increase the desired capacity again unless either a larger
        scale out is triggered or the cooldown period ends. While the scale-out cooldown period is in effect, the
        capacity added by the initiating scale-out activity is calculated as part of the desired capacity for the next
        scale-out activity" (overview, "Define cooldown periods"). Read here: within the cooldown the policy computes
        from the capacity before the initiating scale-out and acts only when that exceeds the current desired count.
        A scale-out in the scale-in cooldown goes ahead at once and ends that cooldown ("if another alarm triggers a
        scale-out activity during the scale-in cooldown period, Application Auto Scaling scales out the target
        immediately. In this case, the scale-in cooldown period stops and doesn't complete").
        """
        in_cooldown = now < self.scale_out_until
        base = self.scale_out_base if in_cooldown else self.desired
        wanted = self._capacity(base, metric)
        if wanted <= self.desired:
            return
        if not in_cooldown:
            self.scale_out_base = self.desired
        self.desired = wanted
        self.scale_out_until = now + self.policy.scale_out_cooldown
        self.scale_in_until = -math.inf

    def _scale_in(self, now: float, metric: float) -> None:
        """ScaleInCooldown: "scale-in activities are blocked until the cooldown period has expired" (overview, "Define
        cooldown periods"); the caller checks it."""
        wanted = self._capacity(self.desired, metric)
        if wanted < self.desired:
            self.desired = wanted
            self.scale_in_until = now + self.policy.scale_in_cooldown


class _Service:
    """ECS's side: tasks started for the desired count and stopped down to it, sparing protected ones.

    A task is protected while it has messages in flight (consumer/runtime/protection.py); ECS does not stop it in a
    scale-in ("Amazon ECS will not terminate this task during scale-in events", task scale-in protection) and stops it
    once it is idle. Not-yet-started tasks go first (they hold no message).
    """

    def __init__(self, running: int, task_start_seconds: float) -> None:
        self.ready_at = [-math.inf] * running
        self.task_start_seconds = task_start_seconds

    def capacity(self, start: float) -> float:
        """Task-minutes available in [start, start + 60): a task that starts consuming mid-minute counts in part."""
        end = start + PERIOD_SECONDS
        return sum(max(0.0, min(1.0, (end - ready) / PERIOD_SECONDS)) for ready in self.ready_at)

    def running(self, now: float) -> int:
        return sum(1 for ready in self.ready_at if ready <= now)

    def reconcile(self, now: float, desired: int, busy: int) -> None:
        """Start or stop tasks toward ``desired``; ``busy`` running tasks hold protection and stay."""
        missing = desired - len(self.ready_at)
        if missing > 0:
            self.ready_at += [now + self.task_start_seconds] * missing
            return
        excess = -missing
        starting = [ready for ready in self.ready_at if ready > now]
        running = [ready for ready in self.ready_at if ready <= now]
        dropped = min(excess, len(starting))
        starting = starting[: len(starting) - dropped]
        idle = max(0, len(running) - busy)
        running = running[: len(running) - min(excess - dropped, idle)]
        self.ready_at = running + starting


def simulate(
    policy: ScalingPolicy,
    load: Load,
    *,
    task_start_seconds: int = DEFAULT_TASK_START_SECONDS,
    initial_tasks: int | None = None,
    missing_task_metric: Collection[int] = (),
    step: StepPolicy | None = None,
    step_at: Collection[int] = (),
) -> list[Minute]:
    """Run ``load`` through the policy, one minute at a time; the service starts with ``initial_tasks`` running
    (default MinCapacity), its desired count that number within [MinCapacity, MaxCapacity].

    Each minute: tasks consume (new ones from ``task_start_seconds`` after the decision that started them), the
    policy's metric math gives the minute's datapoint, both alarms are evaluated, the policy acts on an alarm in ALARM
    and ECS starts or stops tasks. ``missing_task_metric``: minutes whose RunningTaskCount datapoint is missing.
    ``step_at``: minutes at whose end the alarm of the ``step`` policy (a wake-up, infra.alarms.wake_up) invokes it,
    whatever runs then: the policy applies its own adjustment and cooldown (:class:`StepScaling`), after target
    tracking's decision; when its alarm acts comes from the alarm itself (:func:`infra.alarms.wake_up.woken_fleet`).

    The metric math gap: "Missing values in a time series are treated as 0. If the value of a data point causes a
    function to attempt to divide by zero, the data point is dropped"
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html#metric-math-syntax-arithmetic).
    With no task running, or no RunningTaskCount datapoint, ``backlog / tasks`` has no value that minute: the alarms
    see missing data, go to INSUFFICIENT_DATA when the whole range is missing, and the policy does nothing: it
    cannot scale out from zero tasks, whatever the backlog (hence the wake-up of a worker with min_tasks 0).
    """
    if initial_tasks is not None and initial_tasks < 0:
        raise ValueError(f"initial_tasks must be >= 0, got {initial_tasks}")
    if load.per_task_per_minute <= 0:
        raise ValueError(f"per_task_per_minute must be > 0, got {load.per_task_per_minute}")
    if step_at and step is None:
        raise ValueError("step_at: needs the step policy its alarm invokes")
    running = policy.min_tasks if initial_tasks is None else initial_tasks
    scaler = _Scaler(policy, max(policy.min_tasks, min(policy.max_tasks, running)))
    stepper = StepScaling(step, policy.min_tasks, policy.max_tasks) if step is not None else None
    service = _Service(running, task_start_seconds)
    service.reconcile(0.0, scaler.desired, busy=0)
    queue = _Queue()
    minutes = []
    for t, arrivals in enumerate(load.arrivals_per_minute):
        start, now = t * PERIOD_SECONDS, (t + 1) * PERIOD_SECONDS
        task_minutes = service.capacity(start)  # RunningTaskCount's Average over the minute
        queue.arrive(start, arrivals)
        processed = queue.consume(task_minutes * load.per_task_per_minute)
        backlog = queue.backlog
        tasks = 0.0 if t in missing_task_metric else task_minutes
        datapoint = backlog / tasks if tasks > 0 else None
        scaler.evaluate(datapoint)
        scaler.decide(now)
        before = scaler.desired
        if stepper is not None and t in step_at:
            scaler.desired = stepper.invoke(now, scaler.desired)
        service.reconcile(now, scaler.desired, _busy(service.running(now), backlog, processed, load))
        minutes.append(
            Minute(
                t=t,
                arrivals=arrivals,
                backlog=backlog,
                running=service.running(now),
                desired=scaler.desired,
                backlog_per_task=datapoint,
                oldest_age_seconds=queue.oldest_age(now),
                processed=processed,
                alarm_high=scaler.high,
                alarm_low=scaler.low,
                stepped=scaler.desired - before,
            )
        )
    return minutes


def _busy(running: int, backlog: float, processed: float, load: Load) -> int:
    """Running tasks with messages in flight at the minute's end, so protected. With a backlog left every task was
    working; without one, the fewest that could have done the minute's work (a reading: SQS spreads messages over
    every polling task, so more may be busy, which only delays when ECS can stop them)."""
    if processed <= 0:
        return 0
    if backlog > 0:
        return running
    return min(running, math.ceil(processed / load.per_task_per_minute - 1e-9))


# --- the summary ---------------------------------------------------------------------------------------------------


def summary(minutes: Sequence[Minute], load: Load, policy: ScalingPolicy) -> dict[str, Any]:
    """What a scenario comes to, beside the ideal: the same load on MaxCapacity tasks running from t = 0 (the
    fastest any fleet within the bounds drains it) and, for cost, a fleet sized each minute to that minute's arrivals.

    ``backlog_from_minute``: the first minute ending with a backlog; ``drained_at_minute``: the minute from which it
    stays empty (None: never backlogged, or still backlogged at the end); ``time_to_drain_minutes``: the one less the
    other (0 when never backlogged, None when not drained); ``flaps``: a scale-in followed by a scale-out within
    FLAP_WINDOW_MINUTES.
    """
    ideal = _fixed_fleet(load, policy.max_tasks)
    events = _scale_events(minutes, policy)
    scale_ins = [e for e in events if e["direction"] == "in"]
    scale_outs = [e for e in events if e["direction"] == "out"]
    flaps = [
        {"scale_in_at": i["t"], "scale_out_at": o["t"]}
        for i in scale_ins
        for o in scale_outs
        if 0 < o["t"] - i["t"] <= FLAP_WINDOW_MINUTES
    ]
    backlog_from, drained_at, time_to_drain = _drain(minutes)
    ideal_time_to_drain = _drain(ideal)[2]
    datapoints = [m.backlog_per_task for m in minutes if m.backlog_per_task is not None]
    return {
        "minutes": len(minutes),
        "backlog_from_minute": backlog_from,
        "drained_at_minute": drained_at,
        "time_to_drain_minutes": time_to_drain,
        "ideal_time_to_drain_minutes": ideal_time_to_drain,
        "max_backlog": max((m.backlog for m in minutes), default=0.0),
        "max_backlog_per_task": max(datapoints, default=None),
        "max_oldest_age_seconds": max((m.oldest_age_seconds for m in minutes), default=0.0),
        "ideal_max_oldest_age_seconds": max((m.oldest_age_seconds for m in ideal), default=0.0),
        "max_desired": max((m.desired for m in minutes), default=0),
        "max_running": max((m.running for m in minutes), default=0),
        "exceeded_max_tasks": any(m.desired > policy.max_tasks or m.running > policy.max_tasks for m in minutes),
        "task_minutes": sum(m.running for m in minutes),
        "sized_fleet_task_minutes": sum(
            math.ceil(a / load.per_task_per_minute - 1e-9) for a in load.arrivals_per_minute
        ),
        "scale_outs": scale_outs,
        "scale_ins": scale_ins,
        "flaps": flaps,
    }


def _scale_events(minutes: Sequence[Minute], policy: ScalingPolicy) -> list[dict[str, Any]]:
    """Each change of the desired count, from the count the service starts at (MinCapacity unless changed at t=0)."""
    events, previous = [], minutes[0].desired if minutes else policy.min_tasks
    for minute in minutes:
        if minute.desired != previous:
            direction = "out" if minute.desired > previous else "in"
            events.append({"t": minute.t, "direction": direction, "from": previous, "to": minute.desired})
            previous = minute.desired
    return events


def _drain(minutes: Sequence[Minute]) -> tuple[int | None, int | None, int | None]:
    """(first minute ending with a backlog, minute from which the backlog stays empty, minutes between them)."""
    backlogged = [m.t for m in minutes if m.backlog > 0]
    if not backlogged:
        return None, None, 0
    if backlogged[-1] == minutes[-1].t:
        return backlogged[0], None, None
    return backlogged[0], backlogged[-1] + 1, backlogged[-1] + 1 - backlogged[0]


def _fixed_fleet(load: Load, tasks: int) -> list[Minute]:
    """The same load on ``tasks`` tasks running from t = 0, never scaled."""
    queue, minutes = _Queue(), []
    for t, arrivals in enumerate(load.arrivals_per_minute):
        queue.arrive(t * PERIOD_SECONDS, arrivals)
        processed = queue.consume(tasks * load.per_task_per_minute)
        backlog = queue.backlog
        per_task = backlog / tasks if tasks else None
        age = queue.oldest_age((t + 1) * PERIOD_SECONDS)
        minutes.append(Minute(t, arrivals, backlog, tasks, tasks, per_task, age, processed))
    return minutes
