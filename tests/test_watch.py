"""`spark-agent watch` end to end: a tag in a local registry moves from one simulator image to another that differs
the way two vLLM releases do; watch measures only the new digest and its page says what changed, with evidence."""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from agent.cli import main
from agent.running import timer

from .sshd_hosts import foreign_holder, inventory_for
from .test_sweep import write_spec

pytest_plugins = ["tests.fixtures_docker"]
pytestmark = [pytest.mark.integration, pytest.mark.docker]

# The second image: another vLLM (0.24: NVFP4's auto picks FLASHINFER_B12X where 0.21 picked MARLIN, and the
# variable both images set, VLLM_USE_FLASHINFER_MOE_FP4, is gone), 10% slower, and FLASHINFER_B12X dies under load
# (so auto fails now).
DEAD = "VLLM_USE_FLASHINFER_MOE_FP4"
HOOK_SECRET = "hook-secret-5f2a"
BEFORE = {"SPARK_SIM_VLLM_VERSION": "0.21.0", "SPARK_SIM_SEED": "1", DEAD: "0"}
AFTER = {
    DEAD: "0",
    "SPARK_SIM_VLLM_VERSION": "0.24.0",
    "SPARK_SIM_SEED": "2",
    "SPARK_SIM_SPEED": "0.9",
    "SPARK_SIM_CRASH_BACKEND": "flashinfer_b12x",
    "SPARK_SIM_CRASH_AT_REQUEST": "1",
}


class _Hook(http.server.BaseHTTPRequestHandler):
    got: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.got.append({"path": self.path, "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def webhook():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.got = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook?token={HOOK_SECRET}", _Hook.got
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def docker_inventory(ssh_fleet, dockerd, tmp_path, webhook) -> Path:
    extra = {
        "spark_watch_webhook": webhook[0],
        # 10 simulated seconds a window, 4 s of wall time: long enough that a loaded machine (the suite's parallel
        # workers) does not drown a 10% slowdown in timing noise (2 s windows did, once)
        "spark_sim_time_scale": 2.5,
    }
    inv = inventory_for(ssh_fleet, {**dockerd.sweep_vars(), **extra})
    path = tmp_path / "docker-fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _spec(tmp_path: Path) -> Path:
    path = write_spec(tmp_path, "watched", backends=("auto", "marlin"), duration=10.0, repeats=4, concurrency=(1, 4))
    path.write_text(path.read_text().replace('vllm_version = "0.24.0"\n', ""))
    return path


def test_watch_measures_the_new_digest_and_says_what_changed(tmp_path, docker_inventory, dockerd, webhook, capsys):
    name = "vllm-sim-watch"
    tag = f"{dockerd.registry}/{name}:stable"
    spec = _spec(tmp_path)
    results = tmp_path / "results"
    argv = ["watch", str(spec), "-i", str(docker_inventory), "--limit", "spark-a", "--track", tag,
            "--results", str(results), "--min-repeats", "4"]  # fmt: skip

    first = dockerd.push_sim_image(name, "stable", BEFORE)
    assert main(argv) == 0, capsys.readouterr()
    capsys.readouterr()
    assert (results / f"watched-{first.split(':')[-1][:12]}").is_dir()

    second = dockerd.push_sim_image(name, "stable", AFTER)
    assert second != first
    assert main(argv) == 1
    out = capsys.readouterr().out
    page_md = Path(next(line for line in out.splitlines() if line.endswith(".md")))
    text = page_md.read_text()
    html = page_md.with_suffix(".html").read_text()
    swept = sorted(p.name for p in results.iterdir() if p.name.startswith("watched-"))
    assert swept == sorted(f"watched-{ref.split(':')[-1][:12]}" for ref in (first, second))  # only the new one ran
    assert "vLLM 0.21.0 → 0.24.0" in text and "0.21.0" in html
    assert re.search(r"auto: MoE MARLIN → \*\*FLASHINFER_B12X\*\*", text), text
    assert f"`{DEAD}` became dead" in text
    assert "auto: **started failing**: FAILED (engine_died) (ran before)" in text
    assert "CUDA error: unspecified launch failure" in text  # the root cause, from the log
    assert re.search(r"marlin: 0\.[89]\d\dx \\\[0\.\d+, 0\.\d+\\\] over 2 points: \*\*slower\*\*", text), text
    assert "Startup, cold and warm" in text and "Correctness verdicts" in text
    assert "**Changed.** Now: gb10 (simulated) · nvfp4: nothing to compare" in text, text  # only marlin is left valid
    assert "```" in text  # the log lines as evidence

    told = webhook[1][-1]
    assert len(webhook[1]) == 2 and told["path"].startswith("/hook")  # each run that measured something
    assert told["body"]["page"] == str(page_md.with_suffix(".html"))
    assert told["body"]["regressed"] == ["uns-fast / marlin"] and told["body"]["newly_failing"] == ["uns-fast/auto"]
    assert HOOK_SECRET not in text + html + json.dumps(told["body"]) + out

    assert main(argv) == 0  # a third run: the tag has not moved
    assert "no new digest" in capsys.readouterr().out
    assert len([p for p in results.iterdir() if p.name.startswith("watched-")]) == 2


def test_bad_tracks_are_one_line_exit_2_before_any_sweep(tmp_path, docker_inventory, dockerd, capsys):
    spec = _spec(tmp_path)
    results = tmp_path / "results"
    base = ["watch", str(spec), "-i", str(docker_inventory), "--limit", "spark-a", "--results", str(results)]
    pinned = f"{dockerd.registry}/vllm-sim-watch@sha256:{'a' * 64}"
    assert main([*base, "--track", pinned]) == 2
    assert "pinned by digest" in capsys.readouterr().err
    assert main([*base, "--track", f"{dockerd.registry}/vllm-sim-watch:no-such-tag"]) == 2
    assert "cannot resolve" in capsys.readouterr().err
    assert main([*base, "--track", f"127.0.0.1:{dockerd.free_port()}/vllm-sim:x"]) == 2  # nothing listens there
    assert "cannot resolve" in capsys.readouterr().err
    assert not any(p.name.startswith("watched") for p in results.iterdir()) if results.exists() else True


def test_a_host_busy_with_a_server_we_did_not_start_waits_for_the_next_tick(
    tmp_path, docker_inventory, dockerd, ssh_fleet, capsys
):
    host = next(h for h in ssh_fleet.hosts if h.name == "spark-a")
    dockerd.push_sim_image("vllm-sim-watch", "busy", BEFORE)
    spec = _spec(tmp_path)
    results = tmp_path / "results"
    argv = ["watch", str(spec), "-i", str(docker_inventory), "--limit", "spark-a",
            "--track", f"{dockerd.registry}/vllm-sim-watch:busy", "--results", str(results)]  # fmt: skip
    with foreign_holder(host.workdir):
        assert main(argv) == timer.BUSY_EXIT
        err = capsys.readouterr().err
        assert "spark-a is busy" in err and "alice@lab-7" in err and "next tick" in err
        assert not list(results.rglob("cell.toml"))  # nothing measured: the next tick sees the digest as new
