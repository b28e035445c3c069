"""What the tests and the benchmarks share: simulators of launches (simulate) and of bisects
(bisection, bisect_repo: a small vLLM checkout to bisect), stored-run factories (factory,
stored), A/A relabellings of a stored run (permutation), the minimal scenario and the
fault-test scenario (scenarios), the bad-input cases (bad_inputs), and process inspection
(processes). It imports nothing from tests/, and nothing in harness/ imports it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root
