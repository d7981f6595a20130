"""The decode bandwidth ceiling: rules lookup, % of ceiling, flags, explained / not explained pairs."""

from __future__ import annotations

import pytest

from agent.errors import UserError
from agent.hostside.safetensors import inspect_checkpoint
from agent.judging.bandwidth import bandwidth_for, ceiling_notes, ceiling_tok_s, single_stream_tok_s

from .test_inspect_build import build_qwen

pytestmark = pytest.mark.unit

GIB = 2**30


def test_bandwidth_from_rules_by_arch_or_gpu_name():
    assert bandwidth_for("gb10") == (273.0, "third-party figure")
    assert bandwidth_for("NVIDIA GB10") == (273.0, "third-party figure")
    assert bandwidth_for("NVIDIA H200")[0] > 1000  # \bH200\b: GH200 is another row
    assert bandwidth_for("NVIDIA GH200 480GB") != bandwidth_for("NVIDIA H200")


def test_unknown_gpu_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"gpus.toml: no GPU matches 'tpu-v9'.*--bandwidth-gbs"):
        bandwidth_for("tpu-v9")
    rules = tmp_path / "gpus.toml"
    rules.write_text('[x1]\nname = "X1"\n')
    with pytest.raises(UserError, match=r"\[x1\] has no bandwidth_gbs"):
        bandwidth_for("x1", rules)


def test_ceiling_is_bandwidth_over_bytes():
    assert ceiling_tok_s(2.73e9, 273) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        ceiling_tok_s(0, 273)


def test_single_stream_speed_from_tpot_else_throughput():
    assert single_stream_tok_s({"median_tpot_ms": 20.0, "output_throughput": 40.0}) == pytest.approx(50.0)
    assert single_stream_tok_s({"median_tpot_ms": 0.0, "output_throughput": 40.0}) == pytest.approx(40.0)


def _point(label, gib, tok_s, speculative=False):
    return {"label": label, "bytes_per_token": int(gib * GIB), "tok_s": tok_s, "speculative": speculative}


def test_rows_give_percent_of_ceiling_and_flag_points_above_it():
    notes = ceiling_notes(
        [
            _point("ok", 1.0, 127.1),
            _point("spec", 1.0, 400.0, True),
            _point("wrong", 1.0, 300.0),
            {"label": "?", "bytes_per_token": None, "tok_s": 10},
        ],
        273,
        "third-party figure",
    )
    ok, spec, wrong, unknown = notes["rows"]
    assert ok["ceiling_tok_s"] == pytest.approx(254.25, abs=0.01)
    assert ok["pct_of_ceiling"] == 50.0 and ok["flag"] == ""
    assert spec["flag"] == "above_ceiling_speculative" and "speculative decoding is on" in spec["note"]
    assert wrong["flag"] == "above_ceiling_inputs_wrong" and "inputs are wrong" in wrong["note"]
    assert unknown["pct_of_ceiling"] is None and "unknown" in unknown["note"]
    assert notes["bandwidth_source"] == "third-party figure"


def test_pairs_like_the_article():
    """Twins 7.9% apart and uns -3.0% where bytes say -13%: not explained. FP8 -> NVFP4: explained."""
    notes = ceiling_notes(
        [
            _point("nv", 1.00, 100.0),
            _point("uns-fast", 1.00, 92.1),
            _point("uns", 1.154, 89.3),
            _point("fp8", 1.59, 59.2),
            _point("nv-spec", 1.00, 180.0, True),
        ],
        273,
    )
    pairs = {(p["a"], p["b"]): p for p in notes["pairs"]}
    assert all("nv-spec" not in key for key in pairs)  # no pairs across speculative settings
    twins = pairs[("nv", "uns-fast")]
    assert (twins["predicted_pct"], twins["measured_pct"], twins["explained"]) == (0.0, -7.9, False)
    uns = pairs[("uns-fast", "uns")]
    assert (uns["predicted_pct"], uns["measured_pct"], uns["explained"]) == (-13.3, -3.0, False)
    assert uns["note"] == "uns vs uns-fast: bytes predict -13.3%, measured -3.0%: not explained by bytes"
    cross = pairs[("nv", "fp8")]
    assert cross["predicted_pct"] == -37.1 and cross["measured_pct"] == -40.8 and cross["explained"] is True


def test_ceiling_from_an_inspected_checkpoint(tmp_path):
    s = inspect_checkpoint(build_qwen(str(tmp_path / "nv"), "nv"))
    notes = ceiling_notes([{"label": s["name"], "bytes_per_token": s["bytes_per_token"], "tok_s": 1000.0}], 273)
    assert notes["rows"][0]["ceiling_tok_s"] == pytest.approx(273e9 / s["bytes_per_token"], abs=0.01)
