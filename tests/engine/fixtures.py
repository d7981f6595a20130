"""The real CPU build of vLLM as a test engine: its venv, tiny local models, a server on 127.0.0.1, and one real
sweep over SSH whose cells both engine modules read (`engine_sweep`).

tests/conftest.py loads these fixtures as a plugin (pytest_plugins), so test modules use them by name.

Everything is cached under ${SPARK_AGENT_CACHE:-/var/cache/spark-agent} so a reused machine skips the install.
Servers are stopped by the PID (and process group) of the process this module started, also when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPARK_AGENT_CACHE", "/var/cache/spark-agent"))
INSTALL_TIMEOUT_S = 900
STARTUP_TIMEOUT_S = 300  # 25-65 s alone on 2 cores; CI shares them

# Flags every test server gets (the recipe for the tiny models on CPU).
BASE_ARGS = ["--dtype", "bfloat16", "--max-model-len", "512", "--max-num-seqs", "8", "--enforce-eager"]
# No usage stats, no hub look-ups, no probing for a "host IP" (vLLM's get_ip): nothing leaves loopback.
BASE_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_LOOPBACK_IP": "127.0.0.1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_COLOR": "0",
}


class ServerFailed(RuntimeError):
    """The server exited (or never became healthy); .log holds its full log."""

    def __init__(self, message: str, log: str):
        tail = "\n".join(log.splitlines()[-40:])
        super().__init__(f"{message}; last lines of its log:\n{tail}")
        self.log = log


@dataclass
class VllmServer:
    """One running `vllm serve` on 127.0.0.1:port; its stdout+stderr go to log_path."""

    proc: subprocess.Popen
    port: int
    model: str
    log_path: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
            return resp.read().decode()

    def get_json(self, path: str) -> dict:
        return json.loads(self.get(path))


# --- setup ------------------------------------------------------------------------------------------------------------


def setup_vllm_cpu() -> Path:
    """Run setup_vllm.sh (a no-op when the cached venv is complete); returns the venv's python."""
    proc = subprocess.run(
        ["bash", str(HERE / "setup_vllm.sh")], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
    )
    if proc.returncode != 0:
        raise RuntimeError(f"setup_vllm.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]) / "bin" / "python"


def make_tiny_models(python: Path, root: Path | None = None) -> dict[str, str]:
    """Make (or reuse) the tiny models with the vLLM venv's transformers; returns {name: folder}."""
    root = root or CACHE / "tiny-models"
    proc = subprocess.run(
        [str(python), str(HERE / "make_models.py"), str(root)], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError(f"make_models.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vllm_cpu_python() -> Path:
    """Path to the python of the cached vllm-cpu 0.32.0 venv (installed on first use, about 90 s)."""
    return setup_vllm_cpu()


@pytest.fixture(scope="session")
def tiny_models(vllm_cpu_python) -> dict[str, str]:
    """{"tiny-llama": dir, "tiny-qwen3-moe": dir}: random-weight models made locally, cached."""
    return make_tiny_models(vllm_cpu_python)


# --- servers ----------------------------------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_argv(python: Path, model: str, port: int, extra_args: list[str] = ()) -> list[str]:
    """`vllm serve` from the venv (works thanks to the dist-info shim), bound to loopback."""
    vllm = str(Path(python).parent / "vllm")
    return [vllm, "serve", model, "--host", "127.0.0.1", "--port", str(port), *BASE_ARGS, *extra_args]


def start_server(
    python: Path, model: str, log_path: Path, extra_args: list[str] = (), env: dict[str, str] | None = None
) -> VllmServer:
    """Start a server in its own process group, logging to log_path; returns at once (see wait_healthy)."""
    port = free_port()
    argv = server_argv(python, model, port, list(extra_args))
    full_env = {**os.environ, **BASE_ENV, **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env, start_new_session=True
        )
    return VllmServer(proc=proc, port=port, model=model, log_path=log_path, argv=argv, env=env or {})


def wait_healthy(server: VllmServer, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Poll /health until 200; raise ServerFailed if the process exits or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise ServerFailed(f"vLLM exited with {server.proc.returncode} during startup", server.log_text())
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.5)
    raise ServerFailed(f"vLLM not healthy after {timeout_s:.0f} s", server.log_text())


def wait_exit(server: VllmServer, timeout_s: float = STARTUP_TIMEOUT_S) -> int:
    """For a server that is expected to fail at startup: wait for it to exit; returns the exit code."""
    try:
        return server.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_server(server)
        raise ServerFailed(f"vLLM still running after {timeout_s:.0f} s", server.log_text()) from None


def stop_server(server: VllmServer, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (its engine-core children too), SIGKILL after grace_s."""
    proc = server.proc
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    # Children may outlive the parent; the group id is the PID we started (start_new_session).
    _signal_group(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait(timeout=10)


def _signal_group(pgid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@contextmanager
def running_server(
    python: Path,
    model: str,
    log_path: Path,
    extra_args: list[str] = (),
    env: dict[str, str] | None = None,
    timeout_s: float = STARTUP_TIMEOUT_S,
):
    """Start a server, wait until healthy, yield it, and always stop it."""
    server = start_server(python, model, log_path, extra_args, env)
    try:
        wait_healthy(server, timeout_s)
        yield server
    finally:
        stop_server(server)


# --- one real sweep, shared -------------------------------------------------------------------------------------------

# The three servers the engine tier's sweep assertions need, in one sweep (one Ansible run, the cells in a row): the
# tiny MoE under marlin (dies at startup: a real traceback) and under auto, and the tiny Llama with ngram speculation.
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
SWEEP_SPEC = """
[sweep]
name = "engine"
[image]
ref = "localhost/vllm-cpu@sha256:{digest}"
vllm_version = "0.32.0"
[[checkpoints]]
name = "tiny-moe"
model = "{moe}"
quant = "bf16"
[[checkpoints]]
name = "tiny-llama"
model = "{llama}"
quant = "bf16"
[server]
max_model_len = 512
max_num_seqs = 8
extra_args = ["--dtype", "bfloat16", "--enforce-eager"]
[matrix]
moe_backend = ["marlin", "auto"]
speculative = ["off", '{ngram}']
concurrency = [1, 4]
duration_s = 3
warmup = 1
repeats = 1
[[matrix.include]]
checkpoint = "tiny-moe"
speculative = "off"
[[matrix.include]]
checkpoint = "tiny-llama"
moe_backend = "auto"
speculative = '{ngram}'
[load]
prompt_len = 32
output_len = 32
"""


@pytest.fixture(scope="session")
def engine_sweep(ssh_fleet, vllm_cpu_python, tiny_models, tmp_path_factory) -> dict[str, dict]:
    """A real sweep (ansible-runner over real SSH, the process runtime) on spark-a, whose engine is the real vLLM CPU
    build and whose user's shell exports a variable 0.32 no longer knows. Its cells by label: "moe-marlin" (failed
    at startup), "moe-auto", "llama-ngram"; each cell's "dir" holds its server.log."""
    from agent.judging import correctness
    from agent.planning.inventory import load_inventory
    from agent.planning.spec import load_spec
    from agent.running.follow import run_sweep
    from tests.sshd_hosts import inventory_for

    root = tmp_path_factory.mktemp("engine-sweep")
    vllm = str(Path(vllm_cpu_python).parent / "vllm")
    host_vars = {
        "spark_runtime": "process",
        "spark_host_scope": "workdir",
        "spark_port": 8000,
        "spark_health_timeout": 300,
        "spark_serve_cmd": [vllm, "serve"],
        "spark_serve_env": {**BASE_ENV, "VLLM_USE_FLASHINFER_MOE_FP4": "1"},
    }
    inventory = root / "vllm-fleet.yml"
    inventory.write_text(yaml.safe_dump(inventory_for(ssh_fleet, host_vars)))
    spec = root / "engine.toml"
    spec.write_text(
        SWEEP_SPEC.format(
            digest="cd" * 32,
            moe=tiny_models["tiny-qwen3-moe"],
            llama=tiny_models["tiny-llama"],
            ngram=json.dumps(NGRAM),
        )
    )
    run_sweep(load_spec(spec), inventory, load_inventory(inventory, limit="spark-a"), root / "results")
    labels = {}
    for cell in correctness.judged_cells(root / "results" / "engine"):
        config = cell["config"]
        model = "llama" if config["checkpoint"] == "tiny-llama" else "moe"
        label = "ngram" if config.get("speculative") else config["moe_backend"] or "auto"
        labels[f"{model}-{label}"] = cell
    return labels
