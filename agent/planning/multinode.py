"""Multi-node cells: one cell served by a node set (planning/nodesets.py) over Ray, head first.

The cell's id covers what changes the result (node count, TP/PP sizes, the Ray backend, the transport the link
must give) through [server]; each node's addresses, interface names and RDMA device are host plumbing: they go to
each node's environment (from rules/multinode.toml, each with its rule and reason) and not into the id, so the same
cell on another pair of Sparks keeps its id. Nothing here touches a host.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.errors import UserError, missing_extra
from agent.hostside.contracts import Facts
from agent.planning import envrules, nodesets
from agent.planning.inventory import Host
from agent.planning.matrix import Cell, plan_cells
from agent.planning.roledefaults import default_int
from agent.planning.spec import Spec


def expected_transport(spec: Spec, node_set: nodesets.NodeSet) -> str:
    """What NCCL must use on the link: the spec's choice, else RDMA when every node has an RDMA device."""
    return spec.server.transport or ("rdma" if node_set.rdma else "socket")


def transport_reason(spec: Spec, node_set: nodesets.NodeSet) -> str:
    """Why the cell expects that transport (shown by `spark-agent env`)."""
    if spec.server.transport:
        return f"[server] transport = {spec.server.transport!r}"
    if node_set.rdma:
        return "every node has an RDMA device on the link"
    bare = [link.host for link in node_set.links if not link.rdma]
    return f"no RDMA device on the link of {', '.join(bare)}"


def node_rows(cell: Cell, host: str) -> list[envrules.EnvProvenance]:
    """The provenance rows plan_set added for one node (its link variables), out of the cell's rows."""
    names = {rule["name"] for rule in envrules.multinode_rules()}
    return [r for r in cell.provenance if r["rule"] in names and r["reason"].endswith(f"(node {host})")]


def owner(host_vars: Mapping[str, Any]) -> str:
    """Who a host belongs to, for the trust between a cell's nodes: spark_owner when the inventory says, else the
    login user (ansible_user; "" = the controller's own user)."""
    return str(host_vars.get("spark_owner") or host_vars.get("ansible_user") or "")


def choose(
    spec: Spec, hosts: list[str], facts: Mapping[str, Facts], host_vars: Mapping[str, Mapping[str, Any]] | None = None
) -> nodesets.Choice:
    """The node sets of a multi-node spec, or one line (exit 2) saying why there are none. Also checks that
    TP x PP fills the nodes' GPUs, now that the facts say how many each has. Hosts of different owners share no
    set unless the spec says they are one trust domain."""
    server = spec.server
    where = f"{spec.path}: [server]"
    if server.nodes > len(hosts):
        raise UserError(f"{where} nodes = {server.nodes} but the inventory selects {len(hosts)} host(s); lower nodes")
    owners = None if spec.one_trust_domain else {h: owner((host_vars or {}).get(h, {})) for h in hosts}
    try:
        choice = nodesets.pick(hosts, facts, server.nodes, server.transport, owners)
    except nodesets.NodeSetError as exc:
        raise UserError(f"{where} {exc}") from None
    for s in choice.sets:
        gpus = sum(int(facts[h].get("gpu_count", 0) or 0) for h in s.hosts)
        if server.tensor_parallel_size * server.pipeline_parallel_size != gpus:
            raise UserError(
                f"{where} tensor_parallel_size x pipeline_parallel_size = "
                f"{server.tensor_parallel_size * server.pipeline_parallel_size} but nodes {', '.join(s.hosts)} have "
                f"{gpus} GPU(s); TP x PP must equal nodes x GPUs per node"
            )
    return choice


def plan_set(
    spec: Spec, node_set: nodesets.NodeSet, facts: Mapping[str, Facts], host_vars: Mapping[str, Mapping[str, Any]]
) -> list[Cell]:
    """The cells of a node set, planned on its head, each carrying the cluster plumbing cell.yml needs."""
    transport = expected_transport(spec, node_set)
    server = replace(spec.server, distributed_executor_backend="ray", transport=transport)
    cells = plan_cells(replace(spec, server=server), node_set.head, facts[node_set.head], host_vars[node_set.head])
    head_vars = host_vars[node_set.head]
    head_address = f"{node_set.links[0].address}:{int(head_vars.get('spark_ray_port', default_int('spark_ray_port')))}"
    for cell in cells:
        nodes: list[dict[str, Any]] = []
        for rank, link in enumerate(node_set.links):
            values = {"ifname": link.ifname, "address": link.address, "rdma": link.rdma, "head": head_address}
            env = envrules.node_env(values, transport, link.host)
            cell.provenance += env.provenance
            link_env = dict(env.env)
            if link.simulated:  # the simulated engine's actors read the node's RDMA device from here
                link_env["SPARK_SIM_RDMA"] = link.rdma
            nodes.append(
                {
                    "host": link.host,
                    "rank": rank,
                    "address": link.address,
                    "ifname": link.ifname,
                    "rdma": link.rdma,
                    "gpus": int(facts[link.host].get("gpu_count", 0) or 0),
                    "simulated": bool(link.simulated),
                    "env": link_env,  # this node's link variables; its env file adds the cell's env (provision)
                }
            )
        cell.cluster = {
            "head": node_set.head,
            "head_address": head_address,
            "subnet": node_set.subnet,
            "transport": transport,
            "nodes": nodes,
            "world_size": server.tensor_parallel_size * server.pipeline_parallel_size,
            "drop_page_cache": server.drop_page_cache,
        }
    return cells


def plan_fleet(
    spec: Spec, hosts: list[str], facts: Mapping[str, Facts], host_vars: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, list[Cell]], list[str]]:
    """host -> cells (a head gets its set's cells; workers and unused hosts none), and one warning per unused host."""
    choice = choose(spec, hosts, facts, host_vars)
    cells: dict[str, list[Cell]] = {h: [] for h in hosts}
    for s in choice.sets:
        cells[s.head] = plan_set(spec, s, facts, host_vars)
    warnings = [f"host {h} serves no multi-node cell: {why}" for h, why in choice.unused.items()]
    return cells, warnings


def require_ray(spec: Spec, hosts: Sequence[Host]) -> None:
    """A multi-node sweep on the simulated Spark runs its ranks on Ray from this Python (the simulator is this
    package): without the [multinode] extra it would fail on the hosts, after provisioning. Real Sparks run Ray
    from their vLLM image: the controller itself never needs it."""
    simulated = any(h.vars.get("spark_simulate_gpu") for h in hosts)
    if spec.server.nodes > 1 and simulated and importlib.util.find_spec("ray") is None:
        raise missing_extra("multinode", "a multi-node sweep on the simulated Spark")
