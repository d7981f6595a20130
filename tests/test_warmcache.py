"""agent.hostside.warmcache: one folder per image digest, the variables a server gets, and removal that touches
only well-formed cache folders. collect.kept_levels: what tune's full step keeps."""

import os
from pathlib import Path

import pytest

from agent.hostside import warmcache

pytestmark = pytest.mark.unit

IMAGE = "nvcr.io/nvidia/vllm@sha256:" + "3c0a6e4b9f1d2c8e" + "ab" * 24


def test_one_folder_per_digest_and_none_without_one(tmp_path: Path):
    assert warmcache.key(IMAGE) == "3c0a6e4b9f1d2c8e"
    assert warmcache.key("nvcr.io/nvidia/vllm:25.11-py3") == "" and warmcache.folder(str(tmp_path), "x:1") is None
    path = warmcache.prepare(str(tmp_path), IMAGE)
    assert path == tmp_path / "cache" / "3c0a6e4b9f1d2c8e"
    assert sorted(p.name for p in path.iterdir()) == ["flashinfer", "torchinductor", "triton", "vllm"]
    assert (path.stat().st_mode & 0o777) == 0o700


def test_process_gets_host_paths_container_gets_the_mount(tmp_path: Path):
    path = warmcache.prepare(str(tmp_path), IMAGE)
    env = warmcache.environment(path, "process")
    assert env["VLLM_CACHE_ROOT"] == f"{path}/vllm" and env["TRITON_CACHE_DIR"] == f"{path}/triton"
    docker = warmcache.environment(path, "docker")
    assert set(docker) == set(warmcache.VARIABLES)
    assert all(v.startswith(warmcache.CONTAINER_ROOT + "/") for v in docker.values())


def test_list_and_remove_only_well_formed_keys(tmp_path: Path):
    path = warmcache.prepare(str(tmp_path), IMAGE)
    (path / "vllm" / "graph.bin").write_bytes(b"x" * 100)
    outside = tmp_path / "precious"
    outside.mkdir()
    os.symlink(outside, tmp_path / "cache" / "aaaaaaaaaaaaaaaa")  # a link with a key's name: never followed
    (tmp_path / "cache" / "not-a-key").mkdir()
    assert warmcache.list_caches(str(tmp_path)) == [{"key": "3c0a6e4b9f1d2c8e", "bytes": 100, "files": 1}]
    assert warmcache.remove(str(tmp_path), ["3c0a6e4b9f1d2c8e"], dry_run=True) == ["3c0a6e4b9f1d2c8e"]
    assert path.exists()
    assert warmcache.remove(str(tmp_path), ["aaaaaaaaaaaaaaaa", "../precious", "3c0a6e4b9f1d2c8e"]) == [
        "3c0a6e4b9f1d2c8e"
    ]
    assert not path.exists() and outside.exists() and (tmp_path / "cache" / "not-a-key").exists()


def test_a_work_dir_under_home_gives_absolute_cache_paths(monkeypatch, tmp_path):
    """Servers get these paths in their env, where nothing expands ~: an unexpanded one made a literal "~" folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    path = warmcache.prepare("~/.spark-agent", "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32)
    assert path is not None and path.is_absolute() and str(path).startswith(str(tmp_path))
    assert all(v.startswith(str(tmp_path)) for v in warmcache.environment(path, "process").values())
    assert [c["key"] for c in warmcache.list_caches("~/.spark-agent")] == ["ab" * 8]


def test_a_container_sees_the_warm_cache_the_model_cache_and_a_checkpoint_folder(tmp_path: Path):
    from agent.hostside import docker, serving

    cache = tmp_path / "warm"
    models = tmp_path / "models" / "nv-fp4"
    models.mkdir(parents=True)
    mounts = serving.volumes(cache, str(tmp_path / "hf"), str(models))
    assert mounts == [
        f"{cache}:{warmcache.CONTAINER_ROOT}",
        f"{tmp_path / 'hf'}:{serving.HF_CACHE_IN_CONTAINER}",
        f"{models}:{models}:ro",
    ]
    assert (tmp_path / "hf").is_dir(), "made by us, not by docker as root"
    assert serving.volumes(None, "", "nvidia/Llama-3-70B-FP4") == [], "a hub id is no folder"
    assert serving.volumes(None, "", str(tmp_path / "absent")) == []
    line = docker.launch_line("r/x@sha256:" + "a" * 64, "c", ["serve", str(models)], {}, "cell", volumes=mounts)
    assert line.count("--volume") == 3 and f"{models}:{models}:ro" in line
