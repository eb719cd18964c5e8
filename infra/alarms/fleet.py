"""The calls a simulated fleet makes: a scaling model's minutes (:mod:`infra.alarms.scaling`) turned into the world's
sends, receives and deletes and its task counts. Shared by the burst scenario (:mod:`infra.alarms.scaling_bridge`)
and the wake-up (:mod:`infra.alarms.wake_up`).
"""

from __future__ import annotations

from collections.abc import Sequence

from infra.alarms.gc_pause import paused_gc
from infra.alarms.scaling import Minute
from infra.alarms.world import PICKUP_SECONDS, World


@paused_gc()  # millions of acyclic objects: see infra.alarms.gc_pause
def fleet_calls(world: World, arrivals: Sequence[float], simulated: Sequence[Minute]) -> None:
    """The sends, receives and deletes of ``arrivals`` (messages a minute, spread evenly over it) as the ``simulated``
    fleet takes them, oldest first, and its running and desired counts at each minute's end."""
    duration = world.facts.duration
    sends: list[float] = []
    for at, count in enumerate(arrivals):
        whole = int(count)
        sends.extend(at * 60 + i * 60 / whole for i in range(whole))
    handled = world.handled
    done = 0.0
    index = 0
    for minute in simulated:
        begins = minute.t * 60.0
        world.set_tasks(begins + 60, minute.running, minute.desired)
        done += minute.processed
        stop = min(len(sends), int(done + 1e-9))
        for sent in sends[index:stop]:
            received = min(max(sent + PICKUP_SECONDS, begins), begins + 59)
            handled(sent, received, max(received, sent) + duration)
        index = max(index, stop)
    for sent in sends[index:]:  # never processed: they wait in the source
        world.send(sent)
