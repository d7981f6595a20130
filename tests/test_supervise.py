"""Host-side server control: what counts as a model server, the host lock, and never touching a foreign server."""

import os
import subprocess
import sys
import time

import pytest

from agent.hostside import supervise
from agent.running.identity import controller_identity

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["/usr/bin/python3", "-m", "agent.sim", "serve", "nv"], True),
        (["/venv/bin/vllm", "serve", "/models/x"], True),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], True),
        (["/venv/bin/spark-agent", "sim", "serve", "fp8"], True),
        (["VLLM::EngineCore"], True),
        (["/venv/bin/ansible-playbook", "-e", '{"argv": ["python3", "-m", "agent.sim", "serve"]}'], False),
        (["vim", "vllm serve notes.txt"], False),
        (["python3", "-m", "agent.sim", "image", "build"], False),
    ],
)
def test_is_engine_by_command_shape(argv, expected):
    assert supervise.is_engine(argv) is expected


def test_lock_refuses_a_second_controller_and_names_the_holder(tmp_path):
    holder = controller_identity("sweep-a", "cell1")
    fd = supervise.acquire_lock(str(tmp_path), holder)
    try:
        # a second controller is another process: flock is per open file, so try from a child process
        code = (
            "import sys; from agent.hostside import supervise as s\n"
            "try:\n    s.acquire_lock(sys.argv[1], {'user': 'other'})\nexcept s.HostBusy as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert out.returncode == 3
        assert f"{holder['user']}@{holder['controller_host']} pid {holder['controller_pid']}" in out.stdout
        assert "since " + holder["since"] in out.stdout and "cell1" in out.stdout
    finally:
        os.close(fd)
    supervise.acquire_lock(str(tmp_path), {"user": "next"})  # released with its holder


def test_a_foreign_server_is_left_alone_unless_evicted(tmp_path):
    """A simulator we did not start (no cell marker in its environment) blocks the host; --evict stops it.
    Scoped to this test's work dir, so no other server on the machine is ever touched by the test."""
    env = dict(
        os.environ,
        CUTE_DSL_ARCH="sm_121a",
        FLASHINFER_DISABLE_VERSION_CHECK="1",
        **{supervise.WORKDIR_ENV: str(tmp_path)},
    )
    foreign = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.sim",
            "serve",
            "uns-fast",
            "--moe-backend",
            "marlin",
            "--port",
            "18911",
            "--sim-startup-s",
            "0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bystander = subprocess.Popen(["sleep", "60"])  # same process group as the foreign server (ours)
    try:
        deadline = time.monotonic() + 20
        while not any(e["pid"] == foreign.pid for e in supervise.find_engines(str(tmp_path), "workdir")):
            assert time.monotonic() < deadline and foreign.poll() is None
            time.sleep(0.1)
        with pytest.raises(supervise.HostBusy, match=f"pid {foreign.pid}.*--evict"):
            supervise._clear_the_machine(str(tmp_path), "workdir", evict=False, docker_present=False)
        assert foreign.poll() is None, "a foreign server must never be stopped without --evict"
        supervise._clear_the_machine(str(tmp_path), "workdir", evict=True, docker_present=False)
        assert foreign.wait(timeout=30) is not None
        assert bystander.poll() is None, "eviction must not signal the process group the foreign server sits in"
    finally:
        for proc in (foreign, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
