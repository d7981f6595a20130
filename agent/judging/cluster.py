"""A multi-node cell's cluster, attested from its log: world size, Ray nodes, and NCCL's transport per rank.

A rank that fell back to sockets where the rules expect RDMA (the link has an RDMA device on every node, or the
spec asked for it) makes the cell INVALID with the evidence line: its numbers measure a ~10x slower link.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.hostside.contracts import ClusterFacts


def judge(config: Mapping[str, Any], cluster: ClusterFacts) -> tuple[list[str], list[str], list[str]]:
    """(reasons, evidence, notes) for a cell's [config] table and its log's cluster facts; nothing for one node."""
    nodes = int(config.get("nodes", 1) or 1)
    if nodes <= 1:
        return [], [], []
    reasons: list[str] = []
    evidence: list[str] = []
    notes: list[str] = []
    world = int(config.get("tensor_parallel_size", 1) or 1) * int(config.get("pipeline_parallel_size", 1) or 1)
    if cluster["world_size"] > 0 and cluster["world_size"] != world:
        reasons.append(f"world size: requested {world} (TP x PP), the log says {cluster['world_size']}")
    if cluster["links"] and cluster["ray_nodes"] < nodes:
        reasons.append(f"ray nodes: requested {nodes}, ranks logged from {cluster['ray_nodes']}")
    if not cluster["links"]:
        notes.append(
            "no NCCL transport lines in the log (NCCL_DEBUG=INFO unset?): the link's transport is not attested"
        )
    if config.get("transport") == "rdma":
        for link in cluster["links"]:
            if link["transport"] != "IB":
                reasons.append(
                    f"transport: the rules expect RDMA on the link, NCCL used {link['transport']} on node {link['node']}"
                    + (f" ({link['device']})" if link["device"] else "")
                )
                evidence.append(link["line"])
    return reasons, evidence, notes
