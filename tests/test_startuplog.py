"""agent.hostside.startuplog on real vLLM log lines (tests/data/startup, sources in SOURCES.md) and on the
simulated Spark's wording: weights, compile cold or warm, capture, KV cache, ready."""

from pathlib import Path

import pytest

from agent.hostside import startuplog

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "startup"


def parsed(name: str):
    return startuplog.parse_text((DATA / name).read_text())


def test_compile_range_cache_hit_is_warm():
    b = parsed("warm-musa.log")
    assert b["compile_cache"] == "warm" and b["cache_load_s"] == pytest.approx(1.803)
    assert b["weights_s"] == pytest.approx(28.927489)  # "Model loading took 29.04 GiB memory and ... seconds"


def test_cumulative_compile_total_takes_the_last_and_hits_add_up():
    b = parsed("warm-eagle.log")
    assert b["compile_cache"] == "warm"
    assert b["compile_s"] == pytest.approx(7.35)
    assert b["cache_load_s"] == pytest.approx(2.123)


def test_aot_load_and_took_form():
    b = parsed("warm-aot.log")
    assert b["compile_cache"] == "warm" and b["compile_s"] == pytest.approx(9.61)


def test_a_compiled_graph_is_cold_even_after_a_lookup():
    b = parsed("cold-v0.log")
    assert b["compile_cache"] == "cold" and b["compile_s"] == pytest.approx(5.96)
    assert b["cache_load_s"] == -1.0


def test_loading_weights_wins_over_model_loading():
    assert parsed("weights-mrv2.log")["weights_s"] == pytest.approx(26.93)


def test_engine_init_capture_kv_and_ready():
    log = [
        "(APIServer pid=1) INFO 11-30 23:59:50 [api_server.py:1] vLLM API server version 0.24.0",
        "(EngineCore_DP0 pid=2) INFO 11-30 23:59:58 [default_loader.py:1] Loading weights took 8.00 seconds",
        "(EngineCore_DP0 pid=2) INFO 12-01 00:00:30 [monitor.py:1] torch.compile takes 20.50 s in total",
        "(EngineCore_DP0 pid=2) INFO 12-01 00:00:45 [gpu_model_runner.py:1] Graph capturing finished in 12 secs, "
        "took 0.52 GiB",
        "(EngineCore_DP0 pid=2) INFO 12-01 00:00:46 [core.py:1] init engine (profile, create kv cache, warmup model) "
        "took 40.00 seconds",
        "(APIServer pid=1) INFO 12-01 00:00:50 [launcher.py:1] Application startup complete.",
    ]
    b = startuplog.parse(log)
    assert (b["weights_s"], b["compile_s"], b["graph_capture_s"], b["engine_init_s"]) == (8.0, 20.5, 12.0, 40.0)
    assert b["kv_cache_s"] == pytest.approx(7.5)  # 40 - 20.5 - 12
    assert b["ready_s"] == 60.0  # across midnight and a month end
    assert b["compile_cache"] == ""  # a total without a hit or a compile line says neither


def test_nothing_known_is_minus_one_and_long_lines_are_cut():
    b = startuplog.parse(["x" * 10_000_000, "Loading weights took 1" + "9" * 100 + " seconds"])
    assert b == startuplog.empty()


H200 = Path(__file__).parent / "data" / "logs" / "vllm-0.24-h200"


def test_vllm_024_engine_init_in_seconds_short_form_and_deepgemm_warmup():
    """Real 0.24.0 on an H200: "took 229.81 s (compilation: 23.43 s)", and a DeepGEMM warmup bar of 02:30 that
    is most of a cold start: it is its own phase, not part of "KV etc."."""
    b = startuplog.parse_file(str(H200 / "h200-fp8-triton.log"))
    assert b["engine_init_s"] == pytest.approx(229.81)
    assert b["kernel_warmup_s"] == 150.0
    assert b["compile_s"] == pytest.approx(23.43) and b["graph_capture_s"] == 6.0
    assert b["kv_cache_s"] == pytest.approx(229.81 - 23.43 - 6.0 - 150.0)


def test_a_warm_kernel_cache_gives_a_zero_warmup_and_a_log_without_the_bar_none():
    assert startuplog.parse_file(str(H200 / "h200-fp8-marlin.log"))["kernel_warmup_s"] == 0.0
    assert startuplog.parse_file(str(H200 / "h200-fp8-cutlass.log"))["kernel_warmup_s"] == -1.0
    hours = "DeepGEMM warmup: 100%|##########| 9/9 [1:02:03<00:00,  1.0it/s]"
    assert startuplog.parse_text(hours)["kernel_warmup_s"] == 3723.0
