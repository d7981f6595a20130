"""Checkpoint inspection, here or on a host, and its text rendering.

The reading is agent/hostside/safetensors.py (headers only). On a host (`host` + `inventory`) the
playbooks/inspect.yml playbook runs that same module there and only the summary comes back.
"""

from __future__ import annotations

from agent.errors import UserError
from agent.hostside import safetensors
from agent.hostside.safetensors import FORMAT_LABEL, compare, size_text
from agent.judging.bandwidth import ceiling_notes
from agent.running import tasks

__all__ = [
    "compare",
    "format_ceiling",
    "format_comparison",
    "format_summary",
    "inspect",
    "inspect_local",
    "inspect_remote",
]

KIND_LABEL = {
    "fp4_weights": "packed FP4 weights",
    "fp4_scales": "FP4 scale tensors",
    "fp8_weights": "FP8 weights",
    "fp8_scales": "FP8 scale tensors",
    "high_precision": "high precision",
}


def inspect(path: str, host: str | None = None, inventory: str | None = None) -> dict:
    """The summary of one checkpoint: local, or on `host` of `inventory`."""
    if host:
        return inspect_remote(path, host, inventory)
    return inspect_local(path)


def inspect_local(path: str) -> dict:
    try:
        return safetensors.inspect_checkpoint(path)
    except safetensors.CheckpointError as exc:
        raise UserError(f"{exc}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the checkpoint ({exc.strerror or exc})") from None


def inspect_remote(path: str, host: str, inventory: str | None) -> dict:
    from agent.running.playbooks import run_playbook  # ansible is only needed for the remote path

    if not inventory:
        raise UserError(f"{host}: --host needs an inventory (-i INVENTORY) that defines it")
    run = run_playbook(tasks.INSPECT.playbook, inventory, {"path": path}, limit=host)
    if host in run.unreachable:
        raise UserError(f"{host}: unreachable ({run.unreachable[host]}); check the inventory and SSH access")
    if host in run.failures:
        raise UserError(f"{host}: {run.failures[host]}")
    if run.failures:  # ansible failed before reaching the host, e.g. no such host in the inventory
        raise UserError(f"{host}: {next(iter(run.failures.values()))} (is {host} in {inventory}?)")
    result = run.results.get(host, {}).get(tasks.INSPECT.name)
    if not isinstance(result, dict) or "summary" not in result:
        raise UserError(f"{host}: not in inventory {inventory}, or the inspect task did not run there")
    return _host_summary(result["summary"], host)


def _host_summary(summary: object, host: str) -> dict:
    """A summary from a host is bounded JSON of the expected shape: format_summary must not trip over it."""
    from agent.running import hostdata

    try:
        checked = hostdata.bounded_json(hostdata.mapping(summary, f"{host}: checkpoint summary"), f"{host}: summary")
        format_summary(checked)
    except hostdata.BadHostData as exc:
        raise UserError(f"{host}: bad checkpoint summary from the host: {exc.reason}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        detail = hostdata.one_line(f"{type(exc).__name__}: {exc}")
        raise UserError(f"{host}: bad checkpoint summary from the host ({detail})") from None
    return checked


def format_summary(s: dict) -> str:
    lines = [
        f"{s['name']}: {s['shards']} shard(s), {s['tensors']} tensors, {size_text(s['total_bytes'])}  ({s['path']})"
    ]
    for q in s["quant_configs"]:
        lines.append("quantization config: " + ", ".join(f"{k}={v}" for k, v in q.items()))
    lines.append(
        f"activation scales: {s['activation_scales']}   packed FP4 tensors: {s['packed_fp4_tensors']}   "
        f"high-precision weights: {s['high_precision_weights']}"
    )
    lines.append(
        "by dtype: " + ", ".join(f"{d} {r['tensors']} ({size_text(r['bytes'])})" for d, r in s["dtypes"].items())
    )
    lines.append(
        "by kind:  "
        + ", ".join(f"{KIND_LABEL[k]} {r['tensors']} ({size_text(r['bytes'])})" for k, r in s["kinds"].items())
    )
    lines.append(f"{'role':<15}{'tensors':>8}{'size':>12}  {'activation':<10} formats (modules)")
    for role, r in s["roles"].items():
        formats = ", ".join(f"{n} {FORMAT_LABEL[f]}" for f, n in r["formats"].items())
        lines.append(f"{role:<15}{r['tensors']:>8}{size_text(r['bytes']):>12}  {r['activation']:<10} {formats}")
    if s["expert_format"]:
        raised = "; ".join(r["text"] for r in s["high_precision_expert_layers"]) or "none"
        lines.append(f"routed experts: {FORMAT_LABEL[s['expert_format']]}; kept at higher precision: {raised}")
    m = s["mtp"]
    mtp = (
        "absent"
        if not m["present"]
        else (
            f"present, {'quantized' if m['quantized'] else 'unquantized'}: {m['tensors']} tensors ("
            + ", ".join(f"{n} {d}" for d, n in m["dtypes"].items())
            + ")"
        )
    )
    lines.append(f"MTP module: {mtp}")
    lines.append(_bytes_line(s))
    lines += [f"warning: {w}" for w in s["warnings"]]
    return "\n".join(lines)


def _bytes_line(s: dict) -> str:
    if s["bytes_per_token"] is None:
        return "bytes per token: unknown (see warnings)"
    parts = s["bytes_per_token_parts"]
    moe = s["moe"]
    routed = (
        (
            f", active routed experts {size_text(parts['routed_experts_active'])} "
            f"(top-{moe['num_experts_per_tok']} of {moe['num_experts']})"
        )
        if parts["routed_experts_active"]
        else ""
    )
    return (
        f"bytes per token: {size_text(s['bytes_per_token'])} (always read {size_text(parts['always'])}{routed}, "
        f"embeddings/lm_head {size_text(parts['embeddings'])}; MTP and vision not counted)"
    )


def format_comparison(c: dict) -> str:
    lines = [f"{c['a']} vs {c['b']}: {c['headline']}"]
    lines += [f"  {d}" for d in c["differences"]] or ["  no differences in formats, dtypes, MTP or activation scales"]
    return "\n".join(lines)


def format_ceiling(
    summaries: list[dict], gbs: float, source: str, tok_s: list[float] | None = None, speculative: bool = False
) -> str:
    """Decode ceilings for the summaries; with measured tok/s, % of ceiling and the pair notes too."""
    points = [
        {
            "label": s["name"],
            "bytes_per_token": s["bytes_per_token"],
            "tok_s": (tok_s[i] if tok_s and i < len(tok_s) else 0.0),
            "speculative": speculative,
        }
        for i, s in enumerate(summaries)
    ]
    notes = ceiling_notes(points, gbs, source)
    lines = []
    for row, point in zip(notes["rows"], points, strict=False):
        ceiling = "unknown" if row["ceiling_tok_s"] is None else f"{row['ceiling_tok_s']:.1f} tok/s"
        line = f"single-stream decode ceiling of {row['label']}: {ceiling} at {gbs:g} GB/s ({source})"
        if point["tok_s"]:
            line += f"; measured {row['tok_s']:.1f} tok/s: {row['note']}"
        lines.append(line)
    if tok_s:
        lines += [p["note"] for p in notes["pairs"]]
    return "\n".join(lines)
