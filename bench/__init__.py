"""Benchmarks: each module prints its figures (``python -m bench.<name>``)."""
