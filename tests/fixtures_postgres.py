"""A real PostgreSQL for the store's tests: Debian's package, a cluster initialised in a temp folder as a non-root
user (initdb refuses root), listening on 127.0.0.1 at a free port (no Unix socket outside its folder), password
authentication, stopped by its PID at the end of the session whatever the tests did."""

from __future__ import annotations

import contextlib
import getpass
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER, PASSWORD, DATABASE = "spark", "s3cret-Pg-pass", "spark"


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    bin: Path

    def url(self, database: str = DATABASE, user: str = USER, password: str = PASSWORD) -> str:
        return f"postgresql+psycopg://{user}:{password}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh, empty database; its URL."""
        env = {**os.environ, "PGPASSWORD": PASSWORD}
        subprocess.run(
            [str(self.bin / "createdb"), "-h", self.host, "-p", str(self.port), "-U", USER, name],
            env=env,
            check=True,
            capture_output=True,
            timeout=30,
        )
        return self.url(name)


def _bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    if _bin() is None:
        pytest.skip("Debian's postgresql is not installed (scripts/setup.sh installs it)")
    with running_postgres() as pg:
        yield pg


@contextlib.contextmanager
def running_postgres() -> Iterator[Postgres]:
    """A fresh server for the time of the with-block (the fixture, and bench/bench_store.py)."""
    bindir = _bin()
    if bindir is None:
        raise RuntimeError("Debian's postgresql is not installed (scripts/setup.sh installs it)")
    user = "postgres" if os.geteuid() == 0 else getpass.getuser()
    folder = Path(tempfile.mkdtemp(prefix="spark-pg-"))
    try:
        shutil.chown(folder, user)
        pwfile = folder / "pw"
        pwfile.write_text(PASSWORD + "\n")
        shutil.chown(pwfile, user)
        data = folder / "data"
        run_as = {"user": user} if os.geteuid() == 0 else {}
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}", "--auth=scram-sha-256"],
            check=True,
            capture_output=True,
            timeout=120,
            **run_as,
        )
        port = _free_port()
        server = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "server.log", "wb"),  # noqa: SIM115 (closed with the folder)
            **run_as,
        )
        try:
            pg = Postgres("127.0.0.1", port, bindir)
            _wait_ready(pg, server, folder)
            pg.create_database(DATABASE)
            yield pg
        finally:
            server.send_signal(signal.SIGINT)  # fast shutdown: roll back, close, exit
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(pg: Postgres, server: subprocess.Popen, folder: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("postgres exited: " + (folder / "server.log").read_text()[-2000:])
        ready = subprocess.run(
            [str(pg.bin / "pg_isready"), "-h", pg.host, "-p", str(pg.port)], capture_output=True, timeout=10
        )
        if ready.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError("postgres did not become ready in 60 s")
