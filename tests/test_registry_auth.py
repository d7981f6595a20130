"""Which registry an image name reaches, and the logins docker wrote (agent/hostside/registry.py), pure."""

from __future__ import annotations

import base64
import json

import pytest

from agent.hostside import registry

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "host", "path"),
    [
        ("nvcr.io/nvidia/vllm", "nvcr.io", "nvidia/vllm"),
        ("vllm/vllm-openai", "registry-1.docker.io", "vllm/vllm-openai"),
        ("ubuntu", "registry-1.docker.io", "library/ubuntu"),
        ("docker.io/library/ubuntu", "registry-1.docker.io", "library/ubuntu"),
        ("127.0.0.1:5000/vllm-sim", "127.0.0.1:5000", "vllm-sim"),
        ("localhost/x/y", "localhost", "x/y"),
    ],
)
def test_a_name_reaches_its_registry(name, host, path):
    repo = registry.Repo.of(name)
    assert (repo.registry, repo.path) == (host, path)


def test_plain_http_only_for_loopback_or_the_mirror():
    assert registry.Repo.of("127.0.0.1:5000/x").insecure_ok
    assert not registry.Repo.of("nvcr.io/nvidia/vllm").insecure_ok
    assert registry.Repo.of("nvcr.io/nvidia/vllm", insecure_ok=True).insecure_ok


def test_docker_logins_are_read_and_helpers_marked(tmp_path):
    auth = base64.b64encode(b"$oauthtoken:nvapi-secret").decode()
    config = {
        "auths": {"nvcr.io": {"auth": auth}, "https://index.docker.io/v1/": {"auth": auth}, "bad": {"auth": "%%"}},
        "credHelpers": {"gcr.io": "gcloud"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    creds = registry._credentials(str(tmp_path))
    assert creds["nvcr.io"] == auth and creds["https://index.docker.io/v1/"] == auth
    assert "bad" not in creds and creds["@helper:gcr.io"] == "1"


def test_a_config_that_is_not_json_is_no_login(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    assert registry._credentials(str(tmp_path)) == {}


def test_a_basic_challenge_without_a_login_says_how_to_log_in():
    with pytest.raises(registry.RegistryError, match=r"docker login nvcr\.io"):
        registry._answer(registry.Repo.of("nvcr.io/nvidia/vllm"), 'Basic realm="x"', {})


def test_a_bearer_challenge_to_a_helper_kept_login_asks_for_the_fallback():
    repo = registry.Repo.of("gcr.io/p/img")
    challenge = 'Bearer realm="https://gcr.io/v2/token",service="gcr.io",scope="repository:p/img:pull"'
    with pytest.raises(registry.NeedsCredentialHelper):
        registry._answer(repo, challenge, {"@helper:gcr.io": "1"})


def test_an_unknown_challenge_is_refused():
    with pytest.raises(registry.RegistryError, match="does not speak"):
        registry._answer(registry.Repo.of("nvcr.io/x"), 'Negotiate realm="file:///etc/passwd"', {})
