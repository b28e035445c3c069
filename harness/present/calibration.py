"""`specbench calibrate`'s answer: the gate tolerances an A/A run's noise supports
(harness.analysis.gate.propose_tolerances; the run itself: harness.workflow.calibrate), as a
`gates:` block to paste into the scenario.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.config.scenario import Scenario


def gates_yaml(
    scenario: Scenario, tolerances: dict[str, float], false_alarm: float, run_dir: Path
) -> str:
    """A `gates:` block to paste into the scenario."""
    block = {
        "gates": {
            "metrics": tolerances,
            "output_parity": scenario.gates.output_parity,
            "implementation_proof": scenario.gates.implementation_proof,
        }
    }
    head = (
        f"# From the A/A run {run_dir}: tolerances an unchanged candidate fails to PASS "
        f"(INCONCLUSIVE or REGRESSION) with probability about {false_alarm:g} at this "
        "scenario's precision\n# (about: the noise is this run's estimate; REGRESSION is "
        "far rarer).\n"
    )
    return head + str(yaml.safe_dump(block, sort_keys=False))
