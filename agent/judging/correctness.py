"""Fast and right: a cell whose probe outputs are degenerate, score too low, or disagree with its checkpoint's
reference cell is WRONG OUTPUT, shown but never ranked (docs/correctness.md). A cell served on dummy weights
(`--load-format dummy`) is never judged: "quality not judged: dummy weights", ranked on speed only.

`table` scores one cell's probe.json on the controller (collect: the host's own judgement is never asked for);
`annotate` chooses each checkpoint's reference by consensus (judging/consensus.py) and compares the cells with it,
and the long outputs along each path (alone vs the reference, in a batch vs alone, speculative decoding on vs off),
when a tree is read (judged_cells), since the reference may be measured after the cell; `wrong_reasons` is what
cell_verdict asks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.hostside import probe
from agent.hostside.contracts import Correctness, LongPath, ProbeResult
from agent.judging import consensus, longdecode
from agent.planning.matrix import EAGER, without_eager
from agent.planning.settings import CorrectnessSettings
from agent.results import tree

THRESHOLDS = ("min_score", "max_score_drop", "min_agreement", "max_degenerate", "long_min_tokens", "min_task_accuracy")
PATH_ORDER = ("speculative", "graphs", "batch", "reference")  # a tie in where paths broke: the most specific one
NOT_INDEPENDENT = "reference not independent"  # its outputs agree with no other host's: advisory elsewhere
# CUDA graphs off: [correctness] eager_start (a probe-only start) or an extra_args axis gives a cell its eager twin
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
    if run.get("batch_outputs"):
        asked_batch = {p["id"]: p for p in probe.tasks()}
        right = [
            not o["error"] and probe.normalize(o["text"]) == asked_batch[o["id"]]["answer"]
            for o in run["batch_outputs"]
            if o["id"] in asked_batch
        ]
        out["batch_concurrency"] = int(run.get("batch_concurrency", 0))
        out["batch_answered"], out["batch_exact"] = len(right), sum(right)
        out["batch_score"] = round(sum(right) / len(right), 4) if right else 0.0
    if run.get("long"):
        out["long"] = [longdecode.summarize(o, settings.long_min_tokens) for o in run["long"]]
        out["long_seconds"] = float(run.get("long_seconds", 0.0))
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
    bad = [r for r in c.get("long", []) if r.get("degenerate")]
    if bad:
        first = min(bad, key=lambda r: (int(r["degenerate_at"]), r["path"] != "c1"))
        where = "alone (c=1)" if first["path"] == "c1" else "in a batch"
        reasons.append(
            f"long decode degenerates ({first['degenerate']}) after token {first['degenerate_at']} of "
            f"{first['tokens']} on {first['id']} {where}: {first['excerpt'][:120]!r}"
        )
    return reasons


def _group_key(cell: Mapping[str, Any]) -> tuple[str, str, str]:
    """Cells whose greedy outputs should agree: one sweep, one checkpoint, one image."""
    cfg = cell.get("config", {})
    return (str(cell.get("sweep", "")), str(cfg.get("checkpoint") or cfg.get("model") or ""), str(cfg.get("image")))


def _matches(cell: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    cfg = cell.get("config", {})
    return all(str(cfg.get(k) or "auto") == str(v or "auto") for k, v in wanted.items())


def _fit(group: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cells that may be the yardstick: valid, probed, outputs sane on their own; earliest start first."""
    fit = [
        c
        for c in group
        if c.get("verdict") == "valid"
        and c.get("status") != "failed"
        and not not_judged(c)  # noise by construction: never the yardstick
        and not c.get("config", {}).get("probe_only")  # a checks-only eager start: the graphs path's yardstick only
        and c.get("correctness", {}).get("probed")
        and not own_reasons(c["correctness"])
    ]
    return sorted(fit, key=lambda c: (str(c.get("started_at")), str(c.get("cell_id"))))


def reference(group: Sequence[dict[str, Any]]) -> tuple[dict[str, Any] | None, consensus.Choice, list[dict]]:
    """(the group's reference, how it was chosen, the candidates): among the sane cells (the ones the spec names,
    when it names a configuration), the consensus: the cell that agrees with the most others, across two hosts
    when there are two. Never a cell's own task score: a host can forge that, not the others' continuations."""
    fit = _fit(group)
    wanted = next((c["correctness"].get("reference") for c in fit if c["correctness"].get("reference")), None)
    named = [c for c in fit if _matches(c, wanted)] if wanted else []
    pool = named or fit
    pairs = {(i, j): _similarity(pool[i], pool[j]) for i in range(len(pool)) for j in range(i, len(pool))}
    overall = [[pairs[min(i, j), max(i, j)][0] for j in range(len(pool))] for i in range(len(pool))]
    open_ended = [[pairs[min(i, j), max(i, j)][1] for j in range(len(pool))] for i in range(len(pool))]
    t = pool[0]["correctness"].get("thresholds", {}) if pool else {}
    choice = consensus.choose(
        [str(c.get("host", "")) for c in pool], overall, open_ended, float(t.get("min_agreement", 0.6))
    )
    if named:
        choice.how = "named by the spec; " + choice.how
    ref = pool[choice.index] if choice.index is not None else None
    return ref, choice, pool


