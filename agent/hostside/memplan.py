"""A vLLM server's memory before it starts: weights, KV cache and the rest, against the memory the device has.

model_memory(PATH) runs on the host: the weights from the safetensors headers (per dtype and quant format, scales
and routed experts apart), or from config.json alone when the folder has no weights (`--load-format dummy`), and
the KV cache per token from config.json (layers, KV heads, head size, sliding windows, linear-attention layers).
plan() is pure: a ModelMemory, the cell's settings and the device's memory -> what vLLM will log ("Model loading
took X GiB", "Available KV cache memory: X GiB", "KV cache size: N tokens") and whether it can start. The
controller refuses a cell with it before its start; the simulator logs its numbers from it.

How vLLM sizes the cache (0.2x, gpu_worker.determine_available_memory and kv_cache_utils): it may take
gpu_memory_utilization x total memory; what the weights, a profiling run's activations and the CUDA graphs leave
is the KV cache, cut into 16-token blocks of every attention layer. Standard library only.
"""

from __future__ import annotations

import glob
import math
import os
from typing import Any, cast

from . import configweights, safetensors
from .configweights import DTYPE_BYTES, dtype_bytes, int_of
from .contracts import CheckpointSummary, DeviceMemory, MemoryPlan, ModelMemory

GIB = 2**30
BLOCK_TOKENS = 16  # vLLM's default --block-size: the cache is counted in whole blocks
# Activations of the profiling run, CUDA graphs and the CUDA context: what vLLM takes besides weights and KV cache.
# Fitted to the repository's logs (docs/runs: H100 and H200, vLLM 0.24.0, max_num_seqs 32, max_model_len 4096,
# decode graphs up to 32): budget - weights - "Available KV cache memory" = 1.46-1.74 GiB. Not modelled: its growth
# with max_num_batched_tokens and larger graph batches (docs/memory-plan.md).
RESERVE_GIB = 1.6
KV_DTYPES = ("auto", *DTYPE_BYTES)


class ConfigError(safetensors.CheckpointError):
    """A folder whose config.json does not say enough to plan its memory."""


# ---------------------------------------------------------------- the model, on the host


def model_memory(path: str, summary: CheckpointSummary | None = None) -> ModelMemory:
    """What the checkpoint folder at `path` needs: its headers when it has shards (`summary`, or read here),
    config.json alone otherwise. ConfigError (a CheckpointError) when it cannot say."""
    path = os.path.abspath(os.path.expanduser(path))
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        raise ConfigError(f"{folder}: no config.json; the memory plan needs the model's config")
    config = safetensors.read_json(config_path)
    has_shards = os.path.isfile(path) or bool(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))
    if has_shards and summary is None:
        summary = safetensors.inspect_checkpoint(path)
    return from_config(config, summary if has_shards else None)


def from_config(config: dict[str, Any], summary: CheckpointSummary | None = None) -> ModelMemory:
    """The ModelMemory of a parsed config.json, with the weights of `summary` (headers) when given."""
    text = _text(config)
    kv = _kv_shape(text, config)
    if summary is not None:
        weights = _weights_from_headers(summary)
        source = "headers"
    else:
        weights = configweights.weights(text, config, kv)
        source = "config"
    return cast(ModelMemory, {"source": source, **weights, **kv})


def simulated(weights_gib: float, kv_bytes_per_token: int, layers: int = 40) -> ModelMemory:
    """A simulator checkpoint (agent/sim/calibration.toml): its weights and KV bytes per token as given."""
    return ModelMemory(
        source="simulator",
        weight_bytes=round(weights_gib * GIB),
        weight_parts={},
        expert_bytes=0,
        mtp_bytes=0,
        layers=layers,
        attention_layers=layers,
        sliding_layers=0,
        sliding_window=0,
        linear_layers=0,
        kv_heads=0,
        head_dim=0,
        kv_dtype="bfloat16",
        kv_bytes_per_token=kv_bytes_per_token,
        state_bytes_per_seq=0,
        max_position=0,
        notes=[],
    )


