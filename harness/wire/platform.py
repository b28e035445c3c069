"""The platform a launch's engine runs on, as vLLM's worker process reads it once the engine is
built (harness.engine.platform): model runner, compilation mode, CUDA-graph mode and capture
sizes, async scheduling, attention backends. Written by the plugin beside the swap reports,
read back by the worker, kept in the launch's record and the manifest, printed on the table's
Setup line, and checked against what each feature of the launch declares it works on
(harness.config.platforms), so an unsupported combination is refused before any pass is
measured. Pure data: the engine side imports it too.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.config.platforms import PATCH_SWITCHING, STEP_TIMER, Unsupported
from harness.config.swaps import SWAPS
from harness.wire.spec import RunSpec

PLATFORM_FILE_PREFIX = "platform-"  # platform-<pid>.json in the launch's report folder


class Platform(BaseModel):
    """One vLLM worker process's platform (every TP rank writes its own; they agree)."""

    model_config = ConfigDict(extra="forbid")

    runner: str = Field(description="V1 or V2 (vLLM's Model Runner V2).")
    runner_class: str = Field(description="The model runner's class, module-qualified.")
    device: str = Field(description="vLLM's device type (cpu, cuda, ...).")
    compilation_mode: str = Field(description="CompilationConfig.mode (CompilationMode name).")
    cudagraph_mode: str = Field(
        description="CompilationConfig.cudagraph_mode (CUDAGraphMode name; NONE: nothing captured)."
    )
    capture_sizes: list[int] = Field(
        default_factory=list, description="Batch sizes captured in CUDA graphs."
    )
    async_scheduling: bool = Field(description="SchedulerConfig.async_scheduling.")
    attention: list[str] = Field(
        default_factory=list, description="The attention backends' names, in use order."
    )
    runner_env: str | None = Field(
        default=None,
        description="VLLM_USE_V2_MODEL_RUNNER as the process saw it (unset: "
        "vLLM chose the runner).",
    )
    rank: int | None = Field(default=None, description="The worker's rank, when known.")
    kv_blocks: int | None = Field(
        default=None,
        description="The KV cache's real capacity in blocks (CacheConfig.num_gpu_blocks once "
        "the engine is built; under the extensible KV cache, once extend_kv_cache has "
        "committed the size measured after warm-up: None until then, as the number before "
        "it is a reservation). vLLM sizes it from free memory unless "
        "num_gpu_blocks_override pins it, so arms in separate launches can differ.",
    )
    kv_extensible: bool | None = Field(
        default=None,
        description="CacheConfig.enable_extensible_kv_cache as the worker saw it: True, "
        "vLLM sized the KV cache from the memory free after warm-up and CUDA-graph capture "
        "(0.34 on CUDA by default); False, before them; None, this vLLM has no extensible "
        "KV cache (0.32, 0.33).",
    )
    kv_override: int | None = Field(
        default=None,
        description="CacheConfig.num_gpu_blocks_override: the launch's pinned capacity "
        "(None: vLLM sized it).",
    )
    interpreted: bool = Field(
        default=False,
        description="Triton kernels ran in Triton's interpreter "
        "(TRITON_INTERPRET=1: Model Runner V2 on a CPU): the code paths are V2's, the "
        "timings are numpy's, never performance.",
    )

    def describe(self, kv: bool = True) -> str:
        """The platform in one line; `kv` False leaves the KV cache's capacity out (said
        apart per launch: kv_text)."""
        sizes = self.capture_sizes
        captured = (
            ""
            if self.cudagraph_mode == "NONE" or not sizes
            else (
                f" (sizes {sizes[0]}-{sizes[-1]}, {len(sizes)})"
                if len(sizes) > 3
                else f" (sizes {', '.join(map(str, sizes))})"
            )
        )
        forced = ""
        if self.runner_env is not None:
            forced = (
                f", forced by VLLM_USE_V2_MODEL_RUNNER={self.runner_env}: vLLM's "
                "default runner here may differ"
            )
        short = self.runner_class.rsplit(".", 1)[-1]
        interpreted = (
            (
                ", Triton kernels in Triton's interpreter (code paths only: timings "
                "are not performance)"
            )
            if self.interpreted
            else ""
        )
        capacity = f", KV cache {text}" if kv and (text := self.kv_text()) else ""
        return (
            f"runner {self.runner} ({short}{forced}{interpreted}), {self.device}, compilation "
            f"{self.compilation_mode}, CUDA graphs {self.cudagraph_mode}{captured}, async "
            f"scheduling {'on' if self.async_scheduling else 'off'}, attention "
            f"{', '.join(dict.fromkeys(self.attention)) or 'unknown'}{capacity}"
        )

    def kv_text(self) -> str | None:
        """The KV cache's capacity and how it was sized: '900 blocks (sized by vLLM after
        warm-up: extensible KV cache)'; None where the launch said nothing of it (older
        records)."""
        if self.kv_blocks is None and not self.kv_extensible and self.kv_override is None:
            return None
        if self.kv_override is not None:
            how = "pinned by num_gpu_blocks_override"
        elif self.kv_extensible:
            how = "sized by vLLM after warm-up: extensible KV cache"
        else:
            how = "sized by vLLM at start-up"
        if self.kv_blocks is None:
            return f"unknown ({how}; no size reported)"
        return f"{self.kv_blocks} blocks ({how})"


def features_of(run: RunSpec) -> dict[str, tuple[Unsupported, ...]]:
    """What this launch runs inside vLLM's workers, each with the platforms it does not work
    on: its swaps, a patch switched between passes, and the step timer."""
    from harness.config.catalog import parse_implementation

    out: dict[str, tuple[Unsupported, ...]] = {}
    labels = [a.implementation for a in run.arms] if run.arms else [run.implementation]
    for label in labels:
        if not label or label.startswith(("patch:", "overlay:")):
            continue
        name, _ = parse_implementation(label)
        out[f"the {name} swap"] = SWAPS[name].unsupported
    if run.patch:
        out[f"the patch {run.patch}"] = PATCH_SWITCHING
    if run.step_times:
        out["the step timer (where the speedup goes)"] = STEP_TIMER
    return out


def refusals(platform: Platform, run: RunSpec, refuse: bool = True) -> list[str]:
    """Why this launch cannot be measured on `platform` (empty: it can), one sentence per
    feature that does not work there, with the ways out. `refuse=False`: the optional
    features it runs without there instead (harness.config.platforms.Unsupported.refuse)."""
    switching = run.design == "one-engine" and len(run.arms) > 1
    out = []
    for feature, rules in features_of(run).items():
        for rule in rules:
            if rule.refuse == refuse and rule.matches(
                platform.runner, platform.cudagraph_mode, switching
            ):
                where = f"model runner {platform.runner}, CUDA graphs {platform.cudagraph_mode}" + (
                    ", arms switched in one engine" if rule.switching else ""
                )
                out.append(
                    f"{feature} does not run on {where}: {rule.why}; ways out: "
                    + "; or ".join(rule.ways_out())
                )
    return out


def kv_capacity_differs(platforms: dict[str, tuple[str, Platform | None]]) -> dict[str, int]:
    """Each launch's KV capacity in blocks (launch key -> (arm, platform)) when launches of
    different arms got different capacities; empty when they agree or did not say."""
    blocks = {
        key: (arm, p.kv_blocks)
        for key, (arm, p) in platforms.items()
        if p is not None and p.kv_blocks is not None
    }
    if len({b for _, b in blocks.values()}) <= 1 or len({a for a, _ in blocks.values()}) <= 1:
        return {}
    return {key: b for key, (_, b) in blocks.items() if b is not None}
