"""Open-loop arrivals (statistically, fixed seeds, stated tolerances), SLOs and goodput, and the datasets' shapes.
Against a server: test_loadgen_open.py (the simulator) and test_engine_vllm.py (the real CPU vLLM)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import statistics

import pytest

from agent.hostside import arrivals, loadgen, prompts, slo
from agent.hostside.loadgen import _Request

pytestmark = pytest.mark.unit

N = 20_000  # gaps per distribution check: the mean's standard error is 1/sqrt(N) = 0.7 % of the mean (Poisson)


def _ks_exponential(gaps: list[float], rate: float) -> float:
    """Kolmogorov-Smirnov distance between the gaps and Exp(rate)."""
    ordered = sorted(gaps)
    n = len(ordered)
    return max(
        max((i + 1) / n - (1 - math.exp(-rate * x)), (1 - math.exp(-rate * x)) - i / n) for i, x in enumerate(ordered)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_gaps_are_exponential_at_the_asked_rate(seed):
    rate = 250.0
    gaps = arrivals.gaps(rate, 1.0, N, random.Random(seed))
    # mean within 3 standard errors (2.1 %); coefficient of variation of an exponential is 1 (within 3 %)
    assert abs(statistics.fmean(gaps) * rate - 1) < 3 / math.sqrt(N)
    assert abs(statistics.stdev(gaps) / statistics.fmean(gaps) - 1) < 0.03
    # KS at alpha = 0.01: the critical distance is 1.63 / sqrt(N)
    assert _ks_exponential(gaps, rate) < 1.63 / math.sqrt(N)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 4.0])
def test_gamma_gaps_keep_the_rate_and_have_the_asked_burstiness(burstiness):
    rate = 40.0
    gaps = arrivals.gaps(rate, burstiness, N, random.Random(7))
    cv = statistics.stdev(gaps) / statistics.fmean(gaps)
    # gamma(shape k): mean 1/rate whatever k, CV = 1/sqrt(k); tolerances: 3 standard errors of the mean, 5 % on CV
    assert abs(statistics.fmean(gaps) * rate - 1) < 3 / math.sqrt(N * burstiness)
    assert abs(cv * math.sqrt(burstiness) - 1) < 0.05
    # and it is not Poisson (unless k = 1): KS rejects the exponential
    assert _ks_exponential(gaps, rate) > 1.63 / math.sqrt(N)


def test_a_window_offers_exactly_rate_times_duration_requests_like_bench():
    # vllm bench serve --request-rate 4 --num-prompts 32 sends 32 requests over 8 s whatever the seed; an unscaled
    # Poisson draw offered 32 +- 5.7 (18 %), and the window's throughput followed the draw, not the server
    for seed in range(50):
        times = arrivals.schedule(4.0, 1.0, 8.0, random.Random(seed))
        assert len(times) == 32
        # the last one a mean gap before the close: never in its last instants, where a start a few ms late would
        # fall after it and count as missed (at burstiness 0.5 a free tail gap is under 2.5 ms one time in ten)
        assert times[0] == 0.0 and times == sorted(times) and times[-1] == pytest.approx(8.0 - 0.25)
    assert [
        len(arrivals.schedule(r, 0.5, d, random.Random(1))) for r, d in ((100.0, 10.0), (2.5, 3.0), (0.1, 2.0))
    ] == [
        1000,
        8,
        1,  # at least the request at 0
    ]
    times = arrivals.schedule(100.0, 1.0, 10.0, random.Random(3))
    assert times == arrivals.schedule(100.0, 1.0, 10.0, random.Random(3))  # a fixed seed replays the window
    assert arrivals.schedule(4.0, 1.0, 0.0, random.Random(0)) == []


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_rescaled_gaps_keep_the_asked_distribution(burstiness):
    rate = 100.0
    times = arrivals.schedule(rate, burstiness, N / rate, random.Random(11))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    cv = statistics.stdev(gaps) / statistics.fmean(gaps)
    assert abs(statistics.fmean(gaps) * rate - 1) < 0.001  # the rescaling makes the mean exact
    assert abs(cv * math.sqrt(burstiness) - 1) < 0.05  # gamma(k): CV 1/sqrt(k)
    if burstiness == 1.0:  # and Poisson spacing stays exponential (KS at alpha = 0.01)
        assert _ks_exponential(gaps, rate) < 1.63 / math.sqrt(len(gaps))


def test_schedules_refuse_what_cannot_be_a_load():
    for rate, burst in ((0.0, 1.0), (-1.0, 1.0), (5.0, 0.0)):
        with pytest.raises(ValueError):
            arrivals.gaps(rate, burst, 1, random.Random(0))
    with pytest.raises(ValueError):
        arrivals.schedule(1e7, 1.0, 60.0, random.Random(0))


# ------------------------------------------------------------------ SLOs and goodput


def test_slos_parse_as_vllm_bench_serve_takes_them():
    assert slo.parse(["ttft:500", "TPOT:50", "e2el:2000.5"]) == {"ttft": 500.0, "tpot": 50.0, "e2el": 2000.5}
    for bad in (["ttft:0.5s"], ["ttft:500ms"], ["itl:5"], ["ttft"], ["ttft:-1"], ["ttft:nan"], ["ttft:1", "ttft:2"]):
        with pytest.raises(slo.SloError):
            slo.parse(bad)
    with pytest.raises(slo.SloError, match="milliseconds"):
        slo.parse(["ttft:2s"])


def _req(start, chunks, end):
    r = _Request(start, 10)
    r.times = [t for t, _ in chunks]
    r.tokens = [n for _, n in chunks]
    r.end = end
    return r


def test_goodput_counts_the_finished_requests_that_meet_every_slo():
    fast = _req(0.0, [(0.1, 1), (0.2, 1), (0.3, 1)], 0.3)  # ttft 100 ms, tpot 100 ms, e2el 300 ms
    slow_start = _req(0.0, [(0.9, 1), (1.0, 1)], 1.0)  # ttft 900 ms
    slow_decode = _req(1.0, [(1.1, 1), (1.9, 1)], 1.9)  # tpot 800 ms
    unfinished = _req(1.0, [(1.5, 1)], None)
    window = [fast, slow_start, slow_decode, unfinished]
    res = loadgen.summarize_window(window, 0.0, 2.0, 4, slo.parse(["ttft:500", "tpot:200"]))
    assert res["completed"] == 3 and res["request_goodput"] == pytest.approx(1 / 2.0)
    res = loadgen.summarize_window(window, 0.0, 2.0, 4, slo.parse(["e2el:1000"]))
    assert res["request_goodput"] == pytest.approx(3 / 2.0)  # all three finished within a second
    no_slo = loadgen.summarize_window(window, 0.0, 2.0, 4)
    assert no_slo["request_goodput"] == no_slo["request_throughput"]


def test_percentiles_are_numpy_linear_as_bench_reports_them():
    reqs = [_req(0.0, [(t, 1)], t) for t in (0.1, 0.2, 0.3, 0.4, 0.5)]
    res = loadgen.summarize_window(reqs, 0.0, 1.0, 5)
    # TTFT 100..500 ms: p50 300, p90 460, p95 480, p99 496 (linear interpolation)
    assert (res["p50_ttft_ms"], res["p90_ttft_ms"], res["p95_ttft_ms"]) == pytest.approx((300, 460, 480))
    assert res["p99_ttft_ms"] == pytest.approx(496) and res["p50_e2el_ms"] == pytest.approx(300)


# ------------------------------------------------------------------ datasets


def _sharegpt(tmp_path, entries) -> str:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries))
    return str(path)


def test_sharegpt_files_are_read_like_bench_reads_them(tmp_path):
    turn = {"from": "human", "value": "what is a spark"}
    answer = {"from": "gpt", "value": "a small box with a big memory"}
    path = _sharegpt(tmp_path, [{"conversations": [turn, answer]}, {"conversations": [turn]}])
    assert prompts.load_sharegpt(path) == [("what is a spark", "a small box with a big memory")]  # 1 turn: skipped
    bad = {
        "missing": None,
        "not-json": b"[{",
        "not-a-list": b'{"conversations": []}',
        "no-conversations": b'[{"text": "x"}]',
        "value-not-text": b'[{"conversations": [{"value": 1}, {"value": "a"}]}]',
        "no-two-turns": b'[{"conversations": [{"value": "a"}]}]',
    }
    for name, data in bad.items():
        path = tmp_path / f"{name}.json"
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(prompts.DatasetError, match=str(path)):
            prompts.load_sharegpt(str(path))


def test_prefix_groups_share_their_prefix_and_only_it():
    dataset = prompts.Dataset("prefix", prompt_len=40, output_len=8, prefix_len=24, prefix_group_size=3)
    source = prompts.Source(dataset, random.Random(1))
    made = [asyncio.run(source.next()) for _ in range(6)]
    heads = [" ".join(p.text.split()[:24]) for p in made]
    assert heads[0] == heads[1] == heads[2] != heads[3] == heads[4] == heads[5]
    assert len({p.text for p in made}) == 6 and all(p.prompt_len == 40 for p in made)


def test_random_lengths_stay_within_the_range_ratio():
    dataset = prompts.Dataset("random", prompt_len=100, output_len=20, range_ratio=0.3)
    source = prompts.Source(dataset, random.Random(2))
    made = [asyncio.run(source.next()) for _ in range(300)]
    assert {p.prompt_len for p in made} <= set(range(70, 131)) and len({p.prompt_len for p in made}) > 30
    assert {p.output_len for p in made} <= set(range(14, 27))
