"""Provisioning N hosts vs one host, with the image coming over a slow shared link (the office's) or from a mirror on
the fleet's link. Target (issue 13): 8 hosts with a mirror take at most 1.5x one host.

Real parts: N private dockerds (one image store per "host", as separate machines have), a real registry as the
image's own registry reached through a rate-limited TCP proxy (every connection shares one token bucket: the office
link), a second real registry as the fleet's mirror, and the real provision playbook through Ansible.

    .venv/bin/python bench/bench_fleet_provision.py [--hosts 8] [--mb 200] [--link-mbps 80] [--without-mirror]
        [--scale 1,2,4] [--profile]

Times are wall seconds of the provision playbook. The image is a fresh random layer of --mb MB (random data does not
compress, so the link carries all of it). --scale also times the mirror run on the first K hosts; --profile prints
each task's window (first start .. last end), the CPU seconds of each kind of process (dockerd, its docker-untar
child, the registries, Ansible's forks and modules, this process: the link proxy and ansible-runner) per task, and
the bytes written to disk.

Where the time goes (2 shared cores, overlay2, docker 20.10; bench/README.md "Fleet provisioning" has the figures):
one host = its facts and files (~3 s) + 200 MB over the 80 Mbit/s link (21 s) + unpacking (~2 s). Eight hosts =
facts (~2 s) + the seed (the same 21 s on the link; every host's other tasks run meanwhile, since the seed is started
in the background) + eight dockerds pulling from the mirror at once: each spends ~2.2 s of CPU per 200 MB (fetch,
two SHA-256 passes, unpack), so eight need at least 8 x 2.2 / 2 = 8.8 s on two idle cores, and 11-15 s while other
work runs. Real Sparks unpack each on their own cores: there the fan-out is one host's unpack plus the mirror's egress
(8 x the image over the fleet's link), and the N-host figures here are an upper bound.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import logs  # noqa: E402
from agent.hostside import docker as sdocker  # noqa: E402
from agent.running import playbooks as fleet  # noqa: E402
from tests.fixtures_docker import (  # noqa: E402
    DockerDaemon,
    free_port,
    local_inventory,
    start_daemon,
    start_dockerd,
    start_registry,
    stop_daemon,
    stop_pid,
)


class SlowLink:
    """A TCP proxy 127.0.0.1:port → target whose connections share one bandwidth budget (bytes/s)."""

    def __init__(self, target: tuple[str, int], bytes_per_s: float):
        self.target, self.rate = target, bytes_per_s
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.tokens, self.stamp = 0.0, time.monotonic()
        self.lock = asyncio.Lock()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    async def _start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def _take(self, n: int) -> None:
        async with self.lock:  # one bucket for every connection: the link is shared
            while True:
                now = time.monotonic()
                self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= n:
                    self.tokens -= n
                    return
                await asyncio.sleep((n - self.tokens) / self.rate)

    async def _pipe(self, reader, writer, throttle: bool) -> None:
        try:
            while data := await reader.read(64 * 1024):
                if throttle:
                    await self._take(len(data))
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _client(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(reader, up_writer, False), self._pipe(up_reader, writer, True))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)


class Profile:
    """CPU seconds per kind of process and bytes written to disk during one provision run (psutil, sampled): where
    the time goes when every "host" shares this machine's cores."""

    def __init__(self, daemons: list[DockerDaemon], mirror_pid: int | None):
        self.groups: dict[int, str] = {}
        for d in daemons:
            if d.pids.get("dockerd"):
                self.groups[d.pids["dockerd"]] = "dockerd (pull: fetch, verify, unpack)"
            if d.pids.get("registry"):
                self.groups[d.pids["registry"]] = "origin registry (behind the link)"
        if mirror_pid:
            self.groups[mirror_pid] = "mirror registry"
        self.seen: dict[int, tuple[str, float]] = {}  # pid -> (group, last cpu seconds)
        self.phase = "start"  # the task the playbook is on: CPU is charged to it
        self.table: dict[tuple[str, str], float] = {}  # (phase, group) -> cpu seconds
        self.phases: list[str] = []
        self.stop = threading.Event()
        self.io0 = psutil.disk_io_counters()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _group_of(self, proc: psutil.Process) -> str:
        me = os.getpid()
        try:
            chain = [proc, *proc.parents()]
        except psutil.Error:
            return ""
        for p in chain:
            if p.pid in self.groups:
                if p.pid == proc.pid or "dockerd" not in self.groups[p.pid]:
                    return self.groups[p.pid]
                try:  # dockerd's own children: containerd, and docker-untar (it unpacks each layer in a chroot)
                    return f"dockerd's child {proc.name()}"
                except psutil.Error:
                    return ""
        if proc.pid == me:
            return "bench (the link proxy, ansible-runner)"
        if any(p.pid == me for p in chain):
            try:
                name, cmd = proc.name(), " ".join(proc.cmdline())
            except psutil.Error:
                return ""
            if name == "docker":
                return "docker CLI (in modules)"
            if "ansible-playbook" in cmd:
                return "ansible-playbook (its forks)"
            return "modules"
        return ""

    def _sample(self) -> None:
        for proc in psutil.process_iter():
            try:
                if proc.pid not in self.seen:
                    group = self._group_of(proc)
                    if not group:
                        continue
                    self.seen[proc.pid] = (group, 0.0)
                group, last = self.seen[proc.pid]
                t = proc.cpu_times()
                cpu = t.user + t.system
                self.seen[proc.pid] = (group, cpu)
                if self.before is not None:
                    key = (self.phase, group)
                    self.table[key] = self.table.get(key, 0.0) + cpu - max(last, self.before.get(proc.pid, 0.0))
                    if self.phase not in self.phases:
                        self.phases.append(self.phase)
            except psutil.Error:
                continue

    before: dict[int, float] | None = None

    def _run(self) -> None:
        self._sample()
        self.before = {pid: cpu for pid, (_, cpu) in self.seen.items()}
        while not self.stop.wait(0.25):
            self._sample()

    def report(self, wall: float) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()
        io1 = psutil.disk_io_counters()
        per: dict[str, float] = {}
        for (_, group), cpu in self.table.items():
            per[group] = per.get(group, 0.0) + cpu
        for group, cpu in sorted(per.items(), key=lambda kv: -kv[1]):
            by_phase = ", ".join(
                f"{phase[:14]} {self.table[(phase, group)]:.1f}"
                for phase in self.phases
                if self.table.get((phase, group), 0) >= 0.3
            )
            print(f"    cpu {cpu:6.1f} s  {group}   [{by_phase}]")
        print(f"    cpu {sum(per.values()):6.1f} s  in all, over {wall:.1f} s wall on {os.cpu_count()} cores")
        if self.io0 and io1:
            print(f"    disk written {(io1.write_bytes - self.io0.write_bytes) / 1e6:.0f} MB")


