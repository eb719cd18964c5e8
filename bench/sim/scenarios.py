"""Named regression scenarios of the simulated world: one or more per known race (numbered by ``Scenario.race``),
each a plan written out so that the race, unfixed, breaks an invariant (tests/sim/test_scenarios.py).

``python -m bench.simulate --scenario NAME --log`` runs one with its event log.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench.sim.aws import Brownout, Faults
from bench.sim.plan import Plan


@dataclass(frozen=True)
class Scenario:
    name: str
    race: int  # the race it pins, by number (as invariants.py cites races); 0: a seed's (tests/sim/test_seeds.py)
    what: str
    plan: Plan


def _plan(seed: int, **values: object) -> Plan:
    quiet = {"chaos_until": 5.0, "send_over": 0.0, "cycle_kinds": True, "switch_probability": 0.05}
    return Plan(seed=seed, **(quiet | values))  # type: ignore[arg-type]


#: Eight messages of one FIFO group received at once (eight slots), 1.5 s handlers, a 4 s lease, two receives allowed.
_FIFO_GROUP_ON_A_SHORT_LEASE = _plan(
    1001,
    fifo=True,
    messages=8,
    groups=1,
    duration=(1.5, 1.5),
    max_lease=4,
    max_duration=5,
    max_receive_count=2,
    concurrency=8,
)

SCENARIOS = (
    Scenario(
        "fifo_waiting_keeps_its_lease",
        1,
        "eight messages of one FIFO group, 1.5 s handlers, a 4 s lease, two receives allowed: those waiting their turn"
        " are extended, never handed back, never dead-lettered untried, and the group runs in order (eight slots: one"
        " receive brings the whole group)",
        _FIFO_GROUP_ON_A_SHORT_LEASE,
    ),
    Scenario(
        "fifo_waiting_keeps_its_lease_async",
        1,
        "the same group through an async def handler",
        replace(_FIFO_GROUP_ON_A_SHORT_LEASE, seed=1002, shape="async"),
    ),
    Scenario(
        "batch_claims_before_the_call",
        2,
        "a batch of six on a slow table (claims 1.2 s each, 7 s in all, max_duration 3 s): the call's time limit"
        " counts from the handler's call, so the batch runs once and is settled",
        _plan(
            1003,
            shape="batch",
            messages=6,
            max_batch=6,
            batch_window=2,
            max_duration=3,
            concurrency=1,
            duration=(0.1, 0.3),
            ddb_latency_ms=(600.0, 600.0),
        ),
    ),
    Scenario(
        "async_claim_wait_before_the_call",
        2,
        "an async def handler on a slow table (a claim takes 6 s, max_duration 3 s): its time limit counts from the"
        " call, after the claim",
        _plan(
            1004,
            shape="async",
            messages=4,
            max_duration=3,
            concurrency=2,
            duration=(0.1, 0.3),
            ddb_latency_ms=(3000.0, 3000.0),
        ),
    ),
    Scenario(
        "success_just_past_max_duration",
        3,
        "handlers that return successfully 5 % past max_duration, their lease still live: each message is completed"
        " and deleted once, never run again",
        _plan(1005, messages=4, kinds=("slow",), slow=(1.05, 1.05), max_duration=10, concurrency=2),
    ),
    Scenario(
        "batch_success_just_past_max_duration",
        3,
        "the same for a batch handler's call",
        _plan(1006, shape="batch", messages=4, max_batch=4, kinds=("slow",), slow=(1.05, 1.05), max_duration=10),
    ),
    Scenario(
        "claim_answer_lost",
        4,
        "claims whose PutItem committed and whose answer was lost (botocore retries it and meets its own record):"
        " each holds its lease, and the message runs at once, not after a whole lease (310 s here; it settles in 60)",
        _plan(
            1007,
            messages=6,
            concurrency=2,
            max_duration=300,
            faults=Faults(lost_answer=0.6, operations=("PutItem",)),
            chaos_until=10.0,
            settle_limit=60.0,
        ),
    ),
    Scenario(
        "claim_answer_lost_fifo",
        4,
        "the same on FIFO, where a deferral would spend a receive each time, until the DLQ took the message untried",
        _plan(
            1008,
            fifo=True,
            messages=6,
            groups=3,
            concurrency=2,
            max_receive_count=3,
            faults=Faults(lost_answer=0.6, operations=("PutItem",)),
            chaos_until=10.0,
            settle_limit=300.0,
        ),
    ),
    Scenario(
        "sigterm_lands_anywhere",
        5,
        "a SIGTERM every 2 s (30 of them), landing wherever the main thread is (inside Event.wait's lock too): every process"
        " drains and exits 0 within its stop timeout",
        _plan(
            1009,
            messages=12,
            concurrency=2,
            send_over=30.0,
            chaos_until=60.0,
            restart_after=1.0,
            sigterms=tuple((2.0 + 1.9 * n, 0) for n in range(30)),
            switch_probability=0.3,
        ),
    ),
    Scenario(
        "table_brownout",
        6,
        "the idempotency table throttles every call for 40 s while messages arrive: no attempt is spent, nothing is"
        " dead-lettered, everything is done once after",
        _plan(
            1010,
            messages=8,
            concurrency=2,
            max_receive_count=2,
            send_over=20.0,
            chaos_until=60.0,
            faults=Faults(brownouts=(Brownout("dynamodb", 1.0, 41.0),)),
        ),
    ),
    Scenario(
        "async_loop_never_blocks",
        7,
        "an async def handler whose downstream goes away (the circuit hands messages back as copies) with scale-in"
        " protection on (the ECS agent's calls take time): nothing blocking runs on the event loop",
        _plan(
            1011,
            shape="async",
            messages=8,
            concurrency=4,
            kinds=("unavailable", "ok", "ok"),
            protection=True,
            send_over=2.0,
        ),
    ),
    Scenario(
        "twelve_hour_budget",
        8,
        "a FIFO group of seven 1.9-hour jobs (max_duration 2 h) and a second consumer: a message that waited its turn"
        " starts only with its whole attempt inside SQS's 12 hours from its receive, never to have its lease lapse"
        " mid-run",
        _plan(
            1012,
            fifo=True,
            messages=7,
            groups=1,
            kinds=("slow",),
            slow=(0.95, 0.95),
            max_duration=7200,
            consumers=2,
            concurrency=8,
            consumers_from=1.0,  # the whole group in one receive
            settle_limit=40 * 3600.0,
        ),
    ),
    Scenario(
        "fifo_receive_answer_lost",
        9,
        "FIFO receives whose answers are lost half the time: botocore's retry carries the same ReceiveRequestAttemptId"
        " and gets the same messages, so no group waits out a lease and no receive is spent (twelve handlers that"
        " fail once, two receives allowed: one receive spent on a lost answer sends a message to the DLQ)",
        _plan(
            1013,
            fifo=True,
            messages=12,
            groups=4,
            kinds=("flaky",),
            max_receive_count=2,
            concurrency=4,
            faults=Faults(lost_answer=0.5, operations=("ReceiveMessage",)),
            consumers_from=1.0,
            chaos_until=30.0,
        ),
    ),
)

#: Scenarios of the smaller races, numbered 10 together.
SCENARIOS += (
    Scenario(
        "deferral_waits_for_the_holder",
        10,
        "FIFO, two receives allowed, two consumers: a handler overruns its lease, and the other consumer receives the"
        " message as that lease lapses, while the given-up attempt's claim has moments left: its claim waits for that"
        " lease in place instead of handing the message back (a receive spent: the DLQ, untried)",
        _plan(
            1014,
            fifo=True,
            messages=3,
            groups=1,
            kinds=("overrun", "ok", "ok"),
            max_receive_count=2,
            consumers=2,
            concurrency=1,
            max_duration=10,
            max_lease=30,
            consumers_from=1.0,
        ),
    ),
)

SCENARIOS += (
    Scenario(
        "a_crashed_thread_ends_the_process",
        10,
        "visibility changes (sent by the acknowledger's thread alone) raise what nothing expects, as a library's bug"
        " would: the thread dies, and the process exits 1 at once (ECS replaces it) rather than go on with nothing"
        " deleting or extending",
        _plan(
            1015,
            messages=6,
            concurrency=2,
            max_duration=10,
            max_lease=4,
            duration=(6.0, 8.0),
            faults=Faults(crash=0.5, operations=("ChangeMessageVisibilityBatch",)),
            chaos_until=30.0,
        ),
    ),
)

SCENARIOS += (
    Scenario(
        "drain_hand_back_frees_the_claim",
        10,
        "FIFO, two receives allowed: a 240 s handler (max_duration 300 s, a drain of 115 s) still runs when the drain"
        " ends and is handed back; its claim's lease is cut to the flush that ends the process, so the next receive"
        " claims it, instead of deferring to a lease of 310 s (a receive spent: the DLQ, untried)",
        _plan(
            1016,
            fifo=True,
            messages=1,
            kinds=("slow",),
            slow=(0.8, 0.8),
            max_duration=300,
            max_receive_count=2,
            concurrency=1,
            consumers_from=1.0,
            sigterms=((10.0, 0),),
            chaos_until=20.0,
        ),
    ),
)

SCENARIOS += (
    Scenario(
        "a_dead_acknowledger_leaves_no_delete_behind",
        10,
        "seed 500's race: the acknowledger's thread (guarded) dies with a delete waiting for its batch; what waits is"
        " sent from the closing thread, where waiting 10 s for the dead thread and dropping the delete would run a"
        " finished message again",
        Plan.draw(500),
    ),
)

SCENARIOS += (
    Scenario(
        "a_short_lease_batch_starts",
        0,
        "seed 66's race: a batch handler on a 4 s lease with a 2 s window (a 1 s heartbeat): a waiting message is"
        " extended while it still has the heartbeat's reach and a beat; extended only below 2 s left, collected"
        " messages would meet a start that refuses them as lease_ran_down, and every batch would be handed back, again"
        " and again",
        _plan(
            1017,
            shape="batch",
            messages=4,
            kinds=("ok",),
            max_batch=10,
            batch_window=2,
            max_lease=4,
            max_duration=30,
            send_over=6.0,
        ),
    ),
    Scenario(
        "an_async_task_crash_ends_the_process",
        0,
        "seed 118's race: an async handler's settlement raises what nothing expects (a DLQ move, on the loop's"
        " executor); the task's death stops the process (exit 1) as a guarded thread's death does, where a task dying"
        " unseen would leave its FIFO group's tail (one receive brings all six) neither run nor handed back, and the"
        " heartbeat would hold those leases for ever in a live process",
        _plan(
            1018,
            shape="async",
            fifo=True,
            messages=6,
            groups=1,
            consumers_from=2.0,
            kinds=("poison", "ok"),
            faults=Faults(crash=0.5, operations=("SendMessage",)),
            chaos_until=30.0,
        ),
    ),
    Scenario(
        "renewals_never_hold_up_extensions",
        0,
        "seed 517's race: a batch of ten on a slow table (up to 3 s a DynamoDB call) with an 8 s lease: renewals run"
        " on their own threads and the heartbeat waits for none, where a heartbeat renewing each claim in turn before"
        " extending the next message's lease would let leases lapse and messages run twice",
        _plan(
            1019,
            shape="batch",
            guard=True,
            messages=10,
            kinds=("ok",),
            max_batch=10,
            batch_window=1,
            concurrency=1,
            duration=(12.0, 12.0),
            max_lease=8,
            max_duration=30,
            ddb_latency_ms=(800.0, 1500.0),
        ),
    ),
)

SCENARIOS += (
    Scenario(
        "a_lapsed_message_is_not_copied",
        0,
        "seed 481's race: messages received ahead of a one-slot consumer's free handler wait out a slow one (9 s) on"
        " a 4 s lease; the second consumer receives and runs them meanwhile; when the slot frees, a message whose"
        " lease already ran out is left alone (message_lease_lapsed), where handing it back as lease_ran_down by a copy"
        " would have the copy run it again (no guard: done twice or more)",
        _plan(
            1020,
            guard=False,
            concurrency=1,
            consumers=2,
            messages=12,
            kinds=("ok", "ok", "ok", "slow"),
            duration=(0.05, 0.05),
            slow=(0.9, 0.9),
            max_duration=10,
            max_lease=4,
        ),
    ),
)

SCENARIOS += (
    Scenario(
        "done_with_keeps_its_lease_on_a_slow_table",
        0,
        "seed 697's race (past the tier): async handlers on a 4 s lease and a slow table (up to 3 s a DynamoDB"
        " call): a poison message's claim release, its DLQ copy and its delete outlast its lease; the heartbeat"
        " extends a message done with until its outcome is handed over, and the acknowledger writes completions on a"
        " thread of its own, where extensions waiting behind its completion writes would let the message be received"
        " again and moved to the DLQ twice",
        Plan.draw(697),
    ),
)

SCENARIOS += (
    Scenario(
        "a_batched_delete_keeps_its_lease_on_a_slow_table",
        0,
        "seed 592's race (past the tier): batch handlers on an 8 s lease and a slow, throttled table: a processed"
        " message's delete waits for its batch, which writes the batch's completions first, and the throttled write"
        " outlasts the lease; the message is held and extended until the batch is sent, where a lapsed lease would"
        " let it be received again and its claim, the completion not yet landed, run it twice",
        Plan.draw(592),
    ),
)

#: Races of the Lambda runtime (consumer/runtime/invocation.py), found by the Lambda seeds (``--target lambda``).
SCENARIOS += (
    Scenario(
        "lambda_answer_waits_for_a_hand_back",
        0,
        "a race a Lambda seed found: an environment stalls 43 s into a 75 s invocation, and the record left has too"
        " little time to start: its handler thread hands it back (a copy, then the original's delete) while the"
        " invocation answers; listed, the original came back after the queue's visibility beside its copy (no guard:"
        " done twice), the delete frozen with the environment",
        _plan(
            51,
            target="lambda",
            guard=False,
            concurrency=1,
            batch_size=2,
            messages=2,
            max_duration=30,
            consumers_from=1.0,
            stalled=1.0,
            recycled=1.0,
            chaos_until=30.0,
            switch_probability=None,
            cycle_kinds=False,
        ),
    ),
    Scenario(
        "lambda_claim_under_way_at_the_give_up",
        0,
        "Lambda seed 64's race: an environment stalls while a FIFO record's claim is under way, past the give-up: the"
        " record is handed back, never reported timed out, and its handler is never called after the answer",
        Plan.draw_lambda(64),
    ),
    Scenario(
        "lambda_call_needs_max_duration_left",
        0,
        "Lambda seed 494's race: a batch's claims on a slow table take the time its call needed: the records are"
        " handed back rather than called with less than max_duration left and given up on sooner",
        Plan.draw_lambda(494),
    ),
    Scenario(
        "lambda_answer_outlives_a_crash_of_its_visibility_changes",
        0,
        "Lambda seed 920's race: sending an invocation's visibility changes raises what nothing expects; the answer"
        " still goes back, so a poison record moved to the DLQ is deleted, not moved a second time",
        Plan.draw_lambda(920),
    ),
)

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
