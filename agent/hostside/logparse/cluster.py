"""What a multi-node vLLM log says about its cluster: world size, TP/PP sizes, Ray nodes, NCCL's transport per rank.

Fed by the Follower with the lines that can matter (cheap substring checks first); standard library only;
bounded like the other families (MAX_LINKS ranks kept, no backtracking regex over a line). The forms are those of real
logs (tests/data/multinode/SOURCES.md): NCCL's "NET/IB : Using [0]mlx5_0:1/RoCE ..." / "NET/Socket : Using
[0]eth0:10.0.0.1<0>" and "Using network IB|Socket", Ray's "(RayWorkerWrapper pid=N, ip=A)" prefix for a rank on
another node, vLLM's "rank R in world size W" and its engine config's tensor_parallel_size=/pipeline_parallel_size=.

Its own family because its lines come from NCCL and Ray, not vLLM's logger, and from every rank of several hosts;
and because it also owns the header line raynode writes first in a node's own log (`node_header` / `node_report`).
"""

from __future__ import annotations

import re

from ..contracts import ClusterFacts, NcclLink, RayNodeReport

MAX_LINKS = 256
MAX_NODES = 1024
_RAY_PREFIX = re.compile(
    r"\((?:RayWorkerWrapper|RayWorker|RayWorkerVllm)\s+pid=(\d+)(?:,\s*ip=([0-9a-fA-F.:]{1,45}))?\)"
)
_NCCL_ID = re.compile(r"([\w.-]{1,128}):(\d+):(\d+) \[(\d+)\] NCCL INFO ")
_NET_IB = re.compile(r"NET/IB ?: Using \[0\](\S{1,64})")
_NET_SOCKET = re.compile(r"NET/Socket ?: Using \[0\](\S{1,80})")
_NETWORK = re.compile(r"NCCL INFO Using network (IB\w*|Socket|\w{1,32})")
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")  # Ray colours its "(RayWorkerWrapper pid=N)" prefix
_WORLD = re.compile(r"\bin world size (\d{1,6})\b")
_TP = re.compile(r"\btensor_parallel_size[=:] ?(\d{1,6})")
_PP = re.compile(r"\bpipeline_parallel_size[=:] ?(\d{1,6})")


def new() -> ClusterFacts:
    return {"world_size": -1, "tensor_parallel_size": -1, "pipeline_parallel_size": -1, "ray_nodes": 0, "links": []}


def interesting(line: str) -> bool:
    """The cheap pre-check the Follower runs on every line."""
    return "NCCL INFO" in line or "world size" in line or "parallel_size" in line or "RayWorker" in line


class ClusterFollower:
    def __init__(self) -> None:
        self.facts = new()
        self._nodes: set[str] = set()
        self._device: dict[str, str] = {}  # rank key -> NET/IB or NET/Socket device of that rank

    def feed(self, line: str) -> None:
        f = self.facts
        if "\x1b[" in line:
            line = _ANSI.sub("", line)
        prefix = _RAY_PREFIX.search(line) if "RayWorker" in line else None
        ip = prefix.group(2) if prefix else None
        if ip and len(self._nodes) < MAX_NODES:  # a rank on another node than the head
            self._nodes.add(ip)
        if "parallel_size" in line:
            for rx, key in ((_TP, "tensor_parallel_size"), (_PP, "pipeline_parallel_size")):
                m = rx.search(line)
                if m and f[key] < 0:  # type: ignore[literal-required]
                    f[key] = int(m.group(1))  # type: ignore[literal-required]
        if "world size" in line:
            m = _WORLD.search(line)
            if m:
                f["world_size"] = max(f["world_size"], int(m.group(1)))
        if "NCCL INFO" not in line:
            return
        ident = _NCCL_ID.search(line)
        node = ip or (ident.group(1) if ident else "head")  # Ray's ip=, else NCCL's own host name
        if len(self._nodes) < MAX_NODES:
            self._nodes.add(node)
        key = f"{node}|{ident.group(2)}" if ident else node
        m = _NET_IB.search(line) or _NET_SOCKET.search(line)
        if m:
            self._device[key] = m.group(1)
            return
        m = _NETWORK.search(line)
        if m and len(f["links"]) < MAX_LINKS:
            transport = "IB" if m.group(1).startswith("IB") else m.group(1)
            f["links"].append(
                NcclLink(node=node, transport=transport, device=self._device.get(key, ""), line=line.strip()[:1000])
            )

    def result(self) -> ClusterFacts:
        out = ClusterFacts(**self.facts)
        out["links"] = [NcclLink(**link) for link in self.facts["links"]]
        out["ray_nodes"] = len(self._nodes) if self._nodes and (self.facts["links"] or len(self._nodes) > 1) else 0
        return out


# raynode.start's first line of a node's log: what it did before `ray start` (the page cache, the image it runs)
HEADER = "spark-agent: ray {role} node for cell {cell_id}; page cache: {page_cache}"
_HEADER = re.compile(
    r"spark-agent: ray (head|worker) node for cell [0-9a-f]{1,64}; page cache: ((?:(?!; image: )[^\n]){0,200}?)"
    r"(?:; image: (sha256:[0-9a-f]{64}))?\s*$"
)


def node_header(role: str, cell_id: str, page_cache: str, image: str = "") -> str:
    return HEADER.format(role=role, cell_id=cell_id, page_cache=page_cache) + (f"; image: {image}" if image else "")


def node_report(host: str, first_line: str) -> RayNodeReport | None:
    """The node's header line read back (None when the log does not start with one: a killed node, an old host)."""
    m = _HEADER.match(first_line[:600])
    if not m:
        return None
    return RayNodeReport(host=host, role=m.group(1), page_cache=m.group(2).strip(), image=m.group(3) or "")
