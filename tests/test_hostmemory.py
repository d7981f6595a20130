"""The image digest and the logged vLLM version in the fingerprint (issue 13 §1): what the controller remembers per
host (running/hostmemory.py), how it splits groups (running/fingerprints.py), and how the report keeps hosts whose
logs gave different versions apart (judging/stats.recommend, judging/replicas)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.hostside.contracts import Facts
from agent.judging import replicas, stats, summary
from agent.planning import groups
from agent.planning.inventory import Host
from agent.running import fingerprints, hostmemory, tasks
from agent.running.playbooks import FleetRun

from .test_replicas import cell

pytestmark = pytest.mark.unit

IMAGE = "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32
DIGEST = IMAGE.rsplit("@", 1)[1]


def _facts() -> Facts:
    return Facts(  # type: ignore[typeddict-item]
        gpu_name="NVIDIA GB10", compute_capability="12.1", driver="580.82.09", cuda="13.0", mem_total_gib=119.7
    )


class _Record:
    """The two tables learn_version reads of a CellRecord (a finished cell), nothing else."""

    def __init__(self, host: str, version: str, sweep: str = "s1", fp: str = "aaaaaaaa"):
        self.host, self.sweep = host, sweep
        self.attestation = {"vllm_version": version}
        self.facts = {"fingerprint": fp}


def _learn(root: Path, host: str, version: str, **kw: str) -> list[str]:
    return hostmemory.learn_version(root, _Record(host, version, **kw))  # type: ignore[arg-type]


def test_a_logged_version_is_remembered_and_a_differing_host_is_named(tmp_path: Path) -> None:
    hostmemory.remember_images(tmp_path, IMAGE, {"spark-1": DIGEST}, ["spark-1", "spark-2", "spark-3"])
    assert _learn(tmp_path, "spark-1", "0.24.0") == []
    assert _learn(tmp_path, "spark-2", "0.24.0") == []
    notes = _learn(tmp_path, "spark-3", "0.23.0")
    assert [n.split(" (")[0] for n in notes] == [
        f"vLLM 0.23.0 in the log of spark-3 vs 0.24.0 on spark-{i}" for i in (1, 2)
    ]
    assert "not ranked or replicated together" in notes[0]
    assert _learn(tmp_path, "spark-3", "0.23.0", sweep="s2") == []  # another sweep's hosts are not compared
    known = hostmemory.load(tmp_path)
    assert known["spark-1"].image_digest == DIGEST and known["spark-2"].image_digest == ""
    assert hostmemory.versions(known, IMAGE) == {"spark-1": "0.24.0", "spark-2": "0.24.0", "spark-3": "0.23.0"}
    assert hostmemory.versions(known, "other@sha256:" + "cd" * 32) == {}


def test_a_new_image_forgets_the_old_version(tmp_path: Path) -> None:
    hostmemory.remember_images(tmp_path, IMAGE, {}, ["spark-1"])
    _learn(tmp_path, "spark-1", "0.24.0")
    hostmemory.remember_images(tmp_path, "x@sha256:" + "cd" * 32, {}, ["spark-1"])
    assert hostmemory.load(tmp_path)["spark-1"].vllm_version == ""


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"../etc": {}}),
        json.dumps({"spark-1": {"vllm_version": "0.24.0; rm -rf /"}}),
        json.dumps({"spark-1": {"image_digest": "sha256:xyz"}}),
        json.dumps({"spark-1": {"unknown": "x"}}),
        json.dumps({"spark-1": {"image": "x" * 5000}}),
    ],
)
def test_a_damaged_memory_is_ignored_never_trusted(tmp_path: Path, content: str) -> None:
    hostmemory.path(tmp_path).parent.mkdir(parents=True)
    hostmemory.path(tmp_path).write_text(content)
    assert hostmemory.load(tmp_path) == {}
    assert _learn(tmp_path, "spark-1", "0.24.0") == []  # and it is rewritten whole
    assert hostmemory.load(tmp_path)["spark-1"].vllm_version == "0.24.0"


def test_a_version_that_is_no_version_is_not_remembered(tmp_path: Path) -> None:
    assert _learn(tmp_path, "spark-1", "0.24.0\nINFO fake") == []
    assert hostmemory.load(tmp_path) == {}


def test_remembered_version_and_present_digest_split_the_groups(tmp_path: Path) -> None:
    facts = {h: _facts() for h in ("spark-1", "spark-2", "spark-3")}
    (one,) = fingerprints.remembered(tmp_path, IMAGE, facts)
    assert one.hosts == ("spark-1", "spark-2", "spark-3")
    hostmemory.remember_images(tmp_path, IMAGE, {}, list(facts))
    _learn(tmp_path, "spark-1", "0.24.0")
    _learn(tmp_path, "spark-2", "0.24.0")
    _learn(tmp_path, "spark-3", "0.23.0")
    found = fingerprints.remembered(tmp_path, IMAGE, facts)
    assert [g.hosts for g in found] == [("spark-1", "spark-2"), ("spark-3",)]
    assert groups.explain(found)[0].startswith("spark-3: vLLM 0.23.0 vs 0.24.0")
    assert len(fingerprints.remembered(tmp_path, "other@sha256:" + "cd" * 32, facts)) == 1  # other image: unknown

    # provisioning: spark-1 and spark-2 hold the image, spark-3 runs the process runtime (no image)
    run = FleetRun(status="successful", rc=0)
    for h in ("spark-1", "spark-2"):
        run.results[h] = {tasks.IMAGE.name: {"digest": DIGEST, "local_ref": IMAGE}}
    run.results["spark-3"] = {tasks.IMAGE.name: {"skipped": True}}
    after = fingerprints.provisioned(tmp_path, IMAGE, facts, [_host(h) for h in facts], run)
    assert [g.hosts for g in after] == [("spark-1", "spark-2"), ("spark-3",)]
    assert f"image ? vs sha256:{'ab' * 6}…" in groups.explain(after)[0]
    assert [g.fingerprint.image_digest for g in after] == [DIGEST, ""]


def _host(name: str) -> Host:
    return Host(name=name, vars={})


def _versioned(host: str, values: list[float], version: str, backend: str = "marlin") -> dict:
    c = cell(host, values)
    c["attestation"] = {"vllm_version": version}
    c["config"] = {**c["config"], "moe_backend": backend}
    return c


def test_the_report_never_replicates_or_ranks_across_logged_versions() -> None:
    same = [_versioned("a", [100.0, 101.0], "0.24.0"), _versioned("b", [130.0, 131.0], "0.24.0")]
    assert len(replicas.replica_points(summary.summarize_cells(same))) == 1
    apart = [_versioned("a", [100.0, 101.0], "0.24.0"), _versioned("b", [130.0, 131.0], "0.23.0")]
    assert replicas.replica_points(summary.summarize_cells(apart)) == []

    cells = [
        _versioned("a", [100.0, 101.0, 102.0], "0.24.0"),
        _versioned("a", [150.0, 151.0, 152.0], "0.24.0", backend="cutlass"),
        _versioned("b", [100.0, 101.0, 102.0], "0.23.0"),
        _versioned("b", [150.0, 151.0, 152.0], "0.23.0", backend="cutlass"),
    ]
    recs = stats.recommend(summary.summarize_cells(cells))
    assert [r.hardware for r in recs] == ["unknown hardware · vLLM 0.23.0", "unknown hardware · vLLM 0.24.0"]
    assert [{s.cell["host"] for s in r.winner_cells} for r in recs] == [{"b"}, {"a"}]  # each from its own hosts
    (one,) = stats.recommend(summary.summarize_cells(cells[:2]))
    assert one.hardware == "unknown hardware"  # one version: the heading is as before


def test_check_groups_by_what_each_host_last_had(tmp_path: Path) -> None:
    """`check` has no spec (no image): the digest and version each host last had, whatever the image."""
    facts = {h: _facts() for h in ("spark-1", "spark-2")}
    hostmemory.remember_images(tmp_path, IMAGE, {"spark-1": DIGEST}, ["spark-1"])
    hostmemory.remember_images(tmp_path, "other@sha256:" + "cd" * 32, {}, ["spark-2"])
    found = fingerprints.last_known(tmp_path, facts)
    assert [g.hosts for g in found] == [("spark-1",), ("spark-2",)]
    assert groups.explain(found)[0].startswith(f"spark-2: image ? vs sha256:{'ab' * 6}…")


def test_a_host_whose_log_has_not_said_takes_its_twins_logged_version() -> None:
    """A version counts once known: a host without a log yet joins the twins whose logs agree, instead of measuring
    every cell again; twins that disagree leave it nothing to join."""
    facts = {h: _facts() for h in ("spark-1", "spark-2", "spark-new")}
    for digests in (dict.fromkeys(facts, DIGEST), {}):  # docker hosts, or the process runtime
        (one,) = groups.group_facts(facts, digests, {"spark-1": "0.24.0", "spark-2": "0.24.0"})
        assert one.hosts == ("spark-1", "spark-2", "spark-new") and one.fingerprint.vllm_version == "0.24.0"
    split = groups.group_facts(facts, {}, {"spark-1": "0.24.0", "spark-2": "0.23.0"})
    assert [g.hosts for g in split] == [("spark-1",), ("spark-2",), ("spark-new",)]
