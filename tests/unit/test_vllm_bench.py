"""Results in vllm-bench's shape: a stored real run, reported, writes one
`vllm bench serve --save-result` dict per arm, whose keys are checked against the installed
vLLM's own benchmarks/serve.py (read with `ast`, so a vLLM that renames or adds a key is caught)
and which vLLM's own sweep-plot reader reads; the figures agree with specbench's table."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from harness.analysis.compare import compare_run
from harness.plan.vllm_support import installed_source
from harness.present.vllm_bench import PERCENTILE_METRICS, arm_result
from harness.results.run import load_run
from harness.workflow import write_report
from tests.conftest import ROOT


def _text(node: ast.Constant) -> str:
    """A string constant's text (a key or a piece of an f-string), failing on any other."""
    assert isinstance(node.value, str), ast.dump(node)
    return node.value


def _vllm_keys() -> set[str]:
    """The keys vllm bench serve saves for a generative model with speculative decoding, read
    from the installed vLLM's source: the result dict's literal keys (the generation branch),
    the spec-decode keys set on it, the header keys main() sets on result_json without a
    condition, and the latency statistics' f-string keys for its default percentile metrics
    (ttft, tpot, itl) at its default percentile (99)."""
    text = installed_source().read("vllm/benchmarks/serve.py")
    assert text is not None
    tree = ast.parse(text)
    keys: set[str] = set()
    literal = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "output_throughput" for k in n.keys)
    ]
    assert len(literal) == 1
    keys |= {_text(k) for k in literal[0].keys if isinstance(k, ast.Constant)}
    main = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef) and n.name == "main_async"
    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            name = target.value.id if isinstance(target.value, ast.Name) else None
            key = target.slice.value if isinstance(target.slice, ast.Constant) else None
            if name == "result" and isinstance(key, str) and key.startswith("spec_decode_"):
                keys.add(key)
    for node in main.body:  # unconditional header assignments only
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if (
                isinstance(target.value, ast.Name)
                and target.value.id == "result_json"
                and isinstance(target.slice, ast.Constant)
            ):
                keys.add(_text(target.slice))
    patterns = {
        "".join(_text(v) if isinstance(v, ast.Constant) else "{}" for v in n.values)
        for n in ast.walk(tree)
        if isinstance(n, ast.JoinedStr)
    }
    for stat in ("mean_{}_ms", "median_{}_ms", "std_{}_ms", "p{}_{}_ms"):
        assert stat in patterns, stat
    for metric in ("ttft", "tpot", "itl"):
        keys |= {f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms", f"p99_{metric}_ms"}
    return keys


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("vb") / "cpu-medusa-small"
    shutil.copytree(ROOT / "results" / "fixtures" / "cpu-medusa-small", run_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECBENCH_NO_INDEX", "1")
        write_report(run_dir, figures=False)
    return run_dir


def test_every_arm_has_every_key_vllm_bench_saves(reported: Path) -> None:
    files = sorted(
        f for f in (reported / "vllm-bench").glob("*.json") if not f.name.endswith(".pytorch.json")
    )
    run = load_run(reported)
    assert [f.stem for f in files] == sorted([run.scenario.baseline, *run.scenario.candidates])
    expected = _vllm_keys()
    assert {
        "duration",
        "output_throughput",
        "itls",
        "spec_decode_acceptance_rate",
        "date",
        "model_id",
        "max_concurrency",
    } <= expected
    for path in files:
        data = json.loads(path.read_text())
        assert expected <= set(data), (path.name, sorted(expected - set(data)))
        assert data["specbench"]["arm"] == path.stem


def test_vllms_own_reader_reads_it_and_the_figures_agree_with_the_table(reported: Path) -> None:
    from vllm.benchmarks.sweep.plot import _convert_inf_nan_strings, _get_metric

    run = load_run(reported)
    comparison = compare_run(run)
    for cand in comparison.candidates:
        data = json.loads((reported / "vllm-bench" / f"{cand.name}.json").read_text())
        [record] = _convert_inf_nan_strings([data])
        throughput = next(r for r in cand.rows if r.key == "output_throughput")
        # The table's value is the mean of per-pass rates; vllm-bench's, tokens over time.
        assert _get_metric(record, "output_throughput") == pytest.approx(
            throughput.candidate, rel=0.05
        )
        rate = next(r for r in cand.rows if r.key == "acceptance_rate")
        assert _get_metric(record, "spec_decode_acceptance_rate") == pytest.approx(
            rate.candidate, rel=1e-9
        )
        rows = data["specbench"]["against_baseline"]
        mine = next(r for r in rows if r["metric"] == "output_throughput")
        assert mine["delta"] == throughput.estimate.delta
        assert mine["ci_low"] == throughput.estimate.ci_low
    base = json.loads((reported / "vllm-bench" / f"{run.scenario.baseline}.json").read_text())
    assert base["specbench"]["baseline"] and base["specbench"]["against_baseline"] == []


def test_pytorch_format_is_what_vllms_own_converter_writes(
    reported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each arm's <arm>.pytorch.json equals what vLLM's save_to_pytorch_benchmark_format
    writes for the same result and arguments (specbench states an eager engine's compilation
    mode in extra_info, where vLLM's extract_field looks first), so vLLM's dashboard reads it;
    one record per statistic, its value the vllm-bench file's."""
    import argparse

    from vllm.benchmarks.serve import save_to_pytorch_benchmark_format

    from harness.present.vllm_bench import bench_args, pytorch_records

    monkeypatch.setenv("SAVE_TO_PYTORCH_BENCHMARK_FORMAT", "1")
    run = load_run(reported)
    for arm in [run.scenario.baseline, *run.scenario.candidates]:
        data = json.loads((reported / "vllm-bench" / f"{arm}.json").read_text())
        mine = json.loads((reported / "vllm-bench" / f"{arm}.pytorch.json").read_text())
        args = bench_args(run, arm)
        assert args["model"] == run.scenario.model and "enforce_eager" not in args
        save_to_pytorch_benchmark_format(
            argparse.Namespace(**args), data, str(tmp_path / f"{arm}.json")
        )
        theirs = json.loads((tmp_path / f"{arm}.pytorch.json").read_text())
        assert mine == theirs
        # The same arm run eagerly: use_compile false, as vLLM reads the mode.
        eager = pytorch_records({**args, "enforce_eager": True}, data)
        save_to_pytorch_benchmark_format(
            argparse.Namespace(**args, enforce_eager=True),
            {**data, "compilation_config.mode": "0"},
            str(tmp_path / "eager.json"),
        )
        assert json.loads(json.dumps(eager)) == json.loads(
            (tmp_path / "eager.pytorch.json").read_text()
        )
        assert eager[0]["benchmark"]["extra_info"]["use_compile"] is False
        assert [r["metric"]["name"] for r in mine] == [
            k
            for k in (
                "median_ttft_ms",
                "mean_ttft_ms",
                "std_ttft_ms",
                "p99_ttft_ms",
                "mean_tpot_ms",
                "median_tpot_ms",
                "std_tpot_ms",
                "p99_tpot_ms",
                "median_itl_ms",
                "mean_itl_ms",
                "std_itl_ms",
                "p99_itl_ms",
            )
            if k in data
        ]
        assert len(mine) >= 8
        assert all(r["metric"]["benchmark_values"] == [data[r["metric"]["name"]]] for r in mine)
        assert mine[0]["benchmark"]["extra_info"]["use_compile"] is True
        assert "itls" not in mine[0]["metric"]["extra_info"]


def test_statistics_are_vllms_definitions() -> None:
    """Per-request TPOT excluding the first token, ITL gaps pooled, population std, ms."""
    from harness.wire.records import PassRecord, RequestRecord

    def req(i: int, ttft: float, e2el: float, out: int, itl: list[float]) -> RequestRecord:
        return RequestRecord(
            index=i,
            prompt_tokens=4,
            output_tokens=out,
            ttft_s=ttft,
            e2el_s=e2el,
            itl_s=itl,
            finish_reason="length",
            output_token_ids=[],
        )

    p = PassRecord(
        repeat=0,
        started_unix=0.0,
        duration_s=2.0,
        workload_hash="w",
        spec_decode=None,
        requests=[req(0, 0.1, 1.1, 11, [0.1] * 10), req(1, 0.3, 0.7, 5, [0.1] * 4)],
    )
    got = arm_result([p], percentiles=(50.0, 99.9), metrics=PERCENTILE_METRICS)
    assert got["output_throughput"] == 8.0 and got["completed"] == 2
    assert got["mean_tpot_ms"] == pytest.approx(100.0)
    assert got["mean_ttft_ms"] == pytest.approx(200.0) and got["std_ttft_ms"] == pytest.approx(
        100.0
    )
    assert got["p50_itl_ms"] == pytest.approx(100.0) and "p99.9_e2el_ms" in got
    assert "spec_decode_acceptance_rate" not in got  # no counters: vLLM leaves them out too
