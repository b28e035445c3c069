"""Gates on real vLLM: one engine hosts the baseline, an A/A twin and a candidate with a planted
regression (its proposer sleeps inside vLLM's engine core: a test-only fault, tests.faults).
The gate must fail on the planted one, naming the metric in the Markdown and the JUnit file,
and never call the A/A twin a regression."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ExitCode
from tests.conftest import ROOT, SCENARIOS
from tests.faults import SLOW_CHOICE_ENV, fault_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gated(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp = tmp_path_factory.mktemp("gate")
    data = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    data.pop("precision")
    # 6 blocks of the three arms (df 5): two blocks (df 1) left even a 70% slowdown undecided.
    data.update(
        name="gate-planted",
        repeats=12,
        warmup=8,
        env={SLOW_CHOICE_ENV: "medusa-proposer:optimized:0.01"},
    )
    data["workload"].update(num_prompts=8, max_tokens=16)
    data["variants"] = {
        "baseline": {"baseline": True, "implementation": "medusa-proposer:baseline"},
        "aa-twin": {"implementation": "medusa-proposer:baseline"},
        "planted": {"implementation": "medusa-proposer:optimized"},
    }
    path = tmp / "gate.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(path),
            "--results-dir",
            str(tmp / "results"),
            "--run-id",
            "gate",
            "--gate",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        check=False,
        env=fault_env(),
    )
    return proc, tmp / "results" / "gate"


def test_planted_regression_fails_the_gate(
    gated: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, run_dir = gated
    assert proc.returncode == int(ExitCode.GATE_FAILED), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    decisions = json.loads((run_dir / "gate.json").read_text())["decisions"]
    planted = {d["check"]: d for d in decisions if d["candidate"] == "planted"}
    assert planted["output_throughput"]["verdict"] == "REGRESSION"
    assert planted["acceptance_rate"]["verdict"] == "PASS"  # the sleep changes no draft
    md = (run_dir / "gate.md").read_text()
    line = next(row for row in md.splitlines() if row.startswith("| planted | Output throughput"))
    assert "REGRESSION" in line
    junit = (run_dir / "gate.junit.xml").read_text()
    assert 'classname="specbench.gate-planted.planted"' in junit
    assert "<failure" in junit and "Output throughput" in junit


def test_aa_twin_is_never_a_regression(
    gated: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, run_dir = gated
    decisions = json.loads((run_dir / "gate.json").read_text())["decisions"]
    twin = [d for d in decisions if d["candidate"] == "aa-twin"]
    assert twin and all(d["verdict"] != "REGRESSION" for d in twin), twin
    proof = [d for d in decisions if d["check"] == "implementation_proof"]
    assert proof and proof[0]["verdict"] == "PASS"
