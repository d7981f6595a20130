"""Fingerprint groups: hosts whose results may be ranked together.

Two hosts belong to one group when everything that changes a measurement is equal: the chip and its compute
capability, the driver, CUDA, memory, the image digest present on the host, and the vLLM version once a server log
has said it. A sweep measures each cell once per group (not once per host), and no ranking ever mixes groups.
Nothing here touches a host: it reads the facts the facts step returned (hostside/facts.gather, validated by
running/hostdata).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields, replace

from agent.hostside.contracts import Facts


@dataclass(frozen=True, order=True)
class Fingerprint:
    """What must be equal for two hosts' numbers to be comparable. "" where not known (yet)."""

    chip: str  # gpu_name, e.g. "NVIDIA GB10"
    compute_capability: str  # "12.1"
    driver: str  # "580.95.05"
    cuda: str  # "13.0"
    mem_gib: int  # whole GiB of memory the GPU can use (unified on GB10): 119.7 and 119.6 are one machine
    image_digest: str = ""  # the image digest present on the host ("" = none checked, e.g. the process runtime)
    vllm_version: str = ""  # as read from a server log; "" until one was

    def label(self) -> str:
        """A short, human name for the group: chip, driver, CUDA (what usually differs)."""
        chip = self.chip.removeprefix("NVIDIA ") or "?"
        return f"{chip} cc{self.compute_capability or '?'} driver {self.driver or '?'} cuda {self.cuda or '?'}"


# How each field reads in an explanation ("driver 580.95 vs 580.82").
_SHOWN = {
    "chip": "chip",
    "compute_capability": "compute capability",
    "driver": "driver",
    "cuda": "CUDA",
    "mem_gib": "memory GiB",
    "image_digest": "image",
    "vllm_version": "vLLM",
}


def fingerprint(facts: Facts | Mapping[str, object], image_digest: str = "", vllm_version: str = "") -> Fingerprint:
    """The fingerprint of one host from its facts (plus, when known, the image digest present and the vLLM version
    its server logged)."""
    mem = facts.get("mem_total_gib", 0.0)
    return Fingerprint(
        chip=str(facts.get("gpu_name", "") or ""),
        compute_capability=str(facts.get("compute_capability", "") or ""),
        driver=str(facts.get("driver", "") or ""),
        cuda=str(facts.get("cuda", "") or ""),
        mem_gib=round(float(mem)) if isinstance(mem, int | float) else 0,
        image_digest=image_digest,
        vllm_version=vllm_version,
    )


@dataclass(frozen=True)
class HostGroup:
    """Hosts with one fingerprint. name is stable for a fleet: "g1", "g2", ... by the group's first host name."""

    name: str
    fingerprint: Fingerprint
    hosts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.hosts)


def group_hosts(fingerprints: Mapping[str, Fingerprint]) -> list[HostGroup]:
    """Hosts with equal fingerprints form a group. Groups are ordered by their first host (sorted by name), so the
    same fleet always gets the same group names; the biggest group is not special."""
    by_fp: dict[Fingerprint, list[str]] = {}
    for host in sorted(fingerprints):
        by_fp.setdefault(fingerprints[host], []).append(host)
    ordered = sorted(by_fp.items(), key=lambda item: item[1][0])
    return [HostGroup(name=f"g{i}", fingerprint=fp, hosts=tuple(hosts)) for i, (fp, hosts) in enumerate(ordered, 1)]


def group_facts(
    facts: Mapping[str, Facts],
    image_digests: Mapping[str, str] | None = None,
    vllm_versions: Mapping[str, str] | None = None,
) -> list[HostGroup]:
    """group_hosts over fingerprint(facts) for every host (the usual call after the facts step), with the image
    digest each host holds and the vLLM version its log gave where known (running/hostmemory.py remembers both)."""
    digests, versions = image_digests or {}, dict(vllm_versions or {})
    prints = {host: fingerprint(f, digests.get(host, ""), versions.get(host, "")) for host, f in facts.items()}
    # A version counts once known: a host whose log has not said yet (new to this image, or lost before its first
    # cell) joins the twins whose logs agree, instead of a group of its own that measures every cell again. If its
    # log later says otherwise, collect names it and the report never ranks it with them (summary.comparable).
    for host, fp in prints.items():
        if fp.vllm_version:
            continue
        twins = {p.vllm_version for p in prints.values() if p.vllm_version and replace(p, vllm_version="") == fp}
        if len(twins) == 1:
            prints[host] = replace(fp, vllm_version=twins.pop())
    return group_hosts(prints)


def group_of(groups: Iterable[HostGroup], host: str) -> HostGroup:
    for group in groups:
        if host in group.hosts:
            return group
    raise KeyError(host)


def differences(a: Fingerprint, b: Fingerprint) -> list[str]:
    """What separates two fingerprints, one "field A vs B" each (empty when equal)."""
    out = []
    for f, va, vb in zip(fields(Fingerprint), astuple(a), astuple(b), strict=True):
        if va != vb:
            if f.name == "image_digest":  # sha256:<64 hex> reads as its first 12 hex, like docker shows it
                va, vb = _short_digest(str(va)), _short_digest(str(vb))
            out.append(f"{_SHOWN[f.name]} {va or '?'} vs {vb or '?'}")
    return out


def _short_digest(digest: str) -> str:
    algo, _, hexes = digest.partition(":")
    return f"{algo}:{hexes[:12]}…" if len(hexes) > 12 else digest


def explain(groups: list[HostGroup]) -> list[str]:
    """One line per host outside the largest group, saying what separates it from that group, e.g.
    "spark-3: driver 580.95 vs 580.82". Empty when the fleet is one group. Ties go to the first group."""
    if len(groups) < 2:
        return []
    main = max(groups, key=len)  # max keeps the first of equals
    lines: list[str] = []
    for group in groups:
        if group is main:
            continue
        why = ", ".join(differences(group.fingerprint, main.fingerprint))
        lines.extend(
            f"{host}: {why} (group {group.name}; {main.name} is {', '.join(main.hosts)})" for host in group.hosts
        )
    return lines


def describe(groups: list[HostGroup]) -> list[str]:
    """One line per group: its name, label and hosts (check and the sweep's start show these)."""
    return [f"group {g.name}: {g.fingerprint.label()} — {', '.join(g.hosts)}" for g in groups]


def plain(fp: Fingerprint) -> dict[str, object]:
    """The fingerprint as a plain table (status files, JSON)."""
    return dict(zip((f.name for f in fields(Fingerprint)), astuple(fp), strict=True))
