"""What must hold after every run of the simulated world, whatever its seed (:func:`check`).

- **scheduler**: no deadlock, no thread crashed, no blocking call on an event loop, no stall (bench/sim/clock.py);
- **settled**: once the faults stop, every event is done or in the DLQ within the plan's settle limit;
- **lost**: no event is neither done nor in the DLQ;
- **placed**: an event whose handler succeeds is done, never in the DLQ; a poison one is in the DLQ with kind
  ``poison`` (``non_retryable`` never: the world declares none); a failing one with kind ``exhausted``;
- **tried**: a message in the DLQ got there after at least one real attempt (or as poison), with a reason: never
  ``unattempted``, never by SQS's own redrive (no reason); unless every receive of it lost its answer (the consumer
  never saw it);
- **once**: an event's side effect, counted at the handler, happens once;
- **order**: on FIFO, the events of a group are done in the order they were sent (a message whose extensions SQS refused
  through all of botocore's attempts, an outage, is excused: its lease lapses and SQS hands its group on);
- **claim**: a claim that meets its own record (its answer lost, botocore's retry failing its own condition) holds
  the lease: the message is not deferred to itself; nor to a lease that ends within seconds, which it waits for;
- **deadline**: a handler is given up on no sooner than ``max_duration`` after its call (its claims and any wait
  before the call do not count);
- **lease**: no message stays invisible longer than any lease or backoff of the contract without a live holder; no
  message is received again while a live consumer runs it, holds it done, or holds it for its batch or behind its
  FIFO group (a lease the consumer let lapse: the heartbeat's to keep); a message waiting for a free thread of a
  one-message handler may lapse by design (the lookahead hands it back or lets it go, never starts it late);
- **shutdown**: a SIGTERM ends the process within the contract's stop timeout, exit 0; a process exits by itself only
  as stuck (exit 3, every slot held past its lease) or after an error no part of it caught (exit 1);
- **requests**: the SQS and DynamoDB requests of the consumers stay within a bound derived from the contract.

What the world itself did is an excuse for some of them, never for the rest: a SIGKILL of a process holding the event
(its work may be done again: at least once, as SQS promises), a handler that ran past ``max_duration`` (given up on,
its work may be done twice; a success before its lease ran out must count once), and faults the consumer cannot see
past (a lost answer to a receive, a throttled Lambda invocation's batch; with the guard off, any fault on the event's
SQS calls; with it on, faults on both its SQS and its DynamoDB calls). A throttle or a 5xx the consumer sees, a
brownout of the table, a slow call: these it must handle without spending an attempt or doing work twice.

A Lambda run (bench/sim/functions.py) is held to the same: its execution environments are the processes (Lambda
stopping one at the function's timeout, or discarding one with a handler running in it, is a SIGKILL), and a record
too late to start in an invocation (``invocation_ending``) is handed back as one unstarted at a shutdown is.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.sim.plan import MUST_SUCCEED
from bench.sim.run import Run
from consumer.limits import SHUTDOWN_FLUSH_SECONDS
from consumer.runtime.processing import DEFER_IN_PLACE_SECONDS

#: Requests of one delivery at most, botocore's retries apart: its share of a receive, a claim, a delete or a
#: visibility change, a copy (hand-back or DLQ move), a completion, a release.
REQUESTS_PER_DELIVERY = 6
#: botocore's attempts per call in the world's clients.
ATTEMPTS = 3


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


@dataclass
class _Touches:
    """For one event: what the world did to it (the excuses)."""

    killed: bool = False
    overran: bool = False
    given_up: bool = False  # an attempt ran past max_duration: given up on, its lease extended no more
    outlived: bool = False  # ... and another attempt started before it returned: its lease had run out
    sqs_fault: bool = False
    lost_receive: bool = False
    ddb_fault: bool = False
    fifo_hand_back: bool = False  # handed back on FIFO behind a failure or while the circuit was open: a receive
    seen: bool = False  # a receive's answer with it reached the consumer (else only lost answers held it)
    lapsed: bool = False  # received again while an attempt ran, its extensions refused by SQS (an outage)
    refused: bool = False  # an extension of it failed through all of botocore's attempts
    fifo_whys: set[str] = field(default_factory=set)  # the FIFO hand-backs that count (_fifo_hand_backs)


def check(run: Run) -> list[Violation]:
    """Every violation of the module's invariants in ``run``."""
    found = [Violation("scheduler", error.splitlines()[0] + _rest(error)) for error in run.errors]
    found += [Violation("lease", line) for line in dict.fromkeys(run.audit)]
    if run.errors:
        return found  # the run stopped early: the rest would only repeat it
    touches = _touches(run)
    if run.settled_at is None:
        pending = [e for e in run.sent if not run.effects.get(e) and all(m["body"] != e for m in run.dlq)]
        found.append(Violation("settled", f"not settled within the limit; still pending: {pending[:10]}"))
    found += _held_again(run, touches)
    found += _given_up_early(run)
    found += _deferrals(run, touches)
    found += _placement(run, touches)
    found += _order(run, touches)
    found += _shutdown(run)
    found += _requests(run)
    return found