def _text(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a multimodal config (text_config), else the config itself."""
    for key in ("text_config", "language_config", "llm_config"):
        if isinstance(config.get(key), dict):
            return {**config, **config[key]}
    return config


def _layer_kinds(c: dict[str, Any], layers: int) -> tuple[int, int, int, int, list[str]]:
    """(full attention, sliding, linear/Mamba layers, sliding window, notes) from the config's own words."""
    notes: list[str] = []
    window = int_of(c, "sliding_window")
    types = c.get("layer_types")
    if isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types):
        sliding = sum("sliding" in t or "chunked" in t for t in types)
        linear = sum(("linear" in t or "mamba" in t or "deltanet" in t) for t in types)
        return layers - sliding - linear, sliding, linear, window if sliding else 0, notes
    pattern = c.get("hybrid_override_pattern")  # Nemotron-H: M = Mamba, * = attention, - = MLP only
    if isinstance(pattern, str) and pattern:
        attention, mamba = pattern.count("*"), pattern.count("M")
        notes.append("Mamba state per sequence not modelled")
        return attention, 0, mamba, 0, notes
    interval = int_of(c, "full_attention_interval")  # Qwen3-Next / Qwen3.5: every N-th layer is full attention
    if interval > 0:
        full = layers // interval
        return full, 0, layers - full, 0, notes
    if window and c.get("use_sliding_window", True) is not False:
        every = int_of(c, "sliding_window_pattern")  # Gemma 3: 5 sliding, then 1 full
        sliding = layers - layers // every if every > 1 else layers
        return layers - sliding, sliding, 0, window, notes
    return layers, 0, 0, 0, notes


