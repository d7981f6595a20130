"""Host facts: what GPU, driver, memory, disk, container runtime and Python a host has.

Runs ON the host (standard library only) and on the controller. The result is the [facts] table of
a cell (docs/results-tree.md) and its `fingerprint` identifies the host's stable setup.
`python3 -m agent.hostside.facts [--simulate-gpu gb10] [--cache-dir DIR]` prints the facts as JSON.

Which architecture a GPU is (gb10, h200, ...) comes from agent/rules/gpus.toml; the rules are
passed in (`gpu_rules`) because a host may not have the controller's files. When the rules are
not at hand, `arch`/`sm` stay "" and the controller classifies with its own copy.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

from . import netfacts
from .contracts import BuildOrigin, Facts

tomllib: ModuleType | None
try:  # Python 3.11+; older hosts get their rules from the controller
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - exercised only on Python < 3.11
    tomllib = None

DEFAULT_CACHE_DIR = "~/.cache/huggingface"
DEFAULT_GPU_RULES = Path(__file__).resolve().parent.parent / "rules" / "gpus.toml"
# The facts that identify a host's setup; free disk and available memory change by the minute.
STABLE_KEYS = (
    "gpu_name",
    "compute_capability",
    "driver",
    "cuda",
    "mem_total_gib",
    "python",
    "docker",
    "nvidia_runtime",
    "simulated",
)
QUERY_GPU = ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
# memory.total is "[N/A]" on GB10 (unified memory); asked separately so the main query never depends on it
QUERY_GPU_MEM = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
COMMAND_TIMEOUT_S = 20


class GpuFacts(TypedDict):
    """The GPU part of the facts, plus notes for gather() to merge."""

    gpu_name: str
    compute_capability: str
    driver: str
    cuda: str
    gpu_count: int
    gpu_mem_gib: float
    simulated: bool
    notes: list[str]


class ContainerFacts(TypedDict):
    docker: bool
    docker_runtimes: list[str]
    nvidia_runtime: bool
    notes: list[str]


# --- running commands --------------------------------------------------------------------------


def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
    """(exit code, stdout) of a command; 127 when it is missing, 124 when it hangs."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    except OSError as exc:
        return 126, str(exc)
    return done.returncode, done.stdout


