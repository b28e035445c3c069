"""How each pass of a run was driven, as facts read from its scenario (present words them:
harness.present.plan_text.setup_line). Light: `specbench plan` reads it without pandas or
scipy."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.scenario import Scenario


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
