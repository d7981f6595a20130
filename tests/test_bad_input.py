"""Malformed input of every kind, through the real CLI entry point (agent.cli.main, in-process): exit 2, exactly
one line on stderr that names the file and line, the flag or the host, no secret echoed, nothing written and
no host touched. Ansible's own warnings must not come before that line (stderr is captured at the fd level).

A damaged results tree is the other table: report/compare/export name the bad file and go on, or exit 2;
never a traceback. Add a case to a table, not a test."""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import structlog
import tomli_w
import yaml

from agent.cli import main
from agent.running import playbooks

from .test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

SECRET = "hf_SeCrEt0123456789abcdef"
DIGEST = "nvcr.io/nvidia/vllm@sha256:" + "0f" * 32
GOOD_SPEC = f"""\
[sweep]
name = "bad-input"
description = "a good spec that each case breaks in one place"

[image]
ref = "{DIGEST}"
vllm_version = "0.24.0"

[[checkpoints]]
name = "uns-fast"
model = "unsloth/Qwen3.6-35B-A3B-NVFP4-fast"
quant = "nvfp4"

[server]
gpu_memory_utilization = 0.85
max_model_len = 8192
max_num_seqs = 16
speculative = "off"
extra_args = ["--enforce-eager"]

[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
attention_backend = ["auto"]
concurrency = [1, 4]
duration_s = 4
warmup = 1
repeats = 3

[load]
prompt_len = 512
output_len = 128
profile = "uniform"
seed = 0

[env]
VLLM_LOGGING_LEVEL = "INFO"
"""
GOOD_HOST = {
    "ansible_host": "127.0.0.99",
    "ansible_port": 22,
    "ansible_user": "nvidia",
    "spark_runtime": "process",
    "spark_workdir": "~/.spark-agent",
    "spark_port": 8000,
    "spark_bind_host": "127.0.0.1",
    "spark_serve_cmd": ["vllm", "serve"],
    "spark_serve_env": {"HF_HOME": "/data/hf"},
}


def sweep(*extra: str) -> list[str]:
    return ["sweep", "spec.toml", "-i", "inv.yml", "--no-progress", *extra]


class Touched(BaseException):
    """A host was about to be touched. BaseException: the CLI's `except Exception` must not swallow it."""


@dataclass
class World:
    root: Path
    spec: Path
    inv: Path
    argv: list[str] = field(default_factory=list)

    def sweep(self, *extra: str) -> list[str]:
        return sweep(*extra)

    def host_vars(self, **changes: object) -> None:
        self.hosts({"spark-1": {**GOOD_HOST, **changes}})

    def hosts(self, hosts: dict) -> None:
        self.inv.write_text(yaml.safe_dump({"all": {"children": {"sparks": {"hosts": hosts}}}}))


@dataclass
class Case:
    id: str
    setup: Callable[[World], list[str]]  # breaks one thing, returns argv
    names: str = ""  # the stderr line must contain this; "" = spec.toml:<the line the case changed>:


def spec_case(id: str, old: str, new: str, names: str = "") -> Case:
    def setup(w: World) -> list[str]:
        assert old in GOOD_SPEC, old
        w.spec.write_text(GOOD_SPEC.replace(old, new, 1))
        return w.sweep()

    return Case(id, setup, names)


def host_case(id: str, names: str = "host spark-1", **changes: object) -> Case:
    def setup(w: World) -> list[str]:
        w.host_vars(**changes)
        return w.sweep()

    return Case(id, setup, names)


def argv_case(id: str, names: str, *argv: str, prepare: Callable[[World], None] | None = None) -> Case:
    def setup(w: World) -> list[str]:
        if prepare:
            prepare(w)
        return [a.replace("GOOD_RESULTS", str(w.root / "good-results")) for a in argv]

    return Case(id, setup, names)


def file_case(id: str, target: str, content: bytes | None, names: str, argv: list[str] | None = None) -> Case:
    """Replace the spec or inventory with raw bytes (None: a folder in its place)."""

    def setup(w: World) -> list[str]:
        path = w.root / target
        path.unlink(missing_ok=True)
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        return argv or w.sweep()

    return Case(id, setup, names)


def _deep_toml(depth: int) -> str:
    return GOOD_SPEC.replace('extra_args = ["--enforce-eager"]', "extra_args = " + "[" * depth + "]" * depth)