def _kv_shape(c: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    layers = int_of(c, "num_hidden_layers", "n_layer", "num_layers")
    heads = int_of(c, "num_attention_heads", "n_head")
    hidden = int_of(c, "hidden_size", "n_embd", "d_model")
    if not layers or not heads or not hidden:
        raise ConfigError("config.json gives no num_hidden_layers, num_attention_heads or hidden_size")
    kv_heads = int_of(c, "num_key_value_heads", "n_head_kv", default=heads)
    head_dim = int_of(c, "head_dim", default=hidden // heads)
    full, sliding, linear, window, notes = _layer_kinds(c, layers)
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    kv_dtype = "fp8" if _kv_quantized(top) else dtype
    per = dtype_bytes(kv_dtype)
    if int_of(c, "kv_lora_rank"):  # MLA (DeepSeek): one latent per token and layer, no K/V per head
        per_layer = (int_of(c, "kv_lora_rank") + int_of(c, "qk_rope_head_dim")) * per
        kv_heads, head_dim = 1, int_of(c, "kv_lora_rank") + int_of(c, "qk_rope_head_dim")
    else:
        per_layer = 2 * kv_heads * head_dim * per
    return {
        "layers": layers,
        "attention_layers": full + sliding,
        "sliding_layers": sliding,
        "sliding_window": window,
        "linear_layers": linear,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "kv_dtype": kv_dtype,
        "kv_bytes_per_token": per_layer * (full + sliding),
        "state_bytes_per_seq": _linear_state(c, linear, dtype_bytes(dtype)),
        "max_position": int_of(c, "max_position_embeddings", "n_positions"),
        "notes": notes,
    }


def _kv_quantized(config: dict[str, Any]) -> bool:
    """The checkpoint ships an FP8 KV cache (ModelOpt kv_cache_quant_algo, compressed-tensors kv_cache_scheme)."""
    q = config.get("quantization_config") or {}
    if not isinstance(q, dict):
        return False
    algo = str(q.get("kv_cache_quant_algo") or "").upper()
    return "FP8" in algo or isinstance(q.get("kv_cache_scheme"), dict)


def _linear_state(c: dict[str, Any], linear: int, element: int) -> int:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): a recurrent state and a short convolution per layer and sequence."""
    if not linear or not int_of(c, "linear_num_value_heads"):
        return 0
    v_heads, k_heads = int_of(c, "linear_num_value_heads"), int_of(c, "linear_num_key_heads")
    k_dim, v_dim = int_of(c, "linear_key_head_dim"), int_of(c, "linear_value_head_dim")
    conv = max(int_of(c, "linear_conv_kernel_dim", default=4) - 1, 0) * (2 * k_heads * k_dim + v_heads * v_dim)
    return linear * (v_heads * k_dim * v_dim + conv) * element


def _weights_from_headers(s: CheckpointSummary) -> dict[str, Any]:
    return {
        "weight_bytes": int(s["total_bytes"]),
        "weight_parts": {k: int(v["bytes"]) for k, v in s["kinds"].items()},
        "expert_bytes": int(s["roles"].get("routed_experts", {}).get("bytes", 0)),
        "mtp_bytes": int(s["mtp"]["bytes"]),
    }


# ---------------------------------------------------------------- the plan


def kv_bytes(model: ModelMemory, kv_cache_dtype: str) -> int:
    """KV bytes per token at `--kv-cache-dtype` (auto: the model's own)."""
    if kv_cache_dtype in ("", "auto"):
        return model["kv_bytes_per_token"]
    return model["kv_bytes_per_token"] * DTYPE_BYTES[kv_cache_dtype] // max(dtype_bytes(model["kv_dtype"]), 1)


def request_bytes(model: ModelMemory, per_token: int, length: int) -> int:
    """KV (and linear state) one request of `length` tokens holds: sliding layers keep only their window."""
    layers = max(model["attention_layers"], 1)
    per_layer = per_token / layers
    sliding = model["sliding_layers"]
    window = min(length, model["sliding_window"] + BLOCK_TOKENS) if model["sliding_window"] else length
    return round(per_layer * ((layers - sliding) * length + sliding * window)) + model["state_bytes_per_seq"]


def plan(
    model: ModelMemory | None,
    device: DeviceMemory,
    *,
    gpu_memory_utilization: float,
    max_model_len: int,
    max_num_seqs: int,
    kv_cache_dtype: str = "",
    speculative: bool = False,
    world_size: int = 1,
    moe_backend: str = "",
) -> MemoryPlan:
    """What vLLM will take and log for one server, and whether it can start (fits: yes | queues | no | unknown)."""
    util, world = gpu_memory_utilization, max(world_size, 1)
    total = device["total_gib"]
    out = MemoryPlan(
        fits="unknown",
        problem="",
        advice=[],
        device=device["kind"],
        total_gib=round(total, 2),
        free_gib=round(device["free_gib"], 2),
        gpu_memory_utilization=util,
        budget_gib=round(util * total, 2) if total > 0 else -1.0,
        weights_gib=-1.0,
        weights_source="",
        weight_parts_gib={},
        reserve_gib=RESERVE_GIB,
        kv_gib=-1.0,
        kv_dtype=kv_cache_dtype or "auto",
        kv_bytes_per_token=0,
        kv_tokens=-1,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        request_gib=-1.0,
        batch_gib=-1.0,
        fit_seqs=-1,
        fit_model_len=-1,
        notes=[],
    )
    if model is None or total <= 0:
        out["problem"] = (
            "no checkpoint folder on the host to read" if model is None else "the host's memory is not known"
        )
        return out
    weights = (
        model["weight_bytes"] - (0 if speculative else model["mtp_bytes"]) + _repacked(model, moe_backend)
    ) / world
    per_token = kv_bytes(model, kv_cache_dtype) // world
    out["notes"] = list(model["notes"])
    if world > 1:
        out["notes"].append(f"weights and KV split evenly over {world} GPUs (an approximation)")
    if speculative:
        out["notes"].append("with speculative decoding the MTP module loads too; a draft model's KV is not counted")
    parts = {k: v / world / GIB for k, v in model["weight_parts"].items()}
    if model["expert_bytes"]:
        parts["routed_experts"] = model["expert_bytes"] / world / GIB
    out["weights_gib"] = round(weights / GIB, 2)
    out["weights_source"] = model["source"]
    out["weight_parts_gib"] = {k: round(v, 3) for k, v in parts.items()}
    out["kv_dtype"] = kv_cache_dtype or f"auto ({model['kv_dtype']})"
    out["kv_bytes_per_token"] = per_token
    kv = util * total - weights / GIB - RESERVE_GIB
    request = request_bytes(model, per_token, max_model_len) / world
    out["kv_gib"] = round(kv, 2)
    out["kv_tokens"] = int(kv * GIB // (per_token * BLOCK_TOKENS)) * BLOCK_TOKENS if kv > 0 and per_token else 0
    out["request_gib"] = round(request / GIB, 3)
    out["batch_gib"] = round(request * max_num_seqs / GIB, 2)
    out["fit_seqs"] = int(kv * GIB // request) if kv > 0 and request else 0
    out["fit_model_len"] = _longest(model, per_token, kv * GIB, world) if kv > 0 else 0
    _judge(out, model, device)
    return out


def _repacked(model: ModelMemory, moe_backend: str) -> int:
    """Bytes a MoE backend adds when it loads: Marlin keeps FP8 experts with BF16 scales per group of 128 besides
    (seen: +0.47 GiB on Qwen3-30B-A3B FP8, +0.10 GiB on its 12-layer cut, vLLM 0.24.0, docs/runs/h200-qwen3-fp8)."""
    fp8 = model["weight_parts"].get("fp8_weights", 0) and not model["weight_parts"].get("fp4_weights", 0)
    return model["expert_bytes"] // 128 * 2 if moe_backend == "marlin" and fp8 else 0


def _longest(model: ModelMemory, per_token: int, kv_bytes_: float, world: int) -> int:
    """The longest max_model_len whose one request fits in `kv_bytes_` (binary search over request_bytes)."""
    lo, hi = 0, 1 << 26
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if request_bytes(model, per_token, mid) / world <= kv_bytes_:
            lo = mid
        else:
            hi = mid - 1
    return lo // BLOCK_TOKENS * BLOCK_TOKENS


def _judge(out: MemoryPlan, model: ModelMemory, device: DeviceMemory) -> None:
    """vLLM's own refusals, in the order it meets them; a batch that does not fit at once only queues."""
    total, free, util = device["total_gib"], device["free_gib"], out["gpu_memory_utilization"]
    fp8 = "fp8" not in out["kv_dtype"] and "fp8" not in model["kv_dtype"]
    halve = ['--kv-cache-dtype fp8 ([server] kv_cache_dtype = "fp8"): half the KV bytes per token'] if fp8 else []
    if device["kind"] == "unified" and free >= 0 and out["budget_gib"] > free:
        most = math.floor(free / total * 100) / 100
        out["fits"] = "no"
        out["problem"] = (
            f"gpu_memory_utilization {util} asks for {out['budget_gib']:.1f} GiB of {total:.1f} GiB unified memory "
            f"but only {free:.1f} GiB is free now: vLLM's free-memory check stops the start"
        )
        out["advice"] = [
            f"gpu_memory_utilization <= {most:.2f}",
            "free memory on the host ([server] drop_page_cache = true)",
        ]
        return
    if out["kv_gib"] <= 0:
        out["fits"] = "no"
        out["problem"] = (
            f"weights {out['weights_gib']:.1f} GiB + {RESERVE_GIB} GiB for activations and graphs leave no KV cache "
            f"in {out['budget_gib']:.1f} GiB ({util} x {total:.1f} GiB)"
        )
        need = (out["weights_gib"] + RESERVE_GIB + out["request_gib"]) / total
        out["advice"] = [
            f"gpu_memory_utilization >= {math.ceil(need * 100) / 100:.2f}"
            if need < 1
            else "a smaller checkpoint or more GPUs"
        ]
        return
    if out["fit_seqs"] < 1:
        out["fits"] = "no"
        out["problem"] = (
            f"one request of max_model_len {out['max_model_len']} needs {out['request_gib']:.2f} GiB of KV cache, "
            f"{out['kv_gib']:.2f} GiB is left: vLLM refuses to start"
        )
        out["advice"] = [f"max_model_len <= {out['fit_model_len']}", *halve]
        return
    if out["fit_seqs"] < out["max_num_seqs"]:
        out["fits"] = "queues"
        out["problem"] = (
            f"{out['max_num_seqs']} requests of {out['max_model_len']} tokens need {out['batch_gib']:.1f} GiB of KV "
            f"cache, {out['kv_gib']:.1f} GiB is left: {out['fit_seqs']} fit at once, the rest wait or are preempted"
        )
        out["advice"] = [f"max_num_seqs <= {out['fit_seqs']}", "or a shorter max_model_len", *halve]
        return
    out["fits"] = "yes"
