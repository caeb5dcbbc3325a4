"""Benchmarks: the harness, the workload generator and the per-area scripts."""
