"""Benchmarks of Profile Warehouse: generators, harness and results (see bench/README.md)."""
