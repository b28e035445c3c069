"""How each pass of a run was driven, as facts read from its scenario (present words them:
harness.present.plan_text.setup_line). Light: `specbench plan` reads it without pandas or
scipy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.config.scenario import Scenario
from harness.wire.platform import Platform
from harness.wire.records import RunRecord


@dataclass
class Setup:
    """How each pass was driven, from the scenario: what the footnotes and `plan` word."""

    mode: str  # "offline" (LLM.generate in the worker) or "serve" (an OpenAI server)
    batch_size: int  # offline: the batch; serve: max_num_seqs
    num_prompts: int
    kind: str  # the workload's kind (random, jsonl, sharegpt, ...)
    max_tokens: int
    tensor_parallel_size: int
    synthetic_acceptance: str | None  # how acceptance is fixed where it is synthetic
    concurrency: int  # serve: requests in flight at most
    request_rate: float | None  # serve: None sends every request at once
    burstiness: float

    @classmethod
    def of(cls, scenario: Scenario) -> Setup:
        w, load = scenario.workload, scenario.serve
        return cls(
            mode=scenario.mode,
            batch_size=scenario.batch_size,
            num_prompts=w.num_prompts,
            kind=w.kind,
            max_tokens=w.max_tokens,
            tensor_parallel_size=scenario.tensor_parallel_size,
            synthetic_acceptance=(
                scenario.draft.synthetic_acceptance if scenario.draft is not None else None
            ),
            concurrency=load.concurrency or scenario.batch_size,
            request_rate=load.request_rate,
            burstiness=load.burstiness,
        )


def kv_capacities(records: Iterable[RunRecord]) -> dict[str, Platform]:
    """The KV cache each launch of a run really had, by launch (run key): its platform, whose
    kv_blocks is the capacity vLLM committed (under the extensible KV cache, the size measured
    after warm-up, never the reservation before it; None: not reported), kv_extensible and
    kv_override say how it was sized, and kv_text() words it. Launches that reported no
    platform (older records, an engine that did not start) are left out."""
    return {
        r.run_key: r.result.platform
        for r in records
        if r.result is not None and r.result.platform is not None
    }