def _held_again(run: Run, touches: dict[str, _Touches]) -> Iterable[Violation]:
    """A live consumer keeps the lease of what it holds: a receive never hands out a message it still holds, unless
    SQS refused that holder's extensions (an outage longer than the lease), or its handler was given up on past
    max_duration (extended no more) and returned as its lease ran out."""
    for event, process, at, state in run.held_again:
        late = state == "done" and touches[event].given_up
        if not touches[event].lapsed and not touches[event].refused and not late:
            yield Violation("lease", f"{event} received again at {at:.1f} while {process} held it ({state})")


def _given_up_early(run: Run) -> Iterable[Violation]:
    """max_duration counts from the handler's call: a handler is given up on no sooner than max_duration after it was
    called, never while its claims (a batch's, one after another) or its wait for the executor run (race 2)."""
    events = _events_by_message_id(run)
    limit = run.contract.max_duration_seconds
    for line in run.events:
        if not (timed_out := _TIMED_OUT.search(line)):
            continue
        at, process = float(line.split()[0]), line.split()[1].split("/")[0]
        event = events.get(timed_out["id"])
        ours = [a for a in run.attempts if a.event == event and a.process == process and a.started <= at]
        # The attempt given up on is one still running then (another may have come and gone since it started).
        running = [a for a in ours if a.ended is None or a.ended >= at]
        called = [a.started for a in running or ours]
        if not called:
            yield Violation("deadline", f"{event} given up on at {at:.1f} by {process} before its handler was called")
        elif at - max(called) < limit - LOG_STAMP_ROUNDING:
            ran = at - max(called)
            yield Violation(
                "deadline", f"{event} given up on at {at:.1f} by {process} {ran:.1f} s into its call (<{limit})"
            )


