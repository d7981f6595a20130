"""A checkpoint folder on one host reaches the hosts that lack it over the fleet's link (playbooks/copy_checkpoint.yml
through real Ansible and real SSH), is verified there, and is never copied twice.

The test hosts share one filesystem, so each gets its own HOME (spark_environment): `~/models/ckpt` is then a
different folder on each host, as it is on real machines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.running import fleetcopy, tasks
from agent.running import playbooks as fleet

from .sshd_hosts import SIM_HOST_VARS, SshFleet, inventory_for
from .test_inspect_build import build_qwen

pytestmark = pytest.mark.integration

SPEC = """
[sweep]
name = "copy"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "uns"
model = "~/models/ckpt"
quant = "nvfp4"
[matrix]
moe_backend = ["marlin"]
concurrency = [1]
""".format(digest="ab" * 32)


def _homes(fleet_: SshFleet, tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    inv = inventory_for(fleet_, SIM_HOST_VARS)
    homes = {}
    for name, host_vars in inv["all"]["children"]["sparks"]["hosts"].items():
        homes[name] = tmp_path / "homes" / name
        homes[name].mkdir(parents=True)
        host_vars["spark_environment"] = {"HOME": str(homes[name])}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path, homes


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_missing_checkpoint_is_copied_from_the_host_that_has_it(ssh_fleet, tmp_path):
    inventory, homes = _homes(ssh_fleet, tmp_path)
    source = Path(build_qwen(str(homes["spark-a"] / "models" / "ckpt"), "uns"))
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    hosts = load_inventory(inventory)

    run = fleet.run_playbook("provision", inventory, {"checkpoints": fleetcopy.checkpoint_vars(spec)})
    assert fleetcopy.holders(run, hosts, "~/models/ckpt") == (["spark-a"], ["spark-b"])

    run = fleetcopy.fill_missing_checkpoints(inventory, spec, hosts, run)
    copy = homes["spark-b"] / "models" / "ckpt"
    assert _tree(copy) == _tree(source)
    [item] = run.items["spark-b"][tasks.CHECKPOINTS.name]
    assert item["summary"]["tensors"] > 0, "the receiver is inspected again: its cells record the copy's headers"
    assert not (homes["spark-a"] / ".spark-agent" / "state" / "share.json").exists(), "the share was stopped"

    again = fleet.run_playbook(
        "copy_checkpoint", inventory, {"source": "spark-a", "path": "~/models/ckpt"}, limit="spark-a,spark-b"
    )
    assert again.ok
    assert again.results["spark-b"][tasks.COPY.name]["bytes"] == 0, "a verified copy is not fetched again"
    assert again.changed.get("spark-b", 0) == 0
