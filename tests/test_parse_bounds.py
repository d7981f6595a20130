"""Parsers fed hostile input: the bounds apply (lines cut, lists capped, nesting refused, files kept inside
their folder) and the answers stay right. Speed is measured by bench/bench_attest_adversarial.py, not here."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import pytest

from agent.hostside import logparse
from agent.hostside.logparse import (
    MAX_ITEMS,
    MAX_LINE,
    Follower,
    follow_file,
    parse,
    parse_file,
    pyrepr,
    signature,
    speculation,
)
from agent.hostside.safetensors import CheckpointError, inspect_checkpoint, read_header

from .test_inspect_build import qwen_moe, write_checkpoint, write_safetensors

pytestmark = pytest.mark.unit

LOGS = Path(__file__).resolve().parent / "data" / "logs"
STARTUP = (LOGS / "synthetic" / "v0.24-nvfp4-marlin-mtp.log").read_text()
INFO = "(APIServer pid=1) INFO 11-29 18:00:00 [x.py:1] "


# ---------------------------------------------------------------- logparse


@pytest.mark.parametrize("path", sorted(LOGS.rglob("*.log")), ids=lambda p: p.name)
def test_streamed_file_gives_the_same_facts_as_the_text(path, tmp_path):
    assert parse_file(str(path)) == parse(path.read_bytes().decode("utf-8", errors="replace"))


def test_streamed_file_decodes_utf8_split_across_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(logparse, "_PARSE_CHUNK", 7)  # every multi-byte character lands on a cut somewhere
    path = tmp_path / "v.log"
    path.write_bytes(STARTUP.encode() + b"\xff\xfe broken \xe2\x96\n" + "\u2588 é ✓\n".encode())
    assert parse_file(str(path)) == parse(path.read_bytes().decode("utf-8", errors="replace"))


def test_giant_line_is_cut_counted_and_the_rest_of_the_log_still_read():
    follower = Follower()
    follower.feed_chunk(STARTUP[:5000])
    for _ in range(40):  # 40 MB of one line, arriving in pieces
        follower.feed_chunk("Error " * 170_000)
        assert len(follower._partial) <= MAX_LINE  # what is held back never grows past the cap
    follower.feed_chunk("\n" + STARTUP[5000:])
    follower.flush()
    facts = follower.facts()
    assert follower.lines_cut == 1
    assert {k: facts[k] for k in ("moe_backend", "vllm_version", "startup_complete")} == {
        "moe_backend": "marlin",
        "vllm_version": "0.24.0",
        "startup_complete": True,
    }


def test_long_lines_in_feed_are_cut_to_the_cap_and_still_counted():
    follower = Follower()
    follower.feed("\n".join([INFO + "Using " + "x" * (2 * MAX_LINE)] * 3))
    facts = follower.facts()
    assert follower.lines_cut == 3 and facts["vllm_log_lines"] == 3


def test_a_fatal_line_after_a_long_prefix_within_the_cap_is_still_seen():
    line = INFO.replace("INFO", "ERROR") + "x" * (MAX_LINE // 2) + " CUDA out of memory"
    assert parse(STARTUP.split("Application startup")[0] + line + "\n")["failure"]["class"] == "oom"


def test_new_names_every_line_stay_capped_and_deduplicated():
    lines = []
    for i in range(MAX_ITEMS * 3):
        lines.append(INFO + f"Unknown vLLM environment variable detected: VAR_{i}")
        lines.append(INFO + f"Selected K{i}NvFp4LinearKernel for NVFP4")
        lines.append(INFO + "Unknown vLLM environment variable detected: VAR_0")  # a repeat: kept once
    follower = Follower()
    follower.feed("\n".join(lines))
    facts = follower.facts()
    assert facts["unknown_env"] == [f"VAR_{i}" for i in range(MAX_ITEMS)]
    assert len(facts["linear_kernels"]) == MAX_ITEMS and len(set(facts["linear_kernels"])) == MAX_ITEMS
    assert follower.items_dropped == 2 * 2 * MAX_ITEMS
    assert len([k for k in facts["evidence"] if k.startswith("unknown_env:")]) == MAX_ITEMS


def test_acceptance_rates_are_capped(monkeypatch):
    monkeypatch.setattr(speculation, "MAX_RATES", 5)
    follower = Follower()
    follower.feed("\n".join([INFO + "SpecDecoding metrics: Avg Draft acceptance rate: 50.0%"] * 9))
    assert follower.facts()["spec_acceptance_rates"] == [0.5] * 5 and follower.items_dropped == 4


@pytest.mark.parametrize(
    "args,expected",
    [
        ("{" + "[" * 5000, {}),  # deeper than the parser allows
        ("{'speculative_config': '" + "[" * 5000 + "'}", {"speculative_config": "[" * 5000}),  # JSON too deep
        ("{'a': " + "9" * 5000 + "}", {}),  # an int past Python's digit limit
        ("{'a': 1", {}),  # cut off
    ],
    ids=["deep-repr", "deep-json", "huge-int", "cut-off"],
)
def test_hostile_non_default_args_give_no_args_and_no_crash(args, expected):
    facts = parse(INFO + "non-default args: " + args + "\n")
    assert facts["non_default_args"] == expected and facts["speculative"]["method"] == ""


def test_only_a_few_bad_args_lines_are_evaluated(monkeypatch):
    calls = []
    monkeypatch.setattr(pyrepr, "literal_dict", lambda text: calls.append(text) or {})
    parse((INFO + "non-default args: {'x'\n") * 100)
    assert len(calls) == 4


NEAR_MISSES = [
    ("Error " * 50 + "CUTE_DSL_ARCH", "cute_dsl_arch"),
    ("Error " * 50 + "CUTE_DSL", ""),
    ("x layout.hpp " * 20 + "Unknown recipe", "deep_gemm_assert"),
    ("Unknown recipe layout.hpp", ""),
    ("deep_gemm " * 10 + "Assertion failed", "deep_gemm_assert"),
    ("ptxas " * 30 + "sm_121a", "ptxas_arch"),
    ("sm_121a ptxas", ""),
    ("flashinfer-cubin version 1 version 2 does not match", "flashinfer_version"),
    ("flashinfer-cubin version  does not match", "flashinfer_version"),
    ("flashinfer-cubin version does not match", ""),
    ("Free memory on device 1 GiB " * 5 + "is less than desired GPU memory utilization", "free_memory_check"),
    ("No No No " + "FP8 MoE backend supports the deployment configuration", "no_moe_backend"),
    ("No " * 100 + "MoE backend", ""),
]


@pytest.mark.parametrize("msg,cls", NEAR_MISSES)
def test_fatal_signatures_match_as_the_plain_regexes_did(msg, cls):
    assert signature.signature_of(msg) == cls
    old = {  # the patterns as written before they were made linear
        "cute_dsl_arch": r"[Ee]rror.*CUTE_DSL_ARCH",
        "deep_gemm_assert": r"layout\.hpp.*Unknown recipe|deep_gemm.*Assertion",
        "ptxas_arch": r"ptxas.*sm_12\d",
        "flashinfer_version": r"flashinfer-(?:cubin|jit-cache) version .* does not match",
        "free_memory_check": r"Free memory on device.*is less than desired GPU memory utilization",
        "no_moe_backend": r"No [\w ]*MoE backend supports the deployment configuration",
    }
    assert cls == next((c for c, rx in old.items() if re.search(rx, msg)), "")


def test_logo_version_after_many_blocks():
    facts = parse(INFO + "\u2588" * 5000 + " version 0.24.0\n" + INFO + "\u2588" * 5000 + " version x\n")
    assert facts["vllm_version"] == "0.24.0"


def test_parse_file_stops_at_its_byte_cap_and_says_so(tmp_path):
    path = tmp_path / "big.log"
    path.write_text(STARTUP + (INFO + "Unknown vLLM environment variable detected: LATE\n") * 10)
    follower = follow_file(str(path), max_bytes=len(STARTUP.encode()))
    assert follower.stopped_early and follower.bytes_read == len(STARTUP.encode())
    assert "LATE" not in follower.facts()["unknown_env"]
    assert not follow_file(str(path)).stopped_early


# ---------------------------------------------------------------- safetensors


def _raw(path: Path, body: bytes) -> str:
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    return str(path)


@pytest.mark.parametrize(
    "body,words",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"__metadata__": [1]}', "__metadata__ is not an object"),
        (json.dumps({"w" * 5000: {"dtype": "F8_E4M3", "shape": [], "data_offsets": [0, 0]}}).encode(), "tensor name"),
        (json.dumps({"w": {"dtype": "U8", "shape": [1] * 40, "data_offsets": [0, 1]}}).encode(), "bad dtype"),
        (json.dumps({"w": {"dtype": "X" * 100, "shape": [1], "data_offsets": [0, 1]}}).encode(), "bad dtype"),
    ],
    ids=["deep", "metadata", "long_name", "many_dims", "long_dtype"],
)
def test_hostile_headers_are_refused_naming_the_file(tmp_path, body, words):
    path = _raw(tmp_path / "x.safetensors", body)
    with pytest.raises(CheckpointError) as err:
        read_header(path)
    assert path in str(err.value) and words in str(err.value)


def _checkpoint(tmp_path: Path) -> Path:
    tensors, config, extra = qwen_moe("nv")
    return Path(write_checkpoint(str(tmp_path / "ckpt"), tensors, config, extra=extra))


def _rename_shard(folder: Path, new_name: str) -> None:
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    old = "model-00001-of-00003.safetensors"
    index["weight_map"] = {k: (new_name if v == old else v) for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    "name", ["../outside.safetensors", "/etc/outside.safetensors", "a/../../outside.safetensors", "passwd"]
)
def test_index_cannot_name_files_outside_its_folder(tmp_path, name):
    folder = _checkpoint(tmp_path)
    write_safetensors(str(tmp_path / "outside.safetensors"), {"x.weight": ("BF16", [2, 2])})
    _rename_shard(folder, name)
    with pytest.raises(CheckpointError, match="inside the checkpoint folder"):
        inspect_checkpoint(str(folder))


def test_a_shard_symlinked_out_of_the_folder_is_refused(tmp_path):
    folder = _checkpoint(tmp_path)
    shard = folder / "model-00001-of-00003.safetensors"
    os.rename(shard, tmp_path / "elsewhere.safetensors")
    shard.symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(CheckpointError, match="leads outside the checkpoint folder"):
        inspect_checkpoint(str(folder))


def test_a_subfolder_symlinked_out_is_refused_without_an_index(tmp_path):
    folder = tmp_path / "single"
    folder.mkdir()
    write_safetensors(str(tmp_path / "real.safetensors"), {"x.weight": ("BF16", [2, 2])})
    (folder / "model.safetensors").symlink_to(tmp_path / "real.safetensors")
    with pytest.raises(CheckpointError, match="leads outside"):
        inspect_checkpoint(str(folder))


def test_hugging_face_cache_links_into_blobs_are_fine(tmp_path):
    """snapshots/<rev>/x.safetensors -> ../../blobs/<sha>: how every hub download is laid out."""
    src = _checkpoint(tmp_path)
    repo = tmp_path / "hub" / "models--org--name"
    snap, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for i, f in enumerate(sorted(src.iterdir())):
        os.rename(f, blobs / f"blob{i}")
        (snap / f.name).symlink_to(Path("..") / ".." / "blobs" / f"blob{i}")
    assert inspect_checkpoint(str(snap))["tensors"] == inspect_checkpoint_count(tmp_path)


def inspect_checkpoint_count(tmp_path: Path) -> int:
    return inspect_checkpoint(str(_checkpoint(tmp_path / "again")))["tensors"]


def test_oversized_or_deep_config_json_is_refused(tmp_path, monkeypatch):
    from agent.hostside import safetensors

    folder = _checkpoint(tmp_path)
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=r"config\.json: the file is nested too deeply"):
        inspect_checkpoint(str(folder))
    monkeypatch.setattr(safetensors, "JSON_LIMIT", 100)
    (folder / "config.json").write_text(json.dumps({"pad": "x" * 200}))
    with pytest.raises(CheckpointError, match="larger than 100 bytes"):
        inspect_checkpoint(str(folder))
