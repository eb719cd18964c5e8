"""Benchmarks and the chaos suite: evidence for what the bundle promises (see docs/evidence/BENCHMARKS.md).

Not tests: nothing here asserts timings. Each module is one command (``python -m bench.<name>``).
"""
