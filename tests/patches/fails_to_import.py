"""A patch module whose import fails, as one written for another vLLM's layout would: refused
before any launch, with the reason."""

from __future__ import annotations

raise RuntimeError("written for vLLM 0.99's layout")