def _deferrals(run: Run, touches: dict[str, _Touches]) -> Iterable[Violation]:
    """A deferral hands a message back to another holder's lease (races 4 and 10), judged by the claims of its key its
    process saw answered just before it (any of them may be its own): never to its own record (a PutItem whose answer was lost, retried by botocore,
    fails its own condition and brings back the caller's record: that claim holds the lease); never to a lease
    ending within DEFER_IN_PLACE_SECONDS of the claim, which it waits for in place and claims again (once: the same
    attempt's second refusal defers; a process stopping waits no more); never to the lease of a process a SIGTERM stopped, cut to the flush that ended
    it (unless a fault on the table kept the cut from landing)."""
    events = _events_by_message_id(run)
    stopped = {p.name: p.exited for p in run.processes if p.killed is None and p.exited is not None}
    stopping: dict[str, float] = {}  # process -> when it began to stop (a SIGTERM, a crash): it waits in place no more
    for line in run.events:
        if " log consumer_stopping" in line:
            stopping.setdefault(line.split()[1].split("/")[0], float(line.split()[0]))
    holders: dict[str, str] = {}  # owner -> the process that claimed with it
    claims: dict[tuple[str, str], list[_Claim]] = defaultdict(list)
    for call in run.ledger.calls:
        if call.service != "dynamodb" or call.operation != "PutItem":
            continue
        mine, found = call.body.get("Item", {}), (call.refusal or {}).get("Item")
        event, owner = mine.get("pk", {}).get("S", "").removeprefix("attr:"), mine.get("owner", {}).get("S", "")
        holders.setdefault(owner, call.caller)
        if call.fault is not None:
            continue  # the caller never saw this answer (botocore retried, or gave up)
        now = float(call.body.get("ExpressionAttributeValues", {}).get(":now", {}).get("N", "0"))
        left = float(found.get("lease_expires_at", {}).get("N", "0")) - now if found else 0.0
        holder = found.get("owner", {}).get("S", "") if found else owner
        claims[(call.caller, event)].append(_Claim(call.at, owner, holder, left, found is not None))
    for line in run.events:
        if not (deferred := _DEFERRED.search(line)):
            continue
        at, process = float(line.split()[0]), line.split()[1].split("/")[0]
        event = events.get(deferred["id"], "")
        before = [claim for claim in claims.get((process, event), []) if claim.at <= at]
        # Two copies of one event may be claimed in one process at once: it is wrong only if none of the claims
        # answered just before it justifies it.
        recent = [c for c in before if c.at >= at - CLAIM_ANSWER_SECONDS and c.refused]
        if at >= stopping.get(process, math.inf):
            recent = [c for c in recent if c.holder == c.owner]  # stopping: only its own record is still wrong
        wrongs = [w for c in recent if (w := _deferral_wrong(c, before, stopped, holders, touches[event]))]
        if recent and len(wrongs) == len(recent):
            yield Violation("claim", f"{event}: {process} deferred it at {at:.1f} {wrongs[-1]}")


def _deferral_wrong(
    claim: _Claim, before: list[_Claim], stopped: dict[str, float], holders: dict[str, str], touch: _Touches
) -> str:
    """Why a deferral answering ``claim`` is wrong, or "" if the claim justifies it."""
    if claim.holder == claim.owner:
        return f"to its own claim of {claim.at:.1f}"
    waited = any(c.owner == claim.owner and c.refused and c.at < claim.at for c in before)
    if 0 < claim.left <= DEFER_IN_PLACE_SECONDS and not waited:
        return f"to a lease ending {claim.left:.1f} s later"
    holder = holders.get(claim.holder, "")
    end = claim.at + claim.left
    if holder in stopped and end > stopped[holder] + SHUTDOWN_FLUSH_SECONDS + 1 and not touch.ddb_fault:
        return (
            f"to a lease of {holder}, which a SIGTERM stopped at {stopped[holder]:.1f}, ending {end:.1f}"
            " (not cut to the flush)"
        )
    return ""


@dataclass(frozen=True)
class _Claim:
    """One claim (PutItem) whose answer its caller saw."""

    at: float
    owner: str  # the claiming attempt
    holder: str  # the record's owner it met (its own when acquired)
    left: float  # the lease the record had left, if refused
    refused: bool


def _events_by_message_id(run: Run) -> dict[str, str]:
    """Every message id a receive answered with, to its event (the body)."""
    return {
        m.get("MessageId"): m.get("Body", "") for c in run.ledger.calls for m in (c.answer or {}).get("Messages", [])
    }


def _rest(error: str) -> str:
    lines = error.splitlines()[1:]
    return ("\n" + "\n".join(lines[-12:])) if lines else ""


