# A stand-in `cpu` backend for PyPI's Triton (which has only nvidia and amd), so that vLLM
# finds Triton on a CPU and builds Model Runner V2 there; every kernel then runs in Triton's
# interpreter (TRITON_INTERPRET=1), never compiled. Copied into <site>/triton/backends/cpu/ by
# `scripts/setup.sh --v2`; see docs/model-runner-v2.md.
