"""One measured engine launch: `python -m harness.engine.worker --spec S --out O`.

Runs in its own process (started by an executor, harness.execute.local or .ray_executor, for
the runner): builds vLLM's offline LLM engine with the launch's settings, warms it up, runs
the measured passes (one arm, or every arm of a shared launch switched between passes), and
writes a WorkerResult JSON.
Failures it can catch are written as data (status "failed"); the parent handles the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.atomic import write_json_atomic
from harness.config.catalog import BUILTIN_MODELS
from harness.config.scenario import Workload
from harness.config.workload import (
    READERS,
    Prompt,
    load_workload,
    model_vocab_size,
    warmup_prompts,
    workload_file,
    workload_hash,
)
from harness.engine import chat, contention, platform, steptimes
from harness.engine.schedule import measure_launch, reports_of
from harness.lifeline import guard_process_group
from harness.wire.platform import refusals
from harness.wire.protocol import (
    IMPL_REPORT_DIR_ENV,
    LOG_FILE_ENV,
    PROFILE_DIR_ENV,
    SPAWNED_ENV,
    STEP_TIMES_RPC,
    SWITCH_RPC,
    WORKER_SPEC_VERSION,
    WorkerSpec,
)
from harness.wire.records import (
    ImplReport,
    PassRecord,
    ProfiledPass,
    RequestRecord,
    SpecDecodeCounters,
    StepTimes,
    Timings,
    WorkerResult,
)
from harness.wire.spec import RunSpec

SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def resolve_models(
    engine_args: dict[str, Any], cache_dir: Path | None, base_dir: Path
) -> dict[str, str]:
    """Replace built-in model names (target and draft) by local folders, building if needed."""
    spec = engine_args.get("speculative_config") or {}
    wanted = [name for name in (engine_args["model"], spec.get("model")) if name in BUILTIN_MODELS]
    resolved: dict[str, str] = {}
    if wanted:
        from harness.engine.models import ensure_models

        folders = ensure_models(wanted, cache_dir, log=lambda m: print(m, file=sys.stderr))
        resolved = {name: str(path) for name, path in folders.items()}

    def local(name: str) -> str:
        if name in resolved:
            return resolved[name]
        path = Path(name).expanduser()
        if not path.is_absolute() and (base_dir / path).exists():
            return str(base_dir / path)
        return name

    engine_args["model"] = local(engine_args["model"])
    if spec.get("model"):
        spec["model"] = local(spec["model"])
    return resolved


def read_counters(llm: Any) -> dict[str, Any]:
    """Cumulative spec-decode counters summed over engines/labels."""
    from vllm.v1.metrics.reader import Counter, Vector

    totals: dict[str, Any] = dict.fromkeys(SPEC_COUNTERS.values(), 0)
    per_pos: list[int] = []
    for metric in llm.get_metrics():
        if metric.name in SPEC_COUNTERS and isinstance(metric, Counter):
            totals[SPEC_COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == SPEC_PER_POS and isinstance(metric, Vector):
            values = [int(v) for v in metric.values]
            if len(per_pos) < len(values):
                per_pos.extend([0] * (len(values) - len(per_pos)))
            for i, v in enumerate(values):
                per_pos[i] += v
    totals["accepted_per_pos"] = per_pos
    return totals


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> SpecDecodeCounters:
    """Counters of exactly one pass: vLLM's are cumulative over the process."""
    pos_before = before["accepted_per_pos"] + [0] * len(after["accepted_per_pos"])
    return SpecDecodeCounters(
        num_drafts=after["num_drafts"] - before["num_drafts"],
        num_draft_tokens=after["num_draft_tokens"] - before["num_draft_tokens"],
        num_accepted_tokens=after["num_accepted_tokens"] - before["num_accepted_tokens"],
        accepted_per_pos=[a - pos_before[i] for i, a in enumerate(after["accepted_per_pos"])],
    )


