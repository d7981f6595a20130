"""The single-stream decode ceiling: tokens/s <= memory bandwidth / weight bytes read per token.

Bandwidth comes from agent/rules/gpus.toml (`bandwidth_gbs`, `bandwidth_source`, per GPU arch) or from a
measured value. Bytes per token come from `inspect_checkpoint()` (agent/hostside/safetensors.py).

For the report (agent/report.py):

    from agent.judging.bandwidth import bandwidth_for, ceiling_notes, single_stream_tok_s
    gbs, source = bandwidth_for(cell["facts"]["arch"])          # or a measured GB/s and "measured"
    notes = ceiling_notes([
        {"label": "nv", "bytes_per_token": summary_nv["bytes_per_token"],
         "tok_s": single_stream_tok_s(c001_r1), "speculative": bool(cell["config"]["speculative"])},
        ...], gbs, source)
    notes["rows"]   # one per point: label, bytes_per_token, ceiling_tok_s, tok_s, pct_of_ceiling,
                    #   speculative, flag ("" | "above_ceiling_speculative" | "above_ceiling_inputs_wrong"), note
    notes["pairs"]  # each two points with the same speculative setting, in input order: a, b, predicted_pct,
                    #   measured_pct, explained (bool or None when unknown), note
                    #   e.g. "uns vs uns-fast: bytes predict -13.3%, measured -3.0%: not explained by bytes"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from agent.errors import UserError
from agent.hostside import facts as hostfacts

# A difference between two points is "explained by bytes" when the measured change lies within
# max(TOLERANCE_POINTS, TOLERANCE_SHARE * |predicted|) percentage points of the predicted change.
TOLERANCE_POINTS = 3.0
TOLERANCE_SHARE = 0.25


class Point(TypedDict):
    label: str
    bytes_per_token: int | None  # None when unknown
    tok_s: float  # measured single-stream decode speed (0.0 = not measured)
    speculative: bool


class CeilingRow(TypedDict):
    label: str
    bytes_per_token: int | None
    tok_s: float
    speculative: bool
    ceiling_tok_s: float | None
    pct_of_ceiling: float | None
    flag: str  # "" | above_ceiling_speculative | above_ceiling_inputs_wrong
    note: str


class CeilingPair(TypedDict):
    a: str
    b: str
    predicted_pct: float | None
    measured_pct: float | None
    explained: bool | None  # None when unknown
    note: str


class CeilingNotes(TypedDict):
    bandwidth_gbs: float
    bandwidth_source: str
    rows: list[CeilingRow]
    pairs: list[CeilingPair]


def bandwidth_for(arch_or_gpu: str, rules: Path = hostfacts.DEFAULT_GPU_RULES) -> tuple[float, str]:
    """(GB/s, source) for an arch key of gpus.toml ("gb10") or a GPU name ("NVIDIA GB10")."""
    if not Path(rules).is_file():
        raise UserError(f"{rules}: cannot read the GPU rules (no such file)")
    try:
        table = hostfacts.load_gpu_rules(rules)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{rules}: cannot read the GPU rules ({exc})") from None
    wanted = arch_or_gpu.strip()
    by_key = {arch.lower(): arch for arch in table}
    # The GPU's name alone: no compute capability to check, the name patterns decide (the host's own matcher).
    arch = by_key.get(wanted.lower()) or hostfacts.match_arch(wanted, "", table)
    if not arch:
        raise UserError(
            f"{rules}: no GPU matches {arch_or_gpu!r} (known: {', '.join(sorted(table))}); "
            "pass --bandwidth-gbs with a measured value"
        )
    row = table[arch]
    if not isinstance(row.get("bandwidth_gbs"), (int, float)):
        raise UserError(f"{rules}: [{arch}] has no bandwidth_gbs; add it or pass --bandwidth-gbs")
    return float(row["bandwidth_gbs"]), str(row.get("bandwidth_source", "rules file"))


def ceiling_tok_s(bytes_per_token: float, gbs: float) -> float:
    """The most tokens/s one stream can decode when every token reads its weights once (GB = 10^9 bytes)."""
    if not bytes_per_token or bytes_per_token <= 0 or gbs <= 0:
        raise ValueError(f"need positive bytes per token and bandwidth, got {bytes_per_token} and {gbs}")
    return gbs * 1e9 / bytes_per_token


def single_stream_tok_s(measurement: Mapping[str, Any]) -> float:
    """Decode speed of one stream from a c001-rK measurement: 1000 / median TPOT (no prefill in it);
    output_throughput when TPOT is missing."""
    tpot = float(measurement.get("median_tpot_ms") or 0.0)
    return 1000.0 / tpot if tpot > 0 else float(measurement.get("output_throughput") or 0.0)


def ceiling_notes(
    points: Sequence[Point],
    gbs: float,
    source: str = "",
    tolerance_points: float = TOLERANCE_POINTS,
    tolerance_share: float = TOLERANCE_SHARE,
) -> CeilingNotes:
    """Rows with % of the ceiling and flags, and explained/not-explained notes for pairs (see module doc).

    points: [{"label", "bytes_per_token" (int or None), "tok_s" (measured single-stream), "speculative"}]
    """
    rows = [_row(p, gbs) for p in points]
    pairs = [
        _pair(a, b, tolerance_points, tolerance_share)
        for i, a in enumerate(rows)
        for b in rows[i + 1 :]
        if a["speculative"] == b["speculative"]
    ]
    return CeilingNotes(bandwidth_gbs=gbs, bandwidth_source=source, rows=rows, pairs=pairs)


def _row(point: Point, gbs: float) -> CeilingRow:
    row = CeilingRow(
        label=str(point["label"]),
        bytes_per_token=point.get("bytes_per_token"),
        tok_s=float(point["tok_s"]),
        speculative=bool(point.get("speculative")),
        ceiling_tok_s=None,
        pct_of_ceiling=None,
        flag="",
        note="",
    )
    per_token = row["bytes_per_token"]
    if not per_token:
        row["note"] = "bytes per token unknown: no ceiling"
        return row
    ceiling = round(ceiling_tok_s(per_token, gbs), 2)
    pct = round(100.0 * row["tok_s"] / ceiling, 1)
    row["ceiling_tok_s"], row["pct_of_ceiling"] = ceiling, pct
    if pct > 100.0 and row["speculative"]:
        row["flag"] = "above_ceiling_speculative"
        row["note"] = f"{pct:.0f}% of the ceiling: speculative decoding is on, so one weight read yields several tokens"
    elif pct > 100.0:
        row["flag"] = "above_ceiling_inputs_wrong"
        row["note"] = (
            f"{pct:.0f}% of the ceiling without speculative decoding: "
            "the inputs are wrong (bandwidth, bytes per token or the measurement)"
        )
    else:
        row["note"] = f"{pct:.0f}% of the bandwidth ceiling"
    return row


def _pair(a: CeilingRow, b: CeilingRow, tolerance_points: float, tolerance_share: float) -> CeilingPair:
    """b relative to a: bytes predict tok/s to scale by bytes_a / bytes_b."""
    measured = round((b["tok_s"] / a["tok_s"] - 1) * 100, 1) if a["tok_s"] > 0 else None
    pair = CeilingPair(a=a["label"], b=b["label"], predicted_pct=None, measured_pct=measured, explained=None, note="")
    bytes_a, bytes_b = a["bytes_per_token"], b["bytes_per_token"]
    if not (bytes_a and bytes_b) or measured is None:
        pair["note"] = f"{b['label']} vs {a['label']}: bytes per token or speed unknown, nothing to explain"
        return pair
    predicted = round((bytes_a / bytes_b - 1) * 100, 1)
    explained = abs(measured - predicted) <= max(tolerance_points, tolerance_share * abs(predicted))
    pair["predicted_pct"], pair["explained"] = predicted, explained
    verdict = "explained by bytes" if explained else "not explained by bytes"
    pair["note"] = (
        f"{b['label']} vs {a['label']}: bytes predict {predicted:+.1f}%, measured {measured:+.1f}%: {verdict}"
    )
    return pair
