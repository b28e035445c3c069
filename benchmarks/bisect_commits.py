"""How long does `specbench bisect` take to find a 5% slowdown over 8 commits on this CPU? A
checkout of a few of the installed vLLM's own files (testkit/bisect_repo.py: the
release tag and 7 commits, each changing one function on the Medusa path), a busy wait planted
in MedusaProposer.propose at --slow-commit (--slow-fraction of each engine step, so that the
cost stays a share of the pass however fast the machine is that day), bisected with the
shipped scenario and its 5% threshold: precision runs, every commit overlaid in one engine
beside good's.

    .venv/bin/python benchmarks/bisect_commits.py [--slow-commit 5] [--slow-fraction 0.05]
        [--budget 80] [--keep DIR]

Prints the bisect's answer, its comparisons, the runs it took and the wall time. A benchmark to
run on an idle machine, alone (about 10-15 minutes).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.bisect_repo import make_repo  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow-commit", type=int, default=5)
    parser.add_argument("--slow-fraction", type=float, default=0.05)
    parser.add_argument("--budget", type=float, default=80.0, help="seconds per arm")
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep it")
    args = parser.parse_args()
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None, "needs the installed vLLM"
    work = args.keep or Path(tempfile.mkdtemp(prefix="specbench-bisect-"))
    shas = make_repo(
        work / "repo", Path(spec.origin).parent, args.slow_commit, slow_fraction=args.slow_fraction
    )
    print(
        f"checkout: {len(shas)} commits, each propose call busy-waiting "
        f"{100 * args.slow_fraction:g}% of an engine step from commit {args.slow_commit} "
        f"({shas[args.slow_commit][:12]})",
        flush=True,
    )
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "bisect",
            str(ROOT / "scenarios" / "cpu-medusa-bisect.yaml"),
            "--repo",
            str(work / "repo"),
            "--good",
            "v0.32.0",
            "--bad",
            "main",
            "--budget",
            str(args.budget),
            "--results-dir",
            str(work / "results"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    wall = time.perf_counter() - start
    print(proc.stdout, end="")
    runs = [ln for ln in proc.stderr.splitlines() if "bisect: measuring" in ln]
    print(f"exit {proc.returncode}; {len(runs)} engine run(s); wall {wall / 60:.1f} min")
    found = proc.stdout.startswith(f"culprit: {shas[args.slow_commit]}")
    print("found the planted commit" if found else "DID NOT find the planted commit")
    if proc.returncode not in (0, 8):
        print(proc.stderr[-3000:], file=sys.stderr)
    return 0 if found else 1


if __name__ == "__main__":
    raise SystemExit(main())
