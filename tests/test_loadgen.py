"""agent.hostside.loadgen: window accounting (exact, on recorded events), the HTTP/SSE client against a
scripted loopback server (the closed loop against the simulator: test_loadgen_sim.py)."""

import asyncio
import json
import random
import socketserver
import threading
import time

import pytest

from agent.hostside import loadgen
from agent.hostside.loadgen import _Request

pytestmark = pytest.mark.unit

# ------------------------------------------------------------------ window accounting (exact)


def _req(start, chunks, end=None, error="", prompt_tokens=10):
    """A recorded request: chunks = [(arrival time, tokens), ...]."""
    r = _Request(start, prompt_tokens)
    r.times = [t for t, _ in chunks]
    r.tokens = [n for _, n in chunks]
    r.end = end
    r.error = error
    return r


def test_in_flight_request_counts_only_its_in_window_tokens():
    # window [10, 20): chunks at 8 and 9 are before it, 20 and 21 after it; the request never finishes
    r = _req(5.0, [(8.0, 1), (9.0, 1), (10.0, 2), (15.0, 1), (19.5, 3), (20.0, 1), (21.0, 1)])
    res = loadgen.summarize_window([r], 10.0, 20.0, concurrency=1)
    assert res["total_output_tokens"] == 6  # 2 + 1 + 3: t0 is inside, t1 is not
    assert res["output_throughput"] == 0.6
    assert res["completed"] == 0 and res["failed"] == 0
    assert res["total_input_tokens"] == 0  # only finished requests count their prompt
    assert res["mean_ttft_ms"] == 0.0  # its first token came before the window
    # gaps whose later chunk is inside: 9->10, 10->15, 15->19.5
    assert res["median_itl_ms"] == 4500.0
    assert res["mean_itl_ms"] == pytest.approx(1000.0 * (1 + 5 + 4.5) / 3)
    assert res["max_concurrent_requests"] == 1
    assert res["ok"] is True and res["error"] == ""


def test_completed_requests_give_ttft_tpot_e2el():
    a = _req(0.0, [(0.5, 1), (0.6, 1), (0.7, 1), (0.9, 1)], end=1.0, prompt_tokens=100)
    b = _req(1.0, [(1.2, 1), (1.4, 3)], end=1.5, prompt_tokens=120)  # a 3-token (speculative) chunk
    res = loadgen.summarize_window([a, b], 0.0, 2.0, concurrency=1)
    assert res["completed"] == 2
    assert res["total_input_tokens"] == 220
    assert res["total_output_tokens"] == 8
    assert res["request_throughput"] == 1.0
    assert res["mean_ttft_ms"] == pytest.approx(350.0)  # 500 and 200
    # TPOT = (e2el - ttft) / (tokens - 1): a (1.0-0.5)/3, b (1.5-0.2-1.0)/3
    assert res["mean_tpot_ms"] == pytest.approx(1000.0 * (0.5 / 3 + 0.3 / 3) / 2)
    assert res["median_e2el_ms"] == pytest.approx(750.0)
    assert res["p99_e2el_ms"] == pytest.approx(1000.0 * (0.5 + 0.99 * 0.5))
    # gaps 0.1, 0.1, 0.2 (a) and 0.2 (b): the 3-token chunk is one gap, as in `vllm bench serve`
    assert res["median_itl_ms"] == pytest.approx(150.0)
    assert res["mean_itl_ms"] == pytest.approx(150.0)
    assert res["p99_itl_ms"] == pytest.approx(200.0)


def test_failures_and_completions_count_where_they_end():
    before = _req(0.0, [(1.0, 1)], end=4.0)  # finished before the window
    inside_ok = _req(4.0, [(6.0, 2)], end=7.0)
    inside_err = _req(7.0, [], end=7.5, error="HTTP 400: prompt too long")
    inside_err2 = _req(7.5, [], end=8.0, error="HTTP 400: prompt too long")
    other_err = _req(8.0, [], end=9.0, error="stream ended without [DONE] after 0 tokens")
    after_err = _req(9.0, [], end=10.0, error="late")  # ends exactly at t1: not inside
    res = loadgen.summarize_window([before, inside_ok, inside_err, inside_err2, other_err, after_err], 5.0, 10.0, 2)
    assert res["completed"] == 1 and res["failed"] == 3
    assert res["errors"] == ["HTTP 400: prompt too long", "stream ended without [DONE] after 0 tokens"]
    assert res["total_output_tokens"] == 2 and res["ok"] is True


