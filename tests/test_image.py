"""The simulator image's rootfs: what goes in, what stays out, and that it runs on its own (chroot, no docker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile

import pytest

from agent.errors import UserError
from agent.sim import image

pytestmark = pytest.mark.integration

CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
pytest_plugins = ["tests.fixtures_docker"]  # dockerd: one per session

PRUNED = ("/test/", "/idlelib/", "/tkinter/", "/ensurepip/", "/__pycache__/", "/config-3")


@pytest.fixture(scope="module")
def plan():
    return image.rootfs_plan()


@pytest.fixture(scope="module")
def rootfs_tar(tmp_path_factory):
    path = tmp_path_factory.mktemp("image") / "rootfs.tar"
    image.write_rootfs_tar(str(path))
    return path


@pytest.fixture(scope="module")
def rootfs(rootfs_tar, tmp_path_factory):
    """The rootfs unpacked, to chroot into."""
    root = tmp_path_factory.mktemp("rootfs")
    with tarfile.open(rootfs_tar) as tar:
        tar.extractall(root, filter="fully_trusted")
    return root


def _in_chroot(root, argv):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": image.SITE}  # what the image's ENV sets
    return subprocess.run([CHROOT, str(root), *argv], env=env, capture_output=True, text=True)


def test_the_rootfs_holds_busybox_python_its_libraries_and_the_agent(plan):
    exe = os.path.realpath(image.PYTHON)
    assert plan["/bin/busybox"] == image.BUSYBOX and plan[exe] == exe
    assert any(dest.endswith("/libc.so.6") for dest in plan)
    assert any(dest.startswith("/lib64/ld-linux") for dest in plan)  # the ELF interpreter itself
    assert any(dest.endswith("/python3.11/json/__init__.py") for dest in plan)
    for part in ("sim/__main__.py", "sim/calibration.toml", "hostside/docker.py", "errors.py"):
        assert f"{image.SITE}/agent/{part}" in plan


def test_the_rootfs_leaves_out_tests_guis_caches_and_the_controller(plan):
    assert not [dest for dest in plan if any(part in dest for part in PRUNED)]
    assert not [dest for dest in plan if "/agent/commands/" in dest or dest.endswith("/agent/cli.py")]
    assert all(os.path.isfile(src) for src in plan.values())


def test_the_tar_has_links_a_tmp_and_root_ownership(rootfs_tar):
    with tarfile.open(rootfs_tar) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["usr/bin/python3"].issym()
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}


def test_the_rootfs_runs_python_and_the_agent_without_the_host(rootfs):
    code = "import ssl, sqlite3, json, tomllib, agent.sim.options, agent.hostside.docker; print('imports ok')"
    proc = _in_chroot(rootfs, ["python3", "-c", code])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imports ok"
    assert "python3" in _in_chroot(rootfs, ["sh", "-c", "ls /usr/bin"]).stdout.split()


def test_the_simulator_starts_without_compiling_anything(rootfs):
    before = set(rootfs.rglob("*.pyc"))
    assert rootfs / "opt/spark-agent/agent/sim/__pycache__/main.cpython-311.pyc" in before
    code = "import agent.sim.main, agent.hostside.docker; print('ok')"
    assert _in_chroot(rootfs, ["python3", "-c", code]).stdout.strip() == "ok"
    assert set(rootfs.rglob("*.pyc")) == before  # everything it imported came with bytecode


@pytest.mark.parametrize("argv", [["--help"], ["vllm", "serve", "--help"]])
def test_the_entrypoint_takes_bare_serve_arguments_or_a_vllm_command(rootfs, argv):
    proc = _in_chroot(rootfs, [image.ENTRYPOINT, *argv])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Simulated vLLM")


def test_a_missing_busybox_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="busybox-static"):
        image.rootfs_plan(busybox=str(tmp_path / "busybox"))


@pytest.mark.docker
def test_build_from_the_command_line_into_a_given_daemon(dockerd, capsys):
    from agent.hostside import docker as sdocker

    tag = f"{dockerd.registry}/vllm-sim:cli"
    assert image.main(["--tag", tag, "--docker-host", dockerd.host]) == 0
    image_id = capsys.readouterr().out.strip()
    assert image_id.startswith("sha256:") and sdocker.image_present(image_id, dockerd.env)
    entrypoint = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Entrypoint}}", tag],
        env=dockerd.env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert entrypoint == json.dumps([image.ENTRYPOINT])
