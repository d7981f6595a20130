"""Ray in the pinned image on the docker runtime, proved once with real parts (issue 19 §3): a private dockerd and
a local registry (tests/fixtures_docker.py), an image built here from the simulator's rootfs plus this venv's `ray`
and its requirements (no download), pushed, then run by digest. Two Ray nodes (head and worker, each on its own
loopback address, ports and temp dir) are started through agent/hostside/raynode.py exactly as the spark_ray module
does on the docker runtime; the cluster is checked with `ray status` inside the head's container; each container's
digest is verified against the pin; the node reports are read back from the logs' header lines; then the docker
clients are SIGKILLed (a killed controller) and raynode.stop removes both containers.

Not a timed test: the image holds ~300 MB of Ray and building it costs a minute on a busy 2-core machine.

    SPARK_TEST_NET=127.0.25 python bench/prove_ray_in_image.py
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.hostside import docker as sdocker  # noqa: E402
from agent.hostside import raynode  # noqa: E402
from agent.hostside.logparse import cluster as clusterlog  # noqa: E402
from agent.sim import image  # noqa: E402
from tests import fixtures_docker  # noqa: E402
from tests.sshd_hosts import host_address  # noqa: E402

SITE = "/opt/site"
RAY_SCRIPT = '#!/bin/sh\nexec python3 -c "import sys; from ray.scripts.scripts import main; sys.exit(main())" "$@"\n'


def requirements(name: str, seen: set[str]) -> set[str]:
    """`name` and what it requires, recursively (no extras: `pip install ray`, the minimal Ray)."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return seen
    seen.add(key)
    for req in md.requires(name) or []:
        if "extra ==" in req:
            continue
        requirements(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0], seen)
    return seen


def site_files(names: set[str]) -> dict[str, str]:
    plan: dict[str, str] = {}
    for name in names:
        dist = md.distribution(name)
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f))).resolve()
            if src.is_file() and "__pycache__" not in f.parts and not str(f).startswith(".."):
                plan[f"{SITE}/{f}"] = str(src)
                if src.suffix == ".so" or (os.access(src, os.X_OK) and _elf(src)):
                    plan.update({lib: lib for lib in image.shared_libraries(str(src))})
    return plan


def _elf(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"


def build(daemon: fixtures_docker.DockerDaemon) -> str:
    names = requirements("ray", set())
    plan = {**image.rootfs_plan(), **site_files(names)}
    changes = [c.replace(f"PYTHONPATH={image.SITE}", f"PYTHONPATH={image.SITE}:{SITE}") for c in image.IMAGE_CHANGES]
    with tempfile.TemporaryDirectory(prefix="sa-rayimg-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        image._write_tar(tar_path, plan, image.PYTHON, image.BUSYBOX)
        import tarfile

        with tarfile.open(tar_path, "a") as tar:
            image._add_text(tar, "/usr/local/bin/ray", RAY_SCRIPT, mode=0o755)
        ref = f"{daemon.registry}/vllm-sim-ray:proof"
        started = time.monotonic()
        sdocker.import_image(tar_path, ref, changes, daemon.env)
        pinned = sdocker.push(ref, daemon.env)
        print(
            f"image: {len(plan)} files ({', '.join(sorted(names))}); import + push {time.monotonic() - started:.0f} s"
        )
    return pinned


def main() -> int:
    daemon = fixtures_docker.start_daemon()
    os.environ["DOCKER_HOST"] = daemon.host
    roots = [tempfile.mkdtemp(prefix="sa-rayproof-", dir="/tmp") for _ in range(2)]
    try:
        started = time.monotonic()
        pinned = build(daemon)
        print(f"pinned: {pinned} (built in {time.monotonic() - started:.0f} s)")
        head_ip, worker_ip = host_address(0), host_address(1)
        head_address = f"{head_ip}:{fixtures_docker.free_port()}"
        cell = "3f9a1c0e7b2d"
        token = secrets.token_hex(24)  # the cell's Ray token, as cluster.yml makes one (issue 30)
        nodes = []
        for rank, (root, ip) in enumerate(zip(roots, (head_ip, worker_ip), strict=True)):
            role = "head" if rank == 0 else "worker"
            base = 20000 + (os.getpid() % 300) * 100 + rank * 1000
            workdir, temp_root = f"{root}/work", f"{root}/ray"
            folder = str(raynode.cell_temp_dir(temp_root, cell))
            env_file = Path(root) / "node.env"
            env_file.write_text(f"VLLM_HOST_IP={ip}\nRAY_ADDRESS={head_address}\n")
            name = raynode.container_name(cell, base)
            token_path = f"{folder}/{raynode.TOKEN_FILE}"
            command = raynode.container_argv(pinned, name, cell, str(env_file), folder, False, token_path)
            ray_temp = str(raynode.ray_temp_dir(temp_root, cell))
            command += raynode.argv(["ray"], role, ip, head_address, base, ray_temp, 1, {"spark_sim_gpu": 1}, 80)
            t0 = time.monotonic()
            result = raynode.start(
                workdir=workdir,
                cell_id=cell,
                role=role,
                command=command,
                env={},
                holder={},
                drop_page_cache="simulated",
                timeout_s=180,
                image=pinned,
                container=name,
                temp_root=temp_root,
                token=token,
            )
            first = Path(result["log"]).read_text().splitlines()[0]
            report = clusterlog.node_report(f"node{rank}", first)
            print(f"{role}: started in {time.monotonic() - t0:.0f} s, container {name}, digest {result['image']}")
            print(f"  log header: {first}")
            print(f"  report: {json.dumps(report)}")
            sdocker.verify_running_digest(name, pinned, daemon.env)
            nodes.append((workdir, name, result["pid"]))
        seen = raynode.check(raynode.status_cmd(nodes[0][0], ["ray"]), head_address, 2, 2, timeout_s=120, token=token)
        print(f"ray status inside the head's container: ok={seen['ok']} nodes={seen['nodes']} gpus={seen['gpus']}")
        for _workdir, _name, pid in nodes:  # a killed controller and a killed client: the containers live on
            os.killpg(pid, signal.SIGKILL)
        time.sleep(1)
        print("after SIGKILL of the clients:", [sdocker.state(n, daemon.env)["status"] for _, n, _ in nodes])
        for workdir, name, _pid in nodes:
            print(f"stop {name}: {raynode.stop(workdir)} -> {sdocker.state(name, daemon.env)['status']}")
        print("containers of ours left:", sdocker.list_ours(docker_env=daemon.env))
        return 0 if seen["ok"] else 1
    finally:
        for root in roots:
            with_state = Path(root) / "work"
            if with_state.exists():
                raynode.stop(str(with_state))
        fixtures_docker.stop_daemon(daemon)


if __name__ == "__main__":
    sys.exit(main())
