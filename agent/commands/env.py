"""`spark-agent env SPEC [-i INVENTORY] [--host H]`: the environment each cell would get on each host,
every variable with the rule and reason behind it (agent/rules/env.toml). Nothing is started.
With --host and no -i the facts are this machine's (--simulate-gpu gb10 rehearses a Spark).
A multi-node spec ([server] nodes > 1) shows each node set the sweep would form, every node's link variables with
their rules, and each host left out with the reason (two NICs on the subnet, no shared fast subnet)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from agent.errors import UserError
from agent.escape import rich
from agent.hostside import facts as hostfacts
from agent.hostside import redact
from agent.hostside.contracts import Facts
from agent.paths import DEFAULT_INVENTORY
from agent.planning import envrules, memory, multinode
from agent.planning import matrix as plan
from agent.planning.inventory import check_reachable, load_inventory
from agent.planning.spec import Spec, load_spec
from agent.reporting import terminal
from agent.running import tasks
from agent.running.fleetcopy import checkpoint_vars
from agent.running.playbooks import run_playbook
from agent.running.sweep import gather_facts, model_memories


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "env", help="show the environment each cell would get, and the rule behind each variable", description=__doc__
    )
    p.add_argument("spec", metavar="SPEC", help="sweep spec (TOML)")
    p.add_argument("-i", "--inventory", default=None, help="Ansible inventory (default: inventory/local.yml)")
    p.add_argument("--host", default=None, help="only this host; without -i: this machine, under that name")
    p.add_argument(
        "--simulate-gpu",
        default=None,
        metavar="ARCH",
        help="with --host and no -i: report this chip of gpus.toml (e.g. gb10) instead of a real GPU",
    )
    p.add_argument("--json", action="store_true", help="print the cells' env, provenance and notes as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    if spec.server.nodes > 1:  # a node set serves each cell: every node's env, and why a host is in no set
        return _show_multinode(multinode_view(spec, hosts_with_facts(args)), args.json)
    found = hosts_with_facts(args)
    cells = [
        cell
        for name, facts, host_vars in found
        for cell in plan.plan_cells(spec, name, envrules.with_arch(facts), host_vars)
    ]
    _plan_memory(args, spec, cells, {name: envrules.with_arch(facts) for name, facts, _ in found})
    warnings = plan.spec_warnings(spec)
    if args.json:
        shown = redact.redact({"warnings": warnings, "cells": [_as_dict(cell) for cell in cells]})
        print(json.dumps(shown, indent=1))
        return 0
    console = terminal.console()
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    for hosts, cell in _same_on_hosts(cells):
        console.print(_table(cell, hosts))
        for note in cell.notes:
            console.print(f"  [yellow]note:[/] {redact.redact_text(note)}", highlight=False)
        if cell.memory_plan:
            style = {"no": "red", "queues": "yellow"}.get(cell.memory_plan["fits"], "")
            line = rich(memory.summary_line(cell.memory_plan))
            console.print(f"  [{style}]{line}[/]" if style else f"  {line}", highlight=False)
            if cell.memory_plan["fits"] in ("no", "queues"):
                why = "; ".join([cell.memory_plan["problem"], *cell.memory_plan["advice"]])
                console.print(f"  [{style}]{'refused' if style == 'red' else 'note'}:[/] {rich(why)}", highlight=False)
    return 0


def _plan_memory(args: argparse.Namespace, spec: Spec, cells: list[plan.Cell], facts: dict[str, Facts]) -> None:
    """Each cell's memory plan on its host: the checkpoint folders read there (provision's inspect step, no
    download, no image) or, for this machine, here."""
    if args.host and not args.inventory:
        for cell in cells:
            cell.model_memory = memory.local_model_memory(cell)
    else:
        inventory = args.inventory or DEFAULT_INVENTORY
        run = run_playbook(
            "provision", inventory, {"image": spec.image, "checkpoints": checkpoint_vars(spec)},
            limit=",".join(sorted(facts)), tags=tasks.CHECKPOINTS.tag,
        )  # fmt: skip
        found = {host: model_memories(run, host) for host in facts}
        for cell in cells:
            cell.model_memory = found[cell.host].get(cell.config.model)
    for cell in cells:
        cell.memory_plan = memory.plan_cell(cell, facts[cell.host])


def _same_on_hosts(cells: list[plan.Cell]) -> list[tuple[list[str], plan.Cell]]:
    """Each cell once with every host where it gets the very same environment, rules and notes (equal hosts): one
    table for the fleet, not one per host."""
    seen: dict[str, tuple[list[str], plan.Cell]] = {}
    for cell in cells:
        key = json.dumps([cell.id, cell.label, cell.provenance, cell.notes], sort_keys=True, default=str)
        seen.setdefault(key, ([], cell))[0].append(cell.host)
    return list(seen.values())


def hosts_with_facts(args: argparse.Namespace) -> list[tuple[str, Facts, dict[str, Any]]]:
    """(host, facts, host vars) for each host: this machine's facts, or gathered by provision's facts task."""
    if args.host and not args.inventory:
        try:
            return [(args.host, hostfacts.gather(simulate_gpu=args.simulate_gpu), {})]
        except ValueError as exc:
            raise UserError(f"--simulate-gpu: {exc}") from None
    inventory = args.inventory or DEFAULT_INVENTORY
    hosts = load_inventory(inventory, limit=args.host, flag="--host")
    check_reachable(hosts)
    facts = gather_facts(inventory, hosts)
    return [(host.name, facts[host.name], host.vars) for host in hosts]


def _table(cell: plan.Cell, hosts: list[str]) -> Table:
    table = Table(title=f"{', '.join(hosts)} · {cell.id} · {cell.label}", title_justify="left")
    for column in ("name", "value", "action", "rule"):
        table.add_column(column, overflow="fold")
    table.add_column("reason", overflow="fold")
    for row in redact.redact(cell.provenance):
        style = {"drop": "red", "override": "yellow"}.get(row["action"], "")
        table.add_row(row["name"], row["value"], row["action"], row["rule"], row["reason"], style=style)
    return table


def _as_dict(cell: plan.Cell) -> dict[str, Any]:
    return {
        "host": cell.host,
        "id": cell.id,
        "label": cell.label,
        "speculative": cell.config.server.speculative,
        "env": cell.env,
        "provenance": cell.provenance,
        "notes": cell.notes,
        "memory_plan": cell.memory_plan,
    }


def multinode_view(spec: Spec, hosts: list[tuple[str, Facts, dict[str, Any]]]) -> dict[str, Any]:
    """The node sets the sweep would form (multinode.choose, plan_set: the planner itself), each cell's env on each
    node with the rule behind every variable, and the hosts refused with why. No set at all: UserError (exit 2)."""
    facts = {name: envrules.with_arch(f) for name, f, _ in hosts}
    host_vars = {name: v for name, _, v in hosts}
    choice = multinode.choose(spec, [name for name, _, _ in hosts], facts, host_vars)
    sets = []
    for s in choice.sets:
        cells = multinode.plan_set(spec, s, facts, host_vars)
        sets.append(
            {
                "hosts": s.hosts,
                "head": s.head,
                "subnet": s.subnet,
                "transport": multinode.expected_transport(spec, s),
                "transport_reason": multinode.transport_reason(spec, s),
                "cells": [_multinode_cell(cell) for cell in cells],
            }
        )
    return {"warnings": plan.spec_warnings(spec), "node_sets": sets, "refused": dict(choice.unused)}


def _multinode_cell(cell: plan.Cell) -> dict[str, Any]:
    nodes = []
    node_row_ids: set[int] = set()
    for node in cell.cluster["nodes"]:
        rows = multinode.node_rows(cell, node["host"])
        node_row_ids.update(id(r) for r in rows)
        keys = ("host", "rank", "address", "ifname", "rdma", "env")
        nodes.append({**{k: node[k] for k in keys}, "provenance": rows})
    cell_rows = [r for r in cell.provenance if id(r) not in node_row_ids]
    return {**_as_dict(cell), "provenance": cell_rows, "nodes": nodes}


def _show_multinode(view: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(redact.redact(view), indent=1))
        return 0
    console = terminal.console()
    for warning in view["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    for s in view["node_sets"]:
        console.print(
            f"node set {', '.join(s['hosts'])} (head {s['head']}) on {s['subnet']}: transport {s['transport']} "
            f"({s['transport_reason']})",
            highlight=False,
        )
        for cell in s["cells"]:
            table = Table(title=f"{s['head']} · {cell['id']} · {cell['label']}", title_justify="left")
            for column in ("node", "name", "value", "action", "rule", "reason"):
                table.add_column(column, overflow="fold")
            rows = [("all nodes", r) for r in cell["provenance"]]
            rows += [(n["host"], r) for n in cell["nodes"] for r in n["provenance"]]
            for node, row in rows:
                row = redact.redact(row)
                style = {"drop": "red", "override": "yellow"}.get(row["action"], "")
                table.add_row(node, row["name"], row["value"], row["action"], row["rule"], row["reason"], style=style)
            console.print(table)
            for note in cell["notes"]:
                console.print(f"  [yellow]note:[/] {redact.redact_text(note)}", highlight=False)
    for host, why in view["refused"].items():
        console.print(f"[red]refused:[/] host {host} is in no node set: {why}", highlight=False)
    return 0