def _placement(run: Run, touches: dict[str, _Touches]) -> Iterable[Violation]:
    dlq: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in run.dlq:
        dlq[message["body"]].append(message)
    attempts: dict[str, int] = defaultdict(int)
    for attempt in run.attempts:
        attempts[attempt.event] += 1
    source = {m["body"] for m in run.source}
    for event in run.sent:
        kind, effects, copies, touch = run.kinds[event], run.effects.get(event, []), dlq.get(event, []), touches[event]
        if not effects and not copies and run.settled_at is not None and event not in source:
            yield Violation("lost", f"{event} ({kind}) is neither done nor in the DLQ")
        reasons = [c["reason"] for c in copies]
        if any(r is None for r in reasons) and not (touch.killed or touch.lost_receive):
            counts = [c["receive_count"] for c in copies]
            yield Violation(
                "tried", f"{event} ({kind}) was moved to the DLQ by SQS's redrive, without a reason {counts}"
            )
        unattempted = [r for r in reasons if r and r.get("kind") == "unattempted"]
        if unattempted and not _fifo_cost(unattempted, touch):
            yield Violation("tried", f"{event} ({kind}) in the DLQ untried: {unattempted[0]['reason']}")
        if copies and not attempts[event] and not touch.fifo_hand_back and touch.seen:
            # Unseen: every receive of it lost its answer, and SQS's redrive moved it (excused above, a lost receive).
            yield Violation("tried", f"{event} ({kind}) in the DLQ with no attempt at all")
        if len(copies) > 1 and not (touch.sqs_fault or touch.killed):
            yield Violation("once", f"{event} ({kind}) is in the DLQ {len(copies)} times")
        dlq_excused = touch.killed or touch.lost_receive or touch.fifo_hand_back
        if kind in MUST_SUCCEED and copies and not dlq_excused:
            yield Violation("placed", f"{event} ({kind}) is in the DLQ: {_kinds(reasons)}; its handler would succeed")
        fifo_cost = bool(copies) and touch.fifo_hand_back  # in the DLQ with a reason, by a FIFO hand-back
        if (
            kind == "poison"
            and (effects or not any(r and r.get("kind") == "poison" for r in reasons))
            and not fifo_cost
        ):
            yield Violation("placed", f"{event} (poison) is not in the DLQ as poison: {_kinds(reasons)}")
        if kind == "failing" and not any(r and r.get("kind") == "exhausted" for r in reasons) and not dlq_excused:
            yield Violation("placed", f"{event} (failing) is not in the DLQ as exhausted: {_kinds(reasons)}")
        if len(effects) > 1 and not _duplicate_excused(run, touch):
            where = ", ".join(f"{process}@{at:.1f}" for at, process in effects)
            yield Violation("once", f"{event} ({kind}) was done {len(effects)} times: {where}")
        if effects and copies and not (touch.killed or touch.overran or touch.sqs_fault):
            yield Violation("once", f"{event} ({kind}) was done and is in the DLQ too: {_kinds(reasons)}")


#: FIFO's documented cost (docs/runtime.md, "FIFO", "hand-back" and "The circuit"): a hand-back there is a visibility
#: change, a receive, since a copy would jump its group: the rest of a group after a failure, what the consumer holds
#: while the circuit is open, a deferral to another holder, what is unstarted at shutdown (or at a Lambda invocation's
#: end) or running at the drain's end, a start past the 12 hours; on the last allowed receive such a message goes to
#: the DLQ with the reason. The consumer logs each (message_released and the like, with its why). A message waiting its
#: turn is never among them: it keeps its lease (lease_ran_down is no excuse), and nothing else excuses an untried move.
FIFO_HAND_BACKS = (
    "fifo_group_blocked",
    "circuit_open",
    "deferred",
    "shutdown",
    "received_after_shutdown",
    "drain_timeout",
    "visibility_budget",
    "invocation_ending",  # a Lambda invocation's shutdown: too little of its time left to start the message
)


