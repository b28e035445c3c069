"""Triton's interpreter where it differs from a GPU (harness.engine.interpreter), each on a real
Triton kernel in the interpreter V2 runs under (scripts/setup.sh --v2), without the fix and
with it: an argmax over an all-NaN row (vLLM's Gumbel sampler, padded rows), where numpy's
nanargmax raises; and a load masked by a scalar comparison (vLLM's V2 n-gram speculator),
which the interpreter types int32 instead of int1 and then refuses."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from harness.config import interpreter as setup
from harness.engine.interpreter import nan_safe
from tests.conftest import ROOT


def test_an_all_nan_row_gives_index_zero_and_other_rows_numpys_answer() -> None:
    data = np.array([[np.nan, np.nan, np.nan], [1.0, np.nan, 3.0], [2.0, 5.0, 5.0]])
    with pytest.raises(ValueError, match="All-NaN"):
        np.nanargmax(data, axis=1)
    assert nan_safe(np.nanargmax)(data, axis=1).tolist() == [0, 2, 1]
    assert nan_safe(np.nanargmin)(data, axis=1, keepdims=True).tolist() == [[0], [0], [0]]
    ints = np.array([[3, 1, 2]])
    assert nan_safe(np.nanargmax)(ints, axis=1).tolist() == [0]
    assert nan_safe(np.nanargmax)(np.array([[1.0, 2.0]]), axis=0).tolist() == [0, 0]


KERNEL = """
import os, sys, torch, triton, triton.language as tl
if os.environ.get("FIX") == "1":
    from harness.engine import interpreter
    assert interpreter.install()

@triton.jit
def row_argmax(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    values = tl.load(x_ptr + row * N + tl.arange(0, N))
    value, index = tl.max(values, axis=0, return_indices=True)
    tl.store(out_ptr + row, index)

@triton.jit
def masked_by_a_comparison(x_ptr, n_ptr, out_ptr, K: tl.constexpr):
    num = tl.load(n_ptr)
    k = tl.arange(0, K).to(tl.int64)
    values = tl.load(x_ptr + k, mask=(k < 3) & (num > 0), other=0)
    tl.store(out_ptr + k, values)

if sys.argv[1] == "argmax":
    x = torch.tensor([[float("nan")] * 4, [1.0, 7.0, 3.0, 2.0]])
    out = torch.full((2,), -1, dtype=torch.int32)
    row_argmax[(2,)](x, out, N=4)
else:
    out = torch.zeros(4, dtype=torch.int64)
    masked_by_a_comparison[(1,)](torch.arange(1, 5), torch.tensor([2], dtype=torch.int32),
                                 out, K=4)
print(out.tolist())
"""


CASES = {
    "argmax": ("[0, 1]", "All-NaN slice encountered"),
    "mask": ("[1, 2, 3, 0]", "mask has unsupported dtype"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fixed", [False, True])
def test_the_interpreter_runs_the_kernel_only_with_the_fix(case: str, fixed: bool) -> None:
    assert setup.installed() is None, setup.installed()
    env = {
        **os.environ,
        **setup.launch_env(),
        "FIX": "1" if fixed else "0",
        "PYTHONPATH": os.pathsep.join([str(setup.site_dir()), str(ROOT)]),
    }
    out = subprocess.run(
        [sys.executable, "-c", KERNEL, case],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    want, error = CASES[case]
    if fixed:
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip().splitlines()[-1] == want
    else:
        assert out.returncode != 0 and error in out.stderr, out.stderr[-3000:]
