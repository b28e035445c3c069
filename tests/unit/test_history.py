"""The run store and what reads it: every run folder indexed in DuckDB (rebuilt to the same
series), a locked index that loses nothing, history series with change points named by run,
`specbench history` (text and page), and `gate --against history` (exact where deterministic,
the history's spread elsewhere). Runs are one-engine launches simulated through the shipped
records and compared by the shipped statistics; the exact metrics come from a real run."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.history import build_series
from harness.cli import main
from harness.errors import ExitCode
from harness.results.index import history, index_path, index_run, rebuild, runs
from harness.results.store import save_run_record
from harness.wire.manifest import Manifest
from harness.workflow import gate_run, write_report
from testkit.stored import SCENARIO, shared_launch
from tests.conftest import ROOT

FIXTURE = ROOT / "results" / "fixtures" / "cpu-medusa-small"


def simulated(
    root: Path,
    name: str,
    created: float,
    effect: float,
    seed: int,
    status: str = "complete",
    commit: str | None = None,
) -> Path:
    """A one-engine run of arms a and b (b's true effect `effect`, a fraction), analysed."""
    rng = np.random.default_rng(seed)
    run_dir = root / name
    Manifest.model_validate(
        {
            "run_id": name,
            "status": status,
            "created_unix": created,
            "scenario_hash": "h1",
            "scenario": SCENARIO,
            "fingerprint": {"cpu_model": "cpu-x", "vllm": "0.32.0"},
            "builds": {
                "a": {"vllm": "0.32.0", "vllm_location": "/x", "git": None},
                "b": {"vllm": "0.32.0", "vllm_location": "/x", "git": commit},
            },
            "plan": {"design": "one-engine"},
        }
    ).save(run_dir)
    save_run_record(run_dir, shared_launch(0, 30, math.log1p(effect), rng, created))
    if status == "complete":
        write_report(run_dir, figures=False)
    return run_dir


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten runs: b as fast as a in the first six, 5% slower from r06 (its commit c06) on,
    plus an interrupted run that has no summary."""
    root = tmp_path_factory.mktemp("store")
    for i in range(10):
        simulated(
            root,
            f"r{i:02d}",
            1000.0 + i,
            -0.05 if i >= 6 else 0.0,
            seed=i,
            commit=f"c{i:02d}" + "0" * 38,
        )
    simulated(root, "stopped", 2000.0, 0.0, seed=99, status="interrupted")
    return root


def test_every_run_is_indexed_and_a_rebuild_gives_the_same_series(store: Path) -> None:
    frame = history(store)
    assert index_path(store).is_file()
    assert sorted(frame["run_id"].unique()) == [f"r{i:02d}" for i in range(10)]
    table = runs(store)
    assert set(table["status"]) == {"complete", "interrupted"}  # failed runs are indexed too
    first = frame.drop(columns=["folder"]).reset_index(drop=True)
    index_path(store).unlink()
    assert rebuild(store) == 11
    again = history(store).drop(columns=["folder"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(first, again)
    tput = frame[frame["metric"] == "output_throughput"]
    assert tput["delta"].notna().all() and (tput["ci_low"] < tput["ci_high"]).all()
    assert tput["commit"].iloc[0].startswith("c00")


def test_a_locked_index_never_fails_a_run_and_loses_nothing(tmp_path: Path) -> None:
    simulated(tmp_path, "a1", 100.0, 0.0, 1)
    index_run(tmp_path / "a1")
    holder = subprocess.Popen(  # another process holds the index for writing
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)",
            str(index_path(tmp_path)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        simulated(tmp_path, "a2", 200.0, 0.0, 2)
        assert index_run(tmp_path / "a2") is False  # best-effort: no exception
        # A reader still sees both runs (the tables built in memory from the folders).
        assert set(history(tmp_path)["run_id"]) == {"a1", "a2"}
    finally:
        holder.kill()
        holder.wait()
    assert index_run(tmp_path / "a2") is True
    assert set(runs(tmp_path)["run_id"]) == {"a1", "a2"}


def test_the_step_is_found_at_its_run_with_its_size(store: Path) -> None:
    series = build_series(history(store), metric="output_throughput")
    assert len(series) == 1
    s = series[0]
    assert [step.run_id for step in s.delta_steps] == ["r06"]
    step = s.delta_steps[0]
    assert step.commit is not None and step.commit.startswith("c06")
    assert step.ci_low is not None and step.ci_high is not None
    assert step.ci_low < -0.05 < step.ci_high and step.ci_high < 0
    # Each run's own launch offset (sd 8%) hides the step in b's absolute throughput, and the
    # series says how large a step it could show.
    assert s.value_detectable is not None and s.value_detectable > 0.05


def test_history_command_prints_the_series_and_writes_the_page(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "history.html"
    assert main(["history", "unit", "--results-dir", str(store), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "unit: b Output throughput (tok/s) (10 run(s)" in out
    found = re.search(r"change point \(delta\): step (-[0-9.]+)% .* from r06 \(c060000000", out)
    assert found is not None and -6.0 < float(found.group(1)) < -4.0, out
    assert out.count("▶ r06") == 1
    assert "data:image/png;base64," in page.read_text()
    assert main(["history", "nope", "--results-dir", str(store)]) == ExitCode.USAGE
    assert "no complete run of scenario 'nope'" in capsys.readouterr().err
    assert main(["history", "--metric", "bogus", "--results-dir", str(store)]) == ExitCode.USAGE
    assert "no metric matches 'bogus'" in capsys.readouterr().err


def test_gate_against_history_judges_the_latest_stable_segment(tmp_path: Path) -> None:
    for i in range(6):
        simulated(tmp_path, f"h{i}", 100.0 + i, 0.0, seed=20 + i)
    same = simulated(tmp_path, "same", 200.0, 0.0, seed=40)
    _, result = gate_run(same, against="history")
    delta = next(d for d in result.decisions if d.check == "output_throughput:delta")
    assert delta.verdict == "PASS", delta.reason
    assert "6 one-engine deltas of the latest stable segment" in delta.reason
    value = next(d for d in result.decisions if d.check == "output_throughput")
    assert "run-to-run spread of the 6 runs" in value.reason  # launch noise, stated
    slower = simulated(tmp_path, "slower", 300.0, -0.10, seed=41)
    _, result = gate_run(slower, against="history")
    delta = next(d for d in result.decisions if d.check == "output_throughput:delta")
    assert delta.verdict == "REGRESSION", delta.reason
    # Too little history: undecided, saying why.
    fresh = tmp_path / "fresh"
    simulated(fresh, "only", 100.0, 0.0, seed=1)
    _, result = gate_run(fresh / "only", against="history")
    first = [d for d in result.decisions if d.check in ("output_throughput", "mean_tpot_ms")]
    assert len(first) == 2 and {d.verdict for d in first} == {"INCONCLUSIVE"}
    assert "no earlier run of this comparison" in first[0].reason


def test_deterministic_metrics_compare_exactly_across_runs(tmp_path: Path) -> None:
    """The issue's CI flow: two runs of a real scenario, one launch per arm each. Acceptance
    is identical in every pass, so it is decided exactly (within one run and across runs)."""
    for i in range(3):
        dest = tmp_path / f"real{i}"
        shutil.copytree(FIXTURE, dest)
        manifest = json.loads((dest / "manifest.json").read_text())
        manifest.update(run_id=f"real{i}", created_unix=time.time() + i)
        (dest / "manifest.json").write_text(json.dumps(manifest))
        write_report(dest, figures=False)
    _, own = gate_run(tmp_path / "real2")
    acceptance = next(d for d in own.decisions if d.check == "acceptance_rate")
    assert acceptance.verdict == "PASS" and "(exact)" in acceptance.reason
    _, result = gate_run(tmp_path / "real2", against="history")
    acceptance = next(d for d in result.decisions if d.check == "acceptance_rate")
    assert acceptance.verdict == "PASS", acceptance.reason
    assert "exact under greedy decoding" in acceptance.reason


def test_gate_against_a_saved_baseline_decides_deterministic_metrics_exactly(
    tmp_path: Path,
) -> None:
    """The issue's flow: one run saved as the baseline, the next gated `--against` it (one
    launch per arm across runs). Acceptance, identical in every pass of both runs, is decided
    (it had been INCONCLUSIVE, 'not estimable'); throughput, with no launch spread to estimate
    from, stays undecided, saying why."""
    for name in ("first", "second"):
        shutil.copytree(FIXTURE, tmp_path / name)
        write_report(tmp_path / name, figures=False)
    baselines = tmp_path / "baselines"
    assert (
        main(
            [
                "baseline",
                "save",
                str(tmp_path / "first"),
                "--name",
                "main",
                "--baselines-dir",
                str(baselines),
            ]
        )
        == 0
    )
    _, result = gate_run(tmp_path / "second", against="main", baselines_dir=baselines)
    by_check = {d.check: d for d in result.decisions}
    for check in ("acceptance_rate", "acceptance_pos_0", "acceptance_pos_2"):
        assert by_check[check].verdict == "PASS", by_check[check].reason
        assert "(exact)" in by_check[check].reason
    assert by_check["output_throughput"].verdict == "INCONCLUSIVE"


def test_identical_counts_change_nothing_exact_and_a_real_change_is_named(tmp_path: Path) -> None:
    """Two runs with the same acceptance counts whose means differ in the last bit (12 and 16
    passes an arm) show no change in any exact series, nor do summaries an older version
    wrote with such means; a real change of the counts is named, each value in its unit (an
    acceptance length in tokens, not '161.3%')."""
    from harness.workflow import show_history
    from tests.unit.test_gate import _counted

    for i, blocks in enumerate((8, 6)):
        write_report(
            _counted(
                f"r{i}", tmp_path, blocks, (99, 62, 31), created_unix=100.0 + i, scenario_hash="h1"
            ),
            figures=False,
        )
    text, _ = show_history(tmp_path)
    assert "(exact)" not in text, text
    frame = history(tmp_path)
    exact = frame["exact"].astype(bool)
    assert set(frame.loc[exact, "metric"]) >= {
        "acceptance_rate",
        "acceptance_pos_0",
        "mean_acceptance_length",
    }
    # Summaries written with means of the same counts that differ in the last bit.
    later = exact & (frame["run_id"] == "r1")
    for column in ("candidate_value", "baseline_value"):
        frame.loc[later, column] = np.nextafter(frame.loc[later, column].astype(float), 0.0)
    frame.loc[later, "delta"] = 2e-16
    assert not [
        (s.metric, s.value_steps, s.delta_steps)
        for s in build_series(frame)
        if s.exact and (s.value_steps or s.delta_steps)
    ]
    write_report(
        _counted("r2", tmp_path, 6, (99, 62, 20), created_unix=102.0, scenario_hash="h1"),
        figures=False,
    )
    series = {s.metric: s for s in build_series(history(tmp_path))}
    assert [s.run_id for s in series["acceptance_pos_2"].value_steps] == ["r2"]
    assert not series["acceptance_pos_0"].value_steps
    text, _ = show_history(tmp_path)
    assert "acceptance_pos_0" not in text and "Acceptance at position 0" not in text
    assert "Acceptance at position 2 (%): changed at r2: 9.904% -> 6.39% (exact)" in text
    assert "Mean acceptance length: changed at r2: 1.613 tokens -> 1.578 tokens (exact)" in text


def test_a_drifting_delta_is_printed_as_a_drift_with_its_slope_not_a_commit() -> None:
    """Drift: a delta drifting by -4% over 30 runs (a step at one commit in every
    history before) is printed as a trend over the runs it spans, slope and interval, and no
    change point names a commit."""
    from harness.present.history import render_series
    from testkit.simulate import History, history_frame

    h = History(runs=30, trend=math.log1p(-0.04))
    (s,) = build_series(history_frame(h, np.random.default_rng(21)))
    assert not s.delta_steps
    (drift,) = s.delta_drifts
    assert (drift.first_run, drift.last_run, drift.runs) == ("r000", "r029", 30)
    assert drift.ci_low < -0.04 / 29 < drift.ci_high < 0
    text = "\n".join(render_series(s))
    assert "no change point in the deltas" in text
    found = re.search(
        r"trend \(delta\): drift (-[0-9.]+)% over 30 runs \(r000 \.\. r029\): "
        r"-[0-9.]+% a run \[-[0-9.]+, -[0-9.]+\]",
        text,
    )
    assert found is not None and -6.0 < float(found.group(1)) < -2.0, text
    assert " from r0" not in text  # no step "from <run> (<commit>)"


def test_history_marks_runs_on_a_loaded_or_shared_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Contention: a run whose passes shared the CPUs with other work (its contention findings)
    and a run without the machine lock (--shared-machine) are marked in `history`, named
    under the series, and kept in the index; a quiet run is not marked."""

    def run(name: str, created: float, foreign: float, shared: bool = False) -> None:
        run_dir = tmp_path / name
        Manifest.model_validate(
            {
                "run_id": name,
                "status": "complete",
                "created_unix": created,
                "scenario_hash": "h1",
                "scenario": SCENARIO,
                "fingerprint": {"cpu_model": "cpu-x", "vllm": "0.32.0"},
                "machine": {
                    "lock": None if shared else "/tmp/x.lock",
                    "shared": shared,
                    "waited_s": 0.0,
                    "waited_for": None,
                },
                "plan": {"design": "one-engine"},
            }
        ).save(run_dir)
        record = shared_launch(0, 20, 0.0, np.random.default_rng(int(created)), created)
        assert record.result is not None
        for p in record.result.passes:
            p.foreign_cpu = foreign
        save_run_record(run_dir, record)
        write_report(run_dir, figures=False)

    run("quiet", 100.0, 0.01)
    run("busy", 200.0, 0.40)
    run("shared", 300.0, 0.01, shared=True)
    frame = history(tmp_path, metric="output_throughput").set_index("run_id")
    found = {k: json.loads(v) for k, v in frame["machine_findings"].items()}
    assert found["quiet"] == []
    assert len(found["busy"]) == 1 and found["busy"][0].startswith("the machine was busy: ")
    assert len(found["shared"]) == 1 and "--shared-machine" in found["shared"][0]
    assert main(["history", "unit", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.strip().split(" ")[0] in ("quiet", "busy", "shared")
    }
    assert not rows["quiet"].rstrip().endswith("⚠")
    assert rows["busy"].rstrip().endswith("⚠") and rows["shared"].rstrip().endswith("⚠")
    assert "  ⚠ busy: the machine was busy (its table says more)" in out
    assert "  ⚠ shared: shared machine (its table says more)" in out