SPEC_CASES = [
    # non-finite and absurd numbers
    spec_case("duration-inf", "duration_s = 4", "duration_s = inf"),
    spec_case("duration-nan", "duration_s = 4", "duration_s = nan"),
    spec_case("duration-minus-inf", "duration_s = 4", "duration_s = -inf"),
    spec_case("duration-zero", "duration_s = 4", "duration_s = 0"),
    spec_case("duration-negative", "duration_s = 4", "duration_s = -1"),
    spec_case("duration-absurd", "duration_s = 4", "duration_s = 1e12"),
    spec_case("duration-string", "duration_s = 4", 'duration_s = "four"'),
    spec_case("concurrency-2-63", "concurrency = [1, 4]", "concurrency = [9223372036854775807]"),
    spec_case("concurrency-zero", "concurrency = [1, 4]", "concurrency = [0, 4]"),
    spec_case("concurrency-negative", "concurrency = [1, 4]", "concurrency = [-1]"),
    spec_case("concurrency-float", "concurrency = [1, 4]", "concurrency = [1.5]"),
    spec_case("concurrency-string", "concurrency = [1, 4]", 'concurrency = ["4"]'),
    spec_case("concurrency-bool", "concurrency = [1, 4]", "concurrency = [true]"),
    spec_case("concurrency-empty", "concurrency = [1, 4]", "concurrency = []"),
    spec_case("concurrency-twice", "concurrency = [1, 4]", "concurrency = [4, 4]"),
    spec_case("concurrency-not-list", "concurrency = [1, 4]", "concurrency = 4"),
    spec_case("concurrency-too-many", "concurrency = [1, 4]", f"concurrency = {list(range(1, 66))}"),
    spec_case("concurrency-over-max-num-seqs", "max_num_seqs = 16", "max_num_seqs = 2", names="@concurrency ="),
    spec_case("gpu-util-nan", "gpu_memory_utilization = 0.85", "gpu_memory_utilization = nan"),
    spec_case("gpu-util-inf", "gpu_memory_utilization = 0.85", "gpu_memory_utilization = inf"),
    spec_case("gpu-util-zero", "gpu_memory_utilization = 0.85", "gpu_memory_utilization = 0"),
    spec_case("gpu-util-over-one", "gpu_memory_utilization = 0.85", "gpu_memory_utilization = 1.5"),
    spec_case("max-model-len-zero", "max_model_len = 8192", "max_model_len = 0"),
    spec_case("max-model-len-2-63", "max_model_len = 8192", "max_model_len = 9223372036854775807"),
    spec_case("max-num-seqs-zero", "max_num_seqs = 16", "max_num_seqs = 0"),
    spec_case("max-num-seqs-2-63", "max_num_seqs = 16", "max_num_seqs = 9223372036854775807"),
    spec_case("warmup-negative", "warmup = 1", "warmup = -1"),
    spec_case("warmup-absurd", "warmup = 1", "warmup = 1000000000"),
    spec_case("repeats-zero", "repeats = 3", "repeats = 0"),
    spec_case("repeats-absurd", "repeats = 3", "repeats = 1000000000"),
    spec_case("prompt-len-zero", "prompt_len = 512", "prompt_len = 0"),
    spec_case("prompt-len-absurd", "prompt_len = 512", "prompt_len = 1099511627776"),
    spec_case("output-len-negative", "output_len = 128", "output_len = -5"),
    spec_case("request-longer-than-model", "prompt_len = 512", "prompt_len = 8100"),
    spec_case("seed-negative", "seed = 0", "seed = -1"),
    spec_case("profile-unknown", 'profile = "uniform"', 'profile = "zipf"'),
    # names and models
    spec_case("sweep-name-empty", 'name = "bad-input"', 'name = ""'),
    spec_case("sweep-name-huge", 'name = "bad-input"', f'name = "{"n" * 300}"'),
    spec_case("sweep-name-traversal", 'name = "bad-input"', 'name = "../x"'),
    spec_case("sweep-name-slash", 'name = "bad-input"', 'name = "a/b"'),
    spec_case("sweep-name-newline", 'name = "bad-input"', 'name = "a\\nb"'),
    spec_case("description-huge", 'description = "a good', f'description = "{"d" * 5000}'),
    spec_case("description-nul", 'description = "a good', 'description = "\\u0000 a good'),
    spec_case("image-tag", f'ref = "{DIGEST}"', 'ref = "nvcr.io/nvidia/vllm:25.11-py3"'),
    spec_case("image-empty", f'ref = "{DIGEST}"', 'ref = ""'),
    spec_case("image-huge", f'ref = "{DIGEST}"', f'ref = "{DIGEST}{"a" * 5000}"'),
    spec_case("image-newline", f'ref = "{DIGEST}"', f'ref = "{DIGEST}\\nx"'),
    spec_case("vllm-version-path", 'vllm_version = "0.24.0"', 'vllm_version = "../../etc"'),
    spec_case("checkpoint-name-empty", 'name = "uns-fast"', 'name = ""'),
    spec_case("checkpoint-name-space", 'name = "uns-fast"', 'name = "uns fast"'),
    spec_case("checkpoint-name-huge", 'name = "uns-fast"', f'name = "{"c" * 200}"'),
    spec_case("model-empty", 'model = "unsloth/', 'model = "" #'),
    spec_case("model-blank", 'model = "unsloth/', 'model = "   " #'),
    spec_case("model-a-flag", 'model = "unsloth/', 'model = "--trust-remote-code" #'),
    spec_case("model-huge", 'model = "unsloth/', f'model = "{"m" * 5000}" #'),
    spec_case("model-newline", 'model = "unsloth/', 'model = "a\\nb" #'),
    spec_case("model-nul", 'model = "unsloth/', 'model = "a\\u0000b" #'),
    spec_case("quant-unknown", 'quant = "nvfp4"', 'quant = "int4"'),
    spec_case(
        "checkpoint-twice",
        'quant = "nvfp4"\n',
        'quant = "nvfp4"\n\n[[checkpoints]]\nname = "uns-fast"\nmodel = "m"\nquant = "fp8"\n',
        names="spec.toml:15:",  # the second name
    ),
    spec_case("checkpoints-a-table", "[[checkpoints]]", "[checkpoints]"),
    spec_case(
        "checkpoints-too-many",
        '[[checkpoints]]\nname = "uns-fast"',
        "".join(f'[[checkpoints]]\nname = "c{i}"\nmodel = "m"\nquant = "fp8"\n' for i in range(65))
        + '[[checkpoints]]\nname = "uns-fast"',
        names="spec.toml:9:",  # the first [[checkpoints]]
    ),
    # backends
    spec_case("backend-upper-case", 'moe_backend = ["marlin", "flashinfer_b12x"]', 'moe_backend = ["MARLIN"]'),
    spec_case("backend-huge", 'moe_backend = ["marlin", "flashinfer_b12x"]', f'moe_backend = ["{"b" * 100}"]'),
    spec_case("backend-empty-list", 'moe_backend = ["marlin", "flashinfer_b12x"]', "moe_backend = []"),
    spec_case("backend-number", 'moe_backend = ["marlin", "flashinfer_b12x"]', "moe_backend = [1]"),
    spec_case(
        "backend-too-many",
        'moe_backend = ["marlin", "flashinfer_b12x"]',
        "moe_backend = [" + ", ".join(f'"b{i}"' for i in range(65)) + "]",
    ),
    spec_case("backend-space", 'attention_backend = ["auto"]', 'attention_backend = ["flash attn"]'),
    spec_case(
        "backend-unknown-to-vllm",
        'moe_backend = ["marlin", "flashinfer_b12x"]',
        'moe_backend = ["marlin", "flashinfer_b13x"]',
        names="did you mean flashinfer_b12x?",
    ),
    # speculative and extra args
    spec_case("speculative-bad-json", 'speculative = "off"', "speculative = '{not json'"),
    spec_case("speculative-not-object", 'speculative = "off"', "speculative = '[1]'"),
    spec_case("speculative-deep-json", 'speculative = "off"', "speculative = '" + "[" * 100_000 + "'"),
    spec_case("speculative-nan-json", 'speculative = "off"', """speculative = '{"method":"mtp","x":NaN}'"""),
    spec_case("speculative-nan-table", 'speculative = "off"', 'speculative = {method = "mtp", x = nan}'),
    spec_case("extra-args-string", 'extra_args = ["--enforce-eager"]', 'extra_args = "--enforce-eager"'),
    spec_case("extra-args-managed-port", 'extra_args = ["--enforce-eager"]', 'extra_args = ["--port", "1"]'),
    spec_case("extra-args-managed-host", 'extra_args = ["--enforce-eager"]', 'extra_args = ["--host=0.0.0.0"]'),
    spec_case("extra-args-newline", 'extra_args = ["--enforce-eager"]', 'extra_args = ["a\\nb"]'),
    spec_case("extra-args-table", 'extra_args = ["--enforce-eager"]', "extra_args = [{a = 1}]"),
    spec_case("extra-args-bool", 'extra_args = ["--enforce-eager"]', "extra_args = [true]"),
    # [matrix] axes beyond the backends (issue 15): unknown, empty, a bad value, exclusions that leave no cell
    spec_case(
        "axis-unknown",
        'attention_backend = ["auto"]',
        'attention_backend = ["auto"]\nmax_num_seq = [8]',
        names="@max_num_seq = [8]",
    ),
    spec_case(
        "axis-empty",
        'attention_backend = ["auto"]',
        'attention_backend = ["auto"]\nkv_cache_dtype = []',
        names="@kv_cache_dtype",
    ),
    spec_case(
        "axis-also-in-server",
        'attention_backend = ["auto"]',
        'attention_backend = ["auto"]\nmax_num_seqs = [8, 16]',
        names="@max_num_seqs = [8",
    ),
    spec_case(
        "axis-bad-value",
        'attention_backend = ["auto"]',
        'attention_backend = ["auto"]\nenable_prefix_caching = ["no"]',
        names="@enable_prefix",
    ),
    spec_case(
        "axis-image-tag",
        'attention_backend = ["auto"]',
        'attention_backend = ["auto"]\nimage = ["nvcr.io/nvidia/vllm:25.11-py3"]',
        names="@image = [",
    ),
    spec_case(
        "axis-env-empty", 'attention_backend = ["auto"]', 'attention_backend = ["auto"]\nenv = {}', names="@env = {}"
    ),
    spec_case(
        "axis-env-secret-newline",
        'attention_backend = ["auto"]',
        f'attention_backend = ["auto"]\nenv = {{ t = {{ HF_TOKEN = "{SECRET}\\n" }} }}',
        names="@env = {",
    ),
    spec_case(
        "exclude-every-cell",
        "repeats = 3",
        'repeats = 3\n[[matrix.exclude]]\ncheckpoint = "uns-fast"',
        names="@[[matrix.exclude]]",
    ),
    spec_case(
        "exclude-unknown-axis",
        "repeats = 3",
        'repeats = 3\n[[matrix.exclude]]\nmoe = "marlin"',
        names='@moe = "marlin"',
    ),
    spec_case(
        "exclude-unknown-value",
        "repeats = 3",
        'repeats = 3\n[[matrix.exclude]]\nmoe_backend = "triton"',
        names='@moe_backend = "triton"',
    ),
    spec_case("include-empty", "repeats = 3", "repeats = 3\n[[matrix.include]]", names="@[[matrix.include]]"),
    # env
    spec_case("env-key-space", 'VLLM_LOGGING_LEVEL = "INFO"', '"BAD KEY" = "x"'),
    spec_case("env-key-digit", 'VLLM_LOGGING_LEVEL = "INFO"', '"1ABC" = "x"'),
    spec_case("env-key-dash", 'VLLM_LOGGING_LEVEL = "INFO"', '"A-B" = "x"'),
    spec_case("env-key-empty", 'VLLM_LOGGING_LEVEL = "INFO"', '"" = "x"'),
    spec_case("env-key-equals", 'VLLM_LOGGING_LEVEL = "INFO"', '"A=B" = "x"'),
    spec_case("env-key-newline", 'VLLM_LOGGING_LEVEL = "INFO"', '"A\\nB" = "x"', names="@[env]"),
    spec_case("env-value-newline-secret", 'VLLM_LOGGING_LEVEL = "INFO"', f'HF_TOKEN = "{SECRET}\\nx"'),
    spec_case("env-value-nul-secret", 'VLLM_LOGGING_LEVEL = "INFO"', f'HF_TOKEN = "{SECRET}\\u0000"'),
    spec_case("env-value-cr-secret", 'VLLM_LOGGING_LEVEL = "INFO"', f'HF_TOKEN = "{SECRET}\\r"'),
    spec_case("env-value-list", 'VLLM_LOGGING_LEVEL = "INFO"', 'VLLM_LOGGING_LEVEL = ["INFO"]'),
    spec_case("env-value-bool", 'VLLM_LOGGING_LEVEL = "INFO"', "VLLM_LOGGING_LEVEL = true"),
    spec_case("env-value-nan", 'VLLM_LOGGING_LEVEL = "INFO"', "VLLM_LOGGING_LEVEL = nan"),
    spec_case("env-value-huge-secret", 'VLLM_LOGGING_LEVEL = "INFO"', f'HF_TOKEN = "{SECRET}{"x" * 40_000}"'),
    spec_case("env-not-a-table", '[env]\nVLLM_LOGGING_LEVEL = "INFO"', 'env = "x"', names="spec.toml"),
    # structure and files
    spec_case("unknown-table", "[load]", "[loads]"),
    spec_case("unknown-key", "max_num_seqs = 16", "max_num_seqs = 16\nmax_num_seq = 8", names="@max_num_seq = 8"),
    spec_case(
        "sweep-not-a-table",
        '[sweep]\nname = "bad-input"\ndescription = "a good spec that each case breaks in one place"',
        'sweep = "x"',
        names="spec.toml:1:",
    ),
    spec_case("sweep-array-of-tables", "[sweep]", "[[sweep]]"),
    spec_case("matrix-missing", "[matrix]", "[nomatrix]"),
    spec_case("not-toml", "[load]", "[load"),
    Case("toml-nested-arrays", lambda w: (w.spec.write_text(_deep_toml(5000)), w.sweep())[1], "spec.toml"),
    Case(
        "toml-nested-tables",
        lambda w: (w.spec.write_text(GOOD_SPEC + "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n"), w.sweep())[1],
        "spec.toml",
    ),
    file_case(
        "spec-not-utf8",
        "spec.toml",
        GOOD_SPEC.encode() + b"# \xff\xfe\n",
        f"spec.toml:{len(GOOD_SPEC.splitlines()) + 1}:",
    ),
    file_case("spec-binary", "spec.toml", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "spec.toml:1:"),
    file_case("spec-folder", "spec.toml", None, "spec.toml: is a folder"),
    file_case("spec-huge", "spec.toml", GOOD_SPEC.encode() + b"#" * (2 << 20), "spec.toml: larger than"),
    file_case("spec-empty", "spec.toml", b"", "spec.toml:1:"),
    Case("spec-missing", lambda w: (w.spec.unlink(), w.sweep())[1], "spec.toml: cannot read"),
]

