"""Sinks the multi-process tests and benchmarks schedule (owned by the concurrency tests)."""
