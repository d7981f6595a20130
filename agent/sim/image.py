"""The simulator's container image, built locally from a rootfs: no base image, no registry download.

The rootfs holds busybox-static (a shell and coreutils for debugging), the host's python (its binary,
the shared libraries ldd names, its pruned standard library) and the `agent` package (sim + hostside
only). `docker import` turns it into an image whose entrypoint runs `python3 -m agent.sim serve`, so
`docker run IMAGE MODEL --port P ...` behaves like `vllm serve MODEL --port P ...`; so does
`docker run IMAGE vllm serve MODEL --port P ...` (the form NVIDIA's vLLM image takes).
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..errors import UserError
from ..hostside import docker as sdocker

PYTHON = "/usr/bin/python3"  # Debian's python3 (apt: python3-minimal)
BUSYBOX = "/bin/busybox"  # Debian's busybox-static: one static binary
AGENT_ROOT = Path(__file__).resolve().parents[1]  # the `agent` package folder (agent/paths.py is not in the image)
AGENT_PARTS = ("__init__.py", "errors.py", "sim", "hostside")  # errors.py: tiny, stdlib only
SITE = "/opt/spark-agent"  # where `agent` lives in the image (PYTHONPATH)

# Standard-library parts a server never needs: tests, GUIs, terminals, build tools, old databases, NIS
# (their extensions pull in curses, Berkeley DB and Kerberos libraries), bytecode caches.
PRUNE_DIRS = {
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "__pycache__",
    "lib2to3",
    "pydoc_data",
    "distutils",
    "curses",
    "dbm",
    "site-packages",
    "dist-packages",
}
PRUNE_FILE = re.compile(
    r"^(_test\w*|_xxtestfuzz|xxlimited\w*|_ctypes_test|_curses\w*|readline|_dbm|_gdbm|nis)\.cpython-.*\.so$"
    r"|^sitecustomize\.py$"
)

ENTRYPOINT = "/usr/local/bin/spark-sim-entrypoint"
# Both conventions of vLLM images work: bare arguments are `vllm serve`'s (like vllm/vllm-openai, whose
# entrypoint is `vllm serve`), and a `vllm ...` command runs as given (like NVIDIA's image, which the
# agent's docker runtime drives with `vllm serve MODEL ...`).
ENTRYPOINT_SCRIPT = """#!/bin/sh
if [ "$1" = vllm ] || [ "$1" = python3 ] || [ "$1" = sh ] || [ "$1" = ray ]; then exec "$@"; fi
exec python3 -m agent.sim serve "$@"
"""
VLLM_SCRIPT = '#!/bin/sh\n# `vllm serve MODEL ...` is the simulator\nexec python3 -m agent.sim "$@"\n'

IMAGE_CHANGES = [
    f'ENTRYPOINT ["{ENTRYPOINT}"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"ENV PYTHONPATH={SITE}",
    "ENV PYTHONUNBUFFERED=1",  # log lines reach `docker logs` as they are written
    "LABEL org.opencontainers.image.title=vllm-sim",
]


def _python_layout(python: str) -> dict:
    """Ask the interpreter itself where its executable and standard library are."""
    code = "import json,sys,sysconfig; print(json.dumps({'exe': sys.executable, 'stdlib': sysconfig.get_paths()['stdlib']}))"
    try:
        out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise UserError(
            f"{python}: cannot run it to build the simulator image ({exc}); install python3 (apt install python3)"
        ) from None
    layout = json.loads(out)
    layout["exe"] = os.path.realpath(layout["exe"])
    return layout


def shared_libraries(binary: str) -> list[str]:
    """Absolute paths of the shared libraries `binary` loads, the ELF interpreter included (via ldd)."""
    proc = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if proc.returncode != 0:  # a static binary: "not a dynamic executable"
        return []
    libs = []
    for line in proc.stdout.splitlines():
        if "not found" in line:
            raise FileNotFoundError(f"{binary}: {line.strip()}")
        match = re.search(r"(/\S+) \(0x", line)
        if match:
            libs.append(match.group(1))
    return libs


def _stdlib_files(stdlib: str) -> list[str]:
    """Every standard-library file worth shipping, as paths under `stdlib`."""
    keep = []
    for folder, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in PRUNE_DIRS and not d.startswith("config-"))
        keep += [os.path.join(folder, f) for f in sorted(files) if not PRUNE_FILE.match(f)]
    return keep


def _agent_files() -> list[tuple[str, str]]:
    """(source, path in image) for the agent package parts the simulator needs."""
    pairs = []
    for part in AGENT_PARTS:
        source = AGENT_ROOT / part
        paths = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        for path in paths:
            if "__pycache__" not in path.parts and path.suffix in (".py", ".toml", ".json", ".txt", ".md"):
                pairs.append((str(path), f"{SITE}/agent/{path.relative_to(AGENT_ROOT)}"))
    return pairs


def _check_tools(python: str, busybox: str) -> None:
    for tool in (busybox, python):
        if not os.path.exists(tool):
            raise UserError(f"{tool} not found: the simulator image needs it (apt install busybox-static python3)")


def rootfs_plan(python: str = PYTHON, busybox: str = BUSYBOX) -> dict[str, str]:
    """path in image -> source file on this machine (symlinks followed). The whole image, as data."""
    _check_tools(python, busybox)
    return {"/bin/busybox": busybox, **_python_files(python), **{dest: src for src, dest in _agent_files()}}


@functools.lru_cache(maxsize=4)  # an installed python does not change under us; ldd over it is the slow part
def _python_files(python: str) -> dict[str, str]:
    """The interpreter, its pruned standard library and every shared library they load."""
    layout = _python_layout(python)
    exe = layout["exe"]
    files = _stdlib_files(layout["stdlib"])
    plan = {exe: exe, **{path: path for path in files}}
    try:
        plan.update({lib: lib for lib in shared_libraries(exe)})
    except FileNotFoundError as exc:
        raise UserError(
            f"{exc}: python itself cannot run here; reinstall it (apt install --reinstall python3)"
        ) from None
    for extension in (f for f in files if f.endswith(".so")):
        try:
            plan.update({lib: lib for lib in shared_libraries(extension)})
        except FileNotFoundError:  # its library is not on this host: leave the extension out
            del plan[extension]
    return plan


def _busybox_applets(busybox: str) -> list[str]:
    out = subprocess.run([busybox, "--list"], capture_output=True, text=True).stdout
    return [name for name in out.split() if re.fullmatch(r"[\w.\[-]+", name)]


def _tarinfo(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


# Run by the image's own python: import every simulator and hostside module, then compile each source file
# that got loaded to where the image keeps its bytecode. Prints {source path in image: .pyc path in image}.
_COMPILE_SCRIPT = r"""
import importlib, importlib.util, json, os, pkgutil, py_compile, sys, sysconfig
out, site, parent = sys.argv[1:4]
sys.path.insert(0, parent)
for package in ("agent.sim", "agent.hostside"):
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if not info.name.endswith("__main__"):
            try:
                importlib.import_module(info.name)
            except Exception:
                pass