INVENTORY_CASES = [
    Case("host-name-shell", lambda w: (w.hosts({"bad host;x": GOOD_HOST}), w.sweep())[1], "host bad host;x:"),
    Case("host-name-traversal", lambda w: (w.hosts({"../x": GOOD_HOST}), w.sweep())[1], "host ../x"),
    Case("host-name-option", lambda w: (w.hosts({"-oProxyCommand=x": GOOD_HOST}), w.sweep())[1], "-oProxyCommand"),
    Case("host-name-unicode", lambda w: (w.hosts({"spärk": GOOD_HOST}), w.sweep())[1], "host spärk:"),
    Case("host-name-huge", lambda w: (w.hosts({"h" * 200: GOOD_HOST}), w.sweep())[1], "h" * 80),
    host_case("ansible-port-zero", ansible_port=0),
    host_case("host-var-typo", names="did you mean spark_runtime?", spark_runtme="process"),
    host_case("ansible-port-too-big", ansible_port=70000),
    host_case("ansible-port-negative", ansible_port=-1),
    host_case("ansible-port-shell", ansible_port="22; rm -rf /"),
    host_case("ansible-port-bool", ansible_port=True),
    host_case("ansible-port-float", ansible_port=22.5),
    host_case("spark-port-zero", spark_port=0),
    host_case("spark-port-too-big", spark_port=65536),
    host_case("ansible-host-shell", ansible_host="1.2.3.4; rm -rf /"),
    host_case("ansible-host-ssh-option", ansible_host="-oProxyCommand=touch x"),
    host_case("ansible-host-empty", ansible_host=""),
    host_case("ansible-host-space", ansible_host="a b"),
    host_case("ansible-host-newline", ansible_host="host\nname"),
    host_case("ansible-host-list", ansible_host=["1.2.3.4"]),
    host_case("ansible-user-option", ansible_user="-oX"),
    host_case("bind-host-shell", spark_bind_host="0.0.0.0 && x"),
    host_case("serve-cmd-string", spark_serve_cmd="vllm serve"),
    host_case("serve-cmd-dict-item", spark_serve_cmd=["vllm", {"a": 1}]),
    host_case("serve-cmd-newline", spark_serve_cmd=["vllm\nserve"]),
    host_case("workdir-semicolon", spark_workdir="~/x; rm -rf /"),
    host_case("workdir-subshell", spark_workdir="$(id)"),
    host_case("workdir-backtick", spark_workdir="`id`"),
    host_case("workdir-space", spark_workdir="/a b"),
    host_case("workdir-option", spark_workdir="-rf"),
    host_case("workdir-empty", spark_workdir=""),
    host_case("model-cache-pipe", spark_model_cache="/data|x"),
    host_case("runtime-unknown", spark_runtime="podman"),
    host_case("host-scope-unknown", spark_host_scope="global"),
    host_case("evict-string", spark_evict="yes"),
    host_case("ray-port-in-node-range", spark_ray_port=46450),
    host_case("ray-port-base-over-head", spark_ray_port_base=6300),
    host_case("ray-port-base-too-high", spark_ray_port_base=65500),
    host_case("ray-port-shell", spark_ray_port="6379; id"),
    host_case("ray-container-user-root", spark_ray_container_user="0:0"),
    host_case("ray-container-user-name", spark_ray_container_user="nvidia"),
    host_case("ray-container-user-shell", spark_ray_container_user="1000:1000; id"),
    host_case("health-timeout-nan", spark_health_timeout=float("nan")),
    host_case("health-timeout-negative", spark_health_timeout=-5),
    host_case("serve-env-list", spark_serve_env=["A=1"]),
    host_case("serve-env-bad-key", spark_serve_env={"BAD KEY": "x"}),
    host_case("serve-env-newline-secret", spark_serve_env={"HF_TOKEN": SECRET + "\nx"}),
    host_case("environment-bad-key", spark_environment={"1X": "y"}),
    file_case("inventory-not-utf8", "inv.yml", b"all:\n  hosts:\n    spark-1: {ansible_host: \xff}\n", "inv.yml:3:"),
    file_case("inventory-binary", "inv.yml", b"\x00\x01\x02binary", "inv.yml:1:"),
    file_case("inventory-deep-yaml", "inv.yml", b"all: " + b"[" * 5000 + b"]" * 5000 + b"\n", "inv.yml"),
    file_case("inventory-bad-yaml", "inv.yml", b"all:\n  hosts: [\n", "inv.yml:"),
    file_case("inventory-no-hosts", "inv.yml", b"all: {}\n", "inv.yml: the inventory has no hosts"),
    file_case("inventory-huge", "inv.yml", b"#" * (17 << 20), "inv.yml: larger than"),
    Case("inventory-missing", lambda w: (w.inv.unlink(), w.sweep())[1], "inv.yml: inventory not found"),
    Case(
        "group-vars-binary",
        lambda w: (
            ((w.root / "group_vars").mkdir(), (w.root / "group_vars" / "all.yml").write_bytes(b"\0\xff")) and w.sweep()
        ),
        "group_vars/all.yml:1:",
    ),
]


