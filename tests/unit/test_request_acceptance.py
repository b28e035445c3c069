"""Per-request acceptance (vLLM's per_request_spec_decode_metrics): one request's acceptance
length from its histogram, the pass-level P10 / median / P90 rows, the figure, and records of
older runs (no histogram) giving no such rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.present.figures import acceptance_per_request
from harness.results.metrics import passes_frame, request_acceptance, requests_frame
from harness.wire.records import PassRecord, RequestRecord, RunRecord, WorkerResult


def req(hist: list[int] | None, tokens: int = 8) -> RequestRecord:
    return RequestRecord(
        index=0,
        prompt_tokens=4,
        output_tokens=tokens,
        ttft_s=0.01,
        e2el_s=0.05,
        finish_reason="length",
        output_token_ids=[],
        spec_histogram=hist,
        spec_draft_tokens=None if hist is None else 3 * sum(hist),
    )


def launch(requests: list[RequestRecord]) -> RunRecord:
    p = PassRecord(
        repeat=0,
        started_unix=0.0,
        duration_s=1.0,
        requests=requests,
        spec_decode=None,
        workload_hash="w",
    )
    return RunRecord(
        run_key="a.r0",
        variant="a",
        round=0,
        order=0,
        status="ok",
        wall_s=1.0,
        result=WorkerResult(run_key="a.r0", status="ok", passes=[p]),
    )


def test_acceptance_length_of_one_request() -> None:
    # 4 verify steps accepting 0, 1, 1 and 3 drafts: 5 accepted, 1 + 5/4 tokens a step.
    assert request_acceptance(req([1, 2, 0, 1])) == (2.25, 4, 5)
    length, steps, accepted = request_acceptance(req([0, 0, 0, 0]))
    assert math.isnan(length) and (steps, accepted) == (0, 0)
    assert math.isnan(request_acceptance(req(None))[0])


def test_pass_rows_and_the_figure() -> None:
    # Request k: two verify steps accepting k drafts in all (k = 0..6), length 1 + k / 2.
    requests = []
    for k in range(7):
        h = [0, 0, 0, 0]
        h[min(3, k)] += 1
        h[k - min(3, k)] += 1
        requests.append(req(h, tokens=8 + k))
    frame = passes_frame([launch(requests)])
    lengths = [1 + k / 2 for k in range(7)]
    assert frame["median_acceptance_length"].iloc[0] == pytest.approx(np.median(lengths))
    assert frame["p10_acceptance_length"].iloc[0] == pytest.approx(np.percentile(lengths, 10))
    assert frame["p90_acceptance_length"].iloc[0] == pytest.approx(np.percentile(lengths, 90))
    rq = requests_frame([launch(requests)])
    assert list(rq["acceptance_length"]) == pytest.approx(lengths)
    assert list(rq["spec_steps"]) == [2] * 7
    assert acceptance_per_request(rq, "a", "t") is not None
    old = [req(None) for _ in range(3)]  # a run from before per-request metrics
    assert passes_frame([launch(old)])["median_acceptance_length"].isna().all()
    assert acceptance_per_request(requests_frame([launch(old)]), "a", "t") is None
