"""agent.hostside.metrics: Prometheus text parsing and a real scrape over loopback."""

import http.server
import threading

import pytest

from agent.hostside import metrics

pytestmark = pytest.mark.unit

EXPOSITION = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1500.0
vllm:generation_tokens_total{engine="1",model_name="m"} 500.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 4096.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 210.0
weird{path="/a b}c",quote="x\\"}y"} 2.5 1700000000000
process_start_time_seconds 1.7e9
not a sample line
"""


def test_parse_sums_label_sets_and_keeps_series():
    values = metrics.parse(EXPOSITION)
    assert values[metrics.GENERATION_TOKENS] == 2000.0
    assert values['vllm:generation_tokens_total{engine="1",model_name="m"}'] == 500.0
    assert values[metrics.REQUEST_SUCCESS] == 10.0
    assert values[metrics.KV_CACHE_USAGE] == 0.25
    assert values["process_start_time_seconds"] == 1.7e9
    # a label value holding `}`, a space and an escaped quote; the trailing timestamp is not the value
    assert values["weird"] == 2.5
    assert "not" not in values


def test_delta_and_window_counters():
    before = metrics.parse(EXPOSITION)
    after = dict(before)
    after[metrics.GENERATION_TOKENS] += 640.0
    after[metrics.SPEC_DRAFT_TOKENS] += 100.0
    after[metrics.SPEC_ACCEPTED_TOKENS] += 75.0
    after["new_counter"] = 3.0
    d = metrics.delta(before, after)
    assert d[metrics.GENERATION_TOKENS] == 640.0 and d["new_counter"] == 3.0 and d[metrics.PROMPT_TOKENS] == 0.0
    counters = metrics.window_counters(before, after)
    assert counters == {
        "generation_tokens": 640.0,
        "prompt_tokens": 0.0,
        "request_success": 0.0,
        "spec_decode_num_draft_tokens": 100.0,
        "spec_decode_num_accepted_tokens": 75.0,
    }
    assert metrics.acceptance_rate(counters) == 0.75


def test_acceptance_rate_without_drafts_is_minus_one():
    counters = metrics.window_counters({}, {metrics.GENERATION_TOKENS: 10.0})
    assert counters["spec_decode_num_draft_tokens"] == 0.0
    assert metrics.acceptance_rate(counters) == -1.0


def test_metrics_url():
    assert metrics.metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics.metrics_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/metrics"
    assert metrics.metrics_url("http://127.0.0.1:8000/metrics") == "http://127.0.0.1:8000/metrics"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        body = EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]:d}"
    finally:
        server.shutdown()
        server.server_close()


def test_scrape_over_http(exporter):
    values = metrics.scrape(exporter, timeout=5)
    assert values[metrics.GENERATION_TOKENS] == 2000.0
    assert values[metrics.SPEC_ACCEPTED_TOKENS] == 210.0


def test_scrape_errors_raise_oserror(exporter):
    with pytest.raises(OSError):
        metrics.scrape(exporter + "/nope/", timeout=5)  # 404
    with pytest.raises(OSError):
        metrics.scrape("http://127.0.0.1:1", timeout=5)  # nothing listens there