def _file(w: World, name: str) -> None:
    (w.root / name).write_text("not a folder")


def _folder(w: World, name: str) -> None:
    (w.root / name).mkdir()


FLAG_CASES = [
    argv_case("limit-no-match", "--limit nope", *sweep("--limit", "nope")),
    argv_case("limit-empty", "--limit ''", *sweep("--limit", "")),
    argv_case("limit-commas", "--limit ','", *sweep("--limit", ",")),
    argv_case("limit-bad-regex", "--limit ~(", *sweep("--limit", "~(")),
    argv_case(
        "results-a-file",
        "--results",
        *sweep("--results", "afile"),
        prepare=lambda w: _file(w, "afile"),
    ),
    argv_case("results-empty", "--results", *sweep("--results", "")),
    argv_case(
        "results-under-a-file",
        "--results",
        *sweep("--results", "afile/sub"),
        prepare=lambda w: _file(w, "afile"),
    ),
    argv_case("duration-nan", "--duration", *sweep("--duration", "nan")),
    argv_case("duration-inf", "--duration", *sweep("--duration", "inf")),
    argv_case("duration-negative", "--duration", *sweep("--duration=-1")),
    argv_case("duration-zero", "--duration", *sweep("--duration", "0")),
    argv_case("duration-absurd", "--duration", *sweep("--duration", "1e9")),
    argv_case("duration-word", "--duration", *sweep("--duration", "abc")),
    argv_case("unknown-flag", "--bogus", *sweep("--bogus")),
    argv_case("sweep-no-spec", "spec", "sweep"),
    argv_case("no-command", "command", "--debug"),
    argv_case("check-limit-no-match", "--limit nope", "check", "-i", "inv.yml", "--limit", "nope"),
    argv_case("env-host-no-match", "--host nope", "env", "spec.toml", "-i", "inv.yml", "--host", "nope"),
    argv_case("attest-missing", "nolog.txt", "attest", "nolog.txt"),
    argv_case("attest-folder", "alog: is a folder", "attest", "alog", prepare=lambda w: _folder(w, "alog")),
    argv_case(
        "attest-binary",
        "abin: no vLLM log line",
        "attest",
        "abin",
        prepare=lambda w: (w.root / "abin").write_bytes(bytes(range(256)) * 100),
    ),
    argv_case("attest-expect-bad", "--expect", "attest", "spec.toml", "--expect", "moe"),
    argv_case("attest-expect-env-bad", "--expect-env", "attest", "spec.toml", "--expect-env", "A=B"),
    argv_case("report-missing", "results_dir", "report", "nothere"),
    argv_case("report-a-file", "results_dir", "report", "afile", prepare=lambda w: _file(w, "afile")),
    argv_case("report-empty-folder", "no finished cell", "report", "empty", prepare=lambda w: _folder(w, "empty")),
    argv_case("report-threshold-nan", "--threshold", "report", "GOOD_RESULTS", "--threshold", "nan"),
    argv_case("report-threshold-negative", "--threshold", "report", "GOOD_RESULTS", "--threshold=-1"),
    argv_case(
        "report-out-a-file", "--out", "report", "GOOD_RESULTS", "-o", "afile", prepare=lambda w: _file(w, "afile")
    ),
    argv_case("compare-missing", "results_a", "compare", "nothere", "GOOD_RESULTS"),
    argv_case("compare-threshold-inf", "--threshold", "compare", "GOOD_RESULTS", "GOOD_RESULTS", "--threshold", "inf"),
    argv_case(
        "compare-markdown-a-folder",
        "--markdown",
        "compare",
        "GOOD_RESULTS",
        "GOOD_RESULTS",
        "--markdown",
        "adir",
        prepare=lambda w: _folder(w, "adir"),
    ),
    argv_case("export-missing", "results_dir", "export", "nothere"),
    argv_case(
        "export-output-a-folder",
        "--output",
        "export",
        "GOOD_RESULTS",
        "-o",
        "adir",
        prepare=lambda w: _folder(w, "adir"),
    ),
    argv_case("export-format-unknown", "--format", "export", "GOOD_RESULTS", "-f", "xml"),
    argv_case("inspect-missing", "nockpt: no such checkpoint", "inspect", "nockpt"),
    argv_case(
        "inspect-empty-folder", "empty: no *.safetensors", "inspect", "empty", prepare=lambda w: _folder(w, "empty")
    ),
    argv_case("inspect-bandwidth-nan", "--bandwidth-gbs", "inspect", "x", "--bandwidth-gbs", "nan"),
    argv_case("inspect-bandwidth-zero", "--bandwidth-gbs", "inspect", "x", "--bandwidth-gbs", "0"),
    argv_case("inspect-tok-s-negative", "--tok-s", "inspect", "x", "--tok-s=-1"),
    argv_case(
        "pin-host-not-in-inventory",
        "--host nope",
        "pin",
        "nvcr.io/nvidia/vllm:25.11-py3",
        "-i",
        "inv.yml",
        "--host",
        "nope",
    ),
    argv_case("pin-bad-tag", "IMAGE:TAG", "pin", "not a tag; rm", "-i", "inv.yml", "--host", "spark-1"),
    argv_case(
        "pin-write-binary-spec",
        "abin.toml:1:",
        "pin",
        "nvcr.io/nvidia/vllm:25.11-py3",
        "-i",
        "inv.yml",
        "--host",
        "spark-1",
        "--write",
        "abin.toml",
        prepare=lambda w: (w.root / "abin.toml").write_bytes(b"\0\0"),
    ),
]


