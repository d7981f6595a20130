"""Fast and right: a cell whose probe outputs are degenerate, score too low, or disagree with its checkpoint's
reference cell is WRONG OUTPUT, shown but never ranked (docs/correctness.md). A cell served on dummy weights
(`--load-format dummy`) is never judged: "quality not judged: dummy weights", ranked on speed only.

`table` scores one cell's probe.json on the controller (collect: the host's own judgement is never asked for);
`annotate` compares the cells of one checkpoint with their reference when a tree is read (tree.load_cells), since
the reference may be measured after the cell; `wrong_reasons` is what cell_verdict asks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.hostside import probe
from agent.hostside.contracts import Correctness, ProbeResult
from agent.planning.settings import CorrectnessSettings

THRESHOLDS = ("min_score", "max_score_drop", "min_agreement", "max_degenerate")
DUMMY = "dummy weights"


def not_judged(cell: Mapping[str, Any]) -> str:
    """Why this cell's outputs are not judged ("" = they are). A server on random weights (`--load-format dummy`,
    seen in the launch or in the log's non-default args) answers with noise by construction: that is no fault."""
    attestation = cell.get("attestation")
    if isinstance(attestation, Mapping) and str(attestation.get("load_format", "")).lower() == "dummy":
        return DUMMY
    launch, config = cell.get("launch"), cell.get("config")
    argv = [str(a) for a in (launch.get("argv") or [] if isinstance(launch, Mapping) else [])]
    argv += [str(a) for a in (config.get("extra_args") or [] if isinstance(config, Mapping) else [])]
    flags = [f"{a}={b}" for a, b in itertools.pairwise(argv)] + argv
    return DUMMY if "--load-format=dummy" in flags else ""


def table(run: Mapping[str, Any] | None, settings: CorrectnessSettings) -> Correctness:
    """[correctness] of cell.toml from probe.json as validated (hostdata.probe_run); None: the probe did not run."""
    out = Correctness(
        thresholds={k: float(getattr(settings, k)) for k in THRESHOLDS},
        reference=dict(settings.reference),
        probed=False,
    )
    if not run:
        return out
    if int(run.get("set_version", 0)) != probe.SET_VERSION:  # another version's prompts: nothing to score with
        return out
    asked = {p["id"]: p for p in probe.prompts()}
    results: list[ProbeResult] = []
    for o in run.get("outputs", []):
        p = asked.get(o["id"])
        if p is None:
            continue
        r = ProbeResult(id=p["id"], kind=p["kind"], text=o["text"], error=o["error"])
        r["degenerate"] = "" if o["error"] else probe.degenerate(o["text"], p["max_tokens"])
        if p["answer"]:
            r["exact"] = not o["error"] and probe.normalize(o["text"]) == p["answer"]
        results.append(r)
    answered = [r for r in results if "exact" in r]
    exact = sum(bool(r["exact"]) for r in answered)
    out["set_version"] = probe.SET_VERSION
    out["probed"] = bool(results)
    out["seconds"] = float(run.get("seconds", 0.0))
    out["prompts"] = len(results)
    out["answered"] = len(answered)
    out["exact"] = exact
    out["score"] = round(exact / len(answered), 4) if answered else 0.0
    out["degenerate"] = sum(bool(r["degenerate"]) for r in results)
    out["errors"] = sum(bool(r["error"]) for r in results)
    out["outputs"] = results
    return out


def own_reasons(c: Mapping[str, Any]) -> list[str]:
    """What makes a cell's outputs wrong on their own: degenerate outputs, too low a score, failed requests."""
    if not c.get("probed"):
        return []
    t = c.get("thresholds", {})
    prompts = max(int(c.get("prompts", 0)), 1)
    reasons = []
    share = int(c.get("degenerate", 0)) / prompts
    if share > float(t.get("max_degenerate", 0.1)):
        kinds = sorted({r["degenerate"] for r in c.get("outputs", []) if r.get("degenerate")})
        reasons.append(f"degenerate outputs: {c.get('degenerate')} of {prompts} ({', '.join(kinds)})")
    if int(c.get("errors", 0)) * 2 > prompts:
        reasons.append(f"the probe's requests failed: {c.get('errors')} of {prompts}")
    if float(c.get("score", 0.0)) < float(t.get("min_score", 0.0)):
        reasons.append(f"task score {c.get('score', 0.0):.0%} below the minimum {t.get('min_score'):.0%}")
    return reasons


