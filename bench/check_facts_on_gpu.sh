#!/usr/bin/env bash
# Check agent/hostside/facts.py against a real NVIDIA machine and capture the raw outputs it parses
# (they become test data under tests/data/facts/). Run from the repo root:
#   OUT=/tmp/facts-out bash bench/check_facts_on_gpu.sh [EXPECTED_ARCH]
# Exit 0 when the facts parse and, if EXPECTED_ARCH is given, the GPU is classified as that arch.
set -u
OUT="${OUT:-/tmp/facts-out}"
EXPECTED_ARCH="${1:-}"
mkdir -p "$OUT"
PY="$(command -v python3)"

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader > "$OUT/query-gpu.csv" 2>&1
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader,nounits \
  > "$OUT/query-gpu-mem.csv" 2>&1
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
cp /proc/meminfo "$OUT/meminfo.txt"
{ command -v docker && docker info --format '{{json .Runtimes}}'; command -v nvidia-container-runtime; } \
  > "$OUT/containers.txt" 2>&1

"$PY" --version
time "$PY" -m agent.hostside.facts > "$OUT/facts.json" || exit 1
cat "$OUT/facts.json"

"$PY" - "$OUT" "$EXPECTED_ARCH" <<'PYEOF'
import json, sys
from pathlib import Path
from agent.hostside import facts as f
out, expected = Path(sys.argv[1]), sys.argv[2]
got = json.loads((out / "facts.json").read_text())
mem = f.parse_meminfo((out / "meminfo.txt").read_text())
checks = {
    "gpu_name set": bool(got["gpu_name"]),
    "compute capability like N.N": got["compute_capability"].count(".") == 1,
    "driver set": bool(got["driver"]),
    "cuda from banner": got["cuda"] == f.parse_cuda_version((out / "nvidia-smi.txt").read_text()) != "",
    "memory from /proc/meminfo": abs(got["mem_total_gib"] - mem["mem_total_gib"]) < 0.05,
    "no None values": None not in got.values(),
    "arch as expected": (got["arch"] == expected) if expected else True,
}
for name, ok in checks.items():
    print(("PASS " if ok else "FAIL ") + name)
sys.exit(0 if all(checks.values()) else 1)
PYEOF
