"""`spark-agent init` writes an inventory every command accepts, refuses bad hosts before writing, and hands over to
`trust`; `spark-agent demo`'s pieces that run without a sweep (its inventory on another port, the What to run).
The demo end to end: tests/test_wheel.py (from the installed wheel) and tests/test_demo_local.py."""

from __future__ import annotations

import socket

import pytest
import yaml

from agent.cli import main
from agent.commands import demo
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory

pytestmark = pytest.mark.unit


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the with block ends


def test_init_writes_an_inventory_every_command_loads(tmp_path, capfd):
    out = tmp_path / "fleet.yml"
    code = main(["init", "192.0.2.10", "192.0.2.11:2222", "[2001:db8::1]:22", "-o", str(out), "--no-trust"])
    assert code == 0
    hosts = {h.name: h for h in load_inventory(out)}
    assert [hosts[n].address for n in ("spark-1", "spark-2", "spark-3")] == [
        ("192.0.2.10", 22),
        ("192.0.2.11", 2222),
        ("2001:db8::1", 22),
    ]
    assert hosts["spark-1"].vars["ansible_user"] == "nvidia"
    assert f"spark-agent trust sparks -i {out}" in capfd.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["init", "bad;host"],
        ["init", "192.0.2.10:99999"],
        ["init", "192.0.2.10", "--user", "root;id"],
        ["init", "192.0.2.10", "-o", "no/such/folder/inv.yml"],
    ],
)
def test_init_bad_input_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, capfd, argv):
    monkeypatch.chdir(tmp_path)
    assert main(argv + ["--no-trust"]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spark-agent: error: ")
    assert list(tmp_path.rglob("*.yml")) == []


def test_init_never_overwrites_without_force(tmp_path, capfd):
    out = tmp_path / "fleet.yml"
    out.write_text("# mine\n")
    assert main(["init", "192.0.2.10", "-o", str(out), "--no-trust"]) == 2
    assert "--force" in capfd.readouterr().err and out.read_text() == "# mine\n"
    assert main(["init", "192.0.2.10", "-o", str(out), "--no-trust", "--force"]) == 0
    assert "sparks" in yaml.safe_load(out.read_text())["all"]["children"]


def test_init_walks_trust_and_says_how_to_resume(tmp_path, capfd):
    """trust runs right after the write; a host it cannot read leaves the inventory and the command to go on."""
    out = tmp_path / "fleet.yml"
    code = main(["init", f"127.0.0.1:{closed_port()}", "-o", str(out), "--yes"])
    err = capfd.readouterr().err
    assert code == 2 and out.is_file()
    assert err.strip().splitlines()[-1].endswith(f"(the inventory is written; then: spark-agent trust sparks -i {out})")


def test_demo_on_another_port_keeps_to_its_own_work_dir(tmp_path):
    path = demo._inventory_on_port(tmp_path / "results", 18555)
    (host,) = load_inventory(path)  # what every command accepts
    assert host.vars["spark_port"] == 18555 and host.vars["spark_host_scope"] == "workdir"
    written = yaml.safe_load(path.read_text())["all"]["hosts"]["localhost"]
    default = yaml.safe_load(DEFAULT_INVENTORY.read_text())["all"]["hosts"]["localhost"]
    assert written.pop("spark_workdir") == default.pop("spark_workdir") + "-18555"
    del written["spark_port"], written["spark_host_scope"], default["spark_port"]
    assert written == default  # the rest is the embedded default's


def test_demo_prints_the_reports_what_to_run_section():
    report = "# Report\n\n## What to run\n\n### gb10 · nvfp4\n**Run marlin.**\n\n## Problems\n\nnone\n"
    assert demo.what_to_run(report) == ["## What to run", "### gb10 · nvfp4", "**Run marlin.**"]
    assert demo.what_to_run("# Report\n") == ["(the report has no What to run section)"]
