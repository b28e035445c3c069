"""Metrics from hand-made records, checked against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from harness.results.metrics import passes_frame, requests_frame
from testkit.factory import request, run, simple_pass


def test_pass_metrics_by_hand() -> None:
    runs = [run("a", 0, 0, [simple_pass(0, duration_s=2.0)])]
    row = passes_frame(runs).iloc[0]
    # 2 requests x 5 output tokens, 2 x 10 prompt tokens, over 2 s.
    assert row["output_throughput"] == pytest.approx(5.0)
    assert row["total_throughput"] == pytest.approx(15.0)
    assert row["request_throughput"] == pytest.approx(1.0)
    assert row["mean_ttft_ms"] == pytest.approx(150.0)
    assert row["mean_e2el_ms"] == pytest.approx(550.0)
    # TPOT = (e2el - ttft) / (out - 1): (0.4/4, 0.4/4) s
    assert row["mean_tpot_ms"] == pytest.approx(100.0)
    # 15 accepted of 30 drafted over 10 draft steps
    assert row["acceptance_rate"] == pytest.approx(50.0)
    assert row["mean_acceptance_length"] == pytest.approx(2.5)
    assert row["acceptance_pos_0"] == pytest.approx(80.0)
    assert row["acceptance_pos_2"] == pytest.approx(20.0)
    assert math.isnan(row["mean_itl_ms"])


def test_itl_pools_every_gap() -> None:
    p = simple_pass(0, 1.0)
    p.requests[0].itl_s = [0.01, 0.03]
    p.requests[1].itl_s = [0.02]
    row = passes_frame([run("a", 0, 0, [p])]).iloc[0]
    assert row["mean_itl_ms"] == pytest.approx(20.0)


def test_failed_requests_and_runs_are_excluded() -> None:
    p = simple_pass(0, 1.0)
    p.requests.append(request(2, 0.1, 0.2))
    p.requests[-1].error = "HTTP 500"
    row = passes_frame([run("a", 0, 0, [p]), run("b", 0, 1, [], status="failed")]).iloc[0]
    assert row["num_requests"] == 3 and row["num_ok"] == 2 and row["num_failed"] == 1
    assert row["output_throughput"] == pytest.approx(10.0)
    assert list(passes_frame([run("b", 0, 1, [], status="failed")]).columns) == []


def test_no_speculation_has_no_acceptance() -> None:
    row = passes_frame([run("a", 0, 0, [simple_pass(0, 1.0, drafts=None)])]).iloc[0]
    assert math.isnan(row["acceptance_rate"])


def test_request_frame_one_row_per_request() -> None:
    frame = requests_frame([run("a", 0, 0, [simple_pass(0, 1.0), simple_pass(1, 1.0)])])
    assert len(frame) == 4
    assert set(frame["repeat"]) == {0, 1}
    assert frame["tpot_ms"].tolist() == pytest.approx([100.0, 100.0, 100.0, 100.0])
