"""Build the wheel and install it into a fresh virtualenv outside the checkout, as a user would (pipx does the same:
a venv of its own, the wheel and its dependencies). Used by tests/test_wheel.py and bench/bench_install.py."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_wheel(out: Path, python: str = sys.executable) -> Path:
    """`python -m build --wheel` of the checkout (via its sdist, as PyPI's users get it) into `out`."""
    done = subprocess.run(
        [python, "-m", "build", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (out / "build.log").write_text(done.stdout + done.stderr)  # what the build said (tests read its warnings)
    wheels = sorted(out.glob("spark_agent-*.whl"))
    if len(wheels) != 1 or not sorted(out.glob("spark_agent-*.tar.gz")):
        raise RuntimeError(f"expected one wheel and one sdist in {out}, found {sorted(p.name for p in out.iterdir())}")
    return wheels[0]


def install(wheel: Path, venv: Path, python: str = sys.executable, extras: str = "") -> Path:
    """A fresh venv at `venv` with the wheel (and `extras`, e.g. "postgres") installed; returns its bin folder."""
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", target],
        capture_output=True,
        text=True,
        timeout=1800,
        env=user_env(venv / "bin"),  # a checkout on PYTHONPATH (its egg-info) would read as installed already
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip install {target} failed:\n{done.stderr[-3000:]}")
    return venv / "bin"


def shared_install(tmp_path_factory) -> Path:
    """The venv's bin of one build and one install per test run, whichever module asks first: parallel workers
    share the run's temporary root (pytest-xdist puts each worker's folder in it), and a lock makes the others wait.
    Its dist/ keeps build.log. Nothing may install into it afterwards: every module sees the same venv."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "wheel-shared"
    root.mkdir(exist_ok=True)
    assert REPO not in root.parents
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when a build fails
        if not (root / "installed").is_file():
            for stale in ("dist", "venv"):  # an earlier attempt that failed half-way
                shutil.rmtree(root / stale, ignore_errors=True)
            install(build_wheel(root / "dist"), root / "venv")
            (root / "installed").touch()
    return root / "venv" / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    """A user's shell: the venv's bin on PATH, no PYTHONPATH (nothing of the checkout can leak in). HOME stays:
    Ansible's fetch expands a work dir's ~ from the passwd entry, the host side from $HOME; they must agree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
