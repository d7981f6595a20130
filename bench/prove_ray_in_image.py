"""Ray in the pinned image on the docker runtime, proved once with real parts (issue 19 §3): a private dockerd and
a local registry (tests/fixtures_docker.py), an image built here from the simulator's rootfs plus this venv's `ray`
and its requirements (no download), pushed, then run by digest. Two Ray nodes (head and worker, each on its own
loopback address, ports and temp dir) are started through agent/hostside/raynode.py exactly as the spark_ray module
does on the docker runtime (as a non-root user: the login user's, or 65534:65534 when this runs as root); the
cluster is checked with `ray status` inside the head's container; each container's digest is verified against the
pin; the node reports are read back from the logs' header lines; then the docker clients are SIGKILLed (a killed
controller) and raynode.stop removes both containers.

Not a timed test: the image holds ~300 MB of Ray and building it costs a minute on a busy 2-core machine.

    SPARK_TEST_NET=127.0.25 python bench/prove_ray_in_image.py
"""

from __future__ import annotations

import json
import os
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
from tests import fixtures_docker  # noqa: E402
from tests.sshd_hosts import host_address  # noqa: E402

CONTAINER_USER = "" if os.getuid() else "65534:65534"  # never root in the container: a root login names a user


def main() -> int:
    daemon = fixtures_docker.start_daemon()
    os.environ["DOCKER_HOST"] = daemon.host
    roots = [tempfile.mkdtemp(prefix="sa-rayproof-", dir="/tmp") for _ in range(2)]
    try:
        started = time.monotonic()
        pinned = fixtures_docker.build_and_push_ray_image(daemon)
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
            user = raynode.container_user(CONTAINER_USER)
            command = raynode.container_argv(pinned, name, cell, str(env_file), folder, False, user, token_path)
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
                user=user,
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
