"""Which hosts serve a multi-node cell together, and over which link: chosen from the hosts' facts.

A node set is `nodes` hosts of one group (same fingerprint: same chip, driver, CUDA, memory) that share an IPv4
subnet on a fast interface (ConnectX-7: 200 Gb/s). A host with two interfaces on that subnet is refused: Ray and
NCCL pick one of them unpredictably and placement hangs without an error. The head is the first host of the set
in inventory order. Nothing here touches a host.

When agent/planning/groups.py (fingerprint groups) lands, `_groups` becomes its group_hosts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.hostside.contracts import Facts, NetInterface

FAST_MBPS = 100_000  # a "fast" link: ConnectX-7 runs 200 Gb/s; anything under 100 Gb/s is a management port


@dataclass(frozen=True)
class Link:
    """One node's end of the cluster link."""

    host: str
    ifname: str
    address: str  # IPv4, no prefix
    rdma: str  # the RDMA device on it ("" = none)
    simulated: bool


@dataclass(frozen=True)
class NodeSet:
    subnet: str
    links: tuple[Link, ...]  # head first

    @property
    def head(self) -> str:
        return self.links[0].host

    @property
    def hosts(self) -> list[str]:
        return [link.host for link in self.links]

    @property
    def rdma(self) -> bool:
        """Every node has an RDMA device on the link: NCCL should use IB/RoCE, never sockets."""
        return all(link.rdma for link in self.links)


@dataclass
class Choice:
    sets: list[NodeSet]
    unused: dict[str, str]  # host -> why it is in no set


class NodeSetError(ValueError):
    """No node set can serve the spec: the message says why (one line)."""


def fast_links(host: str, facts: Facts) -> dict[str, list[Link]]:
    """subnet -> this host's links on it, over its fast interfaces that are up (or simulated)."""
    out: dict[str, list[Link]] = {}
    for nic in facts.get("interfaces", []):
        if not _fast(nic):
            continue
        for cidr in nic["addresses"]:
            iface = ipaddress.IPv4Interface(cidr)
            link = Link(host, nic["name"], str(iface.ip), (nic["rdma"] or [""])[0], nic["simulated"])
            out.setdefault(str(iface.network), []).append(link)
    return out


def _fast(nic: NetInterface) -> bool:
    return nic["simulated"] or (nic["state"] == "up" and nic["speed_mbps"] >= FAST_MBPS)


def _groups(hosts: Sequence[str], facts: Mapping[str, Facts], owners: Mapping[str, str]) -> list[list[str]]:
    """Hosts with the same fingerprint and the same owner, in inventory order (fleet's groups.py will take this
    over). The nodes of one cell trust each other fully (one Ray token, tasks run as the head's user next to the
    cell's secrets): a Spark of another owner never joins a set by accident."""
    groups: dict[tuple[str, str], list[str]] = {}
    for h in hosts:
        groups.setdefault((str(facts[h].get("fingerprint", "")), owners.get(h, "")), []).append(h)
    return list(groups.values())


def pick(
    hosts: Sequence[str],
    facts: Mapping[str, Facts],
    nodes: int,
    transport: str = "",
    owners: Mapping[str, str] | None = None,
) -> Choice:
    """Node sets of `nodes` hosts each, never mixing owners (host -> owner; None: one trust domain). Raises
    NodeSetError (one line: why) when not one set can be formed, or when the spec asks for RDMA
    (transport = "rdma") and a set's link has none."""
    sets: list[NodeSet] = []
    unused: dict[str, str] = {}
    largest = 0
    for group in _groups(hosts, facts, owners or {}):
        free = list(group)
        by_subnet: dict[str, list[Link]] = {}
        for h in group:
            for subnet, links in fast_links(h, facts[h]).items():
                if len(links) > 1:
                    unused.setdefault(
                        h,
                        f"{len(links)} interfaces on the cluster subnet {subnet} "
                        f"({', '.join(lk.ifname for lk in links)}): keep one, or Ray placement hangs",
                    )
                    continue
                by_subnet.setdefault(subnet, []).append(links[0])
        for subnet, links in sorted(by_subnet.items(), key=lambda kv: -len(kv[1])):
            links = [lk for lk in links if lk.host in free and lk.host not in unused]
            largest = max(largest, len(links))
            while len(links) >= nodes:
                chosen, links = links[:nodes], links[nodes:]
                sets.append(NodeSet(subnet, tuple(chosen)))
                for lk in chosen:
                    free.remove(lk.host)
        for h in free:
            unused.setdefault(h, "no fast interface shared with enough hosts of its group")
    if not sets:
        detail = "; ".join(f"{h}: {why}" for h, why in unused.items())
        mixed = len(set((owners or {}).values())) > 1
        raise NodeSetError(
            f"nodes = {nodes} but the largest group of hosts sharing a fast subnet has {largest}"
            + (f" ({detail})" if detail else "")
            + (
                f"; the hosts belong to different owners ({', '.join(sorted(set((owners or {}).values())))}) and "
                "the nodes of a cell trust each other fully: set [sweep] one_trust_domain = true only if they are "
                "one trust domain (docs/security.md)"
                if mixed
                else ""
            )
        )
    if transport == "rdma":
        for s in sets:
            missing = [lk.host for lk in s.links if not lk.rdma]
            if missing:
                raise NodeSetError(
                    f"transport = rdma but {', '.join(missing)} has no RDMA device on {s.subnet}; "
                    "set transport = socket or fix the link (see `spark-agent check`)"
                )
    return Choice(sets, unused)