def _similarity(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[float, float]:
    """(agreement over all outputs, over the open-ended ones: continuations and long decodes alone) of two cells."""
    if a is b:
        return 1.0, 1.0
    ca, cb = a["correctness"], b["correctness"]
    theirs = {r["id"]: r for r in cb.get("outputs", []) if not r.get("error")}
    every, open_ended = [], []
    for r in ca.get("outputs", []):
        other = theirs.get(r["id"])
        if other is None or r.get("error"):
            continue
        share = probe.agreement(other["text"], r["text"])[0]
        every.append(share)
        if r.get("kind") == "text":
            open_ended.append(share)
    long_b = {r["id"]: r for r in cb.get("long", []) if r["path"] == "c1" and not r.get("error")}
    for r in ca.get("long", []):
        other = long_b.get(r["id"])
        if other is None or r["path"] != "c1" or r.get("error"):
            continue
        share = longdecode.first_divergence(other, r)[1]
        every.append(share)
        open_ended.append(share)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return mean(every), (mean(open_ended) if open_ended else 1.0)  # nothing open-ended: overall decides


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


def judged_cells(root: Path, on_bad: Callable[[Path, str], None] = tree.warn_bad_file) -> list[dict[str, Any]]:
    """Every finished cell below root (results/tree.load_cells), each probed one compared with its checkpoint's
    reference (annotate): what every reader of a sweep's answer reads, since WRONG OUTPUT needs the other cells."""
    cells = tree.load_cells(root, on_bad)
    annotate(cells)
    return cells


def annotate(cells: Iterable[dict[str, Any]]) -> None:
    """Add agreement with the group's reference, the long outputs along each path and the reasons for WRONG
    OUTPUT to every probed cell (in place)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for cell in cells:
        if isinstance(cell.get("correctness"), dict) and cell["correctness"].get("probed"):
            groups.setdefault(_group_key(cell), []).append(cell)
    for group in groups.values():
        ref, choice, pool = reference(group)
        loners = {id(pool[i]) for i in choice.suspicious}
        vouched = (
            {str(ref.get("host", ""))} | {str(pool[j].get("host", "")) for j in choice.supporters} if ref else set()
        )
        independent = len(vouched) >= 2  # the reference's outputs are confirmed by another host
        if ref is not None and not independent and len({str(c.get("host", "")) for c in group}) > 1:
            choice.how += f"; {NOT_INDEPENDENT} (only {', '.join(sorted(vouched))} vouches for it)"
        for cell in group:
            c = cell["correctness"]
            reasons = own_reasons(c)
            c["reference_cell"] = ref["cell_id"] if ref else ""
            c["not_judged"] = not_judged(cell)
            c["reference_host"] = str(ref.get("host", "")) if ref else ""  # replicas share the cell id
            c["consensus"] = choice.how
            c["suspicious"] = ""
            c["advisory"] = []
            if ref is None or ref is cell:
                c["agreement"], c["first_divergence"] = (1.0, -1) if ref is cell else (0.0, -1)
            else:
                # one host's word decides nothing on another host's cells: there, disagreeing is only advisory
                judged_by = reasons if independent or cell.get("host") == ref.get("host") else c["advisory"]
                r = ref["correctness"]
                c["agreement"], c["first_divergence"] = compare(c, r)
                t = c.get("thresholds", {})
                if c["agreement"] < float(t.get("min_agreement", 0.6)):
                    judged_by.append(
                        f"agreement with the reference ({ref['cell_id']}) {c['agreement']:.0%} below "
                        f"{float(t.get('min_agreement', 0.6)):.0%} (first divergence at word {c['first_divergence']})"
                    )
                drop = float(r.get("score", 0.0)) - float(c.get("score", 0.0))
                if drop > float(t.get("max_score_drop", 0.25)) + 1e-9:
                    judged_by.append(
                        f"task score {c.get('score', 0.0):.0%}, {drop:.0%} below the reference's "
                        f"{r.get('score', 0.0):.0%} (allowed: {float(t.get('max_score_drop', 0.25)):.0%})"
                    )
                floor = float(t.get("min_task_accuracy", 0.97)) * float(r.get("batch_score", 0.0))
                if "batch_score" in c and "batch_score" in r and c["batch_score"] < floor - 1e-9:
                    judged_by.append(
                        f"task accuracy at c={c.get('batch_concurrency')} {c['batch_score']:.1%} "
                        f"({c.get('batch_exact')}/{c.get('batch_answered')}), below "
                        f"{float(t.get('min_task_accuracy', 0.97)):.0%} of the reference's {r['batch_score']:.1%}"
                    )
                if id(cell) in loners or (choice.supporters and _similarity(cell, ref)[1] == 0):
                    c["suspicious"] = (
                        f"its task score is {c.get('score', 0.0):.0%}, yet it shares none of its open-ended outputs "
                        "with the consensus: not a yardstick"
                    )
                    judged_by.append("agrees with no other cell: " + c["suspicious"])
            c["long_paths"] = _long_paths(cell, ref, group)
            c["broke_first"] = _broke_first(c["long_paths"])
            if reasons:
                reasons.extend(_blame(cell, group))
            c["wrong"] = [] if c["not_judged"] else reasons


def _long_paths(cell: dict[str, Any], ref: dict[str, Any] | None, group: Sequence[dict[str, Any]]) -> list[LongPath]:
    """The cell's long outputs compared along each path: alone vs the reference cell's; in a batch vs its own
    alone; with speculative decoding vs its spec-off twin's; with CUDA graphs vs its eager twin's."""
    rows = {(r["id"], r["path"]): r for r in cell["correctness"].get("long", []) if not r.get("error")}
    out: list[LongPath] = []

    def add(path: str, against: dict[str, Any], mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> None:
        at, share = longdecode.first_divergence(theirs, mine)
        out.append(
            LongPath(
                path=path,
                against=str(against.get("cell_id", "")),
                prompt=str(mine["id"]),
                first_divergence=at,
                agreement=round(share, 4),
                follows=longdecode.verdict(mine, at),
                degenerate_at=int(mine.get("degenerate_at", -1)),
            )
        )

    others = [
        ("reference", ref),
        ("speculative", _twin(cell, group, "speculative")),
        ("graphs", _twin(cell, group, "graphs")),
    ]
    for (pid, path), mine in sorted(rows.items()):
        if path == "batch" and (pid, "c1") in rows:
            add("batch", cell, mine, rows[(pid, "c1")])
        if path != "c1":
            continue
        for name, other in others:
            if other is None or other is cell:
                continue
            theirs = next(
                (r for r in other["correctness"].get("long", []) if (r["id"], r["path"]) == (pid, "c1")), None
            )
            if theirs and not theirs.get("error"):
                add(name, other, mine, theirs)
    return out


def _twin(cell: Mapping[str, Any], group: Sequence[dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The cell's twin along a path, sane on its own, on the same host: for a cell with speculative decoding on, the
    same configuration with it off ("speculative"); for a cell with CUDA graphs (no --enforce-eager), the same
    configuration eager ("graphs"). None when the cell is not on that path or its host has no such twin: another
    host's clean twin says nothing of this host's kernels (its build, driver or GPU may differ)."""

    def switched_on(cfg: Mapping[str, Any]) -> bool:
        return bool(cfg.get("speculative")) if path == "speculative" else EAGER not in (cfg.get("extra_args") or [])

    def rest(cfg: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(cfg)
        if path == "speculative":
            out.pop("speculative", None)
            return out
        return without_eager(cfg)  # the eager start of planning/matrix.eager_starts is such a twin

    cfg = cell.get("config", {})
    if not switched_on(cfg):
        return None
    same = rest(cfg)
    for other in group:
        ocfg = other.get("config", {})
        if (
            other.get("host") == cell.get("host")
            and not switched_on(ocfg)
            and rest(ocfg) == same
            and not own_reasons(other["correctness"])
        ):
            return other
    return None


def _broke_first(paths: Sequence[LongPath]) -> str:
    """The path whose long output went bad at the earliest token ("" = none did)."""
    broken = [p for p in paths if p["follows"] in ("loop", "garbage")]
    if not broken:
        return ""
    first = min(broken, key=lambda p: (p["first_divergence"], PATH_ORDER.index(p["path"])))
    return first["path"]


def _blame(cell: Mapping[str, Any], group: Sequence[dict[str, Any]]) -> list[str]:
    """Which path a wrong cell's fault is on, where another cell or its own alone-run shows it is that path."""
    c = cell["correctness"]
    out = []
    twin = _twin(cell, group, "speculative")
    if twin is not None:
        out.append(
            f"only with speculative decoding on ({cell.get('config', {}).get('speculative')}): its spec-off twin "
            f"{twin['cell_id']} is clean, so the draft path broke, not the target model"
        )
    eager = _twin(cell, group, "graphs")
    if eager is not None:
        out.append(
            f"only with CUDA graphs: its eager twin {eager['cell_id']} ({EAGER}) is clean, so a kernel broke under "
            "CUDA graphs, not the model"
        )
    long_rows = [r for r in c.get("long", []) if not r.get("error")]
    if any(r["degenerate"] for r in long_rows if r["path"] == "batch") and not any(
        r["degenerate"] for r in long_rows if r["path"] == "c1"
    ):
        out.append("only in a batch at the cell's highest concurrency: alone (c=1) its long outputs are clean")
    if c.get("broke_first"):
        out.append(f"the path that broke first: {c['broke_first']}")
    return out


def wrong_reasons(cell: Mapping[str, Any]) -> list[str]:
    """Why this cell's outputs are wrong ([] = they are not, or were never probed). Uses the group judgement when
    the tree was read through judged_cells, else the cell's own checks."""
    c = cell.get("correctness")
    if not isinstance(c, Mapping) or not c.get("probed") or not_judged(cell):
        return []
    return list(c["wrong"]) if "wrong" in c else own_reasons(c)