def read_step_times(llm: Any) -> dict[str, float] | None:
    """The step timer's totals in vLLM's worker of TP rank 0 (harness.engine.steptimes), or
    None where the timer is not installed (the plugin logged why)."""
    from vllm.v1.engine.exceptions import EngineDeadError

    try:
        ranks = llm.collective_rpc(STEP_TIMES_RPC)
    except EngineDeadError:
        raise
    except Exception:  # noqa: BLE001 - no timer in the worker: a pass without step times
        return None
    return dict(ranks[0]) if ranks else None


def step_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> StepTimes | None:
    """The step times of exactly one pass (the timer's totals are cumulative)."""
    if before is None or after is None:
        return None
    probes = int(round(after.get("probes", 0.0) - before.get("probes", 0.0)))
    twins = int(round(after.get("twins", 0.0) - before.get("twins", 0.0)))
    asked = int(round(after.get("twin_asked", 0.0) - before.get("twin_asked", 0.0)))
    twinned = bool(probes) and twins > 0 and twins == asked  # every run asked for was paired
    return StepTimes(
        steps=int(round(after["steps"] - before["steps"])),
        **{k: after[k] - before[k] for k in ("step_s", "forward_s", "draft_s")},
        probes=probes or None,
        probe_s=after["probe_s"] - before["probe_s"] if probes else None,
        twin_wait_s=(
            after.get("twin_wait_s", 0.0) - before.get("twin_wait_s", 0.0) if probes else None
        ),
        twins=twins if twinned else None,
        twin_s=after["twin_s"] - before["twin_s"] if twinned else None,
        probe_over_twin=(
            math.exp((after["pair_log"] - before["pair_log"]) / twins) if twinned else None
        ),
    )


def to_engine_prompt(prompt: Prompt) -> Any:
    if isinstance(prompt, str):
        return prompt
    from vllm.inputs import TokensPrompt

    return TokensPrompt(prompt_token_ids=prompt)


def request_record(index: int, output: Any, category: str | None = None) -> RequestRecord:
    completion = output.outputs[0]
    stats = output.metrics
    ttft = e2el = None
    if stats is not None and stats.first_token_latency > 0:
        ttft = float(stats.first_token_latency)
        # first_token_latency is measured from arrival (wall clock); the decode span comes
        # from the engine core's monotonic timestamps of the first and last token.
        e2el = ttft + max(0.0, float(stats.last_token_ts - stats.first_token_ts))
    spec = getattr(completion, "spec_decode_metrics", None)  # per_request_spec_decode_metrics
    return RequestRecord(
        index=index,
        prompt_tokens=len(output.prompt_token_ids or []),
        output_tokens=len(completion.token_ids),
        ttft_s=ttft,
        e2el_s=e2el,
        finish_reason=completion.finish_reason,
        output_token_ids=list(completion.token_ids),
        spec_histogram=None if spec is None else [int(c) for c in spec.histogram],
        spec_draft_tokens=None if spec is None else int(spec.num_draft_tokens),
        category=category,
    )


def read_impl_reports(report_dir: Path) -> list[ImplReport]:
    """What vLLM's engine processes reported running (harness.engine.impls writes them)."""
    from harness.engine.impls import read_impl_reports as read_raw

    reports = []
    for data in read_raw(report_dir):
        try:
            reports.append(ImplReport.from_raw(data))
        except ValueError as exc:
            print(f"specbench: unreadable implementation report: {exc}", file=sys.stderr)
    return reports


# How long a dead engine core's exit code may take to be known after vLLM says it is dead.
ENGINE_EXIT_WAIT_S = 5.0
ENGINE_WATCH_S = 0.5


def _engine_client(llm: Any) -> Any:
    """vLLM's client of the engine core process (offline LLM), or None where it has none."""
    return getattr(getattr(llm, "llm_engine", None), "engine_core", None)


