"""Where each part of specbench that reaches into vLLM's workers works: the model runner (V1 or
V2) and the CUDA-graph modes under which its code runs as it must. Pure data: each launch reads
its platform inside the engine once it is built (harness.engine.platform) and checks it against
these declarations (harness.wire.platform.refusals) before any pass is measured, so an
unsupported combination is refused with its reason and the ways out, never measured silently.

What is known, read from vLLM's source (0.32 and 0.33; no CUDA build of vLLM runs here):
- Model Runner V2 (vllm/v1/worker/gpu/model_runner.py) is the CUDA default for EAGLE, MTP,
  draft models and no speculation when Triton is present (VllmConfig.use_v2_model_runner);
  Medusa falls back to V1. It has none of V1's execute_model / _model_forward /
  propose_draft_token_ids split, and samples the draft (DraftModelSpeculator.sample_draft)
  inside the CUDA graph it captures for draft decode.
- A captured CUDA graph replays the kernels recorded at start-up: Python between them does not
  run, so a switch between passes cannot change what replays, and a proof that counts Python
  calls sees only the eager calls (prefills, sizes outside the captured ones).
- Breakable CUDA graphs (vllm/compilation/breakable_cudagraph.py, 0.32 to 0.34) replace
  torch.compile's piecewise split: one capture records the whole model forward, its eager
  Python included, breaking only around attention and KV-cache ops. vLLM turns them on by
  default for some architectures (on NVIDIA in 0.34: Qwen3.5, DeepSeek-V3.2/V4, GLM-5,
  Kimi-K3 and their MTP heads) and can under VLLM_BATCH_INVARIANT=1; harness.plan.breakable
  reads which from the installed source.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNNERS = ("V1", "V2")
# vLLM's CUDAGraphMode names (vllm.config.compilation.CUDAGraphMode); NONE: nothing captured.
GRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
GRAPHED = frozenset(GRAPH_MODES) - {"NONE"}
# Modes with a FULL graph somewhere (draft decode on V2 is FULL in each of them; PIECEWISE
# captures only the compiled regions of a model, so Python around them runs every call,
# except under breakable CUDA graphs (VLLM_USE_BREAKABLE_CUDAGRAPH, on by default for some
# architectures: harness.plan.breakable), which record the whole forward, eager Python too).
FULL_GRAPHS = frozenset({"FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})

# The ways out, by what a rule is about.
RUNNER_WAY_OUT = (
    "model_runner: V1 (vLLM 0.32 and 0.33; 0.34 has no V1 runner; the table "
    "then says vLLM's default runner differs)"
)
V2_WAY_OUT = (
    "model_runner: V2 (vLLM's CUDA default; on a CPU after scripts/setup.sh --v2, code paths only)"
)
EAGER_WAY_OUT = (
    "engine_args: {enforce_eager: true} (no CUDA graphs: the table names the launch eager)"
)
PIECEWISE_WAY_OUT = (
    "engine_args: {compilation_config: {cudagraph_mode: PIECEWISE}} (only the model's "
    "compiled regions are captured, except under breakable CUDA graphs, which record the "
    "model's eager Python too: vLLM turns them on by default for some architectures and "
    "can under VLLM_BATCH_INVARIANT=1 (specbench plan refuses a model-code overlay there); "
    "env: {VLLM_USE_BREAKABLE_CUDAGRAPH: '0'} turns them off)"
)
LAUNCH_WAY_OUT = "design: launch-per-arm (each arm's engine captures its own graphs)"


def expected_graph_mode(device: str, engine_args: dict[str, object]) -> str:
    """The CUDA-graph mode a launch will run under, as far as its arguments say: none on a CPU
    or with enforce_eager; compilation_config.cudagraph_mode where it names one; else vLLM's
    default, which captures (FULL_AND_PIECEWISE)."""
    if device == "cpu" or engine_args.get("enforce_eager"):
        return "NONE"
    compilation = engine_args.get("compilation_config")
    mode = compilation.get("cudagraph_mode") if isinstance(compilation, dict) else None
    if isinstance(mode, str) and mode.upper() in GRAPH_MODES:
        return mode.upper()
    return "FULL_AND_PIECEWISE"


@dataclass(frozen=True)
class Unsupported:
    """A platform a feature does not work on: its runner (None: either), its CUDA-graph modes
    (None: any, captured or not), only when arms switch inside one engine (`switching`), and
    why, in words a vLLM developer can check against vLLM's source."""

    why: str
    runner: str | None = None
    graphs: frozenset[str] | None = None
    switching: bool = False
    # False: the launch runs without the feature, and the table says so (an optional part,
    # such as the step timer); True: the launch is refused before its first pass.
    refuse: bool = True

    def __post_init__(self) -> None:
        assert self.runner is None or self.runner in RUNNERS, self.runner
        assert self.graphs is None or self.graphs <= set(GRAPH_MODES), self.graphs

    def matches(self, runner: str, graphs: str, switching: bool) -> bool:
        return (
            (self.runner is None or self.runner == runner)
            and (self.graphs is None or graphs in self.graphs)
            and (switching or not self.switching)
        )

    def ways_out(self) -> list[str]:
        out = []
        if self.runner == "V2":
            out.append(RUNNER_WAY_OUT)
        if self.runner == "V1":
            out.append(V2_WAY_OUT)
        if self.graphs is not None and "NONE" not in self.graphs:
            out.append(EAGER_WAY_OUT)
        if self.graphs is not None and "PIECEWISE" not in self.graphs:
            out.append(PIECEWISE_WAY_OUT)
        if self.switching:
            out.append(LAUNCH_WAY_OUT)
        return out


# The step timer (harness.engine.steptimes) wraps V1's and V2's runners alike, each at its own
# points (harness.config.vllm_internals: "step timer" and "step timer (V2)"): no platform
# refuses it.
STEP_TIMER: tuple[Unsupported, ...] = ()
# A variant's own patch function switched between passes: what it replaces may run inside a
# captured graph (nothing in the patch says where it runs, unlike an overlay's dispatcher,
# which refuses when a graph captures it).
PATCH_SWITCHING: tuple[Unsupported, ...] = (
    Unsupported(
        graphs=GRAPHED,
        switching=True,
        why="a patch's code may run inside a captured CUDA graph, where a switch "
        "between passes cannot reach it and the proof sees only eager calls",
    ),
)
