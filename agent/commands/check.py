"""spark-agent check [-i INVENTORY] [--limit HOSTS] [--results DIR]: every host's facts as a table, and what would
stop a sweep."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from agent.errors import UserError
from agent.escape import rich
from agent.hostside.contracts import Facts
from agent.paths import DEFAULT_INVENTORY
from agent.planning import envrules, groups, memory
from agent.planning.inventory import check_reachable, load_inventory
from agent.reporting import terminal
from agent.running import fingerprints, hostdata, hostmemory, tasks
from agent.running import playbooks as fleet
from agent.running.sweep import gather_facts


def _columns(f: Facts) -> dict[str, str]:
    """The facts that matter when choosing what to run, compactly (plain text; escaped where shown)."""
    sim = " (simulated)" if f.get("simulated") else ""
    return {
        "gpu": f"{f.get('gpu_name') or '-'}{sim}\ncc {f.get('compute_capability') or '-'} {f.get('arch') or '?'} "
        f"{f.get('sm') or ''}",
        "driver / cuda": f"{f.get('driver') or '-'} / {f.get('cuda') or '-'}",
        "memory / disk": f"{_memory(f)}\n{f.get('disk_free_gib', 0):.0f} GiB disk free",
        "docker": ("yes" if f.get("docker") else "no") + (" +nvidia" if f.get("nvidia_runtime") else ""),
        "python": str(f.get("python", "")),
        "fingerprint": str(f.get("fingerprint", "")),
        "links": _links(f),
    }


def _memory(f: Facts) -> str:
    """What vLLM's gpu_memory_utilization is a fraction of here (planning/memory.device_memory), and on unified
    memory the most it may ask for now: vLLM's free-memory check refuses more."""
    d = memory.device_memory(f)
    if d["kind"] == "unknown":
        return "GPU memory unknown"
    if d["kind"] == "unified" and d["free_gib"] >= 0 and d["total_gib"] > 0:
        most = int(d["free_gib"] / d["total_gib"] * 100) / 100
        return f"unified {d['total_gib']:.1f} GiB, {d['free_gib']:.1f} free now\n(gpu_memory_utilization <= {most:.2f})"
    return f"GPU {d['total_gib']:.1f} GiB"


def _links(f: Facts) -> str:
    """Interfaces with an address: the candidates for a multi-node cell's link (name, address, speed, RDMA)."""
    out = []
    for nic in f.get("interfaces", []):
        if nic["addresses"]:
            speed = f"{nic['speed_mbps'] // 1000} Gb/s" if nic["speed_mbps"] > 0 else "? Gb/s"
            rdma = f" rdma {','.join(nic['rdma'])}" if nic["rdma"] else ""
            sim = " (simulated)" if nic["simulated"] else ""
            out.append(f"{nic['name']} {','.join(nic['addresses'])} {speed}{rdma}{sim}")
    return "\n".join(out) or "-"


def register(sub) -> None:
    p = sub.add_parser("check", help="reach every host, print its facts and anything that would stop a sweep")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY))
    p.add_argument("--limit", help="only these hosts or groups (comma-separated)")
    p.add_argument(
        "--results",
        default="results",
        help="results folder whose remembered image digests and logged vLLM versions join the groups (default ./results)",
    )
    p.set_defaults(func=run)


def blockers(host_vars: Mapping[str, Any], facts: Facts, status: Mapping[str, Any]) -> list[str]:
    """What would stop (or silently spoil) a sweep on this host."""
    out = []
    runtime = host_vars.get("spark_runtime", "docker")
    if runtime == "docker" and not facts.get("docker"):
        out.append("spark_runtime=docker but docker is not usable here")
    if runtime == "docker" and facts.get("docker") and not facts.get("nvidia_runtime") and not facts.get("simulated"):
        out.append("docker has no nvidia runtime: --gpus all will fail (install the NVIDIA container toolkit)")
    if not facts.get("arch"):
        out.append("unknown GPU architecture: no environment rules apply")
    if status.get("running"):
        holder = status.get("holder") or {}
        out.append(
            f"busy: a spark-agent server runs here for {holder.get('user', '?')}@"
            f"{holder.get('controller_host', '?')} since {holder.get('since', '?')}"
        )
    notes = [n for n in facts.get("notes", []) if "no rules apply" not in n]
    if runtime != "docker":  # docker's health does not matter to a process-runtime host
        notes = [n for n in notes if "docker" not in n]
    return out + notes


def row(host: str, facts: Facts, issues: list[str]) -> list[str]:
    """One table row as rich markup: every value is host text, escaped line by line."""
    cells = [host, *_columns(facts).values(), "\n".join(issues) or "-"]
    return ["\n".join(rich(part) for part in c.split("\n")) for c in cells]


def lock_status(value: object, host: str) -> dict[str, Any]:
    """The status task's answer, validated: whether a server runs and who holds the lock."""
    try:
        obj = hostdata.mapping(value, f"host {host}: status")
        return {
            "running": hostdata.flag(obj.get("running", False), f"host {host}: status.running"),
            "holder": hostdata.holder(obj.get("holder") or {}, f"host {host}: lock holder"),
        }
    except hostdata.BadHostData as exc:
        raise UserError(f"checking the host lock failed: {exc.reason}") from None


def run(args: argparse.Namespace) -> int:
    hosts = load_inventory(args.inventory, args.limit)
    check_reachable(hosts)
    facts = {name: envrules.with_arch(f) for name, f in gather_facts(args.inventory, hosts).items()}
    status = fleet.run_playbook(tasks.STATUS.playbook, args.inventory, limit=",".join(h.name for h in hosts))
    table = Table(title="spark-agent check")
    for col in ("host", *_columns(Facts()), "would stop a sweep"):
        table.add_column(col, overflow="fold", style="red" if col == "would stop a sweep" else None)
    problems = 0
    for h in hosts:
        f = facts[h.name]
        st = lock_status(status.results.get(h.name, {}).get(tasks.STATUS.name, {}), h.name)
        issues = blockers(h.vars, f, st)
        problems += bool(issues)
        table.add_row(*row(h.name, f, issues))
    console = terminal.console(least=140)
    console.print(table)
    found = fingerprints.last_known(Path(args.results), facts)  # + the image digest and vLLM version last seen
    known = hostmemory.load(Path(args.results))
    for g, line in zip(found, groups.describe(found), strict=True):
        console.print(rich(line), highlight=False)
        for seen in last_seen(g.hosts, known):
            console.print(rich(f"  {seen}"), highlight=False)
    for line in groups.explain(found):  # hosts that are never ranked together
        console.print(rich(line), highlight=False)
    return 1 if problems else 0


def last_seen(hosts: Sequence[str], known: Mapping[str, hostmemory.Known]) -> list[str]:
    """What a group's hosts last ran, from the results folder: each image with its vLLM version as logged and the
    hosts that had it; "no sweep seen" where nothing is remembered (host data: escaped where shown)."""
    by: dict[tuple[str, str, str], list[str]] = {}
    for h in hosts:
        k = known.get(h)
        if k is not None and (k.image or k.vllm_version):
            by.setdefault((k.image, k.image_digest, k.vllm_version), []).append(h)
    lines = [
        f"last ran image {image or '?'}" + (f" ({digest[:19]})" if digest and digest not in image else "")
        + f", vLLM {version or 'not logged yet'} — {', '.join(on)}"
        for (image, digest, version), on in by.items()
    ]  # fmt: skip
    unseen = [h for h in hosts if not any(h in on for on in by.values())]
    return lines + ([f"no sweep seen in this results folder — {', '.join(unseen)}"] if unseen else [])
