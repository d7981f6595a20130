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

import fnmatch
import glob
import math
import os
from typing import Any, cast

from . import safetensors
from .contracts import CheckpointSummary, DeviceMemory, MemoryPlan, ModelMemory

GIB = 2**30
BLOCK_TOKENS = 16  # vLLM's default --block-size: the cache is counted in whole blocks
# Activations of the profiling run, CUDA graphs and the CUDA context: what vLLM takes besides weights and KV cache.
# Fitted to the repository's logs (docs/runs: H100 and H200, vLLM 0.24.0, max_num_seqs 32, max_model_len 4096,
# decode graphs up to 32): budget - weights - "Available KV cache memory" = 1.46-1.74 GiB. Not modelled: its growth
# with max_num_batched_tokens and larger graph batches (docs/memory-plan.md).
RESERVE_GIB = 1.6
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}
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
        weights = _weights_from_config(text, config, kv)
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


def _int(config: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return default


def _dtype_bytes(name: object, default: int = 2) -> int:
    return DTYPE_BYTES.get(str(name).lower().replace("torch.", ""), default)


def _layer_kinds(c: dict[str, Any], layers: int) -> tuple[int, int, int, int, list[str]]:
    """(full attention, sliding, linear/Mamba layers, sliding window, notes) from the config's own words."""
    notes: list[str] = []
    window = _int(c, "sliding_window")
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
    interval = _int(c, "full_attention_interval")  # Qwen3-Next / Qwen3.5: every N-th layer is full attention
    if interval > 0:
        full = layers // interval
        return full, 0, layers - full, 0, notes
    if window and c.get("use_sliding_window", True) is not False:
        every = _int(c, "sliding_window_pattern")  # Gemma 3: 5 sliding, then 1 full
        sliding = layers - layers // every if every > 1 else layers
        return layers - sliding, sliding, 0, window, notes
    return layers, 0, 0, 0, notes


def _kv_shape(c: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    layers = _int(c, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(c, "num_attention_heads", "n_head")
    hidden = _int(c, "hidden_size", "n_embd", "d_model")
    if not layers or not heads or not hidden:
        raise ConfigError("config.json gives no num_hidden_layers, num_attention_heads or hidden_size")
    kv_heads = _int(c, "num_key_value_heads", "n_head_kv", default=heads)
    head_dim = _int(c, "head_dim", default=hidden // heads)
    full, sliding, linear, window, notes = _layer_kinds(c, layers)
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    kv_dtype = "fp8" if _kv_quantized(top) else dtype
    per = _dtype_bytes(kv_dtype)
    if _int(c, "kv_lora_rank"):  # MLA (DeepSeek): one latent per token and layer, no K/V per head
        per_layer = (_int(c, "kv_lora_rank") + _int(c, "qk_rope_head_dim")) * per
        kv_heads, head_dim = 1, _int(c, "kv_lora_rank") + _int(c, "qk_rope_head_dim")
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
        "state_bytes_per_seq": _linear_state(c, linear, _dtype_bytes(dtype)),
        "max_position": _int(c, "max_position_embeddings", "n_positions"),
        "notes": notes,
    }


def _kv_quantized(config: dict[str, Any]) -> bool:
    """The checkpoint ships an FP8 KV cache (ModelOpt kv_cache_quant_algo, compressed-tensors kv_cache_scheme)."""
    q = config.get("quantization_config") or {}
    if not isinstance(q, dict):
        return False
    algo = str(q.get("kv_cache_quant_algo") or "").upper()
    return "FP8" in algo or isinstance(q.get("kv_cache_scheme"), dict)


def _linear_state(c: dict[str, Any], linear: int, dtype_bytes: int) -> int:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): a recurrent state and a short convolution per layer and sequence."""
    if not linear or not _int(c, "linear_num_value_heads"):
        return 0
    v_heads, k_heads = _int(c, "linear_num_value_heads"), _int(c, "linear_num_key_heads")
    k_dim, v_dim = _int(c, "linear_key_head_dim"), _int(c, "linear_value_head_dim")
    conv = max(_int(c, "linear_conv_kernel_dim", default=4) - 1, 0) * (2 * k_heads * k_dim + v_heads * v_dim)
    return linear * (v_heads * k_dim * v_dim + conv) * dtype_bytes


def _weights_from_headers(s: CheckpointSummary) -> dict[str, Any]:
    return {
        "weight_bytes": int(s["total_bytes"]),
        "weight_parts": {k: int(v["bytes"]) for k, v in s["kinds"].items()},
        "expert_bytes": int(s["roles"].get("routed_experts", {}).get("bytes", 0)),
        "mtp_bytes": int(s["mtp"]["bytes"]),
    }


# ---------------------------------------------------------------- weights from config.json alone


def _weights_from_config(c: dict[str, Any], top: dict[str, Any], kv: dict[str, Any]) -> dict[str, Any]:
    """The parameters the architecture declares, each matrix in the checkpoint's quant format (with its scales):
    what vLLM allocates under `--load-format dummy`. Standard decoders (Llama, Qwen, Qwen-MoE, DeepSeek MLA,
    gated DeltaNet layers); anything else it does not know is in `notes`."""
    fmt = _Format(top.get("quantization_config"), c.get("torch_dtype") or c.get("dtype"))
    hidden, layers, vocab = _int(c, "hidden_size"), kv["layers"], _int(c, "vocab_size")
    heads = _int(c, "num_attention_heads")
    head_dim = _int(c, "head_dim", default=hidden // max(heads, 1))
    kv_heads = _int(c, "num_key_value_heads", default=heads)
    fmt.plain("embed_tokens", vocab * hidden)
    if not c.get("tie_word_embeddings", False):
        fmt.plain("lm_head", vocab * hidden)  # vLLM keeps the output head unquantized (FP8, NVFP4 alike)
    attention = [("q_proj", heads * head_dim, hidden), ("k_proj", kv_heads * head_dim, hidden)]
    attention += [("v_proj", kv_heads * head_dim, hidden), ("o_proj", hidden, heads * head_dim)]
    if _int(c, "kv_lora_rank"):
        attention = _mla(c, hidden, heads)
    experts, top_dense = _int(c, "num_experts", "n_routed_experts", "num_local_experts"), _dense_layers(c, layers)
    moe_inter = _int(c, "moe_intermediate_size", default=_int(c, "intermediate_size"))
    shared = _int(c, "shared_expert_intermediate_size") or _int(c, "n_shared_experts") * moe_inter
    for layer in range(layers):
        if _is_linear(c, layer, layers, kv):
            for name, rows, cols in _deltanet(c, hidden):
                fmt.matrix(f"model.layers.{layer}.linear_attn.{name}", rows, cols)
        else:
            for name, rows, cols in attention:
                fmt.matrix(f"model.layers.{layer}.self_attn.{name}", rows, cols)
        fmt.plain("norms", 2 * hidden)
        if experts and layer not in top_dense:
            fmt.plain(f"model.layers.{layer}.mlp.gate", experts * hidden)  # the router stays unquantized
            for name in ("gate_proj", "up_proj", "down_proj"):
                rows, cols = (hidden, moe_inter) if name == "down_proj" else (moe_inter, hidden)
                fmt.matrix(f"model.layers.{layer}.mlp.experts.0.{name}", rows, cols, count=experts, expert=True)
                if shared:
                    rows, cols = (hidden, shared) if name == "down_proj" else (shared, hidden)
                    fmt.matrix(f"model.layers.{layer}.mlp.shared_expert.{name}", rows, cols)
        else:
            inter = _int(c, "intermediate_size")
            for name in ("gate_proj", "up_proj", "down_proj"):
                rows, cols = (hidden, inter) if name == "down_proj" else (inter, hidden)
                fmt.matrix(f"model.layers.{layer}.mlp.{name}", rows, cols)
    mtp_layers = _int(c, "num_nextn_predict_layers", "mtp_num_hidden_layers")
    mtp = round(fmt.total / max(layers, 1) * mtp_layers) if mtp_layers else 0  # one more decoder layer each
    parts = {k: v for k, v in fmt.parts.items() if v}
    return {"weight_bytes": fmt.total + mtp, "weight_parts": parts, "expert_bytes": fmt.experts, "mtp_bytes": mtp}


def _dense_layers(c: dict[str, Any], layers: int) -> set[int]:
    """Layers with a dense MLP in a MoE model (mlp_only_layers, first_k_dense_replace, decoder_sparse_step)."""
    dense = {i for i in c.get("mlp_only_layers") or [] if isinstance(i, int)}
    dense |= set(range(_int(c, "first_k_dense_replace")))
    step = _int(c, "decoder_sparse_step", default=1)
    if step > 1:
        dense |= {i for i in range(layers) if (i + 1) % step}
    return dense


def _is_linear(c: dict[str, Any], layer: int, layers: int, kv: dict[str, Any]) -> bool:
    if not kv["linear_layers"]:
        return False
    types = c.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return "linear" in str(types[layer])
    interval = _int(c, "full_attention_interval")
    return bool(interval) and (layer + 1) % interval != 0


def _mla(c: dict[str, Any], hidden: int, heads: int) -> list[tuple[str, int, int]]:
    nope, rope, v_dim = _int(c, "qk_nope_head_dim"), _int(c, "qk_rope_head_dim"), _int(c, "v_head_dim")
    kv_rank, q_rank = _int(c, "kv_lora_rank"), _int(c, "q_lora_rank")
    q = [("q_a_proj", q_rank, hidden), ("q_b_proj", heads * (nope + rope), q_rank)] if q_rank else []
    q = q or [("q_proj", heads * (nope + rope), hidden)]
    return q + [
        ("kv_a_proj_with_mqa", kv_rank + rope, hidden),
        ("kv_b_proj", heads * (nope + v_dim), kv_rank),
        ("o_proj", hidden, heads * v_dim),
    ]


def _deltanet(c: dict[str, Any], hidden: int) -> list[tuple[str, int, int]]:
    k_heads, v_heads = _int(c, "linear_num_key_heads"), _int(c, "linear_num_value_heads")
    k_dim, v_dim = _int(c, "linear_key_head_dim"), _int(c, "linear_value_head_dim")
    return [
        ("in_proj_qkvz", 2 * k_heads * k_dim + 2 * v_heads * v_dim, hidden),
        ("in_proj_ba", 2 * v_heads, hidden),
        ("out_proj", hidden, v_heads * v_dim),
    ]


class _Format:
    """Bytes of each matrix in the checkpoint's format: FP8 (per tensor or in blocks, FP32 scales), NVFP4 (two
    per byte, an FP8 scale per 16, FP32 global scales), else the config's dtype. Modules the quantization config
    leaves out (ignore, modules_to_not_convert, ignored_layers) stay in that dtype."""

    def __init__(self, quant: object, dtype: object) -> None:
        q = quant if isinstance(quant, dict) else {}
        method = str(q.get("quant_method") or "").lower()
        algo = str(q.get("quant_algo") or q.get("format") or "").upper()
        self.kind = (
            "fp4" if "FP4" in algo or method in ("mxfp4",) else "fp8" if "fp8" in method or "FP8" in algo else ""
        )
        self.group = int(q.get("group_size") or 16) if self.kind == "fp4" else 0
        block = q.get("weight_block_size")
        self.block = tuple(block) if isinstance(block, list) and len(block) == 2 else None
        skip = [*(q.get("ignore") or []), *(q.get("modules_to_not_convert") or []), *(q.get("ignored_layers") or [])]
        self.skip = [str(p) for p in skip if isinstance(p, str)]
        self.plain_bytes = _dtype_bytes(dtype or "bfloat16")
        self.parts = {"fp4_weights": 0, "fp4_scales": 0, "fp8_weights": 0, "fp8_scales": 0, "high_precision": 0}
        self.total = self.experts = 0

    def _add(self, part: str, size: int, expert: bool) -> None:
        self.parts[part] += size
        self.total += size
        self.experts += size if expert else 0

    def plain(self, _name: str, params: int) -> None:
        self._add("high_precision", params * self.plain_bytes, False)

    def matrix(self, name: str, rows: int, cols: int, count: int = 1, expert: bool = False) -> None:
        params = rows * cols * count
        if not self.kind or any(fnmatch.fnmatch(name, p) or p in name.split(".") for p in self.skip):
            self._add("high_precision", params * self.plain_bytes, expert)
        elif self.kind == "fp4":
            self._add("fp4_weights", params // 2, expert)
            self._add("fp4_scales", params // self.group + 8 * count, expert)  # + weight_scale_2, input_scale
        else:
            self._add("fp8_weights", params, expert)
            blocks = math.ceil(rows / self.block[0]) * math.ceil(cols / self.block[1]) if self.block else 1
            self._add("fp8_scales", 4 * blocks * count, expert)


# ---------------------------------------------------------------- the plan


def kv_bytes(model: ModelMemory, kv_cache_dtype: str) -> int:
    """KV bytes per token at `--kv-cache-dtype` (auto: the model's own)."""
    if kv_cache_dtype in ("", "auto"):
        return model["kv_bytes_per_token"]
    return model["kv_bytes_per_token"] * DTYPE_BYTES[kv_cache_dtype] // max(_dtype_bytes(model["kv_dtype"]), 1)


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
