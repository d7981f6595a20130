"""The weights a model declares, from its config.json alone: what vLLM allocates under `--load-format dummy`, where
a checkpoint folder holds no safetensors to read (hostside/memplan.py uses the headers whenever there are some).
Standard library only."""

from __future__ import annotations

import fnmatch
import math
from typing import Any

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


def int_of(config: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return default


def dtype_bytes(name: object, default: int = 2) -> int:
    return DTYPE_BYTES.get(str(name).lower().replace("torch.", ""), default)


# ---------------------------------------------------------------- weights from config.json alone


def weights(c: dict[str, Any], top: dict[str, Any], kv: dict[str, Any]) -> dict[str, Any]:
    """The parameters the architecture declares, each matrix in the checkpoint's quant format (with its scales):
    what vLLM allocates under `--load-format dummy`. Standard decoders (Llama, Qwen, Qwen-MoE, DeepSeek MLA,
    gated DeltaNet layers); anything else it does not know is in `notes`."""
    fmt = _Format(top.get("quantization_config"), c.get("torch_dtype") or c.get("dtype"))
    hidden, layers, vocab = int_of(c, "hidden_size"), kv["layers"], int_of(c, "vocab_size")
    heads = int_of(c, "num_attention_heads")
    head_dim = int_of(c, "head_dim", default=hidden // max(heads, 1))
    kv_heads = int_of(c, "num_key_value_heads", default=heads)
    fmt.plain("embed_tokens", vocab * hidden)
    if not c.get("tie_word_embeddings", False):
        fmt.plain("lm_head", vocab * hidden)  # vLLM keeps the output head unquantized (FP8, NVFP4 alike)
    attention = [("q_proj", heads * head_dim, hidden), ("k_proj", kv_heads * head_dim, hidden)]
    attention += [("v_proj", kv_heads * head_dim, hidden), ("o_proj", hidden, heads * head_dim)]
    if int_of(c, "kv_lora_rank"):
        attention = _mla(c, hidden, heads)
    experts, top_dense = int_of(c, "num_experts", "n_routed_experts", "num_local_experts"), _dense_layers(c, layers)
    moe_inter = int_of(c, "moe_intermediate_size", default=int_of(c, "intermediate_size"))
    shared = int_of(c, "shared_expert_intermediate_size") or int_of(c, "n_shared_experts") * moe_inter
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
            inter = int_of(c, "intermediate_size")
            for name in ("gate_proj", "up_proj", "down_proj"):
                rows, cols = (hidden, inter) if name == "down_proj" else (inter, hidden)
                fmt.matrix(f"model.layers.{layer}.mlp.{name}", rows, cols)
    mtp_layers = int_of(c, "num_nextn_predict_layers", "mtp_num_hidden_layers")
    mtp = round(fmt.total / max(layers, 1) * mtp_layers) if mtp_layers else 0  # one more decoder layer each
    parts = {k: v for k, v in fmt.parts.items() if v}
    return {"weight_bytes": fmt.total + mtp, "weight_parts": parts, "expert_bytes": fmt.experts, "mtp_bytes": mtp}


def _dense_layers(c: dict[str, Any], layers: int) -> set[int]:
    """Layers with a dense MLP in a MoE model (mlp_only_layers, first_k_dense_replace, decoder_sparse_step)."""
    dense = {i for i in c.get("mlp_only_layers") or [] if isinstance(i, int)}
    dense |= set(range(int_of(c, "first_k_dense_replace")))
    step = int_of(c, "decoder_sparse_step", default=1)
    if step > 1:
        dense |= {i for i in range(layers) if (i + 1) % step}
    return dense


def _is_linear(c: dict[str, Any], layer: int, layers: int, kv: dict[str, Any]) -> bool:
    if not kv["linear_layers"]:
        return False
    types = c.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return "linear" in str(types[layer])
    interval = int_of(c, "full_attention_interval")
    return bool(interval) and (layer + 1) % interval != 0


def _mla(c: dict[str, Any], hidden: int, heads: int) -> list[tuple[str, int, int]]:
    nope, rope, v_dim = int_of(c, "qk_nope_head_dim"), int_of(c, "qk_rope_head_dim"), int_of(c, "v_head_dim")
    kv_rank, q_rank = int_of(c, "kv_lora_rank"), int_of(c, "q_lora_rank")
    q = [("q_a_proj", q_rank, hidden), ("q_b_proj", heads * (nope + rope), q_rank)] if q_rank else []
    q = q or [("q_proj", heads * (nope + rope), hidden)]
    return q + [
        ("kv_a_proj_with_mqa", kv_rank + rope, hidden),
        ("kv_b_proj", heads * (nope + v_dim), kv_rank),
        ("o_proj", hidden, heads * v_dim),
    ]


def _deltanet(c: dict[str, Any], hidden: int) -> list[tuple[str, int, int]]:
    k_heads, v_heads = int_of(c, "linear_num_key_heads"), int_of(c, "linear_num_value_heads")
    k_dim, v_dim = int_of(c, "linear_key_head_dim"), int_of(c, "linear_value_head_dim")
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
        self.plain_bytes = dtype_bytes(dtype or "bfloat16")
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
