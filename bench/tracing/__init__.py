"""``python -m bench tracing``: what an OpenTelemetry span per attempt costs (docs/tracing.md), on and off, against
the runtime before tracing existed.

:mod:`.harness` runs the cells, :mod:`.report` renders the section of the benchmarks page, :mod:`.subject` builds the
subject process's tracer.
"""