# --- parsing (pure: tested against captured real output) ----------------------------------------


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=name,compute_cap,driver_version[,memory.total] --format=csv,noheader`."""
    gpus = []
    for row in csv.reader(line for line in text.splitlines() if line.strip()):
        cells = [cell.strip() for cell in row]
        if len(cells) < 3:
            continue
        gpus.append(
            {
                "name": cells[0],
                "compute_capability": _clean(cells[1]),
                "driver": _clean(cells[2]),
                "mem_mib": _mib(cells[3]) if len(cells) > 3 else 0.0,
            }
        )
    return gpus


def parse_cuda_version(text: str) -> str:
    """The CUDA version from the `nvidia-smi` banner (`CUDA Version: 13.0`), "" when absent."""
    match = re.search(r"CUDA Version\s*:\s*([0-9][0-9.]*)", text)
    return match.group(1) if match else ""


def parse_meminfo(text: str) -> dict[str, float]:
    """MemTotal / MemAvailable of /proc/meminfo in GiB (NVML reports no memory on GB10)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"(MemTotal|MemAvailable):\s+(\d+)\s*kB", line)
        if match:
            values[match.group(1)] = round(int(match.group(2)) / 2**20, 1)
    return {"mem_total_gib": values.get("MemTotal", 0.0), "mem_available_gib": values.get("MemAvailable", 0.0)}


def parse_docker_runtimes(text: str) -> list[str]:
    """Runtime names from `docker info --format '{{json .Runtimes}}'`."""
    try:
        runtimes = json.loads(text or "{}")
    except ValueError:
        return []
    return sorted(runtimes) if isinstance(runtimes, dict) else []


def _clean(value: str) -> str:
    """nvidia-smi's placeholders for values it cannot read become ""."""
    return "" if value.strip("[] ").lower() in ("n/a", "not supported", "unknown error", "") else value


def _mib(value: str) -> float:
    match = re.match(r"\s*([0-9.]+)", value)
    return float(match.group(1)) if match else 0.0


# --- GPU architecture rules (agent/rules/gpus.toml) ---------------------------------------------


def load_gpu_rules(path: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """The arch table of gpus.toml; {} when the file or a TOML reader is missing on this host."""
    rules_path = Path(path) if path else DEFAULT_GPU_RULES
    if tomllib is None or not rules_path.is_file():
        return {}
    return parse_gpu_rules(rules_path.read_text())


def parse_gpu_rules(text: str) -> dict[str, dict[str, Any]]:
    if tomllib is None:
        return {}
    return {arch: entry for arch, entry in tomllib.loads(text).items() if isinstance(entry, dict)}


def match_arch(gpu_name: str, compute_capability: str, gpu_rules: dict[str, dict[str, Any]]) -> str:
    """The arch whose compute capability and name pattern both fit; "" when none (or several) do."""
    if not gpu_name:
        return ""
    found = [arch for arch, entry in gpu_rules.items() if _fits(entry, gpu_name, compute_capability)]
    return found[0] if len(found) == 1 else ""


def _fits(entry: dict[str, Any], gpu_name: str, compute_capability: str) -> bool:
    wanted_cc = str(entry.get("compute_capability", ""))
    if wanted_cc and compute_capability and wanted_cc != compute_capability:
        return False
    patterns = entry.get("name_patterns", [])
    return any(re.search(pattern, gpu_name, re.IGNORECASE) for pattern in patterns)


def classify_gpu(facts: Facts, gpu_rules: dict[str, dict[str, Any]]) -> Facts:
    """Facts with `arch` and `sm` filled from the rules (a copy; the input is left alone)."""
    arch = match_arch(facts.get("gpu_name", ""), facts.get("compute_capability", ""), gpu_rules)
    out = facts.copy()
    out["arch"] = arch
    out["sm"] = str(gpu_rules.get(arch, {}).get("sm", "")) if arch else ""
    return out


# --- gathering ----------------------------------------------------------------------------------


def gpu_facts(simulate_gpu: str | None, gpu_rules: dict[str, dict[str, Any]]) -> GpuFacts:
    """GPU name, compute capability, driver, CUDA version, count and notes, real or simulated."""
    if simulate_gpu:
        return _simulated_gpu(simulate_gpu.lower(), gpu_rules)
    code, out = _run(QUERY_GPU)
    if code == 127:
        return _no_gpu("no nvidia-smi on PATH: no NVIDIA GPU facts")
    gpus = parse_query_gpu(out) if code == 0 else []
    if not gpus:
        return _no_gpu(f"nvidia-smi --query-gpu failed (exit {code}): no NVIDIA GPU facts")
    first = gpus[0]
    notes = [] if all(gpu["name"] == first["name"] for gpu in gpus) else ["mixed GPUs; facts describe GPU 0"]
    return {
        "gpu_name": first["name"],
        "compute_capability": first["compute_capability"],
        "driver": first["driver"],
        "cuda": parse_cuda_version(_run(["nvidia-smi"])[1]),
        "gpu_count": len(gpus),
        "gpu_mem_gib": _gpu_mem_gib(),
        "simulated": False,
        "notes": notes,
    }


def _gpu_mem_gib() -> float:
    """Memory of GPU 0 as NVML reports it; 0.0 where it cannot (GB10: read /proc/meminfo instead)."""
    code, out = _run(QUERY_GPU_MEM)
    lines = out.splitlines() if code == 0 else []
    return round(_mib(_clean(lines[0])) / 1024, 1) if lines else 0.0


def _no_gpu(note: str) -> GpuFacts:
    return {
        "gpu_name": "",
        "compute_capability": "",
        "driver": "",
        "cuda": "",
        "gpu_count": 0,
        "gpu_mem_gib": 0.0,
        "simulated": False,
        "notes": [note],
    }


def _simulated_gpu(arch: str, gpu_rules: dict[str, dict[str, Any]]) -> GpuFacts:
    entry = gpu_rules.get(arch)
    if entry is None:
        if not gpu_rules:
            raise ValueError(
                f"cannot simulate GPU {arch!r}: gpus.toml is not available on this host "
                "(the spark_facts task must pass gpu_rules_toml)"
            )
        raise ValueError(f"cannot simulate GPU {arch!r}: not in gpus.toml (known: {', '.join(sorted(gpu_rules))})")
    return {
        "gpu_name": entry["name"],
        "compute_capability": str(entry["compute_capability"]),
        "driver": "",
        "cuda": "",
        "gpu_count": 1,
        "gpu_mem_gib": float(entry.get("memory_gb", 0)),
        "simulated": True,
        "notes": [],
    }


def memory_facts() -> dict[str, float]:
    try:
        return parse_meminfo(Path("/proc/meminfo").read_text())
    except OSError:
        return {"mem_total_gib": 0.0, "mem_available_gib": 0.0}


def disk_free_gib(cache_dir: str) -> float:
    """Free space of the file system that holds (or would hold) the model cache."""
    path = Path(os.path.expanduser(cache_dir)).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return round(shutil.disk_usage(path).free / 2**30, 1)


def container_facts() -> ContainerFacts:
    """Whether a docker daemon answers and whether the NVIDIA container runtime is there."""
    notes: list[str] = []
    docker = False
    runtimes: list[str] = []
    if shutil.which("docker"):
        code, out = _run(["docker", "info", "--format", "{{json .Runtimes}}"])
        docker = code == 0
        runtimes = parse_docker_runtimes(out) if docker else []
        if not docker:
            notes.append(f"docker is installed but `docker info` failed (exit {code}): is the daemon running?")
    nvidia_runtime = "nvidia" in runtimes or bool(shutil.which("nvidia-container-runtime"))
    return {"docker": docker, "docker_runtimes": runtimes, "nvidia_runtime": nvidia_runtime, "notes": notes}


def fingerprint(facts: Mapping[str, object]) -> str:
    """8 hex characters over the stable facts: same fingerprint, same host setup. The build origin counts when the
    facts have one (hosts without it keep the fingerprint they always had)."""
    stable = {key: facts.get(key, "") for key in STABLE_KEYS}
    build = facts.get("build")
    if isinstance(build, dict) and build.get("source"):
        stable["build"] = {k: build.get(k, "") for k in ("ref", "vllm_version", "cuda_targets", "sm121")}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:8]


# Where images say how vLLM was built: the env their Dockerfile sets, and labels. NGC and community GB10 images set
# TORCH_CUDA_ARCH_LIST; vLLM's own images carry the version in VLLM_VERSION or the OCI version label.
_VERSION_KEYS = ("VLLM_VERSION", "org.opencontainers.image.version", "vllm.version", "VLLM_VERSION_TAG")
_TARGET_KEYS = ("TORCH_CUDA_ARCH_LIST", "CUDA_ARCH_LIST", "torch_cuda_arch_list")
_MAX_TARGETS = 32


def build_origin(inspect: object, ref: str = "") -> BuildOrigin:
    """The build origin of an image from `docker image inspect`'s JSON (a list of one object, or the object)."""
    item = inspect[0] if isinstance(inspect, list) and inspect else inspect
    if not isinstance(item, dict):
        return BuildOrigin(source="", ref=ref, vllm_version="", cuda_targets=[], sm121="unknown")
    raw = item.get("Config")
    config: dict[str, Any] = raw if isinstance(raw, dict) else {}
    env: dict[str, str] = {}
    for entry in config.get("Env") or []:
        if isinstance(entry, str) and "=" in entry:
            key, _, value = entry.partition("=")
            env[key] = value[:1000]
    labels = {str(k): str(v)[:1000] for k, v in (config.get("Labels") or {}).items()}
    said = {**labels, **env}
    version = next((said[k].lstrip("v") for k in _VERSION_KEYS if said.get(k)), "")
    targets_text = next((said[k] for k in _TARGET_KEYS if said.get(k)), "")
    targets = [t for t in targets_text.replace(";", " ").replace(",", " ").split() if t][:_MAX_TARGETS]
    digests = item.get("RepoDigests") or []
    shown = ref or next(iter(item.get("RepoTags") or []), "")
    if digests and isinstance(digests[0], str) and "@" not in shown:
        shown = f"{shown} ({digests[0]})" if shown else digests[0]
    return BuildOrigin(
        source="image",
        ref=_clean(shown)[:300],
        vllm_version=_clean(version)[:60],
        cuda_targets=targets,
        sm121=sm121_of(targets),
    )


def sm121_of(targets: list[str]) -> str:
    """yes: a target builds SM121 kernels (12.1, 12.1a, 12.1f, or a 12.0f family build that covers 12.1);
    no: the targets are known and none does (12.0+PTX only JIT-compiles PTX); unknown: no targets said."""
    if not targets:
        return "unknown"
    for target in targets:
        base = target.lower().replace("sm_", "").replace("+ptx", "")
        if base in ("12.1", "12.1a", "12.1f", "121", "121a", "121f", "12.0f", "120f"):
            return "yes"
    return "no"


# Run by the Python that serves vLLM (a venv's): the installed distribution's version and how pip got it. PEP 610's
# direct_url.json says a wheel came from a folder or a VCS checkout (built here, with this host's CUDA targets) rather
# than from an index (the published build).
_WHEEL_PROBE = (
    "import importlib.metadata as m, json\n"
    "d = m.distribution('vllm')\n"
    "u = json.loads(d.read_text('direct_url.json') or '{}')\n"
    "print(json.dumps({'version': d.version, 'local': 'dir_info' in u or 'vcs_info' in u,"
    " 'url': str(u.get('url', ''))[:200]}))"
)


def wheel_build(python: str) -> tuple[BuildOrigin, list[str]]:
    """(build origin, notes) of the vLLM installed for `python` (its version; a published wheel or a local build)."""
    code, out = _run([python, "-c", _WHEEL_PROBE])
    unknown = BuildOrigin(source="", ref="", vllm_version="", cuda_targets=[], sm121="unknown")
    if code != 0:
        return unknown, [f"{python}: no vLLM installed for it (or it does not run)"]
    try:
        said = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return unknown, [f"{python}: could not read vLLM's distribution"]
    how = "built here" if said.get("local") else "from a package index"
    return BuildOrigin(
        source="wheel",
        ref=_clean(f"vllm {said.get('version', '')} ({how})")[:300],
        vllm_version=_clean(str(said.get("version", "")))[:60],
        cuda_targets=[],
        sm121="unknown",
    ), []


def image_build(image: str) -> tuple[BuildOrigin, list[str]]:
    """(build origin, notes) of an image this host has, read with `docker image inspect` (no pull)."""
    if not shutil.which("docker"):
        return BuildOrigin(source="", ref=image, vllm_version="", cuda_targets=[], sm121="unknown"), [
            f"no docker here: the build of {image} is unknown"
        ]
    code, out = _run(["docker", "image", "inspect", image])
    if code != 0:
        return BuildOrigin(source="", ref=image, vllm_version="", cuda_targets=[], sm121="unknown"), [
            f"`docker image inspect {image}` failed (exit {code}): is the image on this host?"
        ]
    try:
        return build_origin(json.loads(out), image), []
    except ValueError:
        return BuildOrigin(source="", ref=image, vllm_version="", cuda_targets=[], sm121="unknown"), [
            f"`docker image inspect {image}` printed no JSON"
        ]


def gather(
    simulate_gpu: str | None = None,
    cache_dir: str = DEFAULT_CACHE_DIR,
    gpu_rules: dict[str, dict[str, Any]] | None = None,
    simulate_link: str = "",
    image: str = "",
    wheel_python: str = "",
) -> Facts:
    """The [facts] table of this host. No value is None; `notes` (worth a warning each) says what
    could not be read or classified. simulate_gpu (an arch of gpus.toml) reports that chip instead."""
    rules = load_gpu_rules() if gpu_rules is None else gpu_rules
    gpu = gpu_facts(simulate_gpu, rules)
    containers = container_facts()
    memory = memory_facts()
    gathered = Facts(
        gpu_name=gpu["gpu_name"],
        compute_capability=gpu["compute_capability"],
        driver=gpu["driver"],
        cuda=gpu["cuda"],
        gpu_count=gpu["gpu_count"],
        gpu_mem_gib=gpu["gpu_mem_gib"],
        simulated=gpu["simulated"],
        mem_total_gib=memory["mem_total_gib"],
        mem_available_gib=memory["mem_available_gib"],
        disk_free_gib=disk_free_gib(cache_dir),
        cache_dir=os.path.expanduser(cache_dir),
        python=platform.python_version(),
        docker=containers["docker"],
        docker_runtimes=containers["docker_runtimes"],
        nvidia_runtime=containers["nvidia_runtime"],
        hostname=platform.node(),
        kernel=platform.release(),
        machine=platform.machine(),
    )
    facts = classify_gpu(gathered, rules)
    notes = gpu["notes"] + containers["notes"]
    facts["build"] = BuildOrigin(source="", ref="", vllm_version="", cuda_targets=[], sm121="unknown")
    if image or wheel_python:  # the build the host runs: which image or wheel, its CUDA targets, SM121 among them
        facts["build"], build_notes = image_build(image) if image else wheel_build(wheel_python)
        notes += build_notes
    if facts["gpu_name"] and not facts["arch"]:
        notes.append(unknown_arch_note(facts, rules))
    facts["notes"] = notes
    facts["fingerprint"] = fingerprint(facts)
    # a simulated host (simulate_link: its loopback address) reports a simulated ConnectX-7, never the machine's NICs
    facts["interfaces"] = [netfacts.simulated_interface(simulate_link)] if simulate_gpu else netfacts.interfaces()
    return facts


def unknown_arch_note(facts: Facts, gpu_rules: dict[str, dict[str, Any]]) -> str:
    if not gpu_rules:
        return "no GPU rules on this host (gpus.toml not available): the controller classifies the GPU"
    return (
        f"unknown GPU architecture {facts.get('gpu_name', '')!r} (compute capability "
        f"{facts.get('compute_capability') or '?'}): no rules apply; add it to agent/rules/gpus.toml"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m agent.hostside.facts", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--simulate-gpu", default=None, help="report this chip (gb10, ...) instead of a GPU")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="model cache whose free disk is reported")
    parser.add_argument("--gpu-rules", default=None, help="path of gpus.toml (default: agent/rules/gpus.toml)")
    parser.add_argument("--image", default="", help="also report the vLLM build of this image (docker image inspect)")
    parser.add_argument("--wheel-python", default="", help="or of the vLLM installed for this Python (a venv's)")
    args = parser.parse_args(argv)
    try:
        facts = gather(
            args.simulate_gpu,
            args.cache_dir,
            load_gpu_rules(args.gpu_rules),
            image=args.image,
            wheel_python=args.wheel_python,
        )
    except ValueError as exc:
        print(f"facts: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(facts, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