def start_proxy_registry(root: Path, upstream: str) -> tuple[subprocess.Popen, str]:
    """Debian's docker-registry as a pull-through cache of `upstream` (distribution's proxy mode)."""
    port = free_port()
    config = root / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'registry'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\nproxy:\n  remoteurl: {upstream}\n"
    )
    proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)  # fmt: skip
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.05)
    return proc, f"127.0.0.1:{port}"


def fat_image(daemon: DockerDaemon, registry: str, mb: int, work: Path) -> str:
    """A single-layer image of `mb` MB of random bytes, pushed to `registry`; its pinned ref there."""
    blob = work / "rootfs" / "weights.bin"
    blob.parent.mkdir(parents=True)
    with open(blob, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1024 * 1024))
    tar = work / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(blob, arcname="weights.bin")
    ref = f"{registry}/fat:bench"
    sdocker.import_image(str(tar), ref, ['CMD ["/weights.bin"]'], daemon.env)
    pinned = sdocker.push(ref, daemon.env)
    sdocker.remove_image(ref, daemon.env)
    sdocker.remove_image(pinned, daemon.env)
    return pinned


def forget(daemons: list[DockerDaemon], pinned_digest: str) -> None:
    for d in daemons:
        out = subprocess.run(
            ["docker", "image", "ls", "-q", "--digests", "--format", "{{.ID}} {{.Digest}}"],
            env=d.env, capture_output=True, text=True,
        ).stdout  # fmt: skip
        for line in out.splitlines():
            image_id, _, digest = line.partition(" ")
            if digest == pinned_digest:
                subprocess.run(["docker", "image", "rm", "-f", image_id], env=d.env, capture_output=True)


