"""A hostile host over real SSH: its server plants a symbolic link to /etc/passwd in the cell's run folder, so the
archive the host sends back holds a link. The cell is failed as bad_host_data, nothing of the archive is kept, and
nothing outside results/<sweep>/<host>/<cell>/ is created or changed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.results import tree as results
from agent.running import collect
from agent.running.follow import run_sweep
from tests.hostile import snapshot
from tests.sshd_hosts import REPO, inventory_for
from tests.test_sweep import engines_running, write_spec

pytestmark = pytest.mark.integration

# The engine is the simulator, started through a shell that first plants the link where the run's files go.
PLANT = (
    'd="$SPARK_AGENT_WORKDIR/runs/$SPARK_AGENT_CELL"; mkdir -p "$d"; ln -sf /etc/passwd "$d/c001-r9.json"; '
    'exec /usr/bin/python3 -m agent.sim serve "$@"'
)


@pytest.mark.attack("collect: a host's archive holds a symbolic link to /etc/passwd")
def test_a_hostile_archive_over_ssh_fails_the_cell_and_touches_nothing_else(tmp_path, ssh_fleet):
    inv = inventory_for(
        ssh_fleet,
        {
            "spark_runtime": "process",
            "spark_simulate_gpu": "gb10",
            "spark_host_scope": "workdir",
            "spark_port": 8000,
            "spark_health_timeout": 60,
            "spark_serve_cmd": ["/bin/sh", "-c", PLANT, "hostile-engine"],
            "spark_serve_env": {"PYTHONPATH": str(REPO)},
        },
    )
    inventory = tmp_path / "hostile.yml"
    inventory.write_text(yaml.safe_dump(inv))
    spec = load_spec(write_spec(tmp_path, "hostile", backends=("marlin",)))
    hosts = load_inventory(inventory, limit="spark-a")
    root = tmp_path / "results"
    (root / "hostile" / "spark-b").mkdir(parents=True)
    (root / "hostile" / "spark-b" / "keep.txt").write_text("mine\n")
    before = snapshot(tmp_path)

    outcome = run_sweep(spec, inventory, hosts, root)

    [cell_id] = outcome.hosts["spark-a"].done
    cell_dir = results.cell_dir(root, "hostile", "spark-a", cell_id)
    record = results.read_toml(cell_dir / results.CELL_FILE)
    assert record["status"] == "failed" and record["failure_class"] == collect.BAD_HOST_DATA
    assert "'c001-r9.json' is a symbolic link" in record["failure_evidence"][0]
    assert sorted(p.name for p in cell_dir.iterdir()) == [results.CELL_FILE]
    # the host really sent the link (this is what was refused)
    assert (ssh_fleet.host("spark-a").workdir / "runs" / cell_id / "c001-r9.json").is_symlink()

    after = snapshot(tmp_path)
    new_or_changed = {p for p in after if before.get(p) != after[p]}
    allowed = {"results"} | {
        str(Path("results", p)) for p in ("hostile", "hostile/spark-a", ".incoming", ".incoming/hostile")
    }
    allowed |= {str(Path("results") / ".incoming" / "hostile" / "spark-a")}
    allowed |= {str(Path("results") / "store.sqlite")}  # the results store indexes each cell as it lands
    allowed |= {str(Path("results", "hostile", results.RUN_FILE))}  # when this run of the sweep began (the store's key)
    # what provisioning found on each host (its image digest), remembered for the next sweep's fingerprint
    allowed |= {str(Path("results", p)) for p in (".fleet", ".fleet/hosts", ".fleet/hosts/known.json")}
    allowed |= {str(Path("results") / ".fleet"), str(Path("results") / ".fleet" / "hostile.json")}  # the hand-out
    stray = {p for p in new_or_changed if p not in allowed and not p.startswith(str(cell_dir.relative_to(tmp_path)))}
    assert stray == set()
    assert (root / "hostile" / "spark-b" / "keep.txt").read_text() == "mine\n"
    assert not list((root / ".incoming").rglob("*.tar"))
    assert engines_running(ssh_fleet) == []
