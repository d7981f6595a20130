"""The simulated engine across nodes, on a real Ray cluster (`ray` from PyPI; imported only here and only when
`--distributed-executor-backend ray` asks for it, so the one-node simulator stays standard library).

What vLLM's Ray executor does, in the simulator's terms: join the running cluster (RAY_ADDRESS), refuse to load
unless the nodes and GPU resources are there (a simulated host declares its GPU, and a `spark_sim_gpu` resource,
when its Ray node starts), place one actor per rank in a placement group (the per-node part: one rank per Spark),
and have every rank print NCCL's init lines. Each rank picks its transport as NCCL would from ITS node's env and
facts: RDMA ("Using network IB") when the node has an RDMA device on the link and nothing disables it, else
sockets ("Using network Socket"). When a rank's actor dies (its node is lost), the engine dies as vLLM does.
The link's cost per decode step comes from calibration.toml [multinode] (labelled assumptions).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import calibration
from .vlog import ENGINE, VllmLog

PLACEMENT_TIMEOUT_S = 30.0
PING_S = 0.5
REPO = str(Path(__file__).resolve().parent.parent.parent)


def wanted(given: Mapping[str, Any]) -> bool:
    return str(given.get("distributed_executor_backend", "")) == "ray"


def sizes(given: Mapping[str, Any]) -> tuple[int, int]:
    return int(given.get("tensor_parallel_size", 1) or 1), int(given.get("pipeline_parallel_size", 1) or 1)


def nccl_transport(env: Mapping[str, str]) -> tuple[str, str]:
    """(transport, device) as NCCL would choose on a node with this env: IB when an RDMA device is there
    (SPARK_SIM_RDMA on a simulated node) and neither NCCL_IB_DISABLE=1 nor NCCL_NET=Socket says otherwise."""
    rdma = env.get("NCCL_IB_HCA", "").lstrip("=^").split(",")[0].split(":")[0] or env.get("SPARK_SIM_RDMA", "")
    if not env.get("SPARK_SIM_RDMA"):
        rdma = ""  # the node has no RDMA device, whatever NCCL_IB_HCA names
    if env.get("NCCL_IB_DISABLE") == "1" or env.get("NCCL_NET", "").lower() == "socket" or not rdma:
        return "Socket", ""
    return "IB", f"{rdma}:1/RoCE"


def nccl_lines(env: Mapping[str, str], address: str, rank: int) -> list[str]:
    """NCCL's init lines of one rank (NCCL_DEBUG=INFO), in NCCL's own shape."""
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    host, pid = socket.gethostname(), os.getpid()
    head = f"{host}:{pid}:{pid} [{rank}] NCCL INFO"
    ifname = env.get("NCCL_SOCKET_IFNAME", "eth0").lstrip("=^").split(",")[0]
    transport, device = nccl_transport(env)
    lines = [f"{head} Bootstrap : Using {ifname}:{address}<0>"]
    if transport == "IB":
        lines.append(f"{head} NET/IB : Using [0]{device} [RO]; OOB {ifname}:{address}<0>")
    else:
        if env.get("NCCL_IB_DISABLE") == "1":
            lines.append(f"{head} NCCL_IB_DISABLE set by environment to 1.")
        elif not env.get("SPARK_SIM_RDMA"):
            lines.append(f"{head} NET/IB : No device found.")
        lines.append(f"{head} NET/Socket : Using [0]{ifname}:{address}<0>")
    lines.append(f"{head} Using network {transport}")
    return lines


@dataclass
class Cluster:
    tp: int
    pp: int
    transports: dict[str, str]  # node address -> IB | Socket
    actors: list[Any] = field(default_factory=list)
    dead: threading.Event = field(default_factory=threading.Event)
    last_words: str = ""  # the exception a dead rank left

    @property
    def transport(self) -> str:
        """The link's transport: Socket if any rank fell back to sockets."""
        return "Socket" if "Socket" in self.transports.values() else "IB"

    def step_cost(self) -> tuple[float, Callable[[int], float]]:
        """(compute scale, seconds the link adds to one decode step at a concurrency)."""
        cal = calibration.load()["multinode"]
        link = cal["transport"][self.transport]
        bytes_per_s = link["bandwidth_gbps"] * 1e9 / 8 * link["efficiency"]
        latency = link["latency_us"] / 1e6
        tp, pp = self.tp, self.pp
        scale = 1.0 / (tp * cal["tp_efficiency"]) if tp > 1 else 1.0

        def comm(concurrency: int) -> float:
            payload = max(1, concurrency) * cal["hidden"] * cal["activation_bytes"]
            cost = 0.0
            if tp > 1:  # two all-reduces per layer; a ring moves 2(N-1)/N of the payload
                cost += 2 * cal["layers"] * (latency + payload * 2 * (tp - 1) / tp / bytes_per_s)
            if pp > 1:  # one activation hop per stage boundary
                cost += (pp - 1) * (latency + payload / bytes_per_s)
            return cost

        return scale, comm

    def watch(self, ray: Any) -> None:
        """Ping every rank; the first that does not answer (its actor or node died) ends the engine."""

        def loop() -> None:
            while not self.dead.is_set():
                try:
                    ray.get([a.ping.remote() for a in self.actors], timeout=10)
                except Exception as exc:  # ActorDiedError, ActorUnavailableError, GetTimeoutError
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    self.last_words = f"ray.exceptions.{type(exc).__name__}: {first}"
                    self.dead.set()
                    return
                time.sleep(PING_S)

        threading.Thread(target=loop, name="ray-ranks", daemon=True).start()