def test_window_without_tokens_is_not_ok():
    res = loadgen.summarize_window([_req(0.0, [], end=0.1, error="HTTP 500: boom")], 0.0, 1.0, 4)
    assert res["ok"] is False and res["error"] == "HTTP 500: boom"
    res = loadgen.summarize_window([_req(0.0, [])], 0.0, 1.0, 4)  # a server that accepts and says nothing
    assert res["ok"] is False and "no output tokens" in res["error"]


def test_result_keys_are_the_contract_and_have_no_none():
    res = loadgen.summarize_window([], 0.0, 1.0, 1)
    expected = {
        "concurrency",
        "ok",
        "error",
        "started_at",
        "duration",
        "completed",
        "failed",
        "errors",
        "total_input_tokens",
        "total_output_tokens",
        "output_throughput",
        "request_throughput",
        "max_concurrent_requests",
        "median_e2el_ms",
        "p99_e2el_ms",
    }
    expected |= {f"{s}_{m}_ms" for s in ("mean", "median", "p99") for m in ("ttft", "tpot", "itl")}
    # as `vllm bench serve --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99` names them
    expected |= {f"p{q}_{m}_ms" for q in (50, 90, 95) for m in ("ttft", "tpot", "itl", "e2el")}
    expected |= {"mean_e2el_ms", "request_goodput"}
    assert set(res) == expected
    assert all(v is not None for v in res.values())


def test_max_in_flight_counts_overlap_inside_the_window_only():
    reqs = [
        _req(0.0, [], end=3.0),
        _req(1.0, [], end=2.0),
        _req(2.0, [], end=5.0),
        _req(2.5, [], None),
        _req(6.0, [], None),
    ]
    assert loadgen.max_in_flight(reqs, 0.0, 10.0) == 3  # at 2.5: first, third, fourth
    assert loadgen.max_in_flight(reqs, 3.5, 5.5) == 2  # third and fourth
    assert loadgen.max_in_flight(reqs[:2], 2.5, 3.5) == 1


def test_percentile_matches_linear_interpolation():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert loadgen.percentile(values, 50) == 3.0
    assert loadgen.percentile(values, 99) == pytest.approx(4.96)
    assert loadgen.percentile([7.0], 99) == 7.0
    assert loadgen.percentile([], 50) == 0.0


def test_chunk_tokens_usage_fallback_and_correction():
    def event(text, completion_tokens=None):
        e = {"choices": [{"text": text}] if text is not None else []}
        if completion_tokens is not None:
            e["usage"] = {"prompt_tokens": 9, "completion_tokens": completion_tokens}
        return e

    assert loadgen._chunk_tokens(event(" a b c", 3), counted=0) == 3  # speculative: 3 tokens in one chunk
    assert loadgen._chunk_tokens(event("", 3), counted=3) == 0  # final usage-only chunk repeats it
    assert loadgen._chunk_tokens(event(" a"), counted=0) == 1  # no usage: one per chunk with text
    assert loadgen._chunk_tokens(event(""), counted=1) == 0
    assert loadgen._chunk_tokens(event(None, 5), counted=2) == 3  # usage only at the end corrects


def test_prompt_lengths_uniform_and_mixed_are_seeded():
    rng = random.Random(1)
    assert loadgen.request_lengths("uniform", 1024, 256, rng) == (1024, 256)
    draws = [loadgen.request_lengths("mixed", 1000, 200, random.Random(7)) for _ in range(2)]
    assert draws[0] == draws[1]
    rng = random.Random(7)
    many = [loadgen.request_lengths("mixed", 1000, 200, rng) for _ in range(500)]
    assert all(500 <= p <= 1500 and 100 <= o <= 300 for p, o in many)
    assert len(set(many)) > 400
    with pytest.raises(ValueError):
        loadgen.request_lengths("bursty", 10, 10, rng)
    prompt = loadgen.make_prompt(50, random.Random(3))
    assert len(prompt.split()) == 50 and prompt != loadgen.make_prompt(50, random.Random(4))


