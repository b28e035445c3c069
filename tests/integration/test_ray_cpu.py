"""The Ray executor on a local two-node Ray cluster on this CPU (ray.cluster_utils.Cluster):
the Medusa scenario end to end on real vLLM with the same table and the same greedy outputs as
the local executor; arms pinned to one node; a node lost mid-launch; Ctrl-C cancelling every
task with no worker left behind. Fault cases use the fake worker through the same seam as the
local fault tests (SPECBENCH_WORKER_MODULE, forwarded to the tasks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis.compare import compare_run
from harness.execute.local import WORKER_MODULE_ENV
from harness.present.tables import table_rows
from harness.results.run import load_run
from testkit.processes import alive, start_specbench
from testkit.scenarios import fake_model
from tests.conftest import ROOT, SCENARIOS

# The slow tier (pytest -m slow): long real-engine runs of one feature's own path.
pytestmark = [pytest.mark.integration, pytest.mark.slow]
ray = pytest.importorskip("ray", reason="the Ray extra: pip install -e '.[ray]'")


def _cluster() -> Any:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    return cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    c = _cluster()
    yield c
    c.shutdown()


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _medusa(tmp: Path) -> Path:
    data = yaml.safe_load((SCENARIOS / "cpu-medusa-proposer.yaml").read_text())
    data.update(name="ray-medusa", repeats=4, warmup=4, precision=None)
    data["workload"].update(num_prompts=8, max_tokens=16)
    path = tmp / "medusa.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _fakes(tmp: Path, modes: dict[str, str], rounds: int = 1, timeout_s: float = 60) -> Path:
    data: dict[str, Any] = {
        "name": "ray-faults",
        "model": str(fake_model(tmp)),
        "batch_size": 2,
        "workload": {"num_prompts": 4, "input_len": 4, "max_tokens": 4},
        "warmup": 0,
        "repeats": 2,
        "rounds": rounds,
        "timeout_s": timeout_s,
        "variants": {
            name: {"baseline": i == 0, "env": {"FAKE_MODE": mode, "FAKE_PID_DIR": str(tmp)}}
            for i, (name, mode) in enumerate(modes.items())
        },
    }
    path = tmp / "fakes.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


FAKE_ENV = {WORKER_MODULE_ENV: "tests.fakes.worker"}


def _pids(tmp: Path) -> list[int]:
    return [int(p) for f in tmp.glob("*.pids") for p in f.read_text().split()]


def _wait_for(tmp: Path, files: int, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while len(list(tmp.glob("*.pids"))) < files:
        if time.time() > deadline:
            pytest.fail(f"{files} fake workers never started")
        time.sleep(0.3)


def test_medusa_through_ray_matches_the_local_executor(cluster: Any, tmp_path: Path) -> None:
    scenario = _medusa(tmp_path)
    local = _cli("run", str(scenario), "--results-dir", str(tmp_path / "local"), "--run-id", "l")
    assert local.returncode == 0, local.stderr
    remote = _cli(
        "run",
        str(scenario),
        "--results-dir",
        str(tmp_path / "ray"),
        "--run-id",
        "r",
        "--executor",
        "ray",
        "--address",
        cluster.address,
    )
    assert remote.returncode == 0, remote.stderr
    assert "Ray: 2 node(s)" in remote.stderr
    a, b = load_run(tmp_path / "local" / "l"), load_run(tmp_path / "ray" / "r")
    # The same table: header, rows and their order; only the measured numbers differ.
    head_a, rows_a = table_rows(compare_run(a))
    head_b, rows_b = table_rows(compare_run(b))
    assert head_a == head_b and [r[0] for r in rows_a] == [r[0] for r in rows_b]
    assert "Output parity vs baseline" in [r[0] for r in rows_b]
    (record,) = b.runs
    assert record.status == "ok" and record.node is not None
    assert record.node["fingerprint"]["vllm"] == "0.32.0" and record.node["node_id"]
    # The same worker ran: greedy outputs token for token, proof of the swap in both arms.
    (local_record,) = a.runs
    assert record.result is not None and local_record.result is not None
    outputs = [[r.output_token_ids for r in p.requests] for p in record.result.passes]
    assert outputs == [[r.output_token_ids for r in p.requests] for p in local_record.result.passes]
    assert not compare_run(b).unproven
    assert (tmp_path / "ray" / "r" / "logs" / f"{record.run_key}.log").stat().st_size > 1000


def test_pinned_arms_share_a_node(cluster: Any, tmp_path: Path) -> None:
    scenario = _fakes(tmp_path, {"a": "ok", "b": "ok"}, rounds=2)
    result = _cli(
        "run",
        str(scenario),
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "p",
        "--executor",
        "ray",
        "--address",
        cluster.address,
        "--pin",
        "node",
        env=FAKE_ENV,
    )
    assert result.returncode == 0, result.stderr
    runs = load_run(tmp_path / "results" / "p").runs
    assert len(runs) == 4 and all(r.status == "ok" for r in runs)
    assert len({r.node["node_id"] for r in runs if r.node}) == 1


def test_unlike_nodes_are_refused_unless_forced(cluster: Any, tmp_path: Path) -> None:
    scenario = _fakes(tmp_path, {"a": "ok", "b": "ok"})
    result = _cli(
        "run",
        str(scenario),
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "u",
        "--executor",
        "ray",
        "--address",
        cluster.address,
        env=FAKE_ENV,
    )
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "u"
    for file in (run / "runs").glob("*.json"):  # as if arm b had run on another CPU model
        data = json.loads(file.read_text())
        if data["variant"] == "b":
            data["node"]["fingerprint"]["cpu_model"] = "another CPU"
            file.write_text(json.dumps(data))
    refused = _cli("report", str(run))
    assert refused.returncode == 5, refused.stderr
    assert "a vs b: launches ran on unlike nodes: cpu_model (" in refused.stderr
    forced = _cli("report", str(run), "--force")
    assert forced.returncode == 0 and "compared anyway: a vs b" in forced.stdout


def _hanging_run(
    tmp: Path,
    address: str,
    run_id: str,
    timeout_s: float = 60,
) -> subprocess.Popen[str]:
    """`specbench run` through Ray of two fake launches that hang, one per node."""
    scenario = _fakes(tmp, {"a": "hang", "b": "hang"}, timeout_s=timeout_s)
    return start_specbench(
        "run",
        str(scenario),
        "--results-dir",
        str(tmp / "results"),
        "--run-id",
        run_id,
        "--executor",
        "ray",
        "--address",
        address,
        env={**os.environ, **FAKE_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _none_left(tmp: Path) -> None:
    """Every fake worker and child of the run is gone (within 30 s)."""
    deadline = time.time() + 30
    while any(alive(p) for p in _pids(tmp)) and time.time() < deadline:
        time.sleep(0.5)
    assert not [p for p in _pids(tmp) if alive(p)]


def test_ctrl_c_cancels_every_task(cluster: Any, tmp_path: Path) -> None:
    proc = _hanging_run(tmp_path, cluster.address, "c")
    try:
        _wait_for(tmp_path, 2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted: 2 launch(es) in flight stopped" in err
    runs = load_run(tmp_path / "results" / "c").runs
    assert sorted(r.status for r in runs) == ["interrupted", "interrupted"]
    _none_left(tmp_path)


def test_a_lost_node_is_a_failed_launch(tmp_path: Path) -> None:
    own = _cluster()  # this test takes a node away
    try:
        proc = _hanging_run(tmp_path, own.address, "n", timeout_s=20)
        try:
            _wait_for(tmp_path, 2)
            worker = next(n for n in own.list_all_nodes() if n is not own.head_node)
            own.remove_node(worker, allow_graceful=False)
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1, err
        runs = load_run(tmp_path / "results" / "n").runs
        by_status = {r.status: r for r in runs}
        # The launch on the lost node fails saying so; the other runs to its own timeout.
        assert set(by_status) == {"failed", "timeout"}, [(r.status, r.error) for r in runs]
        assert "the Ray task failed" in (by_status["failed"].error or "")
        _none_left(tmp_path)
    finally:
        own.shutdown()


def test_refused_before_any_run_folder(cluster: Any, tmp_path: Path) -> None:
    """No cluster at the address, or a launch no node can hold: one line, nothing written."""
    scenario = _fakes(tmp_path, {"a": "ok", "b": "ok"})
    results = tmp_path / "results"
    nobody = _cli(
        "run",
        str(scenario),
        "--results-dir",
        str(results),
        "--executor",
        "ray",
        "--address",
        "127.0.0.1:1",
        env=FAKE_ENV,
        timeout=60,
    )
    assert nobody.returncode == 2, nobody.stderr
    assert nobody.stderr.strip() == (
        "specbench: error: --address 127.0.0.1:1: no Ray cluster answers there (Connection refused)"
    )
    data = yaml.safe_load(scenario.read_text())
    data["tensor_parallel_size"] = 2  # 2 CPUs on one node; each node has 1
    scenario.write_text(yaml.safe_dump(data))
    too_big = _cli(
        "run",
        str(scenario),
        "--results-dir",
        str(results),
        "--executor",
        "ray",
        "--address",
        cluster.address,
        env=FAKE_ENV,
        timeout=120,
    )
    assert too_big.returncode == 3, too_big.stderr
    assert (
        "needs 2 CPU, 0 GPU on one node; the Ray cluster's nodes have 1 CPU, 0 GPU; "
        "1 CPU, 0 GPU" in too_big.stderr
    )
    assert not results.exists() or not any(results.iterdir())
