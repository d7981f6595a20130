"""A serve command the host cannot run is refused at the facts step (a pre-flight on the host), naming the host,
the inventory variable and the fix: before, every cell started nothing and failed as "ended before ready", with
"vllm: not found" only in server.log (issue 47 item 5)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from .test_sweep import CLI, write_spec

pytestmark = pytest.mark.integration


def test_a_serve_command_the_host_cannot_run_is_exit_2_at_the_facts_step(tmp_path, sim_inventory):
    inv = yaml.safe_load(sim_inventory.read_text())
    hosts = inv["all"]["children"]["sparks"]["hosts"]
    first = sorted(hosts)[0]
    hosts[first]["spark_serve_cmd"] = ["no-such-vllm", "serve"]
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(inv))
    spec = write_spec(tmp_path, "preflight", duration=1.0)
    out = tmp_path / "results"
    run = subprocess.run(
        [*CLI, "sweep", str(spec), "-i", str(path), "--results", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-3000:]
    said = run.stderr.strip().splitlines()[-1]
    assert first in said and "spark_serve_cmd" in said and "no-such-vllm" in said, run.stderr[-3000:]
    assert not list(out.glob("*/*/*/cell.toml"))  # no cell was started
