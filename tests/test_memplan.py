"""The memory plan (hostside/memplan.py, planning/memory.py): weights from headers or config.json, the KV cache per
token from the config's layers (sliding windows, linear attention, MLA), vLLM's refusals in its order with what to
change, the sweep's refusal (exit 2 when no cell fits) and the record beside the log. Against the real logs of the
repository: bench/bench_memplan.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from agent.errors import UserError
from agent.hostside import memplan
from agent.hostside.contracts import DeviceMemory
from agent.planning import memory
from agent.planning.matrix import plan_cells
from agent.planning.spec import load_spec

pytestmark = pytest.mark.unit

GIB = 2**30
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 512,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 2048,
}
H200 = DeviceMemory(kind="discrete", total_gib=140.4, free_gib=140.4, source="test")
GB10 = DeviceMemory(kind="unified", total_gib=119.7, free_gib=115.2, source="test")


def _plan(model, device=H200, **kw):
    args = {"gpu_memory_utilization": 0.85, "max_model_len": 4096, "max_num_seqs": 32, **kw}
    return memplan.plan(model, device, **args)


def test_headers_give_the_weights_and_config_the_kv_cache(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    tensors = {"model.embed_tokens.weight": np.zeros((512, 128), dtype=np.float16)}
    tensors["model.layers.0.self_attn.q_proj.weight"] = np.zeros((128, 128), dtype=np.float16)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    m = memplan.model_memory(str(tmp_path))
    assert m["source"] == "headers" and m["weight_bytes"] == (512 * 128 + 128 * 128) * 2
    assert m["kv_bytes_per_token"] == 2 * 2 * 32 * 2 * 2  # K and V x 2 KV heads x head 32 x bf16 x 2 layers
    (tmp_path / "model.safetensors").unlink()  # config.json alone (--load-format dummy): estimated from it
    m = memplan.model_memory(str(tmp_path))
    assert m["source"] == "config" and m["weight_bytes"] > (512 * 128 * 2 + 2 * 4 * 128 * 128) * 2


def test_kv_cache_tokens_are_whole_blocks_of_what_is_left():
    m = memplan.from_config({**LLAMA, "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128})
    p = _plan(m)
    assert p["kv_bytes_per_token"] == 98304  # Qwen3-30B-A3B's 96 KiB per token
    left = 0.85 * 140.4 - p["weights_gib"] - memplan.RESERVE_GIB
    assert p["kv_gib"] == round(left, 2) and p["kv_tokens"] % 16 == 0
    assert abs(p["kv_tokens"] - left * GIB / 98304) / p["kv_tokens"] < 1e-4  # weights_gib is rounded
    assert _plan(m, kv_cache_dtype="fp8")["kv_bytes_per_token"] == 98304 // 2
    assert p["fits"] == "yes" and p["fit_seqs"] >= 32


def test_sliding_windows_linear_attention_and_mla_from_the_config():
    gpt_oss = {**LLAMA, "num_hidden_layers": 4, "sliding_window": 128}
    gpt_oss["layer_types"] = ["sliding_attention", "full_attention"] * 2
    m = memplan.from_config(gpt_oss)
    assert (m["attention_layers"], m["sliding_layers"], m["sliding_window"]) == (4, 2, 128)
    per_layer = m["kv_bytes_per_token"] // 4
    assert memplan.request_bytes(m, m["kv_bytes_per_token"], 4096) == per_layer * (2 * 4096 + 2 * (128 + 16))
    qwen_next = {**LLAMA, "num_hidden_layers": 8, "full_attention_interval": 4, "linear_num_value_heads": 4}
    qwen_next |= {"linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16}
    m = memplan.from_config(qwen_next)
    assert (m["attention_layers"], m["linear_layers"]) == (2, 6) and m["state_bytes_per_seq"] > 0
    mla = {**LLAMA, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
    assert memplan.from_config(mla)["kv_bytes_per_token"] == 2 * (512 + 64) * 2
    qwen = {**LLAMA, "sliding_window": 4096, "use_sliding_window": False}  # Qwen's configs name a window, unused
    assert memplan.from_config(qwen)["sliding_layers"] == 0


def test_vllm_refusals_each_with_what_to_change():
    m = memplan.simulated(22.0, 20480)
    free = _plan(m, GB10, gpu_memory_utilization=0.99)  # 118.5 GiB asked, 115.2 free: vLLM's UMA check
    assert free["fits"] == "no" and "free" in free["problem"] and "gpu_memory_utilization <= 0.96" in free["advice"]
    long = _plan(m, GB10, max_model_len=8_000_000)
    assert long["fits"] == "no" and "one request" in long["problem"]
    assert (
        long["advice"][0] == f"max_model_len <= {long['fit_model_len']}" and "kv-cache-dtype fp8" in long["advice"][1]
    )
    assert _plan(m, GB10, max_model_len=long["fit_model_len"])["fits"] != "no"
    big = _plan(memplan.simulated(120.0, 20480), GB10)
    assert big["fits"] == "no" and "leave no KV cache" in big["problem"]
    queues = _plan(m, GB10, max_model_len=1_000_000, max_num_seqs=64)
    assert queues["fits"] == "queues" and f"max_num_seqs <= {queues['fit_seqs']}" in queues["advice"]
    assert _plan(None)["fits"] == "unknown"


SPEC = """
[sweep]
name = "mem"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "nv"
model = "nv"
quant = "nvfp4"
[server]
max_num_seqs = 4
[matrix]
moe_backend = ["marlin"]
concurrency = [1]
max_model_len = {lens}
"""


def _cells(tmp_path: Path, lens: str) -> dict:
    path = tmp_path / "mem.toml"
    path.write_text(SPEC.format(digest="ab" * 32, lens=lens))
    cells = plan_cells(load_spec(path), "spark-a", {"simulated": True, "arch": "gb10"}, {})
    for c in cells:
        c.model_memory = memplan.simulated(22.0, 20480)
    return {"spark-a": cells}


def test_the_sweep_refuses_what_cannot_start_and_exits_2_when_nothing_fits(tmp_path: Path):
    facts = {"spark-a": {"simulated": True, "arch": "gb10"}}
    kept, lines = memory.refuse(_cells(tmp_path, "[8192, 9000000]"), facts)
    assert [c.config.server.max_model_len for c in kept["spark-a"]] == [8192]
    assert len(lines) == 1 and "does not fit" in lines[0] and "change: max_model_len <=" in lines[0]
    assert kept["spark-a"][0].memory_plan["fits"] == "yes"
    with pytest.raises(UserError, match="no cell fits in memory, nothing was started"):
        memory.refuse(_cells(tmp_path, "[9000000, 9500000]"), facts)


def test_the_record_puts_the_plan_beside_the_log_and_the_report_marks_a_miss():
    p = _plan(memplan.simulated(29.0, 98304))
    logged = {"model_load_gib": 29.06, "kv_cache_gib": 88.67, "kv_cache_tokens": 968496}
    rec = memory.record(p, logged)
    assert rec["logged"] == {"weights_gib": 29.06, "kv_gib": 88.67, "kv_tokens": 968496}
    assert 0 < rec["weights_miss_pct"] < 2 and 0 <= rec["kv_tokens_miss_pct"] < 10
    lines = memory.report_lines([{"host": "h", "cell_id": "abc", "memory": rec}])
    assert "within the goal" in lines[-2]
    far = memory.record(p, {**logged, "model_load_gib": 35.0})
    assert "**weights" in memory.report_lines([{"host": "h", "cell_id": "abc", "memory": far}])[-2]
    assert memory.report_lines([{"host": "h"}]) == []


def _window(waiting: float, preempted: float, kv: float) -> dict:
    gauges = {"vllm:num_requests_waiting": {"mean": 0.0, "max": waiting}, "vllm:kv_cache_usage_perc": {"max": kv}}
    gauges["vllm:num_requests_running"] = {"mean": 2.0, "max": 4.0}
    return {
        "concurrency": 8,
        "repeat": 1,
        "server": {"scraped": True, "gauges": gauges, "deltas": {"vllm:num_preemptions_total": preempted}},
    }


def test_windows_under_pressure_are_flagged_from_the_servers_own_metrics():
    assert memory.window_flags(_window(0, 0, 0.5)) == []
    assert memory.window_flags(_window(3, 2, 0.95)) == ["saturated", "preempted", "kv_above_90"]
    assert memory.window_flags({"server": {"scraped": False}}) == [] and memory.window_flags({}) == []
    calm, busy = _window(0, 0, 0.5), _window(3, 0, 0.97)
    busy["pressure"] = memory.window_flags(busy)
    lines = memory.pressure_lines([{"host": "spark-a", "cell_id": "abc", "runs": [calm, busy]}])
    rows = [line for line in lines if line.startswith("| spark-a")]
    assert len(rows) == 1 and "saturated, kv_above_90" in rows[0] and "97%" in rows[0]
    assert memory.pressure_lines([{"host": "h", "runs": [calm]}]) == []