def engine_core_ending(llm: Any) -> str:
    """How vLLM's engine core process ended, in words: 'exit code 3', 'killed by SIGKILL', or
    '' when it is not known (no process found, or it has not ended within a few seconds)."""
    manager = getattr(getattr(_engine_client(llm), "resources", None), "engine_manager", None)
    for proc in list(getattr(manager, "processes", None) or []):
        try:
            proc.join(ENGINE_EXIT_WAIT_S)  # vLLM says it is dead a moment before it exits
        except (AssertionError, ValueError, OSError):
            pass  # not ours to join: its exit code may still be known
        code = proc.exitcode
        if code is None or code == 0:
            continue
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exit code {code}"
    return ""


def wake_on_engine_death(llm: Any) -> threading.Event:
    """vLLM 0.32's offline client marks the engine dead when its engine core process ends
    without a word (killed, os._exit) but wakes no one: LLM.generate and collective_rpc wait
    for ever (until the launch's timeout). A thread wakes them with vLLM's own EngineDeadError.
    Set the returned event to stop watching (before a deliberate shutdown)."""
    stop = threading.Event()
    client = _engine_client(llm)
    resources = getattr(client, "resources", None)
    outputs = getattr(client, "outputs_queue", None)
    if resources is None or outputs is None:
        return stop  # another client (no engine core process): nothing to watch

    def watch() -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        while not stop.wait(ENGINE_WATCH_S):
            if getattr(resources, "engine_dead", False):
                outputs.put_nowait(EngineDeadError())
                for future in list((getattr(client, "utility_results", None) or {}).values()):
                    if not future.done():
                        future.set_exception(EngineDeadError())
                return

    threading.Thread(target=watch, name="specbench-engine-core-watch", daemon=True).start()
    return stop


def engine_death_error(llm: Any, stage: str) -> str:
    """What is known when vLLM reports its engine core dead: which process, how it ended, in
    which stage of the launch, and where its output is (vLLM's own EngineDeadError only says
    to look at a stack trace 'above')."""
    how = engine_core_ending(llm)
    log = os.environ.get(LOG_FILE_ENV)
    return (
        f"vLLM's engine core process died during {stage}"
        + (f" ({how})" if how else "")
        + (f"; its output, with any stack trace, is in {log}" if log else "")
    )


def vllm_dataset_prompts(workload: Workload, base_dir: Path) -> list[str] | None:
    """The prompt texts vLLM's own dataset class reads from the workload's file, in file
    order (disable_shuffle), for the formats it has a class for; None for the others."""
    if workload.kind not in ("spec_bench", "speed_bench"):
        return None
    from vllm.benchmarks.datasets import datasets as vllm_datasets

    found: Any
    if workload.kind == "spec_bench":
        found = vllm_datasets.SpecBench(
            dataset_path=str(workload_file(workload, base_dir)), disable_shuffle=True
        )
    elif workload.kind == "speed_bench":
        folder = Path(workload.path or "")
        folder = folder if folder.is_absolute() else base_dir / folder
        if not folder.is_dir():
            return None  # the file named itself: vLLM's class reads folders only
        found = vllm_datasets.SpeedBench(
            dataset_path=str(folder),
            disable_shuffle=True,
            dataset_subset=workload.subset or "qualitative",
        )
    return [str(row["prompt"]) for row in found.data]


