"""Checkpoint inspection from real safetensors files on disk: counts, roles, formats, bytes, errors, CLI."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import structlog

from agent.cli import main
from agent.errors import UserError
from agent.hostside.safetensors import DTYPE_SIZES, compare, inspect_checkpoint, read_header
from agent.judging.checkpoints import inspect_local

from .test_inspect_build import (
    EXPERTS,
    HIDDEN,
    TOP_K,
    VOCAB,
    build_qwen,
    deepseek_style,
    linear,
    llama_style,
    qwen_moe,
    write_checkpoint,
    write_safetensors,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def _size(dtype: str, shape: list) -> int:
    n = DTYPE_SIZES[dtype]
    for d in shape:
        n *= d
    return n


def _expected_bytes_per_token(tensors: dict, lm_head: bool = True) -> int:
    """Independent of the module: all weights minus MTP/vision, routed experts at top-k/E, one embedding row."""
    total = 0
    for name, (dtype, shape) in tensors.items():
        size = _size(dtype, shape)
        if name.startswith("mtp.") or ".visual." in name:
            continue
        if ".experts." in name:
            size = size * TOP_K // EXPERTS
        if "embed_tokens" in name and lm_head:
            size = shape[1] * 2
        total += size
    return total


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {v: inspect_checkpoint(build_qwen(str(root / v), v)) for v in ("nv", "uns-fast", "uns", "fp8")}


def test_nvfp4_counts_roles_and_formats_exactly(qwen):
    s = qwen["nv"]
    assert (s["shards"], s["tensors"]) == (3, 558)
    assert {r: v["tensors"] for r, v in s["roles"].items()} == {
        "attention": 56,
        "routed_experts": 384,
        "shared_experts": 52,
        "router": 4,
        "embeddings": 2,
        "norms": 15,
        "mtp": 41,
        "vision": 4,
    }
    assert {d: v["tensors"] for d, v in s["dtypes"].items()} == {"BF16": 75, "F32": 243, "F8_E4M3": 120, "U8": 120}
    assert s["roles"]["routed_experts"]["formats"] == {"packed_fp4": 96}
    assert s["roles"]["attention"]["formats"] == {"packed_fp4": 12, "unquantized": 8}
    assert s["roles"]["routed_experts"]["activation"] == "static"
    assert s["roles"]["router"]["activation"] == "none"
    assert (s["packed_fp4_tensors"], s["high_precision_weights"], s["activation_scales"]) == (120, 14, "static")
    assert s["kinds"]["fp4_weights"]["tensors"] == 120
    assert s["kinds"]["fp4_scales"]["tensors"] == 360  # weight_scale, weight_scale_2, input_scale
    assert s["expert_format"] == "packed_fp4" and s["high_precision_expert_layers"] == []
    assert s["mtp"] == {
        "present": True,
        "quantized": False,
        "tensors": 41,
        "bytes": s["roles"]["mtp"]["bytes"],
        "formats": {"unquantized": 41},
        "dtypes": {"BF16": 41},
    }
    assert s["quant_configs"] == [
        {
            "source": "hf_quant_config.json",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "producer": "modelopt",
            "excluded_modules": 3,
        }
    ]


def test_total_and_bytes_per_token_match_the_files(qwen, tmp_path):
    tensors, _config, _extra = qwen_moe("nv")
    assert qwen["nv"]["total_bytes"] == sum(_size(d, s) for d, s in tensors.values())
    assert qwen["nv"]["bytes_per_token"] == _expected_bytes_per_token(tensors)
    assert qwen["nv"]["moe"] == {"num_experts": EXPERTS, "num_experts_per_tok": TOP_K}
    assert qwen["uns"]["bytes_per_token"] > qwen["uns-fast"]["bytes_per_token"]


def test_dynamic_activation_scales_when_input_scale_is_absent(qwen):
    s = qwen["uns-fast"]
    assert (s["tensors"], s["activation_scales"], s["packed_fp4_tensors"]) == (438, "dynamic", 120)


def test_experts_kept_in_fp8_in_the_last_layers(qwen):
    s = qwen["uns"]
    assert s["tensors"] == 390
    assert s["roles"]["routed_experts"]["formats"] == {"fp8": 48, "packed_fp4": 48}
    assert s["high_precision_expert_layers"] == [
        {"first": 2, "last": 3, "format": "fp8", "text": "layers 2–3 experts FP8"}
    ]
    assert s["packed_fp4_tensors"] == 72


def test_fp8_checkpoint_quantizes_its_mtp_module(qwen):
    s = qwen["fp8"]
    assert s["tensors"] == 350
    assert s["mtp"]["quantized"] is True
    assert s["mtp"]["dtypes"] == {"BF16": 9, "F32": 32, "F8_E4M3": 32}
    assert s["roles"]["routed_experts"]["formats"] == {"block_fp8": 96}
    assert s["expert_format"] == "block_fp8" and s["packed_fp4_tensors"] == 0
    assert s["quant_configs"][0]["source"] == "config.json" and s["quant_configs"][0]["excluded_modules"] == 1


def test_byte_twins_headline(tmp_path):
    tensors, config, extra = qwen_moe("nv")
    tensors.update(linear("model.visual.merger.linear_fc2", 16, 32, "nvfp4"))  # one more packed FP4 tensor
    a = inspect_checkpoint(write_checkpoint(str(tmp_path / "nv"), tensors, config, extra=extra))
    b = inspect_checkpoint(build_qwen(str(tmp_path / "uns-fast"), "uns-fast"))
    c = compare(a, b)
    assert c["twins"] is True
    assert c["headline"] == "byte-twins: 121 vs 120 packed FP4 tensors, the same 14 high-precision weights"
    assert "activation scales: static vs dynamic" in c["differences"]


def test_compare_names_what_differs(qwen):
    c = compare(qwen["uns-fast"], qwen["uns"])
    assert c["twins"] is False
    assert c["headline"].startswith("different:")
    assert any(d.startswith("high-precision experts: none vs layers 2–3 experts FP8") for d in c["differences"])
    assert c["bytes_per_token_change_pct"] > 0
    mtp = compare(qwen["fp8"], qwen["nv"])
    assert (
        "MTP module: 73 tensors, quantized (9 BF16, 32 F32, 32 F8_E4M3) vs 41 tensors, unquantized (41 BF16)"
        in mtp["differences"]
    )


def test_deepseek_naming_mtp_as_extra_layer(tmp_path):
    tensors, config = deepseek_style()
    s = inspect_checkpoint(write_checkpoint(str(tmp_path / "ds"), tensors, config, shards=2))
    assert {r: v["tensors"] for r, v in s["roles"].items()} == {
        "attention": 30,
        "dense_mlp": 6,
        "routed_experts": 96,
        "shared_experts": 12,
        "router": 4,
        "embeddings": 2,
        "norms": 13,
        "mtp": 74,
    }
    assert s["mtp"]["present"] and s["mtp"]["quantized"]
    assert s["expert_format"] == "block_fp8" and s["activation_scales"] == "dynamic"
    assert s["bytes_per_token"] == _expected_bytes_per_token(
        {n: v for n, v in tensors.items() if not n.startswith("model.layers.3.")}
    )


@pytest.mark.parametrize("tied", [True, False])
def test_dense_llama_reads_all_weights(tmp_path, tied):
    tensors, config = llama_style(tied)
    s = inspect_checkpoint(write_checkpoint(str(tmp_path / "llama"), tensors, config, shards=1))
    assert {r: v["tensors"] for r, v in s["roles"].items()} == {
        "attention": 8,
        "dense_mlp": 6,
        "embeddings": 1 + (not tied),
        "norms": 5,
    }
    assert not s["mtp"]["present"] and s["expert_format"] == ""
    embed_table = VOCAB * HIDDEN * 2
    assert s["bytes_per_token"] == (s["total_bytes"] if tied else s["total_bytes"] - embed_table + HIDDEN * 2)


def test_single_file_without_config_and_missing_top_k(tmp_path):
    tensors, _config, _extra = qwen_moe("nv")
    path = tmp_path / "model.safetensors"
    write_safetensors(str(path), tensors)
    s = inspect_checkpoint(str(path))
    assert s["tensors"] == 558 and s["bytes_per_token"] is None
    assert s["moe"]["num_experts"] == EXPERTS  # counted from the names
    assert any("num_experts_per_tok" in w for w in s["warnings"])


# ---------------------------------------------------------------- bad files


def _raw(path: Path, body: bytes, length: int | None = None, data: bytes = b"") -> str:
    """A file whose header length field says `length` (default: the true length of `body`)."""
    path.write_bytes(struct.pack("<Q", len(body) if length is None else length) + body + data)
    return str(path)


def _valid(path: Path) -> str:
    write_safetensors(str(path), {"model.layers.0.mlp.up_proj.weight": ("BF16", [64, 64])})
    return str(path)


BAD_FILES = {
    "short": (lambda p: (p.write_bytes(b"\x01\x02\x03"), str(p))[1], "too short"),
    "huge_length": (lambda p: _raw(p, b"{}", length=2**62), "impossible"),
    "length_past_end": (lambda p: _raw(p, b'{"a": 1}', length=4096), "truncated"),
    "not_json": (lambda p: _raw(p, b"{not json}"), "not valid JSON"),
    "not_object": (lambda p: _raw(p, b"[]"), "not an object"),
    "bad_entry": (lambda p: _raw(p, b'{"w": {"dtype": "BF16", "shape": [2]}}'), "data_offsets"),
    "shape_mismatch": (
        lambda p: _raw(p, b'{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}}', data=b"\0" * 4),
        "does not match",
    ),
    "data_truncated": (lambda p: (_valid(p), os.truncate(p, os.path.getsize(p) - 100), str(p))[2], "truncated"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_file_is_a_user_error_naming_it(tmp_path, kind):
    make, words = BAD_FILES[kind]
    path = make(tmp_path / f"{kind}.safetensors")
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as err:
            inspect_local(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert path in err.value.message and words in err.value.message
    assert peak < 1 << 20  # never allocates what a bogus length claims


def test_read_header_of_a_valid_file(tmp_path):
    header = read_header(_valid(tmp_path / "ok.safetensors"))
    assert header["model.layers.0.mlp.up_proj.weight"] == {
        "dtype": "BF16",
        "shape": [64, 64],
        "data_offsets": [0, 8192],
    }


def test_index_naming_a_missing_shard(tmp_path):
    tensors, config, extra = qwen_moe("nv")
    folder = write_checkpoint(str(tmp_path / "nv"), tensors, config, extra=extra)
    os.remove(os.path.join(folder, "model-00002-of-00003.safetensors"))
    with pytest.raises(UserError, match=r"model.safetensors.index.json: names shard model-00002-of-00003"):
        inspect_local(folder)


def test_index_and_shards_that_disagree_are_warned_about(tmp_path):
    tensors, config, extra = qwen_moe("nv")
    folder = Path(write_checkpoint(str(tmp_path / "nv"), tensors, config, extra=extra))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = "model-00003-of-00003.safetensors"  # it is in 00002
    index["weight_map"]["model.language_model.layers.9.mlp.gate.weight"] = "model-00001-of-00003.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    write_safetensors(str(folder / "stray.safetensors"), {"x.weight": ("BF16", [2, 2])})
    warnings = inspect_checkpoint(str(folder))["warnings"]
    assert sorted(warnings) == sorted(
        [
            "1 tensor(s) named in the index are in no shard (incomplete download?)",
            "lm_head.weight is in model-00002-of-00003.safetensors but the index says model-00003-of-00003.safetensors",
            "stray.safetensors is not in the index; loaders ignore it",
        ]
    )


def test_missing_path(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint"):
        inspect_local(str(tmp_path / "nowhere"))


# ---------------------------------------------------------------- command line


@pytest.fixture(autouse=True)
def _unbind_logs():
    """main() points structlog at this test's captured stderr; later tests must not write to it once closed."""
    yield
    structlog.reset_defaults()


def test_cli_text_and_compare(qwen, capsys):
    rc = main(["inspect", qwen["uns-fast"]["path"], qwen["uns"]["path"], "--tok-s", "60", "--tok-s", "58.2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "routed experts: packed FP4; kept at higher precision: layers 2–3 experts FP8" in out
    assert "MTP module: present, unquantized: 41 tensors (41 BF16)" in out
    assert "at 273 GB/s (third-party figure)" in out
    assert "uns vs uns-fast: bytes predict" in out and "not explained by bytes" in out


def test_cli_json(qwen, capsys):
    assert main(["inspect", qwen["nv"]["path"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == qwen["nv"]


def test_cli_bad_header_exits_2_naming_the_file(tmp_path, capsys):
    path = _raw(tmp_path / "bad.safetensors", b"{}", length=2**62)
    assert main(["inspect", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spark-agent: error: ") and path in err and err.count("\n") == 1


def test_hostside_module_runs_with_stdlib_only(qwen):
    """`python3 -S -m agent.hostside.safetensors PATH` (no site-packages) prints the same summary."""
    out = subprocess.run(
        [sys.executable, "-S", "-m", "agent.hostside.safetensors", qwen["uns"]["path"]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert json.loads(out) == qwen["uns"]
