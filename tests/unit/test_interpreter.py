"""Triton's interpreter where it differs from a GPU (harness.engine.interpreter): an argmax over
an all-NaN row, which vLLM's Gumbel sampler reaches on padded rows. numpy's nanargmax raises
there; the fix returns index 0 for such rows and numpy's answer elsewhere. Checked on numpy,
then on a real Triton kernel in the interpreter V2 runs under (scripts/setup.sh --v2)."""

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

x = torch.tensor([[float("nan")] * 4, [1.0, 7.0, 3.0, 2.0]])
out = torch.full((2,), -1, dtype=torch.int32)
row_argmax[(2,)](x, out, N=4)
print(out.tolist())
"""


@pytest.mark.parametrize("fixed", [False, True])
def test_the_interpreter_runs_an_argmax_over_nan_only_with_the_fix(fixed: bool) -> None:
    assert setup.installed() is None, setup.installed()
    env = {**os.environ, **setup.launch_env(), "FIX": "1" if fixed else "0",
           "PYTHONPATH": os.pathsep.join([str(setup.site_dir()), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", KERNEL], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    if fixed:
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip().splitlines()[-1] == "[0, 1]"
    else:
        assert out.returncode != 0 and "All-NaN slice encountered" in out.stderr, \
            out.stderr[-3000:]
