"""What a mistake and an ending cost: how fast bad input is refused, how fast Ctrl-C ends a run
on an idle and on a loaded machine, and how many engine processes each kind of kill leaves.

    .venv/bin/python benchmarks/ending_a_run.py [--skip-engines] [--repeats N]

1. refusals: every bad-input case of testkit/bad_inputs.py through the CLI; median and
   slowest wall seconds (each a fresh `python -m harness.cli`, so Python start-up included).
2. SIGINT: a run whose second launch hangs (the fault-test worker), SIGINT once it runs, seconds
   to exit; idle, then with 4 busy processes on the 2 cores (a machine running other engines).
3. SIGKILL of `specbench run` once a real vLLM engine core runs: processes in the launch's
   session just before the kill, and seconds until none is left (offline demo; TP 2 serve).
Run it on an idle machine, never beside another benchmark.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.bad_inputs import CASES, FILES  # noqa: E402
from testkit.processes import processes_in, sessions_of  # noqa: E402
from testkit.scenarios import MINIMAL, fault_scenario  # noqa: E402


def refusals(repeats: int) -> None:
    times: list[tuple[float, str]] = []
    for name, mutate, code, _fragment, command in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            data = copy.deepcopy(MINIMAL)
            mutate(data, Path(tmp))
            path = Path(tmp) / "s.yaml"
            path.write_text(yaml.safe_dump(data))
            walls = []
            for _ in range(repeats):
                t = time.perf_counter()
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "harness.cli",
                        command,
                        str(path),
                        *(["--results-dir", f"{tmp}/r"] if command == "run" else []),
                    ],
                    capture_output=True,
                    cwd=ROOT,
                    check=False,
                )
                walls.append(time.perf_counter() - t)
                assert proc.returncode == code, (name, proc.stderr)
            times.append((statistics.median(walls), name))
    for name, content, kind, _fragment in FILES:
        with tempfile.TemporaryDirectory() as tmp:
            data = copy.deepcopy(MINIMAL)
            suffix = ".jsonl" if kind == "jsonl" else ".json"
            (Path(tmp) / f"p{suffix}").write_bytes(content)
            data["workload"] = {
                "kind": kind,
                "path": f"p{suffix}",
                "num_prompts": 1,
                "max_tokens": 8,
            }
            path = Path(tmp) / "s.yaml"
            path.write_text(yaml.safe_dump(data))
            walls = []
            for _ in range(repeats):
                t = time.perf_counter()
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "harness.cli",
                        "run",
                        str(path),
                        "--results-dir",
                        f"{tmp}/r",
                    ],
                    capture_output=True,
                    cwd=ROOT,
                    check=False,
                )
                walls.append(time.perf_counter() - t)
                assert proc.returncode == 2, (name, proc.stderr)
            times.append((statistics.median(walls), f"file:{name}"))
    walls = sorted(t for t, _ in times)
    print(
        f"refusals: {len(times)} cases, median {statistics.median(walls):.2f} s, "
        f"slowest {walls[-1]:.2f} s ({max(times)[1]})"
    )


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def sigint(repeats: int, load: int) -> list[float]:
    walls = []
    busy = [multiprocessing.Process(target=_busy, args=(600,)) for _ in range(load)]
    for p in busy:
        p.start()
    try:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                scenario = fault_scenario(Path(tmp), {"good": "ok", "stuck": "hang"}, timeout_s=300)
                env = {
                    **os.environ,
                    "SPECBENCH_WORKER_MODULE": "tests.fakes.worker",
                    "FAKE_PID_DIR": tmp,
                }
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "harness.cli",
                        "run",
                        str(scenario),
                        "--results-dir",
                        f"{tmp}/results",
                        "--run-id",
                        "r",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd=ROOT,
                    env=env,
                )
                while not (Path(tmp) / "stuck.r0.pids").exists():
                    time.sleep(0.05)
                t = time.perf_counter()
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=600)
                walls.append(time.perf_counter() - t)
    finally:
        for p in busy:
            p.terminate()
    return walls


def sigkill(scenario: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                str(scenario),
                "--results-dir",
                str(results),
                "--run-id",
                "killed",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        sessions: set[int] = set()
        try:
            while not any("EngineCor" in p for p in processes_in(sessions)):
                assert proc.poll() is None, "specbench ended before the engine started"
                time.sleep(0.5)
                sessions |= sessions_of(results)
            time.sleep(2)  # let every rank (and the server) come up
            before = processes_in(sessions)
            proc.kill()
            t = time.perf_counter()
            while processes_in(sessions) and time.perf_counter() - t < 60:
                time.sleep(0.1)
            gone = time.perf_counter() - t
            after = processes_in(sessions)
        finally:
            if proc.poll() is None:
                proc.kill()
    names = ", ".join(sorted({p.split(" ", 1)[1] for p in before}))
    print(
        f"SIGKILL {scenario.name}: {len(before)} processes before ({names}); "
        f"{len(after)} after, all gone in {gone:.1f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-engines", action="store_true")
    args = parser.parse_args()
    refusals(args.repeats)
    for load in (0, 4):
        walls = sigint(args.repeats, load)
        print(
            f"SIGINT to exit, {load} busy processes: median {statistics.median(walls):.1f} s, "
            f"max {max(walls):.1f} s over {len(walls)}"
        )
    if not args.skip_engines:
        sigkill(ROOT / "scenarios" / "cpu-medusa-proposer.yaml")
        sigkill(ROOT / "scenarios" / "cpu-eagle-tp2-argmax-serve.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
