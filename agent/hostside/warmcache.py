"""Warm starts: one persistent cache folder per image digest on each host, handed to every server of that image.

vLLM keeps torch.compile artifacts under VLLM_CACHE_ROOT (torch_compile_cache/), Inductor under
TORCHINDUCTOR_CACHE_DIR, Triton's JIT under TRITON_CACHE_DIR and FlashInfer's JIT under FLASHINFER_WORKSPACE_BASE
(docs/vllm-notes.md names the sources). A process server gets the host folders in its environment; a container gets
the folder mounted at CONTAINER_ROOT and the variables pointing there. The same image digest always gets the same
folder, so the second cell of an image loads its compiled graphs instead of compiling them (the log says which:
hostside/startuplog.py). Stdlib only: runs on the host, imported by the controller too.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

CACHE_DIR = "cache"  # <work dir>/cache/<key>/
CONTAINER_ROOT = "/root/.cache/spark-agent"
VARIABLES = {  # variable -> sub-folder of the image's cache folder
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")
_KEY = re.compile(r"^[0-9a-f]{16}$")


def key(image: str) -> str:
    """The cache key of an image: the first 16 hex of its digest ("" for a ref without one: no shared cache)."""
    m = _DIGEST.search(image)
    return m.group(1)[:16] if m else ""


def _base(workdir: str) -> Path:
    """<work dir>/cache, with a leading ~ expanded: the servers get these paths in their env, where no shell
    expands them (an unexpanded ~ made a literal "~" folder in the server's working directory)."""
    return Path(os.path.expanduser(workdir)) / CACHE_DIR


def folder(workdir: str, image: str) -> Path | None:
    k = key(image)
    return _base(workdir) / k if k else None


def prepare(workdir: str, image: str) -> Path | None:
    """The image's cache folder, created (0700: compiled code is executed by the next server) with its parts."""
    path = folder(workdir, image)
    if path is None:
        return None
    for sub in VARIABLES.values():
        (path / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def environment(path: Path, runtime: str) -> dict[str, str]:
    """The variables a server of this image gets: host paths for a process, the mount's paths in a container."""
    root = CONTAINER_ROOT if runtime == "docker" else str(path)
    return {name: f"{root}/{sub}" for name, sub in VARIABLES.items()}


def list_caches(workdir: str) -> list[dict[str, object]]:
    """Every cache folder on this host: key, bytes, files (for clean-cache)."""
    base = _base(workdir)
    out: list[dict[str, object]] = []
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and _KEY.match(entry.name):
            size, files = 0, 0
            for root, _dirs, names in os.walk(entry):
                for name in names:
                    try:
                        size += os.lstat(os.path.join(root, name)).st_size
                        files += 1
                    except OSError:
                        pass
            out.append({"key": entry.name, "bytes": size, "files": files})
    return out


def remove(workdir: str, keys: list[str], dry_run: bool = False) -> list[str]:
    """Remove the named cache folders (only well-formed keys under <work dir>/cache; never a link)."""
    removed = []
    base = _base(workdir)
    for k in keys:
        path = base / k
        if _KEY.match(k) and path.is_dir() and not path.is_symlink():
            if not dry_run:
                shutil.rmtree(path)
            removed.append(k)
    return removed
