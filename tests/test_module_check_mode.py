"""Check mode (as `ansible-playbook --check` runs it) over the real modules on this machine: each says what it would change
and changes nothing on the host. One playbook run covers them all (ansible-playbook is slow to start)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from agent.running import playbooks as fleet

REPO = Path(__file__).resolve().parent.parent  # the checkout these tests run from

pytestmark = pytest.mark.integration

GPU_RULES = REPO / "agent" / "rules" / "gpus.toml"
DIGEST_REF = "registry.invalid/never/pulled@sha256:" + "0" * 64


def _playbook(work: Path) -> list[dict]:
    workdir = str(work / "spark")
    return [
        {
            "name": "Check mode",
            "hosts": "all",
            "gather_facts": False,
            "check_mode": True,  # as --check does, for every task
            "tasks": [
                {
                    "name": "Bench",
                    "spark_bench": {
                        "url": "http://127.0.0.1:9",
                        "model": "m",
                        "level": 1,
                        "duration": 1,
                        "out_dir": str(work / "bench-out"),
                    },
                },
                {
                    "name": "Start",
                    "spark_server": {
                        "state": "started",
                        "workdir": workdir,
                        "cell_id": "c1",
                        "argv": [sys.executable, "-c", "import time; time.sleep(60)"],
                        "url": "http://127.0.0.1:9",
                    },
                },
                {"name": "Stop", "spark_server": {"state": "stopped", "workdir": workdir, "cell_id": "c1"}},
                {"name": "Seal", "spark_server": {"state": "sealed", "workdir": workdir, "cell_id": "c1"}},
                {"name": "Status", "spark_server": {"state": "status", "workdir": workdir}},
                {"name": "Pull", "spark_image": {"ref": DIGEST_REF, "docker_host": "unix:///nonexistent.sock"}},
                {
                    "name": "Facts",
                    "spark_facts": {
                        "simulate_gpu": "gb10",
                        "model_cache": str(work),
                        "gpu_rules_toml": f"{{{{ lookup('ansible.builtin.file', '{GPU_RULES}') }}}}",
                    },
                },
                {"name": "Inspect", "spark_inspect": {"path": str(work / "no-checkpoint")}, "ignore_errors": True},
            ],
        }
    ]


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[fleet.FleetRun, Path]:
    work = tmp_path_factory.mktemp("check-mode")
    (work / "check.yml").write_text(yaml.safe_dump(_playbook(work), sort_keys=False))
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (work / "inventory.yml").write_text(json.dumps({"all": {"hosts": {"here": host}}}))
    before = sorted(p.name for p in work.iterdir())
    run = fleet.run_playbook(str(work / "check.yml"), work / "inventory.yml")
    assert sorted(p.name for p in work.iterdir()) == before, "check mode created something on the host"
    return run, work


def test_changing_modules_report_a_change_and_do_nothing(checked) -> None:
    run, work = checked
    res = run.results["here"]
    assert res["Bench"]["changed"] is True and res["Bench"]["runs"] == []
    assert res["Start"]["changed"] is True and "ready" not in res["Start"]
    assert res["Seal"]["changed"] is True and "sealed" not in res["Seal"]
    assert res["Pull"]["changed"] is True  # not present, so a real run would pull; nothing was pulled
    assert not (work / "bench-out").exists() and not (work / "spark").exists()


def test_nothing_running_means_nothing_to_stop(checked) -> None:
    res = checked[0].results["here"]
    assert res["Stop"]["changed"] is False
    assert res["Status"]["running"] is False and res["Status"]["changed"] is False


def test_read_only_modules_run_as_usual(checked) -> None:
    run, _ = checked
    res = run.results["here"]
    assert res["Facts"]["spark_facts"]["arch"] == "gb10"
    assert "here" not in run.failures  # the inspect failure was ignored, as the playbook said
    assert "no-checkpoint" in res["Inspect"]["msg"]
