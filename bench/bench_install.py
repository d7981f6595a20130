"""What a user's install costs: the default install's size on disk and `spark-agent --help` time, from the wheel in
a fresh venv outside the checkout (the goals: <= 150 MB, <= 0.5 s); with --pythons, the same wheel on each Python
(install, --version, and with --demo the demo itself).

    .venv/bin/python bench/bench_install.py [--wheel dist/spark_agent-*.whl] [--extras multinode,postgres]
        [--pythons 3.10 3.11 3.12 3.13] [--demo] [--runs 10] [--json]

A Python given as X.Y is pyenv's newest X.Y (pyenv root), else a path to an interpreter. Sizes count the venv's
files (no symlinks); "spark-agent's share" leaves out the venv's own pip and setuptools, which every venv has.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from wheel_venv import build_wheel, folder_bytes, install, user_env

MB = 1e6
VENV_TOOLING = ("pip", "setuptools", "pkg_resources", "_distutils_hack")  # in every venv, not ours


def find_python(given: str) -> str:
    if "/" in given:
        return given
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
    found = sorted(
        Path(root, "versions").glob(f"{given}.*/bin/python"), key=lambda p: [int(x) for x in p.parts[-3].split(".")]
    )
    if not found:
        raise SystemExit(f"no pyenv Python {given} (pyenv versions lists what there is)")
    return str(found[-1])


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def sizes(venv: Path) -> dict:
    site = site_packages(venv)
    top = {p.name: folder_bytes(p) if p.is_dir() else p.stat().st_size for p in site.iterdir()}
    tooling = sum(v for k, v in top.items() if k.split("-")[0] in VENV_TOOLING)
    biggest = sorted(((v, k) for k, v in top.items() if not k.endswith(".dist-info")), reverse=True)[:12]
    total = folder_bytes(venv)
    return {
        "venv_mb": round(total / MB, 1),
        "spark_agent_share_mb": round((total - tooling) / MB, 1),
        "biggest_mb": {k: round(v / MB, 1) for v, k in biggest},
    }


def timed(argv: list[str], env: dict, runs: int) -> dict:
    subprocess.run(argv, env=env, capture_output=True, check=True, timeout=120)  # warm the page cache once
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True, timeout=120)
        walls.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(walls), 3), "max_s": round(max(walls), 3), "runs": runs}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_python(python: str, wheel: Path, extras: str, runs: int, demo: bool, work: Path) -> dict:
    version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
    out: dict = {"python": version}
    venv = work / f"venv-{version}"
    start = time.perf_counter()
    try:
        bin_dir = install(wheel, venv, python=python, extras=extras)
    except RuntimeError as exc:
        out["install"] = "failed: " + str(exc).strip().splitlines()[-1][:300]  # pip's last line says why
        return out
    out["install_s"] = round(time.perf_counter() - start, 1)
    env = user_env(bin_dir)
    exe = str(bin_dir / "spark-agent")
    out["version"] = subprocess.run([exe, "--version"], env=env, capture_output=True, text=True).stdout.strip()
    out.update(sizes(venv))
    out["help"] = timed([exe, "--help"], env, runs)
    out["sweep_help"] = timed([exe, "sweep", "--help"], env, max(3, runs // 3))
    if demo:
        folder = work / f"demo-{version}"
        folder.mkdir()
        start = time.perf_counter()
        done = subprocess.run([exe, "demo", "--duration", "1", "--port", str(free_port())], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        out["demo"] = {"rc": done.returncode, "s": round(time.perf_counter() - start, 1)}
        if done.returncode != 0:
            out["demo"]["stderr"] = done.stderr[-600:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, help="a built wheel (default: build one from this checkout)")
    ap.add_argument("--extras", default="", help="install with these extras, e.g. multinode,postgres")
    ap.add_argument("--pythons", nargs="*", default=[sys.executable], help="X.Y (pyenv) or interpreter paths")
    ap.add_argument("--demo", action="store_true", help="also run `spark-agent demo --duration 1` from each venv")
    ap.add_argument("--runs", type=int, default=10, help="timed --help runs (median reported)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        work = Path(tmp)
        wheel = args.wheel or build_wheel(work / "dist")
        results = [one_python(find_python(p), wheel, args.extras, args.runs, args.demo, work) for p in args.pythons]
    if args.json:
        print(json.dumps({"wheel": wheel.name, "extras": args.extras, "results": results}, indent=1))
        return 0
    print(f"wheel {wheel.name}, extras [{args.extras}]")
    for r in results:
        if "install_s" not in r:
            print(f"python {r['python']}: {r['install']}")
            continue
        demo = f", demo rc={r['demo']['rc']} in {r['demo']['s']} s" if "demo" in r else ""
        print(
            f"python {r['python']}: install {r['install_s']} s; venv {r['venv_mb']} MB "
            f"(spark-agent's share {r['spark_agent_share_mb']} MB); --help median {r['help']['median_s']} s "
            f"(max {r['help']['max_s']}), sweep --help {r['sweep_help']['median_s']} s{demo}"
        )
        print("  biggest: " + ", ".join(f"{k} {v}" for k, v in r["biggest_mb"].items()))
        if "stderr" in r.get("demo", {}):
            print("  demo stderr: " + r["demo"]["stderr"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