stdlib, agent = sysconfig.get_paths()["stdlib"] + "/", os.path.join(parent, "agent") + "/"
pycs = {}
for module in list(sys.modules.values()):
    source = getattr(module, "__file__", None) or ""
    if source.endswith(".py") and source.startswith((stdlib, agent)):
        dest = site + "/agent/" + source[len(agent):] if source.startswith(agent) else source
        pycs[dest] = importlib.util.cache_from_source(dest)
        py_compile.compile(source, cfile=out + pycs[dest], dfile=dest, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
print(json.dumps(pycs))
"""


def startup_bytecode(python: str, plan: dict[str, str], out_dir: str) -> dict[str, str]:
    """.pyc path in image -> compiled file under out_dir, for every module the simulator imports.

    Without them each new container compiles its imports first (seconds per cell on a busy host).
    Hash-checked bytecode stays valid whatever the files' times in the image are."""
    argv = [python, "-I", "-c", _COMPILE_SCRIPT, out_dir, SITE, str(AGENT_ROOT.parent)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the simulator's modules with {python} failed:\n{proc.stderr[-2000:]}")
    pycs = json.loads(proc.stdout.strip().splitlines()[-1])
    return {pyc: out_dir + pyc for source, pyc in pycs.items() if source in plan}


def write_rootfs_tar(out_path: str, python: str = PYTHON, busybox: str = BUSYBOX) -> int:
    """Write the simulator's rootfs as an uncompressed tar. Returns the number of regular files."""
    with tempfile.TemporaryDirectory(prefix="spark-sim-pyc-") as pyc_dir:
        plan = rootfs_plan(python, busybox)
        plan.update(startup_bytecode(python, plan, pyc_dir))
        _write_tar(out_path, plan, python, busybox)
    return len(plan)


def _write_tar(out_path: str, plan: dict[str, str], python: str, busybox: str) -> None:
    exe = os.path.realpath(python)  # the same file sys.executable names
    dirs = {"/tmp", "/etc", "/root", "/usr/bin", "/usr/local/bin"} | {
        str(p) for dest in plan for p in Path(dest).parents if str(p) != "/"
    }
    with tarfile.open(out_path, "w") as tar:
        for folder in sorted(dirs):
            tar.addfile(_tarinfo(folder, tarfile.DIRTYPE, 0o1777 if folder == "/tmp" else 0o755))
        for dest, src in sorted(plan.items()):
            with open(src, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                mode = os.stat(src).st_mode & 0o755 | 0o644
                tar.addfile(_tarinfo(dest, tarfile.REGTYPE, mode, size), handle)
        _add_links(tar, plan, exe, busybox)
        _add_text(tar, ENTRYPOINT, ENTRYPOINT_SCRIPT, mode=0o755)
        _add_text(tar, "/usr/bin/vllm", VLLM_SCRIPT, mode=0o755)
        _add_text(tar, "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        _add_text(tar, "/etc/group", "root:x:0:\nnogroup:x:65534:\n")


def _add_links(tar: tarfile.TarFile, plan: dict, exe: str, busybox: str) -> None:
    """`python3` on PATH, and the busybox applets (sh, ls, cat, ...) in /bin."""
    for name in ("/usr/bin/python3", "/usr/bin/python"):
        if name not in plan:
            tar.addfile(_tarinfo(name, tarfile.SYMTYPE, 0o777, link=os.path.basename(exe)))
    for applet in _busybox_applets(busybox):
        if f"/bin/{applet}" not in plan and applet != "busybox":
            tar.addfile(_tarinfo(f"/bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox"))


def _add_text(tar: tarfile.TarFile, name: str, text: str, mode: int = 0o644) -> None:
    data = text.encode()
    tar.addfile(_tarinfo(name, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))


def build_image(
    tag: str,
    docker_env: dict | None = None,
    python: str = PYTHON,
    busybox: str = BUSYBOX,
    settings: dict[str, str] | None = None,
) -> str:
    """Build the simulator image and tag it `tag` (use a name containing "vllm-sim"). Returns the image id.
    `settings`: variables baked into the image (SPARK_SIM_*: another vLLM version, a speed, a fault; or a VLLM_*
    the image sets): two images that differ the way two vLLM releases do."""
    changes = IMAGE_CHANGES + [f"ENV {k}={v}" for k, v in sorted((settings or {}).items())]
    with tempfile.TemporaryDirectory(prefix="spark-sim-image-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        write_rootfs_tar(tar_path, python, busybox)
        try:
            return sdocker.import_image(tar_path, tag, changes, docker_env)
        except sdocker.DockerError as exc:
            raise UserError(f"building the simulator image {tag}: {exc}") from None


def main(argv: list[str]) -> int:
    """`spark-agent sim image build --tag T [--docker-host H]` (argv after `image build`)."""
    import argparse

    parser = argparse.ArgumentParser(prog="spark-agent sim image build", description=__doc__)
    parser.add_argument("--tag", required=True, help="image name:tag, e.g. vllm-sim:local (keep 'vllm-sim' in it)")
    parser.add_argument("--docker-host", help="DOCKER_HOST of the daemon to build in (default: the environment's)")
    args = parser.parse_args(argv)
    print(build_image(args.tag, sdocker.docker_env_for(args.docker_host)))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
