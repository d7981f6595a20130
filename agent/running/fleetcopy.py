"""Provisioning at fleet scale: a checkpoint folder that some hosts have is copied to the hosts that lack it, over
the fleet's own links (playbooks/copy_checkpoint.yml), instead of every host downloading it; and every host is shown
to hold the same image digest, whether it pulled it from the image's registry or from the fleet's mirror
(spark_image_mirror, seeded by provision.yml).

Which host has which folder comes from the provision run's checkpoint inspection (host data, validated there). After
a copy the receiving hosts are inspected again, so every cell records the headers of the copy it will serve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from agent.errors import UserError
from agent.planning.inventory import Host
from agent.planning.spec import Spec
from agent.running import playbooks as fleet
from agent.running import tasks
from agent.running.hostdata import one_line

log = structlog.get_logger("spark_agent.fleetcopy")

MISSING = "no such checkpoint folder"  # hostside/safetensors.py's message for a path that is not there


def holders(run: fleet.FleetRun, hosts: list[Host], model: str) -> tuple[list[str], list[str]]:
    """(hosts whose inspection read the folder, hosts where it does not exist) for one checkpoint folder."""
    have, lack = [], []
    for h in hosts:
        for item in run.items.get(h.name, {}).get(tasks.CHECKPOINTS.name, []):
            if not isinstance(item, dict) or (item.get("item") or {}).get("model") != model:
                continue
            if item.get("summary"):
                have.append(h.name)
            elif MISSING in str(item.get("msg", "")):
                lack.append(h.name)
    return have, lack


def fill_missing_checkpoints(inventory: Path, spec: Spec, hosts: list[Host], run: fleet.FleetRun) -> fleet.FleetRun:
    """Copy every checkpoint folder that some hosts lack from one host that has it; re-inspect the receivers and
    return the provision run with their fresh inspection. A folder no host has is left to the cells to fail on."""
    received: set[str] = set()
    for ckpt in spec.checkpoints:
        if not ckpt.model.startswith(("/", "~")):
            continue  # a hub id: vLLM resolves it, or hubcopy.download_once downloaded it once for the fleet
        have, lack = holders(run, hosts, ckpt.model)
        if not have or not lack:
            continue
        log.info("checkpoint_copy", checkpoint=ckpt.name, source=have[0], to=",".join(lack))
        copy = fleet.run_playbook(
            "copy_checkpoint", inventory, {"source": have[0], "path": ckpt.model}, limit=",".join([have[0], *lack])
        )
        problems = {**copy.unreachable, **copy.failures}
        if problems:
            detail = "; ".join(f"host {h}: {one_line(str(m), 300)}" for h, m in problems.items())
            raise UserError(f"copying checkpoint {ckpt.name} from {have[0]} failed: {detail}")
        for host in lack:
            result: dict[str, Any] = copy.results.get(host, {}).get(tasks.COPY.name) or {}
            log.info("checkpoint_copied", checkpoint=ckpt.name, host=host, bytes=result.get("bytes"))
        received.update(lack)
    if not received:
        return run
    again = fleet.run_playbook(
        "provision", inventory, {"image": spec.image, "checkpoints": checkpoint_vars(spec)},
        limit=",".join(sorted(received)), tags=tasks.CHECKPOINTS.tag,
    )  # fmt: skip
    for host in received:
        run.items.setdefault(host, {})[tasks.CHECKPOINTS.name] = again.items.get(host, {}).get(
            tasks.CHECKPOINTS.name, []
        )
    return run


def check_image_digests(run: fleet.FleetRun, hosts: list[Host], image: str) -> dict[str, str]:
    """Host → the local name of the pinned digest each docker host reported (its own registry's or the mirror's).
    A host that reports another digest stops provisioning: the fleet would not be measuring one image."""
    wanted = image.rsplit("@", 1)[-1]
    present: dict[str, str] = {}
    for h in hosts:
        result = run.results.get(h.name, {}).get(tasks.IMAGE.name)
        if not isinstance(result, dict) or result.get("skipped") or "digest" not in result:
            continue  # process runtime: no image
        digest, local = str(result.get("digest", "")), str(result.get("local_ref", ""))
        if digest != wanted or (local and not local.endswith("@" + wanted)):
            raise UserError(f"host {h.name}: holds {one_line(local or digest, 200)}, not the pinned {wanted}")
        present[h.name] = local
        log.info("image_present", host=h.name, digest=wanted, via="mirror" if local != image else "registry")
    return present


def checkpoint_vars(spec: Spec) -> list[dict[str, str]]:
    return [{"name": c.name, "model": c.model} for c in spec.checkpoints]
