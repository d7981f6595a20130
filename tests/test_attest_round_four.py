"""attest and host facts, round four (issue 49): --expect beside the log's own request, exit 3 said in the help,
a note where auto's choice depends on the build, and the build origin an image's inspect JSON gives."""

from __future__ import annotations

import json

import pytest

from agent.cli import main
from agent.hostside import facts

pytestmark = pytest.mark.unit

AUTO_MARLIN = (
    "(EngineCore pid=1) INFO 11-29 18:31:10 [nvfp4_moe.py:180] Using 'MARLIN' NvFp4 MoE backend out of potential "
    "backends: ['FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN']\n"
)
ASKED_MARLIN = "(APIServer pid=1) INFO 11-29 18:30:55 [utils.py:1] non-default args: {'moe_backend': 'marlin'}\n"


def test_expect_keeps_the_logs_request_in_its_column(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(ASKED_MARLIN + AUTO_MARLIN)
    assert main(["attest", str(log), "--expect", "moe=flashinfer_b12x", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["asked_in_log"]["moe_backend"] == "marlin" and out["expected"] == {"moe_backend": "flashinfer_b12x"}
    main(["attest", str(log), "--expect", "moe=flashinfer_b12x"])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ moe"))
    assert "marlin" in row and "flashinfer_b12x" in row and "MARLIN" in row


def test_exit_3_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["attest", "--help"])
    assert "3  failed" in capsys.readouterr().out


def test_an_auto_choice_that_depends_on_the_build_is_said(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(AUTO_MARLIN)
    main(["attest", str(log), "--json"])
    notes = json.loads(capsys.readouterr().out)["build_notes"]
    assert len(notes) == 1 and "depends on how vLLM was built" in notes[0] and "vllm#50925" in notes[0]
    log.write_text(ASKED_MARLIN + AUTO_MARLIN)  # asked for: no choice of vLLM's to explain
    main(["attest", str(log), "--json"])
    assert json.loads(capsys.readouterr().out)["build_notes"] == []


@pytest.mark.parametrize(
    ("targets", "sm121"),
    [("7.5 8.0 8.9 9.0 10.0 12.0+PTX", "no"), ("12.0 12.1a", "yes"), ("9.0;10.0f;12.0f", "yes"), ("", "unknown")],
)
def test_build_origin_of_an_image(targets, sm121):
    env = ["PATH=/usr/bin", "VLLM_VERSION=0.24.0"] + ([f"TORCH_CUDA_ARCH_LIST={targets}"] if targets else [])
    inspect = [
        {
            "RepoTags": ["vllm/vllm-openai:v0.24.0"],
            "RepoDigests": ["vllm/vllm-openai@sha256:" + "a" * 64],
            "Config": {"Env": env, "Labels": None},
        }
    ]
    origin = facts.build_origin(inspect, "vllm/vllm-openai:v0.24.0")
    assert origin["source"] == "image" and origin["vllm_version"] == "0.24.0" and origin["sm121"] == sm121
    assert "sha256:" in origin["ref"]
    base = {"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}
    assert facts.fingerprint(base) == facts.fingerprint({**base, "build": {}})  # no build: the old fingerprint
    assert facts.fingerprint({**base, "build": origin}) != facts.fingerprint(base)
    assert facts.build_origin("not json of docker")["source"] == ""


def test_a_hosts_build_facts_are_checked_like_the_rest():
    from agent.running import hostdata

    good = {
        "source": "image",
        "ref": "vllm/vllm-openai:v0.24.0",
        "vllm_version": "0.24.0",
        "cuda_targets": ["12.0+PTX"],
        "sm121": "no",
    }
    assert hostdata.build(good, "h") == good
    for bad in ({**good, "sm121": "maybe"}, {**good, "cuda_targets": ["12.0; rm -rf /"]}, {**good, "source": "x"}):
        with pytest.raises(hostdata.BadHostData):
            hostdata.build(bad, "h")


@pytest.mark.parametrize(
    ("direct_url", "how"), [(None, "from a package index"), ({"url": "file:///src/vllm", "dir_info": {}}, "built here")]
)
def test_build_origin_of_an_installed_wheel(tmp_path, monkeypatch, direct_url, how):
    """A real interpreter reading a real (tiny) installed distribution: its version, and whether pip built it here."""
    import sys

    dist = tmp_path / "vllm-0.24.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.24.0\n")
    if direct_url is not None:
        (dist / "direct_url.json").write_text(json.dumps(direct_url))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    origin, notes = facts.wheel_build(sys.executable)
    assert notes == [] and origin["source"] == "wheel" and origin["vllm_version"] == "0.24.0"
    assert how in origin["ref"] and origin["sm121"] == "unknown"