def _fail(log: VllmLog, error: str) -> None:
    """Die at startup as vLLM's engine core does: the traceback's last line names the cause."""
    log.error(ENGINE, "core.py:708", "EngineCore failed to start.")
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_utils.py", line 372, in '
        "initialize_ray_cluster\n" + error + "\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    sys.stderr.flush()


def join(given: Mapping[str, Any], log: VllmLog, env: Mapping[str, str]) -> Cluster | None:
    """Join the cluster, check its resources, place one actor per rank. None (after vLLM's last words) on failure."""
    tp, pp = sizes(given)
    world = tp * pp
    gpus_per_node = int(calibration.load()["multinode"]["gpus_per_node"])
    need_nodes = -(-world // gpus_per_node)
    address = env.get("RAY_ADDRESS", "")
    log.info(ENGINE, "ray_utils.py:337", f"Connecting to existing Ray cluster at address: {address or 'auto'}.")
    import ray  # the real distributed engine; only the multi-node simulator needs it
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(
        address=address or "auto",
        logging_level=30,  # logging.WARNING
        log_to_driver=False,  # the ranks' lines come back as return values (below)
        runtime_env={"env_vars": {"PYTHONPATH": REPO}},  # the actors import this package
    )
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    with_gpu = [n for n in nodes if n.get("Resources", {}).get("GPU", 0) > 0]
    total = ray.cluster_resources()
    gpus, sim_gpus = total.get("GPU", 0.0), total.get("spark_sim_gpu", 0.0)
    log.info(
        ENGINE,
        "ray_utils.py:347",
        f"Ray cluster: {len(nodes)} node(s) alive, {gpus:g} GPU(s); needs {need_nodes} node(s) and {world} GPU(s) "
        f"for tensor_parallel_size={tp} x pipeline_parallel_size={pp}",
    )
    if len(with_gpu) < need_nodes or gpus < world or sim_gpus < world:
        _fail(
            log,
            "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
            f"group. (needs {world} GPU(s) on {need_nodes} node(s); the cluster has {gpus:g} on {len(with_gpu)})",
        )
        return None
    bundles = [{"GPU": 1.0, "spark_sim_gpu": 1.0} for _ in range(world)]
    pg = placement_group(bundles, strategy="PACK")
    try:
        ray.get(pg.ready(), timeout=PLACEMENT_TIMEOUT_S)
    except Exception:
        _fail(log, f"TimeoutError: placement group of {world} GPU bundle(s) not ready in {PLACEMENT_TIMEOUT_S:g} s")
        return None
    worker_cls = ray.remote(num_cpus=0, num_gpus=1, resources={"spark_sim_gpu": 1})(RayWorkerWrapper)
    actors = [
        worker_cls.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)
        ).remote(opts_version(given, env))
        for i in range(world)
    ]
    head_ip = env.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
    where: list[str] = ray.get([a.node_ip.remote() for a in actors])  # type: ignore[attr-defined]
    order = sorted(range(world), key=lambda i: (where[i] != head_ip, where[i], i))  # rank 0 on the head, as vLLM
    actors = [actors[i] for i in order]
    ranks = enumerate(actors)
    results: list[tuple[str, str, int, list[str]]] = ray.get([a.init_device.remote(r, world, tp, pp) for r, a in ranks])  # type: ignore[attr-defined]
    for ip, _, pid, lines in results:
        # each rank's lines were made on its node (its env); written here in the shape of Ray's log forwarding
        # ("(RayWorkerWrapper pid=N, ip=A)"; no ip= for a rank on the head), which is too late under load to trust
        prefix = f"(RayWorkerWrapper pid={pid}" + (f", ip={ip})" if ip != head_ip else ")")
        for line in lines:
            log.raw(f"{prefix} {line}")
    transports = {ip: transport for ip, transport, _, _ in results}
    log.info(ENGINE, "ray_distributed_executor.py:181", f"world_size={world} ranks on nodes {sorted(transports)}")
    cluster = Cluster(tp, pp, transports, actors)
    cluster.watch(ray)
    return cluster


def opts_version(given: Mapping[str, Any], env: Mapping[str, str]) -> str:
    return env.get("SPARK_SIM_VLLM_VERSION") or calibration.load()["default_vllm_version"]


class RayWorkerWrapper:
    """One rank (vLLM's actor has this class name, so Ray's log prefix reads the same). Runs in a Ray worker
    process on its node: os.environ is that node's environment."""

    def __init__(self, version: str):
        self.version = version

    def node_ip(self) -> str:
        import ray

        return str(ray.util.get_node_ip_address())

    def init_device(self, rank: int, world: int, tp: int, pp: int) -> tuple[str, str, int, list[str]]:
        """(node address, NCCL transport, pid, the rank's log lines), all decided on this node."""
        address = self.node_ip()
        stamp = time.strftime("%m-%d %H:%M:%S")
        lines = [
            f"INFO {stamp} [parallel_state.py:1165] rank {rank} in world size {world} is assigned as DP rank 0, "
            f"PP rank {rank // tp}, TP rank {rank % tp}, EP rank {rank % tp}",
            *nccl_lines(os.environ, address, rank),
        ]
        for line in lines:  # the node's own Ray session log keeps them too
            print(line, flush=True)
        return address, nccl_transport(os.environ)[0], os.getpid(), lines

    def ping(self) -> int:
        return 1
