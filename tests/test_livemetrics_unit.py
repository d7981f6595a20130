"""The live metrics endpoint without hosts (running/livemetrics.py): where it may listen, the token off loopback,
the gauges one look at the runners sets, and content negotiation (OpenMetrics for Prometheus). The real Prometheus
scraping a real sweep: tests/test_live_metrics.py."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import memplan
from agent.results import tree
from agent.running import detach, hostdata
from agent.running.livemetrics import LiveMetrics, parse_address

pytestmark = pytest.mark.unit


@pytest.mark.attack("the live metrics endpoint asked to listen on every interface or on another machine's address")
@pytest.mark.parametrize("bad", ["0.0.0.0:9464", "[::]:9464", "192.0.2.77:9464", "127.0.0.1:0", "9464", "x:1"])
def test_it_listens_on_loopback_or_an_own_address_only(bad):
    with pytest.raises(UserError, match="--metrics"):
        parse_address(bad)
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)


@pytest.mark.attack("the live metrics read without the token, or with a wrong one")
def test_a_token_guards_it_and_prometheus_gets_openmetrics():
    live = LiveMetrics("s")
    url = live.serve("127.0.0.1", 0, "t0ken")
    try:
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer nope"}), timeout=5)
        asked = {"Authorization": "Bearer t0ken", "Accept": "application/openmetrics-text; version=1.0.0"}
        with urllib.request.urlopen(urllib.request.Request(url, headers=asked), timeout=5) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert r.read().decode().rstrip().endswith("# EOF")
    finally:
        live.stop(linger_s=0)


def test_one_look_sets_the_cells_the_window_and_the_eta(tmp_path: Path):
    state = detach.FleetState(
        sweep="s", spec="", inventory="", replicas=1, started="", groups={"g": ["a"]},
        assignment={"a": ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]}, facts={},
    )  # fmt: skip
    done = tree.cell_dir(tmp_path, "s", "a", "aaaaaaaaaaaa")
    done.mkdir(parents=True)
    tree.atomic_write_toml(done / tree.CELL_FILE, {"cell_id": "aaaaaaaaaaaa", "status": "done", "verdict": "valid"})
    window = {"concurrency": 4.0, "tok_s": 123.0, "ttft_ms": 250.0, "tpot_ms": 20.0, "at": 1.0}
    progress = detach.HostProgress(host="a", answered=True, current="bbbbbbbbbbbb", window=window)
    live = LiveMetrics("s")
    live.look(state, detach.Collected(progress={"a": progress}), {}, tmp_path)
    value = live.registry.get_sample_value
    labels = {"sweep": "s", "host": "a"}
    assert value("spark_agent_cells_planned", labels) == 2 and value("spark_agent_cells_done", labels) == 1
    assert value("spark_agent_cells", {**labels, "outcome": "measured"}) == 1
    assert value("spark_agent_window_output_tokens_per_second", labels) == 123.0
    assert (
        value("spark_agent_window_ttft_seconds", labels) == 0.25
        and value("spark_agent_window_concurrency", labels) == 4
    )


@pytest.mark.attack("a host sends a runner progress whose live window is not numbers, or absurd ones")
@pytest.mark.parametrize("window", [{"tok_s": "fast"}, {"tok_s": 1e300}, {"ttft_ms": -5}, "not a table"])
def test_a_hostile_live_window_is_refused(window):
    progress = {"state": "running", "current": "", "done": {}, "window": window}
    with pytest.raises(hostdata.BadHostData, match="window"):
        detach.checked_progress(progress, "spark-x")


@pytest.mark.attack("a host sends a memory summary of the wrong shape or with absurd numbers")
def test_a_hostile_model_memory_is_refused():
    good = dict(memplan.simulated(22.0, 20480))
    assert hostdata.model_memory(good, "m") == good and hostdata.model_memory(None, "m") is None
    for bad in ({**good, "weight_bytes": -1}, {**good, "kv_bytes_per_token": 2**60}, {**good, "source": "x" * 40}):
        with pytest.raises(hostdata.BadHostData):
            hostdata.model_memory(bad, "m")
    with pytest.raises(hostdata.BadHostData, match="missing"):
        hostdata.model_memory({k: v for k, v in good.items() if k != "layers"}, "m")