def _fifo_cost(unattempted: list[dict[str, Any]], touch: _Touches) -> bool:
    return all(any(f"({why})" in r["reason"] for why in touch.fifo_whys) for r in unattempted)


def _duplicate_excused(run: Run, touch: _Touches) -> bool:
    if touch.killed or touch.overran or touch.outlived:
        return True
    if run.plan.guard:
        return touch.sqs_fault and touch.ddb_fault
    return touch.sqs_fault


def _kinds(reasons: list[dict[str, Any] | None]) -> str:
    return ", ".join("no reason" if r is None else f"{r.get('kind')}: {r.get('reason')}" for r in reasons) or "none"


def _order(run: Run, touches: dict[str, _Touches]) -> Iterable[Violation]:
    if not run.plan.fifo:
        return
    # A lapsed event (SQS refused its extensions while it ran) may be done after what followed it: not the consumer's.
    firsts = {event: effects[0][0] for event, effects in run.effects.items() if effects and not touches[event].lapsed}
    by_group: dict[str, list[str]] = defaultdict(list)
    for event in run.sent:
        if event in firsts:
            by_group[run.groups[event]].append(event)
    for group, events in by_group.items():
        done = sorted(events, key=lambda e: firsts[e])
        if done != events:
            yield Violation("order", f"group {group} sent {events} but done {done}")


def _shutdown(run: Run) -> Iterable[Violation]:
    stop_timeout = run.contract.stop_timeout_seconds or 0
    # A slot holding a handler past max_duration is stuck: all of them stuck, the process exits 3 (ECS replaces it).
    may_stick = any(kind in ("hang", "overrun", "slow") for kind in run.kinds.values())
    crashed = _crashes(run)
    for process in run.processes:
        if process.exit_code == 1 and process.name in crashed:
            # A call raised what nothing expected and no part caught it: its guarded thread stopped the process (exit
            # 1) rather than leave it half alive. (An unguarded thread's death is the scheduler's to report.)
            continue
        if process.killed is not None and (process.exited is None or process.killed < process.exited):
            continue
        if process.sigterm is not None:
            if process.exited is None:
                yield Violation("shutdown", f"{process.name} did not exit after SIGTERM at {process.sigterm:.1f}")
                continue
            took = process.exited - max(process.sigterm, process.started)
            if took > stop_timeout:
                yield Violation("shutdown", f"{process.name} took {took:.1f} s to exit after SIGTERM (>{stop_timeout})")
            if process.exit_code != 0 and not (process.exit_code == 3 and may_stick):
                yield Violation("shutdown", f"{process.name} exited {process.exit_code} after SIGTERM")
        elif process.exited is not None and not (process.exit_code == 3 and may_stick):
            yield Violation("shutdown", f"{process.name} exited {process.exit_code} unasked at {process.exited:.1f}")


def _crashes(run: Run) -> dict[str, float]:
    """Process -> when a call of one of its threads first raised what nothing expects (a ``crash`` fault)."""
    crashed: dict[str, float] = {}
    for call in run.ledger.calls:
        if call.fault == "crash":
            crashed.setdefault(call.caller, call.at)
    return crashed


def _requests(run: Run) -> Iterable[Violation]:
    contract = run.contract
    interval = contract.heartbeat_interval_seconds
    deliveries: dict[str, int] = defaultdict(int)
    work: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for call in run.ledger.calls:
        if call.caller == "world":
            continue
        if call.operation == "ReceiveMessage":
            # Receives are bounded by time (a long poll, a receive error's backoff), not by work: counted as work
            # is what they deliver.
            deliveries[call.caller] += len((call.answer or {}).get("Messages", []))
            continue
        work[call.caller][call.service] += 1
    ends = {p.name: (p.exited if p.exited is not None else p.killed) for p in run.processes}
    for process, services in work.items():
        held = sum(
            math.ceil(((a.ended if a.ended is not None else ends.get(process) or a.started) - a.started) / interval)
            for a in run.attempts
            if a.process == process
        )
        bound = ATTEMPTS * (REQUESTS_PER_DELIVERY * deliveries[process] + held + 4)
        for service, count in services.items():
            if count > bound:
                yield Violation(
                    "requests",
                    f"{process} sent {count} {service} requests for {deliveries[process]} deliveries (bound {bound})",
                )