def _group_key(cell: Mapping[str, Any]) -> tuple[str, str, str]:
    """Cells whose greedy outputs should agree: one sweep, one checkpoint, one image."""
    cfg = cell.get("config", {})
    return (str(cell.get("sweep", "")), str(cfg.get("checkpoint") or cfg.get("model") or ""), str(cfg.get("image")))


def _matches(cell: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    cfg = cell.get("config", {})
    return all(str(cfg.get(k) or "auto") == str(v or "auto") for k, v in wanted.items())


def reference(group: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The group's reference: a probed, valid cell whose outputs are sane on their own; the one the spec names
    when it names one, else the highest task score (then the earliest start, then the id: deterministic).
    Highest score rather than first measured: a fast-but-broken first backend must not become the yardstick."""
    fit = [
        c
        for c in group
        if c.get("verdict") == "valid"
        and c.get("status") != "failed"
        and not not_judged(c)  # noise by construction: never the yardstick
        and c.get("correctness", {}).get("probed")
        and not own_reasons(c["correctness"])
    ]
    wanted = next((c["correctness"].get("reference") for c in fit if c["correctness"].get("reference")), None)
    if wanted:
        named = [c for c in fit if _matches(c, wanted)]
        fit = named or fit
    fit.sort(key=lambda c: (-float(c["correctness"].get("score", 0.0)), str(c.get("started_at")), c.get("cell_id")))
    return fit[0] if fit else None


def compare(c: Correctness, ref: Correctness) -> tuple[float, int]:
    """(mean agreement over the prompts both answered, earliest first divergence; -1 = none). Each output row
    gains its own agreement and first divergence."""
    theirs = {r["id"]: r for r in ref.get("outputs", []) if not r.get("error")}
    shares, first = [], -1
    for r in c.get("outputs", []):
        other = theirs.get(r["id"])
        if other is None or r.get("error"):
            continue
        share, at = probe.agreement(other["text"], r["text"])
        r["agreement"], r["first_divergence"] = round(share, 4), at
        shares.append(share)
        if at >= 0 and (first < 0 or at < first):
            first = at
    return (round(sum(shares) / len(shares), 4) if shares else 0.0), first


def annotate(cells: Iterable[dict[str, Any]]) -> None:
    """Add agreement with the group's reference and the reasons for WRONG OUTPUT to every probed cell (in place)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for cell in cells:
        if isinstance(cell.get("correctness"), dict) and cell["correctness"].get("probed"):
            groups.setdefault(_group_key(cell), []).append(cell)
    for group in groups.values():
        ref = reference(group)
        for cell in group:
            c = cell["correctness"]
            reasons = own_reasons(c)
            c["reference_cell"] = ref["cell_id"] if ref else ""
            c["not_judged"] = not_judged(cell)
            if ref is None or ref is cell:
                c["agreement"], c["first_divergence"] = (1.0, -1) if ref is cell else (0.0, -1)
            else:
                r = ref["correctness"]
                c["agreement"], c["first_divergence"] = compare(c, r)
                t = c.get("thresholds", {})
                if c["agreement"] < float(t.get("min_agreement", 0.6)):
                    reasons.append(
                        f"agreement with the reference ({ref['cell_id']}) {c['agreement']:.0%} below "
                        f"{float(t.get('min_agreement', 0.6)):.0%} (first divergence at word {c['first_divergence']})"
                    )
                drop = float(r.get("score", 0.0)) - float(c.get("score", 0.0))
                if drop > float(t.get("max_score_drop", 0.25)) + 1e-9:
                    reasons.append(
                        f"task score {c.get('score', 0.0):.0%}, {drop:.0%} below the reference's "
                        f"{r.get('score', 0.0):.0%} (allowed: {float(t.get('max_score_drop', 0.25)):.0%})"
                    )
            c["wrong"] = [] if c["not_judged"] else reasons


def wrong_reasons(cell: Mapping[str, Any]) -> list[str]:
    """Why this cell's outputs are wrong ([] = they are not, or were never probed). Uses the group judgement when
    the tree was read through load_cells, else the cell's own checks."""
    c = cell.get("correctness")
    if not isinstance(c, Mapping) or not c.get("probed") or not_judged(cell):
        return []
    return list(c["wrong"]) if "wrong" in c else own_reasons(c)
