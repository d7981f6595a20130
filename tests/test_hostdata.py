"""JSON a host returns through Ansible is validated per shape before use (that it never goes back to Ansible as a
template, through a real ansible-playbook: test_hostdata_ansible.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.planning.inventory import Host
from agent.running import hostdata, sweep, tasks
from agent.running import playbooks as fleet
from agent.running.hostdata import BadHostData
from tests.hostile import HOSTILE, JINJA, SCRIPT

pytestmark = pytest.mark.unit

FACTS = json.loads((Path(__file__).parent / "data" / "facts" / "h200-facts.json").read_text())


def test_real_facts_pass_and_keep_their_values():
    checked = hostdata.facts(FACTS, "spark-1")
    for key, value in FACTS.items():
        if key in hostdata.FACTS:
            assert checked[key] == value, key


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("arch", JINJA, "not a valid value"),  # arch reaches the simulator's environment: a plain token only
        ("arch", "gb10; rm -rf /", "not a valid value"),
        ("sm", "{{ 7*7 }}", "not a valid value"),
        ("driver", "580.95 {{ x }}", "not a valid value"),
        ("compute_capability", "12.1<i>", "not a valid value"),
        ("fingerprint", "zzzzzzzz", "not a valid value"),
        ("gpu_name", "G" * 300, "more than 256"),
        ("gpu_name", 42, "expected a string"),
        ("gpu_name", "GB10\x00", "NUL"),
        ("mem_total_gib", math.nan, "not a finite number"),
        ("mem_total_gib", math.inf, "not a finite number"),
        ("mem_total_gib", -1, "not a finite number"),
        ("mem_total_gib", "120", "expected a number"),
        ("gpu_count", True, "expected an integer"),
        ("docker", "yes", "expected true or false"),
        ("notes", "one note", "expected a list"),
        ("notes", ["n"] * 1000, "more than 64"),
        ("docker_runtimes", ["nvidia", {"x": 1}], "expected a string"),
    ],
)
def test_bad_facts_are_refused(key, value, reason):
    with pytest.raises(BadHostData, match=reason) as exc:
        hostdata.facts(dict(FACTS, **{key: value}), "spark-1")
    assert str(exc.value).startswith("host spark-1: facts.")


@pytest.mark.parametrize("value", [None, [], "facts", 3])
def test_facts_must_be_an_object(value):
    with pytest.raises(BadHostData, match="expected an object"):
        hostdata.facts(value, "spark-1")


@pytest.mark.parametrize("text", HOSTILE)
def test_free_text_facts_stay_data(text):
    """A GPU name with script or Jinja is just a name: kept as is, escaped where shown, never templated."""
    assert hostdata.facts(dict(FACTS, gpu_name=text), "spark-1")["gpu_name"] == text


def test_unknown_keys_are_dropped():
    checked = hostdata.facts(dict(FACTS, extra={"deep": [1, 2]}, __ansible_unsafe="x"), "spark-1")
    assert "extra" not in checked and "__ansible_unsafe" not in checked


@pytest.mark.parametrize(
    "cell_id",
    ["../../etc", "0123456789a", "0123456789abc", "0123456789AB", JINJA, "", 123456789012, None, "0123456789ab\n"],
)
def test_cell_ids_are_12_hex(cell_id):
    with pytest.raises(BadHostData):
        hostdata.cell_id(cell_id)


def test_holder_records():
    good = {"user": "u", "controller_host": "c", "controller_pid": 42, "since": "t", "sweep": "s", "cell_id": "ab" * 6}
    assert hostdata.holder(good) == good
    assert hostdata.holder({})["cell_id"] == ""
    for bad in ({"cell_id": JINJA}, {"controller_pid": "42"}, {"controller_pid": -1}, {"user": ["u"]}, ["x"]):
        with pytest.raises(BadHostData):
            hostdata.holder(bad)


@pytest.mark.parametrize(
    "serve",
    [
        {"ready": "true"},
        {"ready": False, "failure": {"class": SCRIPT}},
        {"ready": False, "failure": {"class": "other", "evidence": "one line"}},
        {"ready": False, "failure": []},
        {"ready": True, "startup_s": -3},
        {"startup_s": 1.0},
    ],
)
def test_bad_serve_status_is_refused(serve):
    with pytest.raises(BadHostData):
        hostdata.serve_status(serve)


def test_bench_items_and_checkpoint_summaries():
    assert hostdata.bench_item({"elapsed_s": 3.5, "level": 2, "runs": "ignored"}) == {"elapsed_s": 3.5, "level": 2}
    with pytest.raises(BadHostData):
        hostdata.bench_item({"elapsed_s": math.inf})
    summary = {"bytes_per_token": None, "total_gib": 1.5, "expert_format": "nvfp4", "mtp": {"present": True}}
    assert hostdata.checkpoint_summary(summary, "c") == {
        "bytes_per_token": 0,
        "total_gib": 1.5,
        "packed_fp4_tensors": 0,
        "high_precision_weights": 0,
        "expert_format": "nvfp4",
        "mtp_present": True,
        "mtp_quantized": False,
    }
    for bad in ({"bytes_per_token": 1.5}, {"expert_format": JINJA}, {"mtp": {"present": "yes"}}):
        with pytest.raises(BadHostData):
            hostdata.checkpoint_summary(bad, "c")


def test_bounded_json_limits_depth_nodes_and_numbers():
    nested: object = "leaf"
    for _ in range(hostdata.MAX_DEPTH + 2):
        nested = [nested]
    with pytest.raises(BadHostData, match="nested deeper"):
        hostdata.bounded_json(nested, "summary")
    with pytest.raises(BadHostData, match="more than"):
        hostdata.bounded_json(list(range(hostdata.MAX_NODES + 1)), "summary")
    with pytest.raises(BadHostData, match="finite"):
        hostdata.bounded_json({"a": [1.0, math.nan]}, "summary")
    assert hostdata.bounded_json({"a": [1, 2.5, None, True, "x"]}, "s") == {"a": [1, 2.5, None, True, "x"]}


def test_a_stale_lock_with_a_hostile_holder_is_never_reclaimed(tmp_path):
    """The holder's cell_id would go to the teardown playbook: anything but 12 hex stops here, before Ansible."""
    host = Host("spark-1", {})
    for cell_id in (JINJA, "../../x", "0123456789ab' -e x"):
        run = fleet.FleetRun(rc=2, status="failed")
        holder = {"controller_host": "me", "controller_pid": 2**31 - 1, "cell_id": cell_id}
        run.results["spark-1"] = {tasks.SERVE.name: {"busy": True, "host_error": True, "holder": holder, "msg": "busy"}}
        assert sweep._stale_lock_reclaimed(tmp_path / "no-inventory.yml", host, run) is False


def test_hostile_facts_stop_the_sweep_with_a_host_error():
    run = fleet.FleetRun(rc=0, status="successful")
    run.results["spark-1"] = {tasks.FACTS.name: {"spark_facts": dict(FACTS, arch=JINJA)}}
    with pytest.raises(UserError, match=r"host spark-1: facts\.arch"):
        sweep.validated_facts(run, [Host("spark-1", {})])


def test_checkpoint_infos_from_provision_are_validated():
    run = fleet.FleetRun(rc=0, status="successful")
    good = {"item": {"model": "/models/a"}, "summary": {"bytes_per_token": 1000, "total_gib": 2.0, "mtp": {}}}
    run.items["spark-1"] = {tasks.CHECKPOINTS.name: [good]}
    assert sweep.checkpoint_infos(run, "spark-1")["/models/a"]["bytes_per_token"] == 1000
    bad = {"item": {"model": "/models/b"}, "summary": {"bytes_per_token": "1e9", "expert_format": JINJA}}
    run.items["spark-1"] = {tasks.CHECKPOINTS.name: [good, bad]}
    with pytest.raises(UserError, match=r"provisioning failed: host spark-1: checkpoint /models/b.bytes_per_token"):
        sweep.checkpoint_infos(run, "spark-1")
