"""Network interfaces of a host: names, IPv4 addresses, link speed, RDMA devices. Standard library only.

Read from /sys/class/net (state, speed), /sys/class/infiniband (which RDMA device sits on which interface) and
`ip -j -4 addr` (addresses: the standard library has no getifaddrs). A multi-node cell's link is chosen from these
(agent/planning/nodesets.py). A simulated host reports one simulated ConnectX-7 whose "link" is its own loopback
address, marked simulated, so the same rules run on loopback test hosts.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import socket
import struct
import subprocess
from pathlib import Path

from .contracts import NetInterface

SYS_NET = "/sys/class/net"
SYS_IB = "/sys/class/infiniband"
MAX_INTERFACES = 64
# The simulated ConnectX-7 of a simulated Spark: the names a DGX Spark's first CX-7 port has (RoCE device rocep1s0f0)
SIM_IFNAME = "enp1s0f0np0"
SIM_RDMA = "rocep1s0f0"
SIM_SPEED_MBPS = 200_000
SIM_PREFIX = 24


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):  # speed of a down link reads EINVAL
        return ""


def rdma_devices(sys_ib: str = SYS_IB) -> dict[str, list[str]]:
    """interface name -> RDMA devices on it."""
    out: dict[str, list[str]] = {}
    root = Path(sys_ib)
    if not root.is_dir():
        return out
    for dev in sorted(root.iterdir())[:MAX_INTERFACES]:
        net = dev / "device" / "net"
        if net.is_dir():
            for ifname in sorted(os.listdir(net))[:MAX_INTERFACES]:
                out.setdefault(ifname, []).append(dev.name)
    return out


def ipv4_addresses(names: list[str] | None = None) -> dict[str, list[str]]:
    """interface name -> ["a.b.c.d/prefix"]: every address from `ip -j -4 addr` where iproute2 is installed, else
    each interface's primary address from the kernel (SIOCGIFADDR/SIOCGIFNETMASK: standard library only)."""
    try:
        done = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, timeout=10)
        if done.returncode == 0:
            return parse_ip_json(json.loads(done.stdout))
    except (OSError, subprocess.TimeoutExpired, ValueError):
        pass
    out: dict[str, list[str]] = {}
    for name in names or []:
        cidr = _primary_address(name)
        if cidr:
            out[name] = [cidr]
    return out


def _primary_address(name: str) -> str:
    request = struct.pack("256s", name[:15].encode())
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            address = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24])  # SIOCGIFADDR
            mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x891B, request)[20:24])  # SIOCGIFNETMASK
    except OSError:  # no IPv4 address on it
        return ""
    return f"{address}/{ipaddress.IPv4Network(f'0.0.0.0/{mask}').prefixlen}"


def parse_ip_json(rows: object) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if not isinstance(rows, list):
        return out
    for row in rows[:MAX_INTERFACES]:
        if not isinstance(row, dict) or not isinstance(row.get("ifname"), str):
            continue
        for a in row.get("addr_info") or []:
            if isinstance(a, dict) and a.get("family") == "inet" and isinstance(a.get("local"), str):
                out.setdefault(row["ifname"], []).append(f"{a['local']}/{int(a.get('prefixlen', 32))}")
    return out


def interfaces(sys_net: str = SYS_NET, sys_ib: str = SYS_IB) -> list[NetInterface]:
    """Every interface but loopback, with its state, IPv4 addresses, speed and RDMA devices."""
    root = Path(sys_net)
    if not root.is_dir():
        return []
    addrs = ipv4_addresses([p.name for p in root.iterdir()])
    rdma = rdma_devices(sys_ib)
    out: list[NetInterface] = []
    for path in sorted(root.iterdir())[:MAX_INTERFACES]:
        name = path.name
        if name == "lo":
            continue
        speed = _read(path / "speed")
        out.append(
            NetInterface(
                name=name,
                state=_read(path / "operstate") or "unknown",
                addresses=addrs.get(name, []),
                speed_mbps=int(speed) if speed.lstrip("-").isdigit() else -1,
                rdma=rdma.get(name, []),
                simulated=False,
            )
        )
    return out


def simulated_interface(link_address: str) -> NetInterface:
    """The simulated ConnectX-7 of a simulated host: its link is the host's (loopback) address (a name such as
    localhost is not an address: 127.0.0.1 then)."""
    try:
        address = str(ipaddress.IPv4Address(link_address))
    except ValueError:
        address = "127.0.0.1"
    return NetInterface(
        name=SIM_IFNAME,
        state="up",
        addresses=[f"{address}/{SIM_PREFIX}"],
        speed_mbps=SIM_SPEED_MBPS,
        rdma=[SIM_RDMA],
        simulated=True,
    )
