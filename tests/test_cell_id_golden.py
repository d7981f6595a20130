"""The cell id is the resume key: if it changes, every user's finished cells are measured again.

GOLDEN_ID was computed from the code before the typed-contract rewrite; it must never change silently.
"""

from pathlib import Path

import pytest

from agent.hostside import facts
from agent.planning import matrix
from agent.planning.matrix import CellConfig
from agent.planning.spec import load_spec

pytestmark = pytest.mark.unit

GOLDEN_ID = "a4979e5cc5c3"
GOLDEN_CONFIG = {
    "image": "nvcr.io/nvidia/vllm@sha256:0f9c2b1e4d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e",
    "runtime": "docker",
    "checkpoint": "uns-fast",
    "model": "unsloth/Qwen3.6-35B-A3B-NVFP4-fast",
    "quant": "nvfp4",
    "moe_backend": "marlin",
    "linear_backend": "",
    "attention_backend": "",
    "speculative": '{"method":"mtp","moe_backend":"triton","num_speculative_tokens":2}',
    "gpu_memory_utilization": 0.85,
    "max_model_len": 262144,
    "max_num_seqs": 16,
    "extra_args": ["--enable-prefix-caching"],
    "prompt_len": 1024,
    "output_len": 256,
    "profile": "mixed",
    "seed": 7,
    "concurrency": [1, 4, 16],
    "duration_s": 30.0,
    "warmup": 1,
    "repeats": 3,
}
GOLDEN_ENV = {"VLLM_DISABLE_LOG_LOGO": "1", "CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1"}

SPEC = """[sweep]
name = "golden"

[image]
ref = "nvcr.io/nvidia/vllm@sha256:0f9c2b1e4d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e"
vllm_version = "0.24.0"

[[checkpoints]]
name = "uns-fast"
model = "unsloth/Qwen3.6-35B-A3B-NVFP4-fast"
quant = "nvfp4"

[server]
gpu_memory_utilization = 0.85
max_model_len = 262144
max_num_seqs = 16
speculative = '{"method": "mtp", "num_speculative_tokens": 2}'
extra_args = ["--enable-prefix-caching"]

[matrix]
moe_backend = ["auto", "marlin"]
attention_backend = ["auto", "flashinfer"]
concurrency = [1, 4, 16]
duration_s = 30
warmup = 1
repeats = 3

[load]
prompt_len = 1024
output_len = 256
profile = "mixed"
seed = 7
"""


def test_cell_id_of_a_known_config_is_pinned():
    config = CellConfig.from_dict(GOLDEN_CONFIG)
    assert matrix.cell_id(config, GOLDEN_ENV) == GOLDEN_ID
    # the table it hashes is exactly the recorded one: same keys in the same order, same values and types
    table = config.to_dict()
    assert list(table) == list(GOLDEN_CONFIG) and table == GOLDEN_CONFIG
    assert [type(v) for v in table.values()] == [type(v) for v in GOLDEN_CONFIG.values()]


def test_a_spec_plans_exactly_the_known_config(tmp_path: Path):
    path = tmp_path / "golden.toml"
    path.write_text(SPEC)
    gb10 = facts.classify_gpu({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}, facts.load_gpu_rules())
    cells = matrix.plan_cells(load_spec(path), "spark-1", gb10, {"spark_runtime": "docker"})
    cell = next(c for c in cells if c.config.moe_backend == "marlin" and not c.config.attention_backend)
    table = cell.config.to_dict()
    # same keys in the same order (the [config] table of cell.toml), same values and types
    assert list(table) == list(GOLDEN_CONFIG)
    assert table == GOLDEN_CONFIG
    assert [type(v) for v in table.values()] == [type(v) for v in GOLDEN_CONFIG.values()]
    assert cell.id == matrix.cell_id(CellConfig.from_dict(GOLDEN_CONFIG), cell.env)
    assert cell.argv[3:9] == ["--gpu-memory-utilization", "0.85", "--max-model-len", "262144", "--max-num-seqs", "16"]
