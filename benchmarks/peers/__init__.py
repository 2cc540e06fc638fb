"""Minimal set-ups of the peers the benchmark compares against (installed only in benchmarks/.env)."""
