"""A hub checkpoint downloaded once for the fleet, then copied over the fleet's own links.

Without it every host's vLLM downloads a hub id itself: N downloads of tens of GB over the office link. With
`spark_hub_download_once: true` (group_vars), provisioning runs playbooks/hub_checkpoint.yml for each hub-id
checkpoint: the first such host downloads it into its hub cache (hostside/hub.py: the hub's HTTP API, the token
`spark_hub_token` only in the module's no_log argument), the others fetch the snapshot from it, verified by size
and safetensors header hashes (hostside/share.py), and get the revision's ref, so their vLLM finds it in the cache.
Hosts that already have it download and copy nothing (every step is idempotent).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from agent.errors import UserError
from agent.hostside import hub
from agent.planning.inventory import Host
from agent.planning.spec import Spec
from agent.running import playbooks as fleet
from agent.running import tasks
from agent.running.hostdata import one_line

log = structlog.get_logger("spark_agent.hubcopy")

ENABLE = "spark_hub_download_once"  # host var (group_vars): download hub checkpoints once for the fleet


def download_once(inventory: Path, spec: Spec, hosts: list[Host]) -> dict[str, dict[str, object]]:
    """Each hub-id checkpoint downloaded by one host and copied to the others that have the setting on.
    Returns checkpoint name -> {source, commit, bytes downloaded now}; {} when no host has the setting."""
    fleet_hosts = [h for h in hosts if h.vars.get(ENABLE) is True]
    done: dict[str, dict[str, object]] = {}
    if not fleet_hosts:
        return done
    source = fleet_hosts[0].name
    for ckpt in spec.checkpoints:
        if not hub.is_repo_id(ckpt.model):
            continue  # a folder on the hosts: fleetcopy.fill_missing_checkpoints copies those
        run = fleet.run_playbook(
            "hub_checkpoint",
            inventory,
            {"source": source, "repo": ckpt.model, "revision": "main"},
            limit=",".join(h.name for h in fleet_hosts),
        )
        problems = {**run.unreachable, **run.failures}
        if problems:
            detail = "; ".join(f"host {h}: {one_line(str(m), 300)}" for h, m in problems.items())
            raise UserError(f"downloading checkpoint {ckpt.name} ({ckpt.model}) once for the fleet failed: {detail}")
        got = run.results.get(source, {}).get(tasks.HUB.name) or {}
        done[ckpt.name] = {"source": source, "commit": str(got.get("commit", "")), "bytes": got.get("bytes", 0)}
        log.info("hub_checkpoint", checkpoint=ckpt.name, **done[ckpt.name])
    return done