def _touches(run: Run) -> dict[str, _Touches]:
    touches = {event: _Touches() for event in run.sent}
    handles: dict[str, str] = {}
    seen: dict[str, int] = defaultdict(int)  # event -> receives whose answer reached a consumer
    killed = {p.name: p.killed for p in run.processes if p.killed is not None}
    for call in run.ledger.calls:
        if call.service != "sqs" or call.operation != "ReceiveMessage":
            continue
        for message in (call.answer or {}).get("Messages", []):
            event = message.get("Body", "")
            handles[message.get("ReceiptHandle", "")] = event
            if event in touches:
                at = killed.get(call.caller)
                if at is not None and call.at <= at:
                    touches[event].killed = True
                if call.fault != "lost_answer":
                    seen[event] += 1
                if call.fault is not None:
                    touches[event].sqs_fault = True
                    # On FIFO a receive's retry gets the same messages (ReceiveRequestAttemptId): a lost answer
                    # spends nothing there.
                    touches[event].lost_receive = not run.plan.fifo
    # A receive whose batch no consumer saw (a throttled Lambda invocation's): spent unseen, as a lost answer's is.
    for event in run.unseen:
        if event in touches:
            seen[event] -= 1
            touches[event].lost_receive = True
    for event, receives in seen.items():
        if event in touches:
            touches[event].seen = receives > 0
    for call in run.ledger.calls:
        if call.fault is None or call.caller == "world":
            continue
        for event in _mentions(call.body, handles):
            if event in touches:
                if call.service == "sqs":
                    touches[event].sqs_fault = True
                else:
                    touches[event].ddb_fault = True
    # Past max_duration a handler is given up on; past its attempt's end (max_duration and the margin) its lease may
    # have lapsed and another receive run it too. A success between the two must still count once (race 3). On Lambda
    # nothing holds it past max_duration: the invocation gives up and answers without it, and its success, the
    # environment frozen with it, is settled only at the next invocation (consumer/runtime/invocation.py).
    lambda_run = run.plan.target == "lambda"
    lease = run.contract.max_duration_seconds if lambda_run else run.contract.attempt_timeout_seconds
    for attempt in run.attempts:
        end = attempt.ended
        if end is None or end - attempt.started > lease:
            touches[attempt.event].overran = True
        if end is None or end - attempt.started > run.contract.max_duration_seconds:
            touches[attempt.event].given_up = True
            if any(
                other.event == attempt.event and attempt.started < other.started < (end or math.inf)
                for other in run.attempts
            ):
                touches[attempt.event].outlived = True
    _lapsed(run, touches)
    if run.plan.fifo:
        _fifo_hand_backs(run, touches)
    return touches