def load_case(id: str, lines: str, names: str, files: dict[str, bytes] | None = None) -> Case:
    """[load] gains `lines` (open loop, datasets, SLOs); `files` are written beside the spec first."""

    def setup(w: World) -> list[str]:
        for name, data in (files or {}).items():
            (w.root / name).write_bytes(data)
        w.spec.write_text(GOOD_SPEC.replace("seed = 0\n", "seed = 0\n" + lines + "\n", 1))
        return w.sweep()

    return Case(id, setup, names)


SHAREGPT_OK = b'[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]'
LOAD_CASES = [
    load_case("rate-zero", "request_rate = 0", "@request_rate ="),
    load_case("rate-negative", "request_rate = -2.5", "@request_rate ="),
    load_case("rate-absurd", "request_rate = 1e9", "@request_rate ="),
    load_case("burstiness-zero", "request_rate = 4\nburstiness = 0", "@burstiness ="),
    load_case("slo-seconds", 'goodput = ["ttft:0.5s"]', "@goodput ="),
    load_case("slo-unit-suffix", 'goodput = ["tpot:50ms"]', "@goodput ="),
    load_case("slo-unknown-metric", 'goodput = ["itl:50"]', "@goodput ="),
    load_case("slo-zero", 'goodput = ["e2el:0"]', "@goodput ="),
    load_case("dataset-missing", 'dataset = "sharegpt"\ndataset_path = "nope.json"', "@dataset_path ="),
    load_case(
        "dataset-not-json", 'dataset = "sharegpt"\ndataset_path = "d.json"', "@dataset_path =", {"d.json": b"[{"}
    ),
    load_case(
        "dataset-not-sharegpt",
        'dataset = "sharegpt"\ndataset_path = "d.json"',
        "@dataset_path =",
        {"d.json": b'[{"text": "no conversations"}]'},
    ),
    load_case("dataset-no-path", 'dataset = "sharegpt"', "@dataset ="),
    load_case("dataset-unknown", 'dataset = "alpaca"', "@dataset ="),
    load_case("context-depth-over-max-model-len", "context_depth = 131072", "@context_depth ="),
    load_case("prefix-longer-than-prompt", 'dataset = "prefix"\nprefix_len = 600', "@prefix_len ="),
    # the load axes inside a cell: each value of a list checked as the scalar is
    load_case("rate-list-empty", "request_rate = []", "@request_rate ="),
    load_case("rate-list-with-zero", "request_rate = [2, 0]", "@request_rate ="),
    load_case("rate-list-twice", "request_rate = [2, 2.0]", "@request_rate ="),
    load_case("rate-list-text", 'request_rate = [2, "4"]', "@request_rate ="),
    load_case("depth-list-empty", "context_depth = []", "@context_depth ="),
    load_case("depth-list-over-max-model-len", "context_depth = [1024, 131072]", "@context_depth ="),
]

