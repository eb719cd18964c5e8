"""``python -m bench tracing``: what an OpenTelemetry span per attempt costs (docs/tracing.md), off against on.

:mod:`.harness` runs the cells, :mod:`.report` renders the section of docs/BENCHMARKS.md, :mod:`.subject` builds the
subject process's tracer.
"""
