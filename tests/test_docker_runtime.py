"""The docker runtime against a real dockerd and registry: pull by digest, run the simulator, verify, clean up."""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
import urllib.request

import pytest

from agent.hostside import docker as sdocker
from agent.hostside import serving

pytest_plugins = ["tests.fixtures_docker"]  # dockerd, sim_image: one of each per session

pytestmark = [pytest.mark.integration, pytest.mark.docker]

ZERO_DIGEST = "sha256:" + "0" * 64


def _inspect(what: str, template: str, env: dict):
    out = subprocess.run(["docker", "inspect", "--format", template, what], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _wait_health(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"/health on 127.0.0.1:{port} never answered 200")


def _forget_local_copy(ref: str, env: dict) -> None:
    image_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", ref], env=env, capture_output=True, text=True
    ).stdout.strip()
    if image_id:
        subprocess.run(["docker", "image", "rm", "--force", image_id], env=env, check=True, capture_output=True)


def test_pull_by_digest_is_idempotent(dockerd, sim_image):
    _forget_local_copy(sim_image, dockerd.env)
    assert not sdocker.image_present(sim_image, dockerd.env)
    assert sdocker.pull(sim_image, dockerd.env, dry_run=True) is True
    assert not sdocker.image_present(sim_image, dockerd.env)  # a dry run pulls nothing
    assert sdocker.pull(sim_image, dockerd.env) is True
    assert sdocker.image_present(sim_image, dockerd.env)
    assert sdocker.pull(sim_image, dockerd.env) is False


def test_a_digest_missing_from_the_registry_fails_with_the_pull_error_verbatim(dockerd, sim_image):
    name, _ = sdocker.parse_ref(sim_image)
    missing = f"{name}@{ZERO_DIGEST}"
    direct = subprocess.run(["docker", "pull", "--quiet", missing], env=dockerd.env, capture_output=True, text=True)
    assert direct.returncode != 0
    with pytest.raises(sdocker.DockerError) as info:
        sdocker.pull(missing, dockerd.env)
    assert str(info.value) == direct.stderr.strip()
    assert "manifest unknown" in str(info.value)


def test_a_tag_resolves_to_the_pushed_digest(dockerd, sim_image):
    name, _ = sdocker.parse_ref(sim_image)
    assert sdocker.resolve_tag(f"{name}:test", dockerd.env) == sim_image
    with pytest.raises(sdocker.DockerError, match="not found"):
        sdocker.resolve_tag(f"{name}:no-such-tag", dockerd.env)


def test_the_simulator_runs_as_a_cell_container(dockerd, sim_image, tmp_path):
    env, port, name = dockerd.env, dockerd.free_port(), "spark-agent-cell-0123456789ab"
    sdocker.pull(sim_image, env)
    log_path = tmp_path / "server.log"
    gb10_env = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1", "SPARK_SIM_STARTUP_S": "0.2"}
    (tmp_path / "models" / "uns-fast").mkdir(parents=True)
    mounts = serving.volumes(None, str(tmp_path / "hf"), str(tmp_path / "models" / "uns-fast"))
    server = sdocker.run_server(
        sim_image,
        name,
        ["vllm", "serve", "uns-fast", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096"],
        env=gb10_env,
        label="0123456789ab",
        log_path=str(log_path),
        docker_env=env,
        volumes=mounts,
    )
    checked = False
    try:
        _wait_health(port)
        binds = _inspect(name, "{{json .HostConfig.Binds}}", env)  # docker's CLI keeps -v in a map: any order
        assert sorted(binds) == sorted(mounts), "the model cache (rw) and the checkpoint folder (ro, same path)"
        assert "CUTE_DSL_ARCH=sm_121a" in _inspect(name, "{{json .Config.Env}}", env)
        gpu_requests = _inspect(name, "{{json .HostConfig.DeviceRequests}}", env)
        assert gpu_requests[0]["Count"] == -1 and ["gpu"] in gpu_requests[0]["Capabilities"]  # --gpus all
        assert _inspect(name, "{{json .HostConfig.NetworkMode}}", env) == "host"
        assert _inspect(name, "{{json .HostConfig.IpcMode}}", env) == "host"

        sdocker.verify_running_digest(name, sim_image, env)
        assert sdocker.container_digest(name, env) == sdocker.parse_ref(sim_image)[1]
        other = sdocker.parse_ref(sim_image)[0] + "@" + ZERO_DIGEST
        with pytest.raises(sdocker.DigestMismatch) as info:
            sdocker.verify_running_digest(name, other, env)
        assert sdocker.parse_ref(sim_image)[1] in str(info.value) and ZERO_DIGEST in str(info.value)

        ours = sdocker.list_ours(docker_env=env)
        assert [(c["name"], c["cell"], c["state"]) for c in ours] == [(name, "0123456789ab", "running")]
        assert name in [c["name"] for c in sdocker.list_vllm_like(env)]
        assert "non-default args: {'model_tag': 'uns-fast'" in sdocker.logs(name, env)
        checked = True
    finally:
        assert sdocker.stop(name, timeout_s=5, docker_env=env) is True
        if not checked:  # a failed check leaves no container behind for the tests that share this dockerd
            sdocker.remove(name, env)
    server.log_follower.wait(timeout=10)  # `docker logs -f` ends with the container
    log = log_path.read_text()
    assert "Application startup complete." in log and "Using 'FLASHINFER_B12X' NvFp4 MoE backend" in log
    assert sdocker.state(name, env)["status"] == "exited"
    assert sdocker.remove(name, env) is True
    assert sdocker.remove(name, env) is False
    assert sdocker.state(name, env)["status"] == "missing"
    assert sdocker.list_ours(docker_env=env) == []


def test_one_model_check_sees_foreign_vllm_containers_only(dockerd, sim_image):
    env = dockerd.env
    sdocker.pull(sim_image, env)
    name, _ = sdocker.parse_ref(sim_image)
    other = name.replace("vllm-sim", "tools") + ":1"
    sdocker.tag(sim_image, other, env)
    started = []
    try:
        for container, image in (("foreign-vllm", sim_image), ("unrelated", other)):
            subprocess.run(
                [
                    "docker",
                    "run",
                    "--detach",
                    "--name",
                    container,
                    "--network",
                    "host",
                    "--entrypoint",
                    "/bin/sleep",
                    image,
                    "60",
                ],
                env=env,
                check=True,
                capture_output=True,
            )
            started.append(container)
        assert [c["name"] for c in sdocker.list_vllm_like(env)] == ["foreign-vllm"]
        assert sdocker.list_ours(docker_env=env) == []
    finally:
        for container in started:
            sdocker.remove(container, env)


def test_a_server_that_cannot_start_leaves_no_container_behind(dockerd, tmp_path):
    env = dockerd.env
    rootfs = tmp_path / "empty.tar"
    with tarfile.open(rootfs, "w") as tar:  # an image whose entrypoint does not exist: created, then fails to start
        tar.addfile(_dir("etc"))
    tag = f"{dockerd.registry}/broken-vllm:1"
    sdocker.import_image(str(rootfs), tag, ['ENTRYPOINT ["/no/such/server"]'], env)
    ref = sdocker.push(tag, env)
    with pytest.raises(sdocker.DockerError) as info:
        sdocker.run_server(ref, "cannot-start", ["vllm", "serve", "uns-fast"], {}, "c0ffee", docker_env=env)
    assert "/no/such/server" in str(info.value)
    assert sdocker.state("cannot-start", env)["status"] == "missing"


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info
