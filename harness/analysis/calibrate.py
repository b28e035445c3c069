"""`specbench calibrate`: run a scenario as an A/A on real vLLM and propose gate tolerances
that its measured noise supports at a chosen false-alarm rate.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.analysis.compare import compare_results
from harness.analysis.gate import propose_tolerances
from harness.config.scenario import Scenario, as_aa
from harness.execute.local import LocalExecutor, Progress
from harness.execute.runner import run_plan
from harness.plan.plan import expand_plan
from harness.results.store import load_results


def calibrate(scenario: Scenario, scenario_path: Path | None, results_root: Path,
              models_cache: Path | None, progress: Progress,
              false_alarm: float) -> tuple[Path, dict[str, float]]:
    """Run the scenario's A/A and return its run folder and the proposed tolerances."""
    aa = as_aa(scenario)
    plan = expand_plan(aa, scenario_file=scenario_path)
    outcome = run_plan(plan, results_root, LocalExecutor(models_cache), progress)
    comparison = compare_results(load_results(outcome.run_dir))
    return outcome.run_dir, propose_tolerances(comparison, scenario.gates, false_alarm)


def gates_yaml(scenario: Scenario, tolerances: dict[str, float], false_alarm: float,
               run_dir: Path) -> str:
    """A `gates:` block to paste into the scenario."""
    block = {"gates": {"metrics": tolerances, "output_parity": scenario.gates.output_parity,
                       "implementation_proof": scenario.gates.implementation_proof}}
    head = (f"# From the A/A run {run_dir}: tolerances an unchanged candidate fails to PASS "
            f"(INCONCLUSIVE or REGRESSION) with probability about {false_alarm:g} at this "
            "scenario's precision\n# (about: the noise is this run's estimate; REGRESSION is "
            "far rarer).\n")
    return head + str(yaml.safe_dump(block, sort_keys=False))
