"""Benchmarks that compare side by side in one run (``zoo bench ...``)."""
