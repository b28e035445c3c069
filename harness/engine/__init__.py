"""Worker side: the only package that imports vllm or torch, and only inside worker processes."""
