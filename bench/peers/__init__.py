"""The peers people pick, and the bare loop, measured beside ours on one endpoint (``python -m bench peers``).

- :mod:`bench.peers.harness`: the run (cells, rounds, interleaving); :mod:`bench.peers.correctness`: the lease and
  kill cells; :mod:`bench.peers.subjects`: who runs and how (command lines, message bodies, ours' table);
  :mod:`bench.peers.envs`: each peer's own environment under ``.bench/peers/``.
- :mod:`bench.peers.summary` (medians, ratios, who is ahead) and :mod:`bench.peers.report` (the benchmarks page's
  section 10, with the reasons where ours is behind): pure, no I/O.
- The subjects' code: ``handlers.py`` (ours), ``bare.py`` and ``minimal.py`` (the yardsticks), ``celery_peer.py``,
  ``dramatiq_peer.py``, ``sqs_workers_peer.py`` (run in the peers' environments), ``sqs-consumer/peer.mjs`` (Node);
  ``work.py`` is the handlers' work, the same for all.
"""
