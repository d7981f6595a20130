"""Host facts: parsing of real nvidia-smi output (captured on an H200 by bench/check_facts_on_gpu.sh),
facts of this machine, simulated chips, and the spark_facts Ansible module run by real Ansible."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.hostside import facts

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "facts"
RULES = facts.load_gpu_rules()
ARCH_TABLE_KEYS = {
    "gpu_name",
    "compute_capability",
    "arch",
    "sm",
    "driver",
    "cuda",
    "mem_total_gib",
    "python",
    "docker",
    "nvidia_runtime",
    "simulated",
    "fingerprint",
    "disk_free_gib",
}
NO_GPU_HERE = shutil.which("nvidia-smi") is None


def captured(name: str) -> str:
    return (DATA / f"h200-{name}").read_text()


# --- parsing real output ------------------------------------------------------------------------


def test_query_gpu_of_a_real_h200():
    gpus = facts.parse_query_gpu(captured("query-gpu.csv"))
    assert gpus == [{"name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.159.04", "mem_mib": 0.0}]


def test_query_gpu_with_memory_column():
    (gpu,) = facts.parse_query_gpu(captured("query-gpu-mem.csv"))
    assert (gpu["name"], gpu["mem_mib"]) == ("NVIDIA H200", 143771.0)


def test_not_supported_values_become_empty():
    # GB10-style row (written by hand, not captured): NVML has no memory figure for unified memory
    (gpu,) = facts.parse_query_gpu("NVIDIA GB10, 12.1, [N/A], [N/A]\n")
    assert (gpu["name"], gpu["compute_capability"], gpu["driver"], gpu["mem_mib"]) == ("NVIDIA GB10", "12.1", "", 0.0)


def test_cuda_version_from_the_banner():
    assert facts.parse_cuda_version(captured("nvidia-smi.txt")) == "13.0"
    assert facts.parse_cuda_version("NVIDIA-SMI has failed because it couldn't communicate with the driver") == ""


def test_memory_from_proc_meminfo_matches_the_device_run():
    device = json.loads(captured("facts.json"))
    mem = facts.parse_meminfo(captured("meminfo.txt"))
    assert mem["mem_total_gib"] == device["mem_total_gib"] == 125.9
    assert 0 < mem["mem_available_gib"] <= mem["mem_total_gib"]


def test_docker_runtimes():
    assert facts.parse_docker_runtimes('{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}') == [
        "nvidia",
        "runc",
    ]
    assert facts.parse_docker_runtimes("") == []
    assert facts.parse_docker_runtimes("not json") == []


def test_device_facts_were_classified_h200():
    device = json.loads(captured("facts.json"))
    assert (device["gpu_name"], device["compute_capability"], device["arch"], device["sm"]) == (
        "NVIDIA H200",
        "9.0",
        "h200",
        "sm_90a",
    )
    assert (device["driver"], device["cuda"]) == ("580.159.04", "13.0")


def test_device_facts_have_the_keys_gather_makes_here():
    device = json.loads(captured("facts.json"))
    # `interfaces` (multi-node, issue 19) and `build` (the vLLM build, issue 49) came after this capture
    assert set(device) == set(facts.gather()) - {"interfaces", "build"}


# --- classification -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, cc, arch",
    [
        ("NVIDIA H200", "9.0", "h200"),
        ("NVIDIA H200 NVL", "9.0", "h200"),
        ("NVIDIA GH200 480GB", "9.0", "gh200"),
        ("NVIDIA H100 80GB HBM3", "9.0", "h100"),
        ("NVIDIA GB10", "12.1", "gb10"),
        ("NVIDIA B200", "10.0", "b200"),
        ("NVIDIA H200", "12.1", ""),  # name and compute capability disagree: unknown
        ("NVIDIA H800", "9.0", ""),  # not in gpus.toml
        ("", "", ""),
    ],
)
def test_match_arch(name, cc, arch):
    assert facts.match_arch(name, cc, RULES) == arch


def test_every_gpu_entry_classifies_as_itself():
    for arch, entry in RULES.items():
        assert facts.match_arch(entry["name"], entry["compute_capability"], RULES) == arch, arch
        assert re.fullmatch(r"sm_\d+a?", entry["sm"]), arch
        assert entry["bandwidth_gbs"] > 0 and entry["bandwidth_source"], arch


def test_gb10_entry_is_the_spark():
    gb10 = RULES["gb10"]
    assert (gb10["compute_capability"], gb10["sm"], gb10["memory_gb"]) == ("12.1", "sm_121a", 128)
    assert (gb10["bandwidth_gbs"], gb10["bandwidth_source"]) == (273, "third-party figure")


# --- gathering on this machine ------------------------------------------------------------------


@pytest.mark.skipif(not NO_GPU_HERE, reason="this machine has nvidia-smi")
def test_gather_without_a_gpu():
    got = facts.gather()
    assert (got["gpu_name"], got["arch"], got["sm"], got["simulated"]) == ("", "", "", False)
    assert any("no nvidia-smi" in note for note in got["notes"])
    assert got["mem_total_gib"] > 0 and got["disk_free_gib"] > 0
    assert got["python"] == ".".join(map(str, sys.version_info[:3]))


def test_gather_has_the_facts_table_and_no_none():
    got = facts.gather()
    assert set(got) >= ARCH_TABLE_KEYS
    assert None not in got.values()
    assert re.fullmatch(r"[0-9a-f]{8}", got["fingerprint"])


def test_simulated_gb10():
    got = facts.gather(simulate_gpu="gb10")
    assert (got["gpu_name"], got["compute_capability"], got["arch"], got["sm"], got["simulated"]) == (
        "NVIDIA GB10",
        "12.1",
        "gb10",
        "sm_121a",
        True,
    )
    assert got["fingerprint"] != facts.gather()["fingerprint"]


def test_simulating_an_unknown_chip_is_refused():
    with pytest.raises(ValueError, match=r"not in gpus\.toml"):
        facts.gather(simulate_gpu="gb99")


def test_unknown_architecture_is_recorded_with_a_note():
    rules = {"mystery": {"name": "NVIDIA Mystery", "compute_capability": "7.5"}}  # no name pattern: no match
    got = facts.gather(simulate_gpu="mystery", gpu_rules=rules)
    assert (got["gpu_name"], got["arch"]) == ("NVIDIA Mystery", "")
    assert any("unknown GPU architecture" in note and "no rules apply" in note for note in got["notes"])


def test_fingerprint_ignores_what_changes_by_the_minute():
    base = facts.gather(simulate_gpu="gb10")
    assert facts.fingerprint(dict(base, disk_free_gib=1.0, mem_available_gib=0.5)) == base["fingerprint"]
    assert facts.fingerprint(dict(base, driver="580.95.05")) != base["fingerprint"]


def test_disk_free_of_a_cache_dir_that_does_not_exist_yet(tmp_path):
    assert facts.disk_free_gib(str(tmp_path / "not" / "yet")) == facts.disk_free_gib(str(tmp_path))


def test_runs_as_a_module_with_the_standard_library_only():
    # -S: no site-packages, as on a bare Spark
    done = subprocess.run(
        [sys.executable, "-S", "-m", "agent.hostside.facts", "--simulate-gpu", "gb10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["arch"] == "gb10"