# ------------------------------------------------------------------ HTTP/SSE client vs a scripted server


class _Scripted(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, pieces):
        self.pieces = pieces  # raw response bytes, sent one write (and flush) at a time
        self.bodies = []
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)


class _ScriptedHandler(socketserver.StreamRequestHandler):
    def handle(self):
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += self.rfile.read(1)
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        self.server.bodies.append(json.loads(self.rfile.read(length)))
        for piece in self.server.pieces:
            self.wfile.write(piece)
            self.wfile.flush()


@pytest.fixture
def scripted():
    servers = []

    def start(pieces):
        server = _Scripted(pieces)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _sse(event):
    return b"data: " + (event if isinstance(event, bytes) else json.dumps(event).encode()) + b"\n\n"


def _chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def _tok(text, n=None, prompt=12):
    e = {"id": "cmpl-x", "object": "text_completion", "choices": [{"index": 0, "text": text}]}
    if n is not None:
        e["usage"] = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
    return e


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _stream(server, clock=time.monotonic):
    host, port = server.server_address
    record = _Request(clock(), prompt_tokens=1)
    request = loadgen.build_request(host, port, "/v1/completions", "m", "hello world", 8)
    asyncio.run(loadgen.stream_completion(host, port, request, record, clock))
    return record


def test_chunked_sse_with_events_split_and_merged_across_chunks(scripted):
    body = _sse(_tok(" a", 1)) + _sse(_tok(" b c d", 4)) + _sse(_tok(" e", 5)) + _sse(b"[DONE]")
    # chunk boundaries in the middle of events and several events per chunk, plus a chunk extension
    pieces = [
        CHUNKED_HEAD,
        _chunk(body[:7]),
        _chunk(body[7:150]),
        b"%x;ext=1\r\n%s\r\n" % (len(body[150:]), body[150:]),
        b"0\r\n\r\n",
    ]
    server = scripted(pieces)
    ticks = iter(range(1, 100))
    record = _stream(server, clock=lambda: float(next(ticks)))
    assert sum(record.tokens) == 5 and sorted(record.tokens) == [1, 1, 3]
    assert record.prompt_tokens == 12 and record.error == ""
    assert record.end == record.times[-1] or record.end > record.times[-1]
    sent = server.bodies[0]
    assert sent["stream"] is True and sent["ignore_eos"] is True and sent["max_tokens"] == 8
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert sent["model"] == "m" and sent["prompt"] == "hello world"


def test_no_usage_counts_one_token_per_text_chunk(scripted):
    body = _sse(_tok(" a")) + _sse(_tok("")) + _sse(_tok(" b")) + _sse(_tok(" c")) + _sse(b"[DONE]")
    record = _stream(scripted([CHUNKED_HEAD, _chunk(body), b"0\r\n\r\n"]))
    assert record.tokens == [1, 1, 1]


def test_content_length_and_close_delimited_bodies(scripted):
    body = _sse(_tok(" a", 1)) + _sse(_tok(" b", 2)) + _sse(b"[DONE]")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert sum(_stream(scripted([head, body[:20], body[20:]])).tokens) == 2
    head = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    assert sum(_stream(scripted([head, body])).tokens) == 2


@pytest.mark.parametrize(
    "pieces, message",
    [
        (
            [
                CHUNKED_HEAD,
                _chunk(_sse(_tok(" a", 1))),
                _chunk(_sse({"error": {"message": "engine died"}})),
                b"0\r\n\r\n",
            ],
            "server error: engine died",
        ),
        ([CHUNKED_HEAD, _chunk(_sse(_tok(" a", 1))), b"0\r\n\r\n"], "without [DONE] after 1 tokens"),
        ([CHUNKED_HEAD, _chunk(_sse(_tok(" a", 1)))], "closed inside a chunked body"),
    ],
)
def test_broken_responses_raise_load_error(scripted, pieces, message):
    with pytest.raises(loadgen.LoadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _stream(scripted(pieces))


def test_http_error_message_comes_from_json_body(scripted):
    body = b'{"object": "error", "message": "The model `x` does not exist.", "code": 404}'
    head = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    with pytest.raises(loadgen.LoadError) as info:
        _stream(scripted([head, body]))
    assert str(info.value) == "HTTP 404: The model `x` does not exist."
