"""Patches loaded by import path inside vLLM's processes (a variant's `patch:`), shared by
tests and benchmarks."""
