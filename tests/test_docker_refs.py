"""Image references and the docker CLI's absence: no daemon needed."""

from __future__ import annotations

import pytest

from agent.hostside import docker as sdocker

pytestmark = pytest.mark.unit

HEX = "0123456789abcdef" * 4


def test_pinned_ref_splits_into_name_and_digest():
    assert sdocker.parse_ref(f"nvcr.io/nvidia/vllm@sha256:{HEX}") == ("nvcr.io/nvidia/vllm", f"sha256:{HEX}")
    assert sdocker.parse_ref(f"127.0.0.1:5000/vllm-sim@sha256:{HEX}") == ("127.0.0.1:5000/vllm-sim", f"sha256:{HEX}")


@pytest.mark.parametrize(
    "ref, words",
    [
        ("nvcr.io/nvidia/vllm:25.09-py3", "not pinned by digest"),
        ("nvcr.io/nvidia/vllm", "not pinned by digest"),
        (f"nvcr.io/nvidia/vllm:25.09-py3@sha256:{HEX}", f"keep only the digest: nvcr.io/nvidia/vllm@sha256:{HEX}"),
        ("nvcr.io/nvidia/vllm@sha256:abc", "not sha256:<64 lower-case hex>"),
        (f"nvcr.io/nvidia/vllm@sha256:{HEX.upper()}", "not sha256:<64 lower-case hex>"),
        (f"nvcr.io/nvidia/vllm@md5:{HEX}", "not sha256:<64 lower-case hex>"),
        (f"NVIDIA/VLLM@sha256:{HEX}", "not a valid image name"),
        ("two words", "not a valid image reference"),
    ],
)
def test_anything_but_a_digest_is_refused_with_a_reason(ref, words):
    with pytest.raises(ValueError) as info:
        sdocker.parse_ref(ref)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_env_file_refuses_values_it_cannot_carry():
    assert sdocker._env_file_text({"A": "1", "CUTE_DSL_ARCH": "sm_121a"}) == "A=1\nCUTE_DSL_ARCH=sm_121a\n"
    with pytest.raises(ValueError, match="BAD"):
        sdocker._env_file_text({"BAD": "two\nlines"})
    with pytest.raises(ValueError, match="not-a-name"):
        sdocker._env_file_text({"not-a-name": "1"})


def test_a_host_without_docker_gets_a_clear_message(tmp_path):
    no_docker = {"PATH": str(tmp_path)}
    with pytest.raises(sdocker.DockerError, match="docker: command not found on this host"):
        sdocker.pull(f"nvcr.io/nvidia/vllm@sha256:{HEX}", no_docker)
    with pytest.raises(sdocker.DockerError, match="command not found"):
        sdocker.logs("any", no_docker)
    assert sdocker.image_present(f"x@sha256:{HEX}", no_docker) is False


def test_the_launch_line_spells_out_what_run_server_runs():
    line = sdocker.launch_line(f"x@sha256:{HEX}", "cell-1", ["vllm", "serve", "m"], {"A": "1 2"}, "abc")
    assert line == (
        "docker run --detach --name cell-1 --label spark-agent=1 --label spark-agent.cell=abc --network host "
        "--ipc host --gpus all --env 'A=1 2' "
        f"x@sha256:{HEX} vllm serve m"
    )
