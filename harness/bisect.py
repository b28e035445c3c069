"""`specbench bisect`: find the first candidate whose metric differs from `good`, Chromium
Pinpoint style, on real vLLM.

Candidates are the commits good..bad of a vLLM checkout based on the installed release (each
one's change against the release as a diff: overlaid in one engine beside good's, both arms
overlaid; a commit whose change cannot be overlaid is built with the user's command and runs
launch-per-arm), or an explicit list of interpreters (launch-per-arm). Each comparison is an
ordinary specbench run of a two- or three-variant scenario made from the user's (its baseline
variant is the template), stored in the bisect's folder, so it keeps its raw records, report
and interval, and an interrupted bisect resumes: a step whose run is complete is read back, a
step whose run was interrupted is resumed. The decisions are harness.analysis.bisection's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from harness.analysis.bisection import (
    GOOD,
    Change,
    Interval,
    Levels,
    Measured,
    Outcome,
    Search,
    Step,
    Verdict,
    first_points,
    look_interval,
    look_z,
    midpoint_verdict,
    pooled_step,
    precision_target,
    range_verdict,
    side_verdict,
    spread_points,
)
from harness.analysis.comparison import Comparison
from harness.atomic import write_json_atomic, write_text_atomic
from harness.config.scenario import Scenario, load_scenario, parse_scenario
from harness.errors import ExitCode, ScenarioError, SpecbenchError
from harness.plan.commits import Candidate, build_commit, commit_diffs, commit_range, release_base
from harness.plan.design import one_engine_blocker
from harness.present.bisect import SIDE_WORDS, delta_iv, delta_of, render_outcome
from harness.wire.manifest import MANIFEST, Manifest

Progress = Callable[[str], Any]
# 2: good_vs_bad pooled over the looks, `changes` (the parts beside each culprit), the
#    culprit's own step, `max_runs`.
BISECT_VERSION = 2
# A further step beside a culprit: its part's interval excludes zero at this rate (two-sided,
# spent across the looks), so a bisect with one step names a second in few runs.
SIDE_ALPHA = 0.05
# A candidate between good's level and bad's (two steps, one on each side): it differs from
# both at this rate (two-sided, spent across the looks).
SPLIT_ALPHA = 0.05


def _name(index: int, candidate: Candidate) -> str:
    return GOOD if index == 0 else f"c{index}-{candidate.sha[:8]}"


def _template(scenario: Scenario) -> dict[str, Any]:
    """The user's scenario as a mapping, its baseline the template of every arm."""
    if scenario.sweep is not None:
        raise ScenarioError(f"{scenario.name}: a sweep; bisect one A/B (a scenario without sweep:)")
    base = scenario.variants[scenario.baseline]
    for key in ("diff", "source", "implementation", "patch", "python"):
        if getattr(base, key, None):
            raise ScenarioError(
                f"variants.{scenario.baseline}.{key}: bisect gives each arm "
                "its commit's code; the template variant must not name code "
                "of its own"
            )
    data = scenario.model_dump(mode="json", exclude_none=True)
    template = {
        k: v
        for k, v in data["variants"][scenario.baseline].items()
        if k not in ("baseline", "description")
    }
    data["variants"] = {"__template__": template}
    data.pop("gates", None)
    return data


