"""`spark-agent inspect --host`: the stdlib module runs on a real SSH test host; only the summary returns."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside.safetensors import inspect_checkpoint
from agent.judging.checkpoints import inspect

from .test_inspect_build import build_qwen

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


def test_remote_summary_equals_local(ssh_fleet):
    folder = build_qwen(str(ssh_fleet.host("spark-a").workdir / "ckpt-uns"), "uns")
    remote = inspect(folder, host="spark-a", inventory=str(ssh_fleet.inventory))
    assert remote == inspect_checkpoint(folder)
    assert remote["high_precision_expert_layers"][0]["text"] == "layers 2–3 experts FP8"


def test_remote_cli_compares_two_checkpoints_on_the_host(ssh_fleet):
    """The real command line, in its own process: --json stdout is the JSON document alone."""
    workdir = ssh_fleet.host("spark-b").workdir
    a, b = (build_qwen(str(workdir / v), v) for v in ("nv", "uns-fast"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "inspect",
            a,
            b,
            "--host",
            "spark-b",
            "-i",
            str(ssh_fleet.inventory),
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    comparison = json.loads(done.stdout)["comparison"]
    assert comparison["headline"] == "byte-twins: 120 vs 120 packed FP4 tensors, the same 14 high-precision weights"


def test_remote_bad_header_names_host_and_file(ssh_fleet):
    bad = ssh_fleet.host("spark-b").workdir / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(UserError) as err:
        inspect(str(bad), host="spark-b", inventory=str(ssh_fleet.inventory))
    assert err.value.message.startswith("spark-b: ") and str(bad) in err.value.message
    assert "impossible" in err.value.message


def test_remote_unknown_host_is_a_user_error(ssh_fleet):
    with pytest.raises(UserError, match=r"spark-z: .*is spark-z in"):
        inspect("/nowhere", host="spark-z", inventory=str(ssh_fleet.inventory))