ALL_CASES = [
    replace(case, id=f"{table}:{case.id}")
    for table, cases in (
        ("spec", SPEC_CASES),
        ("inventory", INVENTORY_CASES),
        ("flag", FLAG_CASES),
        ("load", LOAD_CASES),
    )
    for case in cases
]


def test_the_table_is_big_and_its_ids_unique():
    ids = [c.id for c in ALL_CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 100


@pytest.fixture
def world(tmp_path, monkeypatch):
    root = tmp_path / "w"
    root.mkdir()
    w = World(root, root / "spec.toml", root / "inv.yml")
    w.spec.write_text(GOOD_SPEC)
    w.host_vars()
    write_cell(root / "good-results", backend="marlin", values={1: [60.0, 61.0]})
    monkeypatch.chdir(root)

    def touch(*args, **kwargs):
        raise Touched(f"a host was touched: {args!r}")

    monkeypatch.setattr(playbooks, "run_playbook", touch)
    monkeypatch.setattr(socket, "create_connection", touch)
    yield w
    structlog.reset_defaults()  # main() pointed structlog at this test's captured stderr


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def test_good_world_passes_validation_and_reaches_the_hosts(world):
    """The control: without the one break, the same command gets as far as touching a host."""
    with pytest.raises(Touched):
        main(world.sweep())


def test_good_load_settings_reach_the_hosts(world):
    """The control of LOAD_CASES: open loop, a good ShareGPT file, SLOs and a depth that fits pass validation."""
    load_case(
        "good",
        'request_rate = 4\nburstiness = 0.5\ndataset = "sharegpt"\ndataset_path = "d.json"\n'
        'goodput = ["ttft:500", "tpot:50"]\ncontext_depth = 4096',
        "",
        {"d.json": SHAREGPT_OK},
    ).setup(world)
    with pytest.raises(Touched):
        main(world.sweep())


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_bad_input_is_one_line_exit_2_nothing_touched(world, case, capfd):
    argv = case.setup(world)
    names = case.names or f"spec.toml:{_changed_line(world.spec.read_text())}:"
    if names.startswith("@"):  # the line that holds this text
        names = f"spec.toml:{_line_of(world.spec.read_text(), names[1:])}:"
    before = _snapshot(world.root)
    capfd.readouterr()
    code = main(argv)
    out, err = capfd.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("spark-agent: error: "), err
    assert names in lines[0]
    assert SECRET not in err and SECRET not in out
    assert _snapshot(world.root) == before


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _changed_line(text: str) -> int:
    good = GOOD_SPEC.splitlines()
    return next((n for n, (a, b) in enumerate(zip(good, text.splitlines(), strict=False), 1) if a != b), len(good) + 1)


# ---------------------------------------------------------------- a damaged results tree


def _damage(kind: str) -> Callable[[Path], Path]:
    """Returns a function that damages one cell of a tree and gives the path of the damaged file."""

    def cell_toml(folder: Path) -> Path:
        return folder / "cell.toml"

    def run_toml(folder: Path) -> Path:
        return folder / "c001-r1.toml"

    def apply(folder: Path) -> Path:
        target = run_toml(folder) if kind.startswith("run-") else cell_toml(folder)
        text = target.read_text()
        if kind.endswith("truncated"):
            target.write_text(text[: len(text) // 2] + '\n[x\n"')
        elif kind.endswith("binary"):
            target.write_bytes(b"\x00\xff\xfe" * 100)
        elif kind.endswith("empty"):
            target.write_text("")
        elif kind.endswith("folder"):
            target.unlink()
            target.mkdir()
            (target / "x").write_text("")
        elif kind.endswith("deep"):
            target.write_text(text + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
        elif kind in EDITS:
            data = tomllib.loads(text)
            EDITS[kind](data)
            target.write_text(tomli_w.dumps(data))
        else:
            raise AssertionError(kind)
        assert target.is_dir() or target.read_bytes() != text.encode(), kind  # the damage took
        return target

    return apply


def _drop(key: str) -> Callable[[dict], None]:
    return lambda data: data.pop(key)


def _set(key: str, value: object, inner: str = "") -> Callable[[dict], None]:
    return lambda data: (data[inner] if inner else data).__setitem__(key, value)


EDITS: dict[str, Callable[[dict], None]] = {  # wrong types and missing keys, written as valid TOML
    "cell-config-string": _set("config", "x"),
    "cell-concurrency-strings": _set("concurrency", ["x"], inner="config"),
    "cell-model-number": _set("model", 7, inner="config"),
    "cell-no-config": _drop("config"),
    "cell-no-cell-id": _drop("cell_id"),
    "cell-verdict-table": _set("verdict", {"a": 1}),
    "cell-facts-list": _set("facts", [1]),
    "cell-elapsed-inf": _set("elapsed_s", float("inf")),
    "run-throughput-string": _set("output_throughput", "fast"),
    "run-throughput-nan": _set("output_throughput", float("nan")),
    "run-concurrency-string": _set("concurrency", "one"),
    "run-no-concurrency": _drop("concurrency"),
    "run-ok-string": _set("ok", "yes"),
    "run-errors-table": _set("errors", {"a": 1}),
}

DAMAGES = [
    "cell-truncated",
    "cell-binary",
    "cell-empty",
    "cell-folder",
    "cell-deep",
    "run-truncated",
    "run-binary",
    "run-folder",
    *EDITS,
]
COMMANDS = {
    "report": lambda a, b, out: ["report", str(a), "-o", str(out)],
    "compare": lambda a, b, out: ["compare", str(b), str(a), "--markdown", str(out / "cmp.md")],
    "export": lambda a, b, out: ["export", str(a), "-o", str(out / "rows.csv")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_results_tree_names_the_file_and_goes_on(tmp_path, capfd, damage, command):
    tree, baseline, out = tmp_path / "tree", tmp_path / "baseline", tmp_path / "out"
    out.mkdir()
    bad = write_cell(tree, backend="marlin", values={1: [60.0, 61.0]})
    write_cell(tree, backend="triton", values={1: [50.0, 51.0]})
    write_cell(baseline, backend="marlin", values={1: [58.0, 59.0]})
    write_cell(baseline, backend="triton", values={1: [50.0, 52.0]})
    damaged = _damage(damage)(bad)
    capfd.readouterr()
    try:
        code = main(COMMANDS[command](tree, baseline, out))
    finally:
        structlog.reset_defaults()
    _out, err = capfd.readouterr()
    assert code == 0, err  # the other cell still makes a report
    assert "Traceback" not in err and "internal error" not in err
    warnings = [line for line in err.splitlines() if "warning" in line and str(damaged) in line]
    assert len(warnings) == 1, err
    wanted = {"report": {"report.html", "report.md"}, "compare": {"cmp.md"}, "export": {"rows.csv"}}[command]
    assert wanted <= {p.name for p in out.iterdir()}  # and the report was written all the same


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_tree_of_only_damaged_cells_is_exit_2_naming_the_folder(tmp_path, capfd, command):
    tree, out = tmp_path / "tree", tmp_path / "out"
    out.mkdir()
    _damage("cell-binary")(write_cell(tree, backend="marlin", values={1: [60.0]}))
    capfd.readouterr()
    try:
        code = main(COMMANDS[command](tree, tree, out))
    finally:
        structlog.reset_defaults()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    if command == "export":  # an empty export is a header and nothing else: fine, and said
        assert code == 0 and "cell.toml" in err
    else:
        assert code == 2 and "no finished cell" in err.splitlines()[-1]
