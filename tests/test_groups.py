"""Fingerprint groups: equal fingerprints group together, differences are explained (agent/planning/groups.py)."""

from __future__ import annotations

import pytest

from agent.hostside.contracts import Facts
from agent.planning import groups

pytestmark = pytest.mark.unit


def _facts(**over: object) -> Facts:
    base: dict[str, object] = {
        "gpu_name": "NVIDIA GB10",
        "compute_capability": "12.1",
        "driver": "580.82.09",
        "cuda": "13.0",
        "mem_total_gib": 119.7,
        "python": "3.12.3",
    }
    base.update(over)
    return Facts(**base)  # type: ignore[typeddict-item]


def test_equal_hosts_form_one_group_and_memory_rounds() -> None:
    fps = {
        "spark-2": groups.fingerprint(_facts()),
        "spark-1": groups.fingerprint(_facts(mem_total_gib=119.6, python="3.11.0")),  # python is not a difference
    }
    (g,) = groups.group_hosts(fps)
    assert g.name == "g1" and g.hosts == ("spark-1", "spark-2")
    assert groups.explain([g]) == []


def test_a_different_driver_is_its_own_group_and_explained() -> None:
    facts = {
        "spark-1": _facts(),
        "spark-2": _facts(),
        "spark-3": _facts(driver="580.95.05"),
    }
    found = groups.group_facts(facts)
    assert [g.hosts for g in found] == [("spark-1", "spark-2"), ("spark-3",)]
    (line,) = groups.explain(found)
    assert line.startswith("spark-3: driver 580.95.05 vs 580.82.09")
    assert groups.group_of(found, "spark-3").name == "g2"
    with pytest.raises(KeyError):
        groups.group_of(found, "spark-9")


def test_other_chip_image_and_vllm_version_separate_hosts() -> None:
    b200 = groups.fingerprint(_facts(gpu_name="NVIDIA B200", compute_capability="10.0"))
    gb10 = groups.fingerprint(_facts())
    assert groups.differences(gb10, b200) == ["chip NVIDIA GB10 vs NVIDIA B200", "compute capability 12.1 vs 10.0"]
    assert groups.fingerprint(_facts(), image_digest="sha256:a") != groups.fingerprint(
        _facts(), image_digest="sha256:b"
    )
    with_v = groups.fingerprint(_facts(), vllm_version="0.24.0")
    assert groups.differences(gb10, with_v) == ["vLLM ? vs 0.24.0"]
    assert groups.plain(gb10)["driver"] == "580.82.09"
    assert "GB10" in gb10.label() and groups.describe(groups.group_hosts({"a": gb10}))[0].startswith("group g1: ")


def test_group_names_are_stable_by_first_host() -> None:
    fps = {"b": groups.fingerprint(_facts(driver="1")), "a": groups.fingerprint(_facts(driver="2"))}
    assert [(g.name, g.hosts) for g in groups.group_hosts(fps)] == [("g1", ("a",)), ("g2", ("b",))]
