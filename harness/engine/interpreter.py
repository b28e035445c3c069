"""Where Triton's interpreter (TRITON_INTERPRET=1, Model Runner V2 on a CPU) differs from a GPU
in a way vLLM's kernels reach, corrected in this process: the interpreter's, not vLLM's.

- An argmax or argmin over a row that is all NaN. The interpreter reduces with numpy's
  nanargmax/nanargmin, which raise ValueError there ("All-NaN slice encountered"); a GPU
  returns an index. vLLM's Gumbel sampler (vllm/v1/worker/gpu/sample/gumbel.py,
  `tl.max(logits, axis=0, return_indices=True)`) reduces the rows of padded tokens too, whose
  logits come from buffers never written (torch.empty) and may hold NaN; their tokens are
  thrown away, so the index does not matter, but the exception killed the engine at start-up.
  Here such a row yields index 0 and a NaN value, as a GPU's reduction leaves an unspecified
  index; rows with a number keep numpy's answer exactly.
- A comparison's result type. The interpreter's binary_op gives a comparison (`num > 0`) numpy
  booleans but the left operand's element type (int32), so a scalar comparison splat to a block
  becomes int32 data, and a mask built from it (`(k < n) & (num > 0)`) is refused by the
  interpreter's load ("mask has unsupported dtype"); on a GPU a comparison is i1. vLLM's V2
  n-gram speculator (vllm/v1/worker/gpu/spec_decode/ngram/speculator.py,
  _ngram_finalize_kernel) builds exactly such a mask. Here a result holding booleans is typed
  int1, as Triton's own semantics type it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("vllm.specbench.interpreter")
_installed = False


def nan_safe(index_op: Callable[..., Any]) -> Callable[..., Any]:
    """numpy's nanargmax/nanargmin, returning 0 for rows that are all NaN instead of raising."""
    import numpy as np

    def reduce(data: Any, axis: Any = None, keepdims: bool = False) -> Any:
        data = np.asarray(data)
        if not np.issubdtype(data.dtype, np.floating):
            return index_op(data, axis=axis, keepdims=keepdims)
        empty = np.isnan(data).all(axis=axis, keepdims=True)
        if not empty.any():
            return index_op(data, axis=axis, keepdims=keepdims)
        filled = np.where(empty, 0, data)  # an all-NaN row: every entry ties, index 0
        return index_op(filled, axis=axis, keepdims=keepdims)

    reduce.__name__ = f"nan_safe_{getattr(index_op, '__name__', 'index')}"
    return reduce


def _type_comparisons_int1() -> None:
    """InterpreterBuilder.binary_op: a result of numpy booleans is typed int1."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    original = InterpreterBuilder.binary_op

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        out = original(self, lhs, rhs, op)
        if out.data.dtype == np.bool_ and out.dtype != tl.int1:
            return TensorHandle(out.data, tl.int1)
        return out

    InterpreterBuilder.binary_op = binary_op


def install() -> bool:
    """Correct the interpreter in this process when it is in use (TRITON_INTERPRET=1)."""
    global _installed
    if _installed or os.environ.get("TRITON_INTERPRET", "") != "1":
        return _installed
    import numpy as np
    from triton.runtime.interpreter import ReduceOps

    original = ReduceOps.min_max
    safe = {np.nanargmax: nan_safe(np.nanargmax), np.nanargmin: nan_safe(np.nanargmin)}

    def min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        return original(self, input, val_reduce_op, safe.get(idx_reduce_op, idx_reduce_op))

    ReduceOps.min_max = min_max
    _type_comparisons_int1()
    _installed = True
    logger.info(
        "specbench: Triton interpreter corrected: argmax over all-NaN rows returns "
        "index 0; comparisons are typed int1"
    )
    return True
