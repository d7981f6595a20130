"""`spark-agent env SPEC [-i INVENTORY] [--host H]`: the environment each cell would get on each host,
every variable with the rule and reason behind it (agent/rules/env.toml). Nothing is started.
With --host and no -i the facts are this machine's (--simulate-gpu gb10 rehearses a Spark)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from agent.errors import UserError
from agent.hostside import facts as hostfacts
from agent.paths import DEFAULT_INVENTORY
from agent.planning import envrules
from agent.planning import matrix as plan
from agent.planning.inventory import check_reachable, load_inventory
from agent.planning.spec import load_spec
from agent.running.sweep import gather_facts


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
    cells = [
        cell
        for name, facts, host_vars in hosts_with_facts(args)
        for cell in plan.plan_cells(spec, name, envrules.with_arch(facts), host_vars)
    ]
    warnings = plan.spec_warnings(spec)
    if args.json:
        print(json.dumps({"warnings": warnings, "cells": [_as_dict(cell) for cell in cells]}, indent=1))
        return 0
    console = Console()
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    for cell in cells:
        console.print(_table(cell))
        for note in cell.notes:
            console.print(f"  [yellow]note:[/] {note}", highlight=False)
    return 0


def hosts_with_facts(args: argparse.Namespace) -> list[tuple[str, dict, dict]]:
    """(host, facts, host vars) for each host: this machine's facts, or gathered by provision's facts task."""
    if args.host and not args.inventory:
        try:
            return [(args.host, hostfacts.gather(simulate_gpu=args.simulate_gpu), {})]
        except ValueError as exc:
            raise UserError(f"--simulate-gpu: {exc}") from None
    inventory = args.inventory or DEFAULT_INVENTORY
    hosts = load_inventory(inventory, limit=args.host)
    check_reachable(hosts)
    facts = gather_facts(inventory, hosts)
    return [(host.name, facts[host.name], host.vars) for host in hosts]


def _table(cell: plan.Cell) -> Table:
    table = Table(title=f"{cell.host} · {cell.id} · {cell.label}", title_justify="left")
    for column in ("name", "value", "action", "rule"):
        table.add_column(column, overflow="fold")
    table.add_column("reason", overflow="fold")
    for row in cell.provenance:
        style = {"drop": "red", "override": "yellow"}.get(row["action"], "")
        table.add_row(row["name"], row["value"], row["action"], row["rule"], row["reason"], style=style)
    return table


def _as_dict(cell: plan.Cell) -> dict:
    return {
        "host": cell.host,
        "id": cell.id,
        "label": cell.label,
        "speculative": cell.config["speculative"],
        "env": cell.env,
        "provenance": cell.provenance,
        "notes": cell.notes,
    }