def _fifo_hand_backs(run: Run, touches: dict[str, _Touches]) -> None:
    """Mark FIFO's hand-backs (FIFO_HAND_BACKS) of each event. A deferral counts only while another attempt's lease
    can be live, once per such attempt (a deferral waits for the holder's lease to end, race 10): its holder killed
    or given up on past max_duration; or a lease SQS let go or the table did not cut. Else the claim met a lease its
    own consumer should have cut or never taken (races 4 and 10: its own record, a drain hand-back's lease)."""
    events = _events_by_message_id(run)
    kills = {p.name: p.killed for p in run.processes}
    exits = {p.name: p.killed if p.killed is not None else p.exited for p in run.processes}
    holders: dict[str, int] = defaultdict(int)  # event -> attempts that may hold a lease past their run
    for attempt in run.attempts:
        killed = kills.get(attempt.process)
        cut = killed is not None and (attempt.ended is None or attempt.ended > killed)
        # A process's exit (a SIGTERM's) ends its attempts: their leases were cut to the flush.
        until = attempt.ended if attempt.ended is not None else exits.get(attempt.process)
        if cut or until is None or until - attempt.started > run.contract.max_duration_seconds:
            holders[attempt.event] += 1
    deferrals: dict[str, int] = defaultdict(int)
    for line in run.events:
        released = _RELEASED.search(line)
        why = released and (released["why"] or _WHY[released[1]])
        event = events.get(released["id"], "") if released else ""
        touch = touches.get(event)
        if touch is None or why not in FIFO_HAND_BACKS:
            continue
        if why == "deferred":
            deferrals[event] += 1
            if not (touch.ddb_fault or touch.refused or touch.lapsed or deferrals[event] <= holders[event]):
                continue
        touch.fifo_hand_back = True
        touch.fifo_whys.add(why)


def _lapsed(run: Run, touches: dict[str, _Touches]) -> None:
    """Mark the events SQS let go of while their handler ran: every extension refused (a throttle or 5xx through all
    of botocore's attempts, as in an SQS brownout longer than the lease) and the event received again meanwhile. No
    consumer can hold a lease SQS will not extend; the next receiver sees the message as new (on FIFO, it may unblock
    the group behind it)."""
    ids = _events_by_message_id(run)
    refused = {ids.get(m["id"]) for line in run.events if (m := _EXTEND_FAILED.search(line))}
    for event in refused:
        if event in touches:
            touches[event].refused = True
    for call in run.ledger.calls:
        if call.service != "sqs" or call.operation != "ReceiveMessage" or call.fault == "lost_answer":
            continue
        for message in (call.answer or {}).get("Messages", []):
            event = message.get("Body", "")
            if event in refused and any(
                a.event == event and a.started <= call.at and (a.ended is None or call.at < a.ended)
                for a in run.attempts
            ):
                touches[event].lapsed = True


#: How far an event log line's time may be from the instant it stamps: printed to the millisecond, so a give-up at
#: exactly max_duration (a Lambda invocation's event loop ticks from the handler's start) may read a little short.
LOG_STAMP_ROUNDING = 0.0005 + 1e-6
#: How soon after its claim's request a deferral is logged: the claim's round trip (a slow table's, up to 3 s).
CLAIM_ANSWER_SECONDS = 4.0
_DEFERRED = re.compile(r"log message_in_progress_elsewhere message_id=(?P<id>\S+)")
_TIMED_OUT = re.compile(r"log handler_timed_out message_id=(?P<id>\S+)")
_EXTEND_FAILED = re.compile(r"log visibility_change_failed message_id=(?P<id>\S+) reason=extend")
_RELEASED = re.compile(
    r"log (message_released|downstream_unavailable|message_in_progress_elsewhere|message_handed_back)"
    r" message_id=(?P<id>\S+)(?: why=(?P<why>\S+))?"
)
#: The why of a hand-back whose log line names none: the circuit's own message, a deferral, the drain's end.
_WHY = {
    "downstream_unavailable": "circuit_open",
    "message_in_progress_elsewhere": "deferred",
    "message_handed_back": "drain_timeout",
}


def _mentions(body: Any, handles: dict[str, str]) -> Iterable[str]:
    """The events a request body names: by receipt handle, message body or idempotency key."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "ReceiptHandle" and isinstance(value, str):
                yield handles.get(value, "")
            elif key == "MessageBody" and isinstance(value, str):
                yield value
            elif key == "S" and isinstance(value, str) and value.startswith("attr:"):
                yield value[5:]
            else:
                yield from _mentions(value, handles)
    elif isinstance(body, list):
        for value in body:
            yield from _mentions(value, handles)
