"""A sweep's fingerprint groups: the host facts, plus what only the controller knows of a host: the image digest it
really holds after provisioning, and the vLLM version its last server log gave (running/hostmemory.py).

Before provisioning the groups use the digests and versions remembered from earlier sweeps of the same image;
after it, the digests each host reported now (fleetcopy.check_image_digests has refused any other than the pinned
one, so hosts differ only in having one or not: docker vs the process runtime).
"""

from __future__ import annotations

from pathlib import Path

from agent.hostside.contracts import Facts
from agent.planning import groups
from agent.planning.inventory import Host
from agent.running import hostmemory, tasks
from agent.running import playbooks as fleet


def remembered(results_root: Path, image: str, facts: dict[str, Facts]) -> list[groups.HostGroup]:
    """The groups before provisioning: facts plus what earlier sweeps of this image learnt."""
    known = hostmemory.load(results_root)
    return groups.group_facts(facts, hostmemory.digests(known, image), hostmemory.versions(known, image))


def present_digests(run: fleet.FleetRun, hosts: list[Host], image: str) -> dict[str, str]:
    """Host → the pinned digest, for each host whose provisioning reported the image present (process-runtime
    hosts report none). Run after check_image_digests: any other digest has stopped the sweep already."""
    wanted = image.rsplit("@", 1)[-1]
    if not hostmemory.DIGEST.fullmatch(wanted):
        return {}
    out = {}
    for h in hosts:
        result = run.results.get(h.name, {}).get(tasks.IMAGE.name)
        if isinstance(result, dict) and not result.get("skipped") and result.get("digest") == wanted:
            out[h.name] = wanted
    return out


def provisioned(
    results_root: Path, image: str, facts: dict[str, Facts], hosts: list[Host], run: fleet.FleetRun
) -> list[groups.HostGroup]:
    """The groups after provisioning: remember the digest each host holds now and group by it."""
    present = present_digests(run, hosts, image)
    hostmemory.remember_images(results_root, image, present, [h.name for h in hosts])
    known = hostmemory.load(results_root)
    return groups.group_facts(facts, present, hostmemory.versions(known, image))


def last_known(results_root: Path, facts: dict[str, Facts]) -> list[groups.HostGroup]:
    """For `check` (no spec, so no image): the facts plus the digest and vLLM version each host last had."""
    known = hostmemory.load(results_root)
    return groups.group_facts(
        facts,
        {h: k.image_digest for h, k in known.items()},
        {h: k.vllm_version for h, k in known.items()},
    )
