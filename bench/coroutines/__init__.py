"""Async handlers beside the threaded one: ``python -m bench async`` (docs/evidence/BENCHMARKS.md, "Async handlers").

- :mod:`bench.coroutines.handlers`: the handlers measured, a 200 ms I/O wait as a ``def`` (a thread per slot) and
  as an ``async def`` (a coroutine per slot), each with and without the idempotency guard;
- :mod:`bench.coroutines.harness`: the run (rounds, interleaving), on the peers' rig (:mod:`bench.rig`: counted at
  the endpoint, CPU, threads and memory read from /proc);
- :mod:`bench.coroutines.report`: medians, ratios to the threaded cell and the section's tables: pure, no I/O.
"""