class Bisector:
    """Runs the steps of one bisect in its folder."""

    def __init__(
        self,
        scenario: Scenario,
        scenario_path: Path,
        candidates: list[Candidate],
        folder: Path,
        metric: str,
        threshold: float,
        budget_s: float,
        tries: int,
        progress: Progress,
        models_cache: Path | None = None,
        build: Callable[[Candidate], str] | None = None,
        points: int = 3,
        blocks: int | None = None,
        max_runs: int | None = None,
        check_runs: int = 0,
    ) -> None:
        self.scenario = scenario
        self.base_dir = scenario_path.resolve().parent
        self.data = _template(scenario)
        self.candidates = candidates
        self.folder = folder
        self.metric = metric
        self.threshold = threshold
        self.budget_s = budget_s
        self.tries = tries
        self.progress = progress
        self.models_cache = models_cache
        self.build = build
        self.points = points  # candidates measured beside good in one run, at most
        self.blocks = blocks
        # Engine runs in all; the check for further steps beside a culprit stops there.
        self.max_runs = 3 * tries + 2 if max_runs is None else max_runs
        # Runs spent checking the parts beside the culprits while they are UNKNOWN, per round
        # of checks (each round measures every open part's ends in one engine). 0 (the
        # default): the parts are judged from what was measured anyway, "not checked" where
        # that cannot decide. Opt-in because it roughly doubles a one-culprit bisect's time;
        # what it buys and costs: docs/history-and-bisect.md, benchmarks/bisect_two_steps.py.
        self.check_runs = check_runs
        self.steps: list[Step] = []
        self._ranging = self._checking = False  # what the runs being said are for

    # -- one run --------------------------------------------------------------------------------

    def _variant(self, index: int) -> dict[str, Any]:
        c = self.candidates[index]
        variant = dict(self.data["variants"]["__template__"])
        variant["description"] = f"{c.ref}: {c.subject}"[:200]
        if c.python is not None:
            variant["python"] = c.python
        elif c.diff is not None:
            if c.overlayable:
                variant["diff"] = str(c.diff)
            elif self.build is not None:
                variant["python"] = self.build(c)
            else:  # refused in pre-flight; kept as a guard
                raise ScenarioError(f"{c.ref}: cannot be overlaid; give --build")
        return variant

    def _blocks(self, attempt: int) -> int | None:
        """With --blocks: the blocks of this try (doubled on each try while UNKNOWN)."""
        return None if self.blocks is None else self.blocks * 2 ** (attempt - 1)

    def _scenario(self, arms: list[int], target: float | None, attempt: int = 1) -> dict[str, Any]:
        data = {k: v for k, v in self.data.items() if k != "variants"}
        variants = {}
        for index in arms:
            variant = self._variant(index)
            if index == arms[0]:
                variant["baseline"] = True
            variants[_name(index, self.candidates[index])] = variant
        data["variants"] = variants
        data["name"] = f"{self.scenario.name}-bisect"
        one_engine = one_engine_blocker(parse_scenario(data, "bisect", max_cells=None)) is None
        blocks = self._blocks(attempt)
        if one_engine and blocks is not None:
            data.pop("precision", None)  # a fixed count of balanced blocks (2 passes per arm)
            data["rounds"] = 1
            data["repeats"] = 2 * blocks
        elif one_engine and target is not None:
            # Per arm: an engine hosting good and three candidates gets four times the time
            # of a lone midpoint against good, and its candidates the same precision.
            data["precision"] = {
                "mde": round(target, 5),
                "budget_s": round(self.budget_s * len(arms), 1),
            }
            data["rounds"] = 1
        else:
            data.pop("precision", None)
            data["rounds"] = max(int(data.get("rounds", 1)), 3)
        return data

    def _run(self, arms: list[int], target: float | None, attempt: int) -> tuple[Step, Comparison]:
        from harness.execute.local import LocalExecutor
        from harness.results.run import load_run
        from harness.workflow import analyze, run_scenario

        data = self._scenario(arms, target, attempt)
        key = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]
        run_id = "-".join(_name(i, self.candidates[i]).split("-")[0] for i in arms)
        run_id = f"{run_id}-t{attempt}-{key}"
        runs = self.folder / "runs"
        path = self.folder / "scenarios" / f"{run_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))
        spec = parse_scenario(data, str(path), max_cells=None)
        folder = runs / run_id
        done = (folder / MANIFEST).is_file() and Manifest.read(folder / MANIFEST)[
            1
        ].status == "complete"
        names = ", ".join(_name(i, self.candidates[i]) for i in arms)
        if done:
            self.progress(f"bisect: {names}: read back {folder}")
            run = load_run(folder, spec)
            comparison = analyze(run)
        else:
            blocks = self._blocks(attempt)
            self.progress(
                f"bisect: measuring {names}"
                + (
                    f" ({blocks} blocks)"
                    if blocks is not None
                    else f" (until MDE {100 * target:.2f}%)"
                    if target is not None
                    else ""
                )
            )
            finished = run_scenario(
                spec,
                path,
                self.base_dir,
                runs,
                LocalExecutor(self.models_cache),
                self.progress,
                run_id=None if folder.exists() else run_id,
                resume=folder if folder.exists() else None,
            )
            if finished.exit_code == int(ExitCode.INTERRUPTED):
                raise KeyboardInterrupt
            comparison = finished.analysis
        assert isinstance(comparison, Comparison)
        step = Step(run_id, str(folder), arms, target, comparison.design)
        return step, comparison

    def _interval(self, comparison: Comparison, index: int) -> Interval:
        name = _name(index, self.candidates[index])
        cand = next((c for c in comparison.candidates if c.name == name), None)
        if cand is None or cand.status != "ok":
            return Interval(float("nan"), float("nan"), float("nan"))
        row = next((r for r in cand.rows if r.key == self.metric), None)
        if row is None:
            raise SpecbenchError(
                f"--metric {self.metric}: no such metric in the comparison "
                f"(has: {', '.join(r.key for r in cand.rows)})"
            )
        est = row.estimate
        scale = 1.0 if est.kind == "relative" else 0.01  # points -> fractions of 1
        if est.known_exactly:
            return Interval(est.delta * scale, est.delta * scale, est.delta * scale)
        if est.ci_low is None or est.ci_high is None:
            return Interval(est.delta * scale, float("nan"), float("nan"))
        return Interval(est.delta * scale, est.ci_low * scale, est.ci_high * scale)

    def observe(
        self, arms: list[int], target: float | None, attempt: int
    ) -> tuple[Step, dict[int, Interval]]:
        """Measure arms[1:] against arms[0] (good): the seam a simulation replaces."""
        step, comparison = self._run(arms, target, attempt)
        return step, {i: self._interval(comparison, i) for i in arms[1:]}

    # -- the search ------------------------------------------------------------------------------

    def _measure(
        self,
        arms: list[int],
        decide: Callable[[int, Interval], Verdict],
        boundary: float,
        progress: Callable[[dict[int, Measured]], bool],
    ) -> dict[int, Measured]:
        """Measure good against `arms` (indices), again with a tighter target while the run
        made no `progress`, up to `tries` runs."""
        target = precision_target(boundary)
        found: dict[int, Measured] = {}
        for attempt in range(1, self.tries + 1):
            step, intervals = self.observe([0, *arms], target, attempt)
            for index in arms:
                interval = intervals[index]
                found[index] = Measured(
                    index, decide(index, interval), interval.delta, interval.low, interval.high
                )
            step.measured = [found[i] for i in arms]
            self.steps.append(step)
            self._say(step)
            if progress(found):
                break
            # Tighten to what the easiest of them needs to decide (at least halving).
            target = max(precision_target(boundary, m.interval) for m in found.values())
        return found

    def _say(self, step: Step) -> None:
        n = len(self.candidates) - 1
        for m in step.measured:
            c = self.candidates[m.index]
            if self._checking:
                said = "measured (checking a part beside a culprit)"
            elif m.index == n and self._ranging:
                said = {
                    "SAME": "within half the threshold of good",
                    "DIFFERENT": "beyond half the threshold",
                }.get(m.verdict, m.verdict)
            else:
                said = (
                    f"{m.verdict} ({SIDE_WORDS[m.verdict]})"
                    if m.verdict != "UNKNOWN"
                    else m.verdict
                )
            self.progress(
                f"bisect: {c.ref[:12]} ({c.subject[:50]}) against good: {delta_of(m)} -> {said}"
            )

    def _between(self, a: int, b: int, pending: dict[int, Interval] | None = None) -> Interval:
        """b's level minus a's (0 is good), from every run so far (and `pending`, one run's
        deltas against good not yet recorded), the runs' shared references accounted for
        (Levels)."""
        if a == b:
            return Interval(0.0, 0.0, 0.0)
        runs = [(s.arms[0], {m.index: m.interval for m in s.measured}) for s in self.steps]
        if pending:
            runs.append((0, pending))
        return Levels(runs).between(a, b)

    def _estimate(self, index: int, extra: Interval | None = None) -> Interval:
        """Every measurement of `index` against good so far (and `extra`), pooled."""
        return self._between(0, index, None if extra is None else {index: extra})

    def run(self) -> Outcome:
        n = len(self.candidates) - 1
        inner = first_points(n, self.points)
        z = look_z(self.tries)

        def ends_verdict(index: int, interval: Interval) -> Verdict:
            # Every look so far, pooled, at the error rate spent across the looks.
            if index != n:
                return "UNKNOWN"
            return range_verdict(look_interval(self._estimate(n, interval), z), self.threshold)

        self._ranging = True
        found = self._measure(
            [*inner, n], ends_verdict, self.threshold / 2, lambda got: got[n].verdict != "UNKNOWN"
        )
        self._ranging = False
        both = self._estimate(n)
        ends = Measured(n, found[n].verdict, both.delta, both.low, both.high)
        search = Search(0, n)
        if ends.verdict != "DIFFERENT":
            verdict = "NO CHANGE" if ends.verdict == "SAME" else "UNKNOWN"
            return self._outcome(verdict, None, search, ends, z)
        step = ends.delta
        for index in inner:  # judged once the step good..bad is known
            m = found[index]
            m.verdict = midpoint_verdict(m.interval, step)
            search.record(index, m.verdict)
        culprits: list[int] | None = None
        while search.consistent and not search.done:
            split = self._split_at(0, n, search)
            if split is not None:  # a level between good's and bad's: a step on each side
                culprits = self._search_part(0, split) + self._search_part(split, n)
                break
            # Every measurement of a candidate that has the change estimates the step.
            step = (
                pooled_step(
                    [m.interval for s in self.steps for m in s.measured if m.index >= search.hi]
                )
                or step
            )
            points = spread_points(search.lo, search.hi, self.points)

            def decide(index: int, interval: Interval, step: float = step) -> Verdict:
                # Every look at this candidate so far, pooled: a retry adds to the earlier
                # runs instead of replacing them.
                return midpoint_verdict(self._estimate(index, interval), step)

            got = self._measure(points, decide, abs(step) / 2, _decided_any)
            if not _decided_any(got) and self._split_at(0, n, search) is None:
                return self._outcome("UNKNOWN", None, search, ends, z)
            for m in got.values():
                search.record(m.index, m.verdict)
        if culprits is None:
            if not search.consistent:
                return self._outcome("UNKNOWN", None, search, ends, z)
            culprits = [search.hi]
        if not culprits:
            return self._outcome("UNKNOWN", None, search, ends, z)
        own = {c: self._between(c - 1, c) for c in culprits}
        culprit = max(culprits, key=lambda c: abs(own[c].delta))  # the largest step first
        changes = [
            Change(
                c - 1,
                c,
                "STEP",
                own[c].delta,
                own[c].low,
                own[c].high,
                c,
                [own[c].delta, own[c].low, own[c].high],
            )
            for c in culprits
            if c != culprit
        ]
        changes += self._beside(sorted(culprits), n)
        mine = own[culprit]
        return self._outcome(
            "CULPRIT",
            culprit,
            Search(culprit - 1, culprit),
            ends,
            z,
            changes,
            Measured(culprit, "DIFFERENT", mine.delta, mine.low, mine.high),
        )

    # -- further steps beside a culprit ----------------------------------------------------------

    def _runs_left(self) -> int:
        return self.max_runs - len(self.steps)

    def _split_at(self, a: int, b: int, search: Search) -> int | None:
        """A candidate measured inside the search whose level lies strictly between a's and
        b's (it differs from both, towards the change, at SPLIT_ALPHA spent across the
        looks): a.. it and it..b each hold a step."""
        total = self._between(a, b).delta
        if not math.isfinite(total) or total == 0:
            return None
        z = look_z(self.tries, SPLIT_ALPHA)
        inside = sorted(
            {m.index for s in self.steps for m in s.measured if search.lo < m.index < search.hi}
        )
        for i in inside:
            ends = (self._between(a, i), self._between(i, b))
            drawn = [look_interval(iv, z) for iv in ends]
            if all(iv.finite and (iv.low > 0 if total > 0 else iv.high < 0) for iv in drawn):
                return i
        return None

    def _beside(self, culprits: list[int], n: int) -> list[Change]:
        """The parts between good, the culprits and bad, each checked for a further step
        and, where there is one, bisected; recursively, while the budget of runs lasts."""
        changes: list[Change] = []
        bounds = [0, *culprits]
        parts = [(lo, hi - 1) for lo, hi in zip(bounds, [*culprits, n + 1], strict=True)]
        while parts:
            checked = self._check_parts([p for p in parts if p[1] > p[0]])
            parts = []
            for change in checked:
                a, b = change.lo, change.hi
                if change.verdict != "STEP":
                    changes.append(change)
                    continue
                found = [b] if b - a == 1 else self._search_part(a, b)
                if not found:
                    changes.append(change)
                    continue
                for c in found:
                    own = self._between(c - 1, c)
                    changes.append(
                        Change(
                            a,
                            b,
                            "STEP",
                            change.delta,
                            change.low,
                            change.high,
                            c,
                            [own.delta, own.low, own.high],
                        )
                    )
                inner = [a, *found]
                parts += [(lo, hi - 1) for lo, hi in zip(inner, [*found, b + 1], strict=True)]
        return changes

    def _check_parts(self, parts: list[tuple[int, int]]) -> list[Change]:
        """Is there a step among commits a+1..b, for each part (a, b)? Its change (b against
        a, from every measurement against good), judged at SIDE_ALPHA spent across its
        looks; the ends of every part still UNKNOWN measured again together, beside good in
        one run, while runs are left."""
        # Each round of checks is another look: the error rate is spent across as many looks
        # as the check may take (the first, on what was measured anyway, and one per run).
        looks = max(self.tries, self.check_runs + 1)
        z = look_z(looks, SIDE_ALPHA)
        verdicts: dict[tuple[int, int], str] = {}
        for look in range(1, looks + 1):
            for a, b in parts:
                change = self._between(a, b)
                verdicts[a, b] = side_verdict(look_interval(change, z), self.threshold)
            open_parts = [p for p in parts if verdicts[p] == "UNKNOWN"]
            if not open_parts or look == looks:
                break
            if self._runs_left() <= 0 or look > self.check_runs:
                # Not checked: the budget of runs is spent, or checking was not asked for.
                unchecked = "UNCHECKED" if self._runs_left() <= 0 else "NOT ASKED"
                for p in open_parts:
                    verdicts[p] = unchecked if look == 1 else "UNKNOWN"
                break
            arms = sorted({i for p in open_parts for i in p} - {0})
            target = min(
                precision_target(self.threshold / 2, self._between(a, b)) for a, b in open_parts
            )
            step, intervals = self.observe([0, *arms], target, look)
            step.measured = [
                Measured(i, "UNKNOWN", iv.delta, iv.low, iv.high) for i, iv in intervals.items()
            ]
            self.steps.append(step)
            self._checking = True
            self._say(step)
            self._checking = False
        out = []
        for a, b in parts:
            change = self._between(a, b)
            self.progress(
                f"bisect: {self._ref(a)}..{self._ref(b)}: {delta_iv(change)} -> {verdicts[a, b]}"
            )
            out.append(Change(a, b, verdicts[a, b], change.delta, change.low, change.high))
        return out

    def _search_part(self, a: int, b: int) -> list[int]:
        """The culprits of a+1..b, a part known to hold a change: the first commit on b's
        side of half their change (each candidate against a, from the measurements against
        good), or, where a candidate lies between a's level and b's, those of each side;
        none when the budget ends first or the part is not one change."""
        search = Search(a, b)
        while search.consistent and not search.done:
            split = self._split_at(a, b, search)
            if split is not None:
                return self._search_part(a, split) + self._search_part(split, b)
            if self._runs_left() <= 0:
                return []
            step = self._between(a, b).delta
            points = spread_points(search.lo, search.hi, self.points)
            target = precision_target(abs(step) / 2)
            verdicts: dict[int, Verdict] = {}
            for attempt in range(1, self.tries + 1):
                if self._runs_left() <= 0:
                    break
                run, intervals = self.observe([0, *points], target, attempt)
                step = self._between(a, b).delta
                run.measured = []
                for i in points:
                    iv = intervals[i]
                    rel = self._between(a, i, intervals)
                    verdicts[i] = midpoint_verdict(rel, step)
                    run.measured.append(Measured(i, verdicts[i], iv.delta, iv.low, iv.high))
                self.steps.append(run)
                self._say(run)
                if (
                    any(v != "UNKNOWN" for v in verdicts.values())
                    or self._split_at(a, b, search) is not None
                ):
                    break
                target = max(precision_target(abs(step) / 2, self._between(a, i)) for i in points)
            if self._split_at(a, b, search) is not None:
                continue
            if not any(v != "UNKNOWN" for v in verdicts.values()):
                return []
            for i, v in verdicts.items():
                search.record(i, v)
        return [search.hi] if search.consistent else []

    def _ref(self, index: int) -> str:
        return GOOD if index == 0 else self.candidates[index].ref[:12]

    def _outcome(
        self,
        verdict: str,
        culprit: int | None,
        search: Search,
        ends: Measured,
        z: float,
        changes: list[Change] | None = None,
        own: Measured | None = None,
    ) -> Outcome:
        out = Outcome(
            self.candidates,
            self.metric,
            self.threshold,
            self.steps,
            verdict,
            culprit,
            search.lo,
            search.hi,
            ends,
            self.folder,
            changes or [],
            own,
            z,
        )
        write_json_atomic(self.folder / "bisect.json", outcome_dict(out))
        write_text_atomic(self.folder / "bisect.md", render_outcome(out))
        return out


