"""Builders of small but realistic checkpoints for the inspect tests and bench/bench_inspect.py.

Files are written in the standard safetensors layout by hand (the `safetensors` package cannot write
BF16 or F8 from numpy): 8-byte header length, JSON header padded with spaces, then the data, which is
left sparse (zeros) by truncate. That is a valid file; test_official_reader_accepts_our_files proves it.
"""

from __future__ import annotations

import json
import os
import struct

import pytest

from agent.hostside.safetensors import DTYPE_SIZES

pytestmark = pytest.mark.unit

# Small Qwen3.5-MoE-shaped model: 4 decoder layers (even: full attention, odd: linear attention),
# 8 routed experts with top-2, one shared expert, a 1-layer MTP module and a small vision tower.
LAYERS, EXPERTS, TOP_K, HIDDEN, EXPERT_INTER, SHARED_INTER, VOCAB = 4, 8, 2, 64, 32, 64, 256
LM = "model.language_model"


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """tensors: name -> (dtype, shape). Writes header + zeroed (sparse) data."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = DTYPE_SIZES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)


def write_checkpoint(folder: str, tensors: dict, config: dict, shards: int = 3, extra: dict | None = None) -> str:
    """A sharded checkpoint folder with model.safetensors.index.json, config.json and extra JSON files."""
    os.makedirs(folder, exist_ok=True)
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(folder, file), {n: tensors[n] for n in part}, {"format": "pt"})
        weight_map.update({n: file for n in part})
    _write_json(os.path.join(folder, "model.safetensors.index.json"), {"metadata": {}, "weight_map": weight_map})
    _write_json(os.path.join(folder, "config.json"), config)
    for file, data in (extra or {}).items():
        _write_json(os.path.join(folder, file), data)
    return folder


def _write_json(path: str, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def linear(prefix: str, out: int, inp: int, fmt: str, static: bool = True) -> dict:
    """One linear layer's tensors in a format: nvfp4 (modelopt), fp8 (per-tensor), fp8_block, bf16."""
    if fmt == "nvfp4":
        t = {
            f"{prefix}.weight": ("U8", [out, inp // 2]),
            f"{prefix}.weight_scale": ("F8_E4M3", [out, inp // 16]),
            f"{prefix}.weight_scale_2": ("F32", []),
        }
    elif fmt == "fp8":
        t = {f"{prefix}.weight": ("F8_E4M3", [out, inp]), f"{prefix}.weight_scale": ("F32", [])}
    elif fmt == "fp8_block":
        return {
            f"{prefix}.weight": ("F8_E4M3", [out, inp]),
            f"{prefix}.weight_scale_inv": ("F32", [-(-out // 128), -(-inp // 128)]),
        }
    else:
        return {f"{prefix}.weight": ("BF16", [out, inp])}
    if static:
        t[f"{prefix}.input_scale"] = ("F32", [])
    return t


def _norm(name: str, size: int = HIDDEN) -> dict:
    return {name: ("BF16", [size])}


def _moe_block(prefix: str, fmt: str, static: bool, expert_fmt: str | None = None) -> dict:
    t = {
        f"{prefix}.gate.weight": ("BF16", [EXPERTS, HIDDEN]),
        f"{prefix}.shared_expert_gate.weight": ("BF16", [1, HIDDEN]),
    }
    for proj, out, inp in (
        ("gate_proj", SHARED_INTER, HIDDEN),
        ("up_proj", SHARED_INTER, HIDDEN),
        ("down_proj", HIDDEN, SHARED_INTER),
    ):
        t.update(linear(f"{prefix}.shared_expert.{proj}", out, inp, fmt, static))
    for e in range(EXPERTS):
        for proj, out, inp in (
            ("gate_proj", EXPERT_INTER, HIDDEN),
            ("up_proj", EXPERT_INTER, HIDDEN),
            ("down_proj", HIDDEN, EXPERT_INTER),
        ):
            t.update(linear(f"{prefix}.experts.{e}.{proj}", out, inp, expert_fmt or fmt, static))
    return t


def _full_attention(prefix: str, fmt: str, static: bool) -> dict:
    t = {}
    for proj, out, inp in (
        ("q_proj", HIDDEN, HIDDEN),
        ("k_proj", HIDDEN // 4, HIDDEN),
        ("v_proj", HIDDEN // 4, HIDDEN),
        ("o_proj", HIDDEN, HIDDEN),
    ):
        t.update(linear(f"{prefix}.{proj}", out, inp, fmt, static))
    t.update(_norm(f"{prefix}.q_norm.weight", 16))
    t.update(_norm(f"{prefix}.k_norm.weight", 16))
    return t


def _linear_attention(prefix: str, fmt: str, static: bool) -> dict:
    t = {}
    t.update(linear(f"{prefix}.in_proj_qkvz", 2 * HIDDEN, HIDDEN, fmt, static))
    t.update(linear(f"{prefix}.in_proj_ba", 16, HIDDEN, "bf16"))
    t.update(linear(f"{prefix}.out_proj", HIDDEN, HIDDEN, fmt, static))
    t[f"{prefix}.A_log"] = ("F32", [8])
    t[f"{prefix}.dt_bias"] = ("BF16", [8])
    t[f"{prefix}.conv1d.weight"] = ("BF16", [128, 1, 4])
    t.update(_norm(f"{prefix}.norm.weight", 16))
    return t


def qwen_moe(variant: str) -> tuple[dict, dict, dict]:
    """(tensors, config, extra files) for variant nv | uns-fast | uns | fp8, after the article's four."""
    fmt = {"nv": "nvfp4", "uns-fast": "nvfp4", "uns": "nvfp4", "fp8": "fp8_block"}[variant]
    static = variant == "nv"
    t = {f"{LM}.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN]), "lm_head.weight": ("BF16", [VOCAB, HIDDEN])}
    t.update(_norm(f"{LM}.norm.weight"))
    for layer in range(LAYERS):
        p = f"{LM}.layers.{layer}"
        t.update(_norm(f"{p}.input_layernorm.weight"))
        t.update(_norm(f"{p}.post_attention_layernorm.weight"))
        attention = _full_attention if layer % 2 == 0 else _linear_attention
        t.update(attention(f"{p}.self_attn" if layer % 2 == 0 else f"{p}.linear_attn", fmt, static))
        expert_fmt = "fp8" if variant == "uns" and layer >= LAYERS - 2 else fmt  # uns: last layers' experts FP8
        t.update(_moe_block(f"{p}.mlp", fmt, static, expert_fmt))
    mtp_fmt = "fp8_block" if variant == "fp8" else "bf16"  # NVFP4 checkpoints leave the MTP module BF16
    t.update(linear("mtp.fc", HIDDEN, 2 * HIDDEN, mtp_fmt))
    for name in (
        "mtp.pre_fc_norm_embedding.weight",
        "mtp.pre_fc_norm_hidden.weight",
        "mtp.norm.weight",
        "mtp.layers.0.input_layernorm.weight",
        "mtp.layers.0.post_attention_layernorm.weight",
    ):
        t.update(_norm(name))
    t.update(_full_attention("mtp.layers.0.self_attn", mtp_fmt, False))
    t.update(_moe_block("mtp.layers.0.mlp", mtp_fmt, False))
    t["model.visual.patch_embed.proj.weight"] = ("BF16", [HIDDEN, 3, 2, 16, 16])
    t["model.visual.blocks.0.attn.qkv.weight"] = ("BF16", [3 * HIDDEN, HIDDEN])
    t["model.visual.blocks.0.norm1.weight"] = ("F32", [HIDDEN])
    t["model.visual.merger.linear_fc1.weight"] = ("BF16", [HIDDEN, HIDDEN])
    config = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "tie_word_embeddings": False,
        "text_config": {
            "num_hidden_layers": LAYERS,
            "num_experts": EXPERTS,
            "num_experts_per_tok": TOP_K,
            "hidden_size": HIDDEN,
            "mtp_num_hidden_layers": 1,
        },
    }
    extra = {}
    if fmt == "nvfp4":
        extra["hf_quant_config.json"] = {
            "producer": {"name": "modelopt"},
            "quantization": {
                "quant_algo": "NVFP4" if variant != "uns" else "MIXED_PRECISION",
                "group_size": 16,
                "exclude_modules": ["lm_head", "mtp*", "model.visual*"],
            },
        }
    else:
        config["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head"],
        }
    return t, config, extra


def deepseek_style() -> tuple[dict, dict]:
    """DeepSeek-V3 naming, block FP8: layer 0 dense, layers 1-2 MoE, layer 3 = the MTP module."""
    t = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN]), "lm_head.weight": ("BF16", [VOCAB, HIDDEN])}
    t.update(_norm("model.norm.weight"))
    for layer in range(4):
        p = f"model.layers.{layer}"
        t.update(_norm(f"{p}.input_layernorm.weight"))
        t.update(_norm(f"{p}.post_attention_layernorm.weight"))
        for proj, out, inp in (
            ("q_a_proj", 32, HIDDEN),
            ("q_b_proj", HIDDEN, 32),
            ("kv_a_proj_with_mqa", 48, HIDDEN),
            ("kv_b_proj", HIDDEN, 32),
            ("o_proj", HIDDEN, HIDDEN),
        ):
            t.update(linear(f"{p}.self_attn.{proj}", out, inp, "fp8_block"))
        t.update(_norm(f"{p}.self_attn.q_a_layernorm.weight", 32))
        t.update(_norm(f"{p}.self_attn.kv_a_layernorm.weight", 32))
        if layer == 0:
            for proj, out, inp in (("gate_proj", 128, HIDDEN), ("up_proj", 128, HIDDEN), ("down_proj", HIDDEN, 128)):
                t.update(linear(f"{p}.mlp.{proj}", out, inp, "fp8_block"))
            continue
        t[f"{p}.mlp.gate.weight"] = ("BF16", [EXPERTS, HIDDEN])
        t[f"{p}.mlp.gate.e_score_correction_bias"] = ("F32", [EXPERTS])
        for proj, out, inp in (
            ("gate_proj", EXPERT_INTER, HIDDEN),
            ("up_proj", EXPERT_INTER, HIDDEN),
            ("down_proj", HIDDEN, EXPERT_INTER),
        ):
            t.update(linear(f"{p}.mlp.shared_experts.{proj}", out, inp, "fp8_block"))
            for e in range(EXPERTS):
                t.update(linear(f"{p}.mlp.experts.{e}.{proj}", out, inp, "fp8_block"))
    t.update(_norm("model.layers.3.enorm.weight"))
    t.update(_norm("model.layers.3.hnorm.weight"))
    t["model.layers.3.eh_proj.weight"] = ("BF16", [HIDDEN, 2 * HIDDEN])
    t["model.layers.3.shared_head.head.weight"] = ("BF16", [VOCAB, HIDDEN])
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": 3,
        "n_routed_experts": EXPERTS,
        "num_experts_per_tok": TOP_K,
        "num_nextn_predict_layers": 1,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    return t, config


def llama_style(tied: bool) -> tuple[dict, dict]:
    """A dense Llama-named BF16 model, 2 layers."""
    t = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN])}
    if not tied:
        t["lm_head.weight"] = ("BF16", [VOCAB, HIDDEN])
    t.update(_norm("model.norm.weight"))
    for layer in range(2):
        p = f"model.layers.{layer}"
        t.update(_norm(f"{p}.input_layernorm.weight"))
        t.update(_norm(f"{p}.post_attention_layernorm.weight"))
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t.update(linear(f"{p}.self_attn.{proj}", HIDDEN, HIDDEN, "bf16"))
        for proj, out, inp in (("gate_proj", 128, HIDDEN), ("up_proj", 128, HIDDEN), ("down_proj", HIDDEN, 128)):
            t.update(linear(f"{p}.mlp.{proj}", out, inp, "bf16"))
    return t, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "tie_word_embeddings": tied}


def build_qwen(folder: str, variant: str) -> str:
    tensors, config, extra = qwen_moe(variant)
    return write_checkpoint(folder, tensors, config, extra=extra)


def test_official_reader_accepts_our_files(tmp_path):
    """The hand-written files are real safetensors: the official reader lists the same tensors."""
    from safetensors import safe_open

    tensors, _config, _extra = qwen_moe("nv")
    path = str(tmp_path / "one.safetensors")
    write_safetensors(path, tensors, {"format": "pt"})
    with safe_open(path, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata() == {"format": "pt"}
