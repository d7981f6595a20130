"""The one serve command line: matrix.serve_argv builds it, serving.launch_command renders it, the report reuses both."""

from __future__ import annotations

import pytest

from agent.hostside.serving import launch_command
from agent.planning.matrix import launch_argv, serve_argv
from agent.reporting.markdown import serve_command

pytestmark = pytest.mark.unit

CONFIG = {
    "model": "/models/uns fast",
    "gpu_memory_utilization": 0.85,
    "max_model_len": 262144,
    "max_num_seqs": 16,
    "moe_backend": "marlin",
    "linear_backend": "",
    "attention_backend": "flashinfer",
    "speculative": '{"method":"mtp","num_speculative_tokens":2}',
    "extra_args": ["--enforce-eager"],
}


def test_serve_argv_passes_only_what_is_set():
    assert serve_argv(CONFIG) == [
        "vllm", "serve", "/models/uns fast",
        "--gpu-memory-utilization", "0.85", "--max-model-len", "262144", "--max-num-seqs", "16",
        "--moe-backend", "marlin", "--attention-backend", "flashinfer",
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
        "--enforce-eager",
    ]  # fmt: skip


def test_launch_argv_is_serve_argv_with_the_hosts_engine_bind_and_port():
    host_vars = {"spark_serve_cmd": ["/usr/bin/python3", "-m", "agent.sim", "serve"], "spark_port": 8123}
    argv = launch_argv(CONFIG, host_vars)
    assert argv == serve_argv(CONFIG, host_vars["spark_serve_cmd"]) + ["--host", "127.0.0.1", "--port", "8123"]


def test_a_config_from_an_older_cell_file_still_gives_a_command():
    assert serve_argv({"model": "m", "max_num_seqs": 8}) == ["vllm", "serve", "m", "--max-num-seqs", "8"]


def test_the_report_shows_the_measured_argv_else_rebuilds_it_the_same_way():
    env = {"B": "two words", "A": "1"}
    measured = {"env": env, "launch": {"argv": ["vllm", "serve", "x", "--port", "9"]}, "config": CONFIG}
    assert serve_command(measured) == "A=1 B='two words' vllm serve x --port 9"
    rebuilt = {"env": env, "config": CONFIG}
    assert serve_command(rebuilt) == launch_command("process", serve_argv(CONFIG), env)
    assert serve_command(rebuilt).startswith("A=1 B='two words' vllm serve '/models/uns fast' --gpu-memory")


def test_docker_cells_render_the_docker_run_line():
    line = launch_command("docker", ["vllm", "serve", "m"], {"A": "1"}, "img@sha256:" + "ab" * 32, "c1", "0123")
    assert line.startswith("docker run --detach") and "--env A=1" in line and line.endswith("vllm serve m")