def _decided_any(found: dict[int, Measured]) -> bool:
    """A run made progress: at least one of its candidates is DIFFERENT or SAME."""
    return any(m.verdict != "UNKNOWN" for m in found.values())


def outcome_dict(out: Outcome) -> dict[str, Any]:
    return {
        "bisect_version": BISECT_VERSION,
        "verdict": out.verdict,
        "metric": out.metric,
        "threshold": out.threshold,
        "culprit": out.culprit,
        "lo": out.lo,
        "hi": out.hi,
        "candidates": [
            {**asdict(c), "diff": None if c.diff is None else str(c.diff)} for c in out.candidates
        ],
        "good_vs_bad": None if out.step is None else asdict(out.step),
        "good_vs_bad_z": out.looks_z,
        "culprit_step": None if out.culprit_step is None else asdict(out.culprit_step),
        "changes": [asdict(ch) for ch in out.changes],
        "steps": [asdict(s) for s in out.steps],
    }


# --- candidates ---------------------------------------------------------------------------------


def commit_candidates(
    repo: Path,
    good: str,
    bad: str,
    base: str | None,
    cache: Path,
    vllm_root: Path,
    scenario: Scenario,
    build_command: str | None,
) -> list[Candidate]:
    """good..bad as candidates, each commit's change against the release classified: an
    overlay where it can be one; a build (with `build_command`) where not; refused (one
    line, before any engine starts) when neither."""
    from harness.plan.classify import classify, engine_graph_mode, engine_is_compiled
    from harness.plan.diffs import installed_version, read_diff

    shas = commit_range(repo, good, bad)
    if len(shas) < 2:
        raise ScenarioError(f"--good {good} --bad {bad}: an empty range")
    version = installed_version(vllm_root) or ""
    cands = commit_diffs(repo, release_base(repo, version, base), shas, cache)
    compiled = engine_is_compiled(scenario)
    for i, cand in enumerate(cands):
        if cand.diff is None:
            continue
        change = read_diff(cand.diff, vllm_root)
        classified = classify(
            change, vllm_root, compiled, scenario.device, graphs=engine_graph_mode(scenario)
        )
        if classified.overlayable:
            cands[i] = Candidate(cand.ref, cand.sha, cand.subject, cand.diff, None, True)
        elif build_command is None:
            reasons = "; ".join(f.line() for f in classified.blockers[:2])
            raise ScenarioError(
                f"commit {cand.sha[:12]} ({cand.subject[:60]}): its change "
                f"cannot be overlaid ({reasons}); give --build COMMAND to "
                "build it (launch-per-arm)"
            )
    return cands


