"""specbench: A/B benchmarking and evaluation harness for speculative decoding in vLLM."""

__version__ = "0.1.0"
