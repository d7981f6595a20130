"""The live view and the memory plan on real parts (issue 50): the CLI sweeps two real sshd hosts (real Ansible) that
run the simulated GB10, with `--metrics` behind a token, while a real Prometheus (Debian's package) scrapes the
controller and the simulated vLLM servers. The spec's checkpoint is a folder of config.json alone (Qwen3-30B-A3B's
shapes, as the GPU runs serve it with dummy weights): the cells whose max_model_len cannot fit are refused before
any start with the numbers; the others record the plan beside the simulator's log (the same plan: no miss). A
PromQL query through Prometheus' HTTP API gives the cells done, and every metric the Grafana dashboard asks for is
one Prometheus saw."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from agent.results import tree

from .fixtures_docker import free_port
from .sshd_hosts import REPO, SIM_HOST_VARS, inventory_for

pytestmark = pytest.mark.integration

sys.path.insert(0, str(REPO / "bench" / "gpu"))
import make_checkpoint  # noqa: E402  (the GPU runs' checkpoints: config.json alone)

SPEC = """
[sweep]
name = "live"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "qwen3-fp8"
model = "{model}"
quant = "fp8"
[server]
max_num_seqs = 4
[matrix]
moe_backend = ["marlin"]
max_model_len = [4096, 4000000]
concurrency = [2]
duration_s = 2.0
warmup = 1
repeats = 4  # windows over several looks, even on a loaded machine
[load]
prompt_len = 64
output_len = 128
[correctness]
enabled = false
"""
DASHBOARD = REPO / "grafana" / "dashboards" / "spark-agent.json"
METRIC = re.compile(r"\b(spark_agent_[a-z_]+|vllm:[a-z_]+)")


def _get(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _query(prom: str, promql: str) -> list:
    return _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["data"]["result"]


@pytest.fixture
def prometheus(tmp_path, ssh_fleet):
    """A real Prometheus on loopback, scraping the controller's endpoint (token) and each host's simulator."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: scripts/setup.sh installs Debian's package")
    metrics_port, web_port = free_port(), free_port()
    token = tmp_path / "token"
    token.write_text("live-" + os.urandom(8).hex() + "\n")
    token.chmod(0o600)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "spark-agent",
                "authorization": {"type": "Bearer", "credentials_file": str(token)},
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            },
            {
                "job_name": "vllm",
                "static_configs": [
                    {"targets": [f"{h.address}:{SIM_HOST_VARS['spark_port']}" for h in ssh_fleet.hosts]}
                ],
            },
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        + [f"--web.listen-address=127.0.0.1:{web_port}", "--log.level=warn"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
                time.sleep(0.3)
        yield {"url": url, "metrics_port": metrics_port, "token": token}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_a_real_prometheus_scrapes_a_sweep_whose_memory_plan_refused_what_cannot_fit(tmp_path, ssh_fleet, prometheus):
    model = tmp_path / "models" / "qwen3-30b-a3b-fp8"  # the simulator serves the folder by its name, reads its config
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(make_checkpoint.variant_config("qwen3-30b-a3b-fp8")))
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(yaml.safe_dump(inventory_for(ssh_fleet, SIM_HOST_VARS)))
    spec = tmp_path / "live.toml"
    spec.write_text(SPEC.format(digest="ab" * 32, model=model))
    out = tmp_path / "results"
    args = [sys.executable, "-m", "agent.cli", "sweep", str(spec), "-i", str(inventory), "--results", str(out)]
    args += ["--no-progress", "--metrics", f"127.0.0.1:{prometheus['metrics_port']}"]
    args += ["--metrics-token-file", str(prometheus["token"])]
    swept = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]

    # the memory plan: 4,000,000 tokens of one request need 366 GiB of KV cache; refused before any start
    refused = [line for line in swept.stderr.splitlines() if "memory_refused" in line]
    assert len(refused) == 1 and "max_model_len <=" in refused[0] and "spark-a, spark-b" in refused[0], swept.stderr
    cells = tree.load_cells(out / "live")
    assert [c["config"]["max_model_len"] for c in cells] == [4096]
    for c in cells:
        assert c["memory"]["plan"]["fits"] == "yes"
        assert c["memory"]["plan"]["weights_source"] == "config"
        # the simulator logged what the controller planned: the same model, no miss
        assert c["memory"]["weights_miss_pct"] == 0.0 and c["memory"]["kv_tokens_miss_pct"] == 0.0
        assert c["memory"]["logged"]["kv_gib"] == c["memory"]["plan"]["kv_gib"] > 0
        assert all("pressure" in run for run in c["runs"])

    # Prometheus scraped the controller through the token, and the simulated servers while they served
    prom = prometheus["url"]
    done = _query(prom, 'sum(max_over_time(spark_agent_cells_done{sweep="live"}[10m]))')
    assert float(done[0]["value"][1]) == 1, done
    measured = _query(prom, 'sum(max_over_time(spark_agent_cells{sweep="live",outcome="measured"}[10m]))')
    assert float(measured[0]["value"][1]) == 1
    live = _query(prom, 'max(max_over_time(spark_agent_window_output_tokens_per_second{sweep="live"}[10m]))')
    assert float(live[0]["value"][1]) > 0, "no look brought back the running cell's window"
    seen = set(_get(f"{prom}/api/v1/label/__name__/values")["data"])
    wanted = {m for m in METRIC.findall(DASHBOARD.read_text())}
    assert wanted and wanted <= seen, f"the dashboard asks for metrics Prometheus never saw: {sorted(wanted - seen)}"
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"} <= wanted