def run_bisect(
    scenario_path: Path,
    results_root: Path,
    progress: Progress,
    *,
    repo: Path | None = None,
    good: str | None = None,
    bad: str | None = None,
    base: str | None = None,
    pythons: list[str] | None = None,
    build_command: str | None = None,
    metric: str = "output_throughput",
    threshold: float | None = None,
    budget_s: float = 80.0,
    tries: int = 3,
    blocks: int | None = None,
    models_cache: Path | None = None,
    check_beside: int = 3,
) -> Outcome:
    """Bisect `scenario_path`'s baseline over good..bad of `repo` (or over `pythons`, good the
    first and bad the last), in `results_root/bisect-<good>-<bad>/`; the same command again
    resumes it."""
    import sys

    from harness.plan.vllm_source import vllm_location

    scenario = load_scenario(scenario_path)
    _template(scenario)
    if threshold is None:
        threshold = scenario.gates.metrics.get(metric, 0.02)
    if pythons:
        if repo is not None or build_command is not None:
            raise SpecbenchError(
                "--python lists the candidates; --repo and --build bisect commits: choose one"
            )
        if len(pythons) < 2:
            raise SpecbenchError("--python: give at least two interpreters (good first, bad last)")
        cands = [
            Candidate(p, hashlib.sha256(p.encode()).hexdigest(), p, None, p, False) for p in pythons
        ]
        key = hashlib.sha256("\0".join(pythons).encode()).hexdigest()[:12]
    else:
        if repo is None or good is None or bad is None:
            raise SpecbenchError("bisect needs --repo, --good and --bad (or --python ...)")
        folder_cache = results_root / "bisect-cache"
        root = vllm_location(None)
        cands = commit_candidates(
            repo, good, bad, base, folder_cache / "diffs", root, scenario, build_command
        )
        key = f"{cands[0].sha[:8]}-{cands[-1].sha[:8]}"
    folder = results_root / f"bisect-{key}"
    folder.mkdir(parents=True, exist_ok=True)

    def build(c: Candidate) -> str:
        assert repo is not None and build_command is not None
        progress(f"bisect: building {c.sha[:12]} ({build_command})")
        return build_commit(
            repo, c.sha, build_command, results_root / "bisect-cache", sys.executable
        )

    bisector = Bisector(
        scenario,
        scenario_path,
        cands,
        folder,
        metric,
        threshold,
        budget_s,
        tries,
        progress,
        models_cache,
        build if build_command else None,
        blocks=blocks,
        check_runs=check_beside,
    )
    return bisector.run()