def provision(
    daemons: list[DockerDaemon], image: str, mirror: str, work: Path, profile: bool = False, mirror_pid: int = 0
) -> float:
    hosts = {
        f"spark-{i}": {
            "spark_runtime": "docker",
            "spark_docker_host": d.host,
            "spark_workdir": str(work / f"host{i}"),
            **({"spark_image_mirror": mirror} if mirror else {}),
        }
        for i, d in enumerate(daemons)
    }
    inventory = local_inventory(work / f"inv-{len(daemons)}-{bool(mirror)}.yml", daemons[0], hosts)
    prof = Profile(daemons, mirror_pid) if profile else None
    durations: dict[str, list[float]] = {}
    windows: dict[str, list[float]] = {}  # task -> [first start, last end], seconds after the run started

    def on_event(event: dict) -> None:
        data = event.get("event_data") or {}
        task = data.get("task")
        at = time.time() - wall0
        if prof and event.get("event") == "playbook_on_task_start" and task:
            prof.phase = task
        if task and event.get("event", "").startswith("runner_on_") and event.get("event") != "runner_on_start":
            if data.get("start"):
                at = datetime.fromisoformat(data["start"]).timestamp() - wall0
            window = windows.setdefault(task, [at, at])
            window[0] = min(window[0], at)
            window[1] = max(window[1], at + float(data.get("duration") or 0))
        if event.get("event") == "runner_on_ok" and task == "Pull the image by digest":
            durations.setdefault(task, []).append(float(data.get("duration") or 0))

    started, wall0 = time.monotonic(), time.time()
    run = fleet.run_playbook("provision", inventory, {"image": image}, on_event=on_event)
    took = time.monotonic() - started
    if not run.ok:
        raise SystemExit(f"provision failed: {run.failures or run.unreachable}")
    for task, secs in durations.items():
        print(f"    {task}: {', '.join(f'{s:.1f}' for s in sorted(secs))} s")
    if mirror and {"Start seeding the image mirror", "Seed the image mirror"} <= windows.keys():  # started, waited
        began, done = windows["Start seeding the image mirror"][0], windows["Seed the image mirror"][1]
        print(f"    seeding the mirror, in the background: {began:.1f} .. {done:.1f} s ({done - began:.1f} s)")
    if profile:
        for task, (first, last) in sorted(windows.items(), key=lambda kv: kv[1][0]):
            print(f"    {first:5.1f} .. {last:5.1f} s  {task}")
        print(f"    {took:5.1f} s  playbook done")
    if prof:
        prof.report(took)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--mb", type=int, default=200, help="image size in MB")
    ap.add_argument("--link-mbps", type=float, default=80.0, help="the office link, megabits per second")
    ap.add_argument("--without-mirror", action="store_true", help="also time N hosts all pulling over the slow link")
    ap.add_argument("--scale", default="", help="also time the mirror run on the first K hosts, e.g. 1,2,4")
    ap.add_argument("--profile", action="store_true", help="task timeline, CPU per process kind, disk writes")
    ap.add_argument(
        "--proxy-mirror", action="store_true", help="the mirror is a pull-through cache of the image's registry"
    )
    args = ap.parse_args()
    logs.configure("console")  # info and up: the per-event hook's debug lines are not the bench's output

    origin = start_daemon()  # its registry is the image's own registry
    extra: list[DockerDaemon] = []
    mirror_proc = None
    link = None
    work = Path(tempfile.mkdtemp(prefix="sa-bench-prov-", dir="/tmp"))
    try:
        for i in range(args.hosts - 1):
            root = Path(tempfile.mkdtemp(prefix=f"sa-d{i}-", dir="/tmp"))
            d = DockerDaemon(root=root, host=f"unix://{root / 'docker.sock'}", env={})
            d.env = sdocker.docker_env_for(d.host)
            d.pids["dockerd"] = start_dockerd(root).pid
            extra.append(d)
        daemons = [origin, *extra]
        host, port = origin.registry.split(":")
        link = SlowLink((host, int(port)), args.link_mbps * 1e6 / 8)
        pinned = fat_image(origin, origin.registry, args.mb, work / "img")
        image = f"127.0.0.1:{link.port}/{pinned.split('/', 1)[1]}"  # the same digest, reached over the slow link
        digest = sdocker.parse_ref(image)[1]
        print(f"image {args.mb} MB, office link {args.link_mbps:g} Mbit/s, {args.hosts} hosts (one dockerd each)")
        driver = subprocess.run(["docker", "info", "--format", "{{.Driver}}"], env=origin.env, capture_output=True,
                                text=True).stdout.strip()  # fmt: skip
        print(f"storage driver {driver}; unpigz on PATH: {bool(shutil.which('unpigz'))}")
        print(f"load average before: {os.getloadavg()[0]:.2f}")

        forget(daemons, digest)
        one = provision(daemons[:1], image, "", work, args.profile, 0)
        print(f"1 host, image over the office link:         {one:6.1f} s")

        counts = [int(k) for k in args.scale.split(",") if k] + [args.hosts]
        for run_no, count in enumerate(counts):
            forget(daemons, digest)
            if mirror_proc:
                stop_pid(mirror_proc.pid)
            (work / f"mirror{run_no}").mkdir()
            mirror_proc, mirror = (
                start_proxy_registry(work / f"mirror{run_no}", f"http://127.0.0.1:{link.port}")
                if args.proxy_mirror
                else start_registry(work / f"mirror{run_no}")
            )
            many = provision(daemons[:count], image, mirror, work, args.profile, mirror_proc.pid)
            kind = "a pull-through mirror" if args.proxy_mirror else "one seeds the fleet's mirror"
            print(f"{count} hosts, {kind}:   {many:6.1f} s   ({many / one:.2f}x one host)")

        if args.without_mirror:
            forget(daemons, digest)
            direct = provision(daemons, image, "", work)
            print(f"{args.hosts} hosts, each over the office link:    {direct:6.1f} s   ({direct / one:.2f}x one host)")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if link:
            link.close()
        if mirror_proc:
            stop_pid(mirror_proc.pid)
        for d in extra:
            stop_daemon(d)
        stop_daemon(origin)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