def check_against_vllm(workload: Workload, base_dir: Path) -> None:
    """vLLM's class and specbench's reader must read the same prompts from the same file
    (specbench's adds the categories vLLM's drops); a difference fails the launch."""
    theirs = vllm_dataset_prompts(workload, base_dir)
    if theirs is None:
        return
    ours = [p for p, _ in READERS[workload.kind](workload_file(workload, base_dir))]
    if theirs != ours:
        first = next(
            (i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
            min(len(theirs), len(ours)),
        )
        raise RuntimeError(
            f"vLLM's {workload.kind} reader and specbench's disagree on "
            f"{workload_file(workload, base_dir)} from prompt {first} "
            f"({len(theirs)} against {len(ours)} prompts)"
        )


def prepare_launch(
    run: RunSpec, base_dir: Path, cache_dir: Path | None, result: WorkerResult
) -> tuple[dict[str, Any], list[Prompt], list[Prompt], list[str | None]]:
    """Both modes: local model folders in a copy of the engine args (timed into `result`),
    the measured prompts, the warm-up prompts and each measured prompt's category."""
    t = time.perf_counter()
    engine_args: dict[str, Any] = json.loads(json.dumps(run.engine_args))
    result.resolved_models = resolve_models(engine_args, cache_dir, base_dir)
    result.timings.models_s = time.perf_counter() - t
    # A local folder's config.json, or a Hub id's in the local Hugging Face cache.
    vocab = model_vocab_size(str(engine_args["model"]))
    check_against_vllm(run.workload, base_dir)
    prompts, categories = load_workload(run.workload, base_dir, vocab)
    prompts, result.prompts_as = chat.render(run.workload, engine_args, prompts)
    return (
        engine_args,
        prompts,
        warmup_prompts(run.workload, run.warmup, vocab, prompts),
        categories,
    )


def run_worker(
    run: RunSpec,
    base_dir: Path,
    cache_dir: Path | None,
    report_dir: Path,
    startup_s: float = 0.0,
    deadline_unix: float | None = None,
) -> WorkerResult:
    """Build the engine, warm up, measure the passes (one-engine design: balanced blocks of
    every arm, switched through collective_rpc). Raises on engine failure."""
    timings = Timings(startup_s=startup_s)
    result = WorkerResult(
        run_key=run.run_key, status="failed", timings=timings, worker_pid=os.getpid()
    )

    t = time.perf_counter()
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    timings.import_s = time.perf_counter() - t
    result.engine_versions = {"vllm": vllm.__version__, "torch": torch.__version__}

    engine_args, prompts, warm, categories = prepare_launch(run, base_dir, cache_dir, result)

    def params(i: int) -> Any:
        w = run.workload
        return SamplingParams(
            max_tokens=w.max_tokens,
            ignore_eos=w.ignore_eos,
            temperature=w.temperature,
            seed=None if w.temperature == 0 else w.seed + i,
        )

    profile_dir = os.environ.get(PROFILE_DIR_ENV) if run.profile_passes else None
    if profile_dir:
        # vLLM's own profiler hooks: a torch profiler in each worker process, started and
        # stopped per profiled pass (LLM.start_profile / stop_profile), idle otherwise.
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        engine_args["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": profile_dir}
    t = time.perf_counter()
    platform.clear(report_dir)
    llm: Any = LLM(**engine_args)
    timings.engine_start_s = time.perf_counter() - t
    # What the engine runs on, read in its processes; refused before any pass where a
    # feature of this launch does not work there.
    result.platform, refused = platform.check_launch(run, report_dir)
    if refused:
        print(f"specbench: {refused}", file=sys.stderr)
        result.error = refused
        return result
    if result.platform is not None:
        result.left_out = refusals(result.platform, run, refuse=False)
    step_timed = run.step_times and not any("step timer" in x for x in result.left_out)
    speculative = "speculative_config" in engine_args
    stage = "the warm-up"  # what the engine is doing, should its core process die
    watching = wake_on_engine_death(llm)

    # The launch's own processes, for what else loads the machine during a pass: this worker's
    # session (vLLM's processes inherit it) and the specbench process that started it.
    session, own = contention.own_session(), frozenset({os.getppid()})
    engine_prompts = [to_engine_prompt(p) for p in prompts]
    sampling = [params(i) for i in range(len(prompts))]
    whash = workload_hash(prompts)

    def warm_up() -> None:
        nonlocal stage
        stage = "the warm-up"
        llm.generate(
            [to_engine_prompt(p) for p in warm],
            [params(i) for i in range(len(warm))],
            use_tqdm=False,
        )

    def measure(repeat: int, arm: str | None = None, block: int | None = None) -> PassRecord:
        nonlocal stage
        # A shared launch measures its checked warm-up through this function too; the warm-up
        # is over once its block count is set (schedule.measure_launch).
        warming = run.design == "one-engine" and result.warmup_blocks == 0
        stage = "the warm-up" if warming else f"pass {repeat}"
        before = read_counters(llm) if speculative else None
        steps_before = read_step_times(llm) if step_timed else None
        started = time.time()
        c0 = contention.sample(session, own)
        t = time.perf_counter()
        outputs = llm.generate(engine_prompts, sampling, use_tqdm=False)
        duration = time.perf_counter() - t
        c1 = contention.sample(session, own)
        timings.measure_s += duration
        after = read_counters(llm) if speculative else None
        steps_after = read_step_times(llm) if step_timed else None
        return PassRecord(
            repeat=repeat,
            started_unix=started,
            duration_s=duration,
            requests=[request_record(i, out, categories[i]) for i, out in enumerate(outputs)],
            spec_decode=counter_delta(before, after) if before and after else None,
            workload_hash=whash,
            arm=arm,
            block=block,
            step_times=step_delta(steps_before, steps_after),
            foreign_cpu=contention.foreign_share(c0, c1),
            load1=contention.load_average(),
        )

    def switch(choice: str | None) -> list[list[dict[str, Any]]]:
        nonlocal stage
        stage = "a switch between arms"
        return list(llm.collective_rpc(SWITCH_RPC, args=(choice or "",)))

    from vllm.v1.engine.exceptions import EngineDeadError

    try:
        result.stop, timings.warmup_s = measure_launch(
            run,
            measure,
            warm_up if warm else None,
            switch,
            deadline_unix,
            int(engine_args.get("tensor_parallel_size", 1)),
            os.getpid(),
            result,
            lambda: read_impl_reports(report_dir),
            # Each pass goes to the pass file, not memory: flat however long it measures.
            slim=True,
            # Checked on this machine before any of its numbers are printed.
            check_pass=(lambda p: steptimes.check_parts([p], speculative)) if step_timed else None,
        )
        if profile_dir:
            stage = "a profiled pass"
            try:
                result.profiled = profile_arms(
                    run,
                    llm,
                    switch,
                    engine_prompts,
                    sampling,
                    lambda: read_impl_reports(report_dir),
                )
            except EngineDeadError:
                raise
            except Exception as exc:  # noqa: BLE001 - the measured passes stand without it
                traceback.print_exc()
                result.left_out.append(f"profile: {type(exc).__name__}: {exc}")
    except EngineDeadError:
        traceback.print_exc()
        # The passes that finished are kept (as data) in a failed result.
        result.error = engine_death_error(llm, stage)
        result.impl_reports = read_impl_reports(report_dir)
        return result
    finally:
        watching.set()

    t = time.perf_counter()
    llm = None  # the closures above share this cell: drop the engine for them too
    gc.collect()
    timings.shutdown_s = time.perf_counter() - t
    t = time.perf_counter()
    result.impl_reports = read_impl_reports(report_dir)
    result.status = "ok"
    timings.finish_s = time.perf_counter() - t
    return result


def profile_arms(
    run: RunSpec,
    llm: Any,
    switch: Callable[[str | None], Any],
    prompts: list[Any],
    sampling: list[Any],
    reports: Callable[[], list[ImplReport]],
) -> list[ProfiledPass]:
    """run.profile_passes passes per arm under vLLM's torch profiler, after the measured
    ones: one-engine, the arms alternated (A B B A ...) and switched like a measured pass;
    each pass's traces named '<arm>-<index>' (plus vLLM's rank suffix)."""
    arms = [(a.variant, a.switch_to) for a in run.arms] if run.arms else [(run.variant, None)]
    order: list[tuple[str, str | None]] = []
    for i in range(run.profile_passes):
        order += arms if i % 2 == 0 else arms[::-1]
    seen: dict[str, int] = {}
    out = []
    for arm, choice in order:
        index = seen.get(arm, 0)
        seen[arm] = index + 1
        prefix = f"{arm}-{index}".replace("+", "_")
        if run.arms and choice is not None:
            switch(choice)
        llm.start_profile(profile_prefix=prefix)
        t = time.perf_counter()
        llm.generate(prompts, sampling, use_tqdm=False)
        duration = time.perf_counter() - t
        llm.stop_profile()
        paths = (
            sorted({p for r in reports_of(switch(None)) for p in r.paths})
            if run.arms and choice is not None
            else sorted({p for r in reports() for p in r.paths})
        )
        out.append(
            ProfiledPass(arm=arm, index=index, prefix=prefix, duration_s=duration, paths=paths)
        )
    return out


RunFn = Callable[[RunSpec, Path, "Path | None", Path, float, argparse.Namespace], WorkerResult]


def worker_main(
    run_fn: RunFn, argv: list[str] | None = None, extra_paths: tuple[tuple[str, str], ...] = ()
) -> int:
    """The worker protocol shared by both modes: read the spec, run, write one WorkerResult
    (also for failures, as data), exit non-zero unless the launch succeeded."""
    guard_process_group()  # a dead runner, or its cleanup, ends the engine processes too
    spawned = os.environ.get(SPAWNED_ENV)
    startup_s = max(0.0, time.time() - float(spawned)) if spawned else 0.0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", type=Path, required=True, help="WorkerSpec JSON from runner")
    parser.add_argument("--out", type=Path, required=True, help="where to write WorkerResult")
    for flag, help_text in extra_paths:
        parser.add_argument(flag, type=Path, required=True, help=help_text)
    args = parser.parse_args(argv)

    raw = json.loads(args.spec.read_text())
    if raw.get("spec_version") != WORKER_SPEC_VERSION:
        # Another specbench wrote it (a variant's environment with an older or newer copy).
        key = str((raw.get("run") or {}).get("run_key", "?"))
        result = WorkerResult(
            run_key=key,
            status="failed",
            error=(
                f"worker spec version {raw.get('spec_version')!r}, but this worker "
                f"({Path(__file__).resolve().parents[2]}) reads version {WORKER_SPEC_VERSION}: "
                "install the same specbench in this environment"
            ),
        )
        write_json_atomic(args.out, result.model_dump(mode="json"), indent=None)
        return 1
    spec = WorkerSpec.model_validate(raw)
    run = spec.run
    base_dir = Path(spec.base_dir)
    cache_dir = Path(spec.models_cache) if spec.models_cache else None
    report_dir = Path(os.environ[IMPL_REPORT_DIR_ENV])
    args.deadline_unix = spec.deadline_unix
    try:
        result = run_fn(run, base_dir, cache_dir, report_dir, startup_s, args)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes data for the parent
        traceback.print_exc()
        result = WorkerResult(
            run_key=run.run_key,
            status="failed",
            error=f"{type(exc).__name__}: {exc}".strip()[:2000],
            impl_reports=read_impl_reports(report_dir),
        )
    write_json_atomic(args.out, result.model_dump(mode="json"), indent=None)
    return 0 if result.status == "ok" else 1


def exit_now(code: int) -> None:
    """The result is on disk and the engine is shut down: skip the interpreter's teardown of
    torch/vLLM modules (seconds of pure overhead); the parent reaps the process group."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    return worker_main(
        lambda run, base, cache, reports, startup, args: run_worker(
            run, base, cache, reports, startup, args.deadline_unix
        ),
        argv,
    )


if __name__ == "__main__":
    exit_now(main())
