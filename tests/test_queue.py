"""The group queue and the detached hand-out, without hosts: longest first, replicas on different hosts, a lost
host's cell handed back, an even split; bad input for status/collect/--replicas is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.hostside.contracts import Facts
from agent.planning import groups
from agent.planning.matrix import plan_cells
from agent.planning.spec import load_spec
from agent.running import detach, hostdata
from agent.running.queue import GroupQueue, estimated_seconds, longest_first

from .test_sweep import write_spec

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
FACTS = Facts(gpu_name="NVIDIA GB10", compute_capability="12.1", arch="gb10", sm="sm_121a", simulated=True)


def _cells(tmp_path: Path, host: str, backends=("marlin", "flashinfer_b12x", "cutlass")):
    spec = load_spec(write_spec(tmp_path, "q", backends=backends))
    return spec, plan_cells(spec, host, FACTS, {"spark_runtime": "process"})


def test_longest_first_and_replicas_go_to_different_hosts(tmp_path):
    _, cells = _cells(tmp_path, "a")
    cells[1].checkpoint_info = {"total_gib": 40.0}  # type: ignore[typeddict-item]  # the biggest load: first
    order = longest_first(cells)
    assert order[0] == cells[1].id and order[1:] == [cells[0].id, cells[2].id]
    assert estimated_seconds(cells[1]) == estimated_seconds(cells[0]) + 20.0
    q = GroupQueue(order, dict.fromkeys(order, 2), {}, ("a", "b"))
    taken_a = [q.take("a") for _ in range(3)]
    assert taken_a == order and q.take("a") is None  # a host never takes a cell twice
    assert [q.take("b") for _ in range(3)] == order and q.unserved() == {}


def test_a_lost_hosts_cell_goes_back_to_the_front_for_another_host(tmp_path):
    _, cells = _cells(tmp_path, "a")
    order = [c.id for c in cells]
    q = GroupQueue(order, dict.fromkeys(order, 1), {}, ("a", "b"))
    first = q.take("a")
    assert q.take("b") == order[1]
    assert q.may_get_more("b")  # a is on a cell that may come back: b waits rather than leaves
    q.retire("a")
    q.give_back("a", first)
    assert q.can_still_run(first)
    assert q.take("b") == first and q.take("a") is None
    q.retire("b")
    assert q.unserved() == {order[2]: 1} and not q.can_still_run(order[2])


def test_a_cell_no_host_can_take_is_counted_lost_once(tmp_path):
    """A lost host's cell with no host left to take it: lost on that host, and not owed again at the end (the
    summary's numbers add up: planned = measured + ... + lost)."""
    from agent.running import sweep
    from agent.running.progress import Progress

    _, cells = _cells(tmp_path, "a")
    order = [c.id for c in cells]
    q = GroupQueue(order, dict.fromkeys(order, 1), {}, ("a", "b"))
    outcome = sweep.SweepOutcome(sweep_dir=tmp_path, hosts={h: sweep.HostOutcome(host=h) for h in "ab"})
    first = q.take("a")
    outcome.hosts["a"].planned.append(first)
    sweep._worker_lost(outcome, q, "b", "worker host b of node set a, b became unreachable")  # b is the lost one
    sweep._hand_back(tmp_path, q, outcome.hosts["a"], Progress(enabled=False), cells[0], "host_lost", "gone")
    assert outcome.lost_hosts == {"b": "worker host b of node set a, b became unreachable"}
    assert outcome.hosts["a"].lost == {first: "host_lost: gone"} and not outcome.hosts["a"].host_lost
    assert first not in q.unserved() and q.unserved() == {order[1]: 1, order[2]: 1}


def test_hand_out_keeps_the_backend_question_on_one_host_and_spreads_replicas(tmp_path):
    spec, cells_a = _cells(tmp_path, "a")
    hosts = ["a", "b", "c"]
    cells = {h: plan_cells(spec, h, FACTS, {"spark_runtime": "process"}) for h in hosts}
    assert [c.id for c in cells["b"]] == [c.id for c in cells_a]  # one group: the same ids on every host
    g = groups.group_facts(dict.fromkeys(hosts, FACTS))
    todo = {h: list(cs) for h, cs in cells.items()}
    one = detach.assign(g, cells, todo, replicas=1)
    # three backends of one checkpoint: the backend question is never split, one host measures it whole
    assert sorted(len(v) for v in one.values()) == [0, 0, 3] and len({c for v in one.values() for c in v}) == 3
    two = detach.assign(g, cells, todo, replicas=2)
    for cid in (c.id for c in cells_a):
        assert sum(cid in v for v in two.values()) == 2
    todo["a"] = []  # a finished every cell earlier: one more replica each, on b or c
    assert detach.assign(g, cells, todo, replicas=2)["a"] == []


def test_runner_progress_from_a_host_is_checked():
    good = {
        "state": "running",
        "alive": True,
        "current": "0123456789ab",
        "done": {"ba9876543210": {"outcome": "sealed", "error": "", "started": 1.0, "finished": 2.0, "measure_s": 0.5}},
        "sealed": ["ba9876543210"],
    }
    p = detach.checked_progress(good, "spark-a")
    assert p.current == "0123456789ab" and p.sealed == ["ba9876543210"] and p.done["ba9876543210"]["finished"] == 2.0
    for bad in (
        {**good, "state": "rm -rf"},
        {**good, "current": "../../etc"},
        {**good, "sealed": ["x" * 12]},
        {**good, "done": {"ba9876543210": {"outcome": "sealed", "started": float("inf")}}},
    ):
        with pytest.raises(hostdata.BadHostData):
            detach.checked_progress(bad, "spark-a")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["status", "nosuch"], "no detached sweep 'nosuch' under"),
        (["collect", "nosuch"], "no detached sweep 'nosuch' under"),
        (["status"], "no detached sweep under"),
        (["sweep", "x.toml", "--replicas", "0"], "--replicas '0': give a whole number of hosts, 1 or more"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expected):
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", *args, *([] if args[0] == "sweep" else ["--results", str(tmp_path)])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr.strip().splitlines()[-1]
