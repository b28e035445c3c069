"""Hand-made records for unit tests: known inputs whose metrics can be worked out by hand."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.wire.records import (
    PassRecord,
    RequestRecord,
    RunRecord,
    SpecDecodeCounters,
    WorkerResult,
)


def request(
    index: int,
    ttft_s: float,
    e2el_s: float,
    output_tokens: int = 5,
    prompt_tokens: int = 10,
    tokens: list[int] | None = None,
    itl_s: list[float] | None = None,
) -> RequestRecord:
    return RequestRecord(
        index=index,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        ttft_s=ttft_s,
        e2el_s=e2el_s,
        itl_s=itl_s,
        finish_reason="length",
        output_token_ids=tokens if tokens is not None else list(range(output_tokens)),
    )


def run(
    variant: str, round_: int, order: int, passes: list[PassRecord], status: str = "ok"
) -> RunRecord:
    key = f"{variant}.r{round_}"
    result = WorkerResult(
        run_key=key,
        status="ok" if status == "ok" else "failed",
        passes=passes if status == "ok" else [],
    )
    return RunRecord(
        run_key=key,
        variant=variant,
        round=round_,
        order=order,
        status=status,
        exit_code=0 if status == "ok" else 1,
        wall_s=1.0,
        error=None if status == "ok" else "boom",
        result=result if status == "ok" else None,
    )


def simple_pass(
    repeat: int,
    duration_s: float,
    scale: float = 1.0,
    tokens_offset: int = 0,
    drafts: tuple[int, int, int, list[int]] | None = (10, 30, 15, [8, 5, 2]),
) -> PassRecord:
    """Two requests; latencies multiplied by `scale`."""
    reqs = [
        request(0, 0.1 * scale, 0.5 * scale, tokens=[1 + tokens_offset, 2, 3, 4, 5]),
        request(1, 0.2 * scale, 0.6 * scale, tokens=[6, 7, 8, 9, 10]),
    ]
    sd = (
        SpecDecodeCounters(
            num_drafts=drafts[0],
            num_draft_tokens=drafts[1],
            num_accepted_tokens=drafts[2],
            accepted_per_pos=drafts[3],
        )
        if drafts
        else None
    )
    return PassRecord(
        repeat=repeat,
        started_unix=0.0,
        duration_s=duration_s,
        requests=reqs,
        spec_decode=sd,
        workload_hash="w",
    )


def stored_run(
    tmp_path: Path,
    name: str,
    runs: list[RunRecord],
    fingerprint: Mapping[str, object],
    variants: Mapping[str, object],
    scenario: Mapping[str, object] | None = None,
) -> Path:
    """A results folder holding `runs` under a minimal scenario with `variants`."""
    from harness.results.store import save_run_record
    from harness.wire.manifest import Manifest

    run_dir = tmp_path / name
    data = {
        "name": "unit",
        "model": "tiny-llama",
        "batch_size": 2,
        "workload": {"num_prompts": 2, "max_tokens": 5},
        "variants": variants,
        **(scenario or {}),
    }
    Manifest.model_validate(
        {"run_id": name, "status": "complete", "scenario": data, "fingerprint": fingerprint}
    ).save(run_dir)
    for record in runs:
        save_run_record(run_dir, record)
    return run_dir
