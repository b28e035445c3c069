"""Serve mode under a low open-file limit: the worker raises its soft limit toward the hard one
(the vLLM server it starts inherits it), a hard limit below the concurrency is refused before
any server starts in one line naming `ulimit -n`, and a stream error never reads as nothing
after its colon."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.config.scenario import parse_scenario
from harness.errors import HardwareError
from harness.plan.plan import expand_plan
from harness.wire.spec import RunSpec
from tests.conftest import ROOT

# A worker under a soft limit of 256 raises it for itself and for a child it then starts.
RAISED_FOR_CHILD = (
    "import resource, subprocess\n"
    "from harness.engine.serve_worker import raise_open_files\n"
    "assert raise_open_files(300) is None\n"
    "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    "print(subprocess.run(['sh', '-c', 'ulimit -Sn'], capture_output=True, text=True,\n"
    "                     check=True).stdout.strip())\n"
)


def _serve_run(scenario_data: dict[str, Any], concurrency: int) -> RunSpec:
    scenario_data["mode"] = "serve"
    scenario_data["serve"] = {"concurrency": concurrency}
    return expand_plan(parse_scenario(scenario_data)).runs[0]


def _low_soft_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def test_the_worker_raises_the_soft_open_file_limit_for_itself_and_its_server() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 812:
        pytest.skip(f"this machine's hard open-file limit ({hard}) is below 300 + headroom")
    out = subprocess.run(
        [sys.executable, "-c", RAISED_FOR_CHILD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
        preexec_fn=_low_soft_limit,
    ).stdout.split()
    expected = 65535 if hard == resource.RLIM_INFINITY else min(hard, 65535)
    assert [int(v) for v in out] == [expected, expected]


def _hard_limit(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _kind: (soft, hard))


def test_a_hard_limit_below_the_concurrency_is_refused_before_any_server(
    scenario_data: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness.engine import serve_worker
    from harness.plan.preflight import check_open_files

    run = _serve_run(scenario_data, 300)
    _hard_limit(monkeypatch, 256, 300)
    with pytest.raises(HardwareError, match=r"^serve\.concurrency: 300 .*ulimit -n 812") as err:
        check_open_files(run)
    assert "\n" not in str(err.value)
    monkeypatch.setattr(subprocess, "Popen", pytest.fail)  # serve_worker's: no server starts
    result = serve_worker.run_serve_worker(run, tmp_path, None, tmp_path, tmp_path / "s.log")
    assert result.status == "failed" and result.server is None
    assert result.error is not None and "ulimit -n 812" in result.error
    _hard_limit(monkeypatch, 256, 20000)
    check_open_files(run)  # the worker raises the soft limit itself: nothing to refuse


def test_an_empty_server_error_in_a_stream_still_says_what_came_back() -> None:
    from harness.engine.loadgen import StreamedRequest, _apply_event

    event = {"error": {"message": "", "type": "InternalServerError", "code": 500}}
    with pytest.raises(ValueError, match="server error in stream: ") as err:
        _apply_event(StreamedRequest(index=0), event, 0.0)
    reason = str(err.value).split("server error in stream: ", 1)[1]
    assert "InternalServerError" in reason and "500" in reason
    with pytest.raises(ValueError, match="server error in stream: boom$"):
        _apply_event(StreamedRequest(index=0), {"error": {"message": "boom"}}, 0.0)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), "TimeoutError()"),
        (OSError(), "OSError()"),
        (ConnectionResetError("peer went away"), "ConnectionResetError: peer went away"),
    ],
)
def test_a_failed_request_never_records_an_empty_reason(exc: Exception, expected: str) -> None:
    from harness.engine.loadgen import stream_completion

    class Session:
        def post(self, *_args: Any, **_kwargs: Any) -> Any:
            raise exc

    session: Any = Session()
    result = asyncio.run(stream_completion(session, "http://x", {}, 0, 0.0))
    assert result.error == expected
