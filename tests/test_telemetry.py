"""The telemetry sampler's parsing and summaries (hostside/telemetry.py), the server's view of a window, the spec's
[telemetry] table, the host-data checks, the report's telemetry sections and the export. The GPU data is the real
capture of an H200 under a matmul load (tests/data/telemetry, SOURCES.md) and the GB10 forms public reports show."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import metrics, telemetry
from agent.hostside.telemetry import Sample
from agent.judging import summary
from agent.judging import telemetry as tj
from agent.judging.correctness import judged_cells
from agent.planning.spec import load_spec
from agent.reporting import export
from agent.reporting import markdown as report
from agent.results.tree import atomic_write_toml, read_toml
from agent.running import hostdata
from agent.sim import gpu
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "telemetry"


def h200_samples(period: float = 0.5) -> list[Sample]:
    """The captured lines, parsed as the sampler parses them, one sample per `period` seconds."""
    lines = (DATA / "h200-matmul.csv").read_text().splitlines()
    fields = (*telemetry.FIELDS[:-1], "reasons")
    rows = [telemetry.parse_line(line, fields) for line in lines[1:]]
    assert all(rows), "every captured line parses"
    return [Sample(i * period, [row], 10.0, 0.5) for i, row in enumerate(rows) if row]


# ---------------------------------------------------------------- nvidia-smi forms


@pytest.mark.parametrize(
    ("cell", "value"),
    [
        ("76.78", 76.78),
        ("0x0000000000000004", 4.0),
        ("[N/A]", None),  # GB10 memory.used / memory.total (unified memory)
        ("N/A", None),
        ("[Not Supported]", None),
        ("Not Supported", None),
        ("11.17 W", 11.17),  # the form without nounits
        ("0 %", 0.0),
        ("", None),
        ("garbage", None),
    ],
)
def test_csv_cells_are_numbers_or_honestly_missing(cell, value):
    assert telemetry.parse_value(cell) == value


def test_gb10_rows_keep_memory_as_unsupported_never_zero():
    header, row = (DATA / "gb10-nvitop.csv").read_text().splitlines()
    fields = ("index", *[h.split(" [")[0] for h in header.split(", ")[:-1]])
    parsed = telemetry.parse_line("0, " + row, ("index", *fields[1:], "temperature.gpu"))
    assert parsed is not None
    assert parsed["memory.used"] is None and parsed["memory.total"] is None and parsed["memory.free"] is None
    assert parsed["power.draw"] == 11.17 and parsed["temperature.gpu"] == 35
    sample = Sample(0.0, [parsed], None, None)
    assert {"memory.used", "memory.total", "memory.free"} <= sample.unsupported
    for line in (DATA / "gb10-sonar-l1.csv").read_text().splitlines()[1:]:
        cells = line.split(", ")
        assert telemetry.parse_value(cells[2]) is None and telemetry.parse_value(cells[3]) == 38


def test_reason_bits_name_power_and_thermal_throttling_only():
    assert telemetry.reasons(0x1) == []  # GPU idle is not throttling
    assert telemetry.reasons(0x4) == ["sw_power_cap"]
    assert telemetry.reasons(0x60) == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert telemetry.reasons(None) == []


# ---------------------------------------------------------------- window summaries (the H200 capture)


def test_the_h200_capture_summarises_to_energy_power_clocks_and_throttling():
    samples = h200_samples()
    end = samples[-1].t + 0.5
    tele = telemetry.summarize(samples, 0.0, end, 100_000, 0.5, 5.0)
    assert tele["available"] and tele["samples"] == len(samples) and tele["unsupported"] == []
    assert tele["power_max_w"] == pytest.approx(693.93) and tele["temp_max_c"] == 61
    assert tele["sm_clock_min_mhz"] == 345 and tele["sm_clock_max_mhz"] == 1980
    assert tele["throttle_reasons"] == ["sw_power_cap"] and tele["throttled"]
    powered = [s.power for s in samples if s.power is not None]
    assert tele["energy_j"] == pytest.approx(sum(powered) / len(powered) * end, rel=1e-6)  # equal spacing
    assert tele["joules_per_output_token"] == pytest.approx(tele["energy_j"] / 100_000)
    assert tele["tokens_per_watt"] == pytest.approx(100_000 / tele["energy_j"])
    throttled = sum(1 for s in samples if s.mask is not None and int(s.mask) & telemetry.THROTTLE_MASK)
    assert tele["throttle_s"] == pytest.approx(throttled * 0.5)
    assert len(tele["timeline"]["t_s"]) == len(samples) <= telemetry.TIMELINE_POINTS


def test_the_idle_part_of_the_capture_is_not_throttled():
    idle = h200_samples()[:16]  # the 8 s before the load
    tele = telemetry.summarize(idle, 0.0, 8.0, -1, 0.5, 5.0)
    assert not tele["throttled"] and tele["throttle_s"] == 0 and tele["throttle_reasons"] == []
    assert tele["joules_per_output_token"] == -1.0 and 70 < tele["power_mean_w"] < 80


def test_the_threshold_decides_whether_a_window_is_flagged():
    def window(throttled_share: float, threshold: float) -> bool:
        samples = [
            Sample(
                float(i),
                [{"index": 0, "power.draw": 50.0, "reasons": 0x40 if i < throttled_share * 10 else 0}],
                None,
                None,
            )
            for i in range(10)
        ]
        return telemetry.summarize(samples, 0.0, 10.0, 10, 1.0, threshold)["throttled"]

    assert window(0.3, 20.0) and not window(0.3, 30.0) and not window(0.0, 0.0)


def test_a_window_without_samples_says_so():
    tele = telemetry.summarize([], 0.0, 5.0, 50, 1.0, 5.0, "no GPU telemetry: nvidia-smi not found")
    assert not tele["available"] and tele["note"].startswith("no GPU telemetry")
    assert tele["energy_j"] == -1.0 and tele["joules_per_output_token"] == -1.0 and not tele["throttled"]


def test_a_host_without_nvidia_smi_gets_a_note_not_an_error(tmp_path):
    sampler = telemetry.Sampler(command=[str(tmp_path / "nvidia-smi")])
    with sampler:
        mark = sampler.mark()
    assert sampler.note == f"no GPU telemetry: {tmp_path / 'nvidia-smi'} not found"
    assert not sampler.summary(mark, sampler.mark(), 10)["available"]


@pytest.mark.parametrize(("interval", "share"), [(0.0, 5.0), (-1.0, 5.0), (1.0, -0.1), (1.0, 100.5)])
def test_the_sampler_refuses_a_bad_interval_or_threshold(interval, share):
    with pytest.raises(ValueError):
        telemetry.Sampler(interval_s=interval, throttle_share=share)


# ---------------------------------------------------------------- the server's view


SCRAPE_BEFORE = """
vllm:generation_tokens_total{engine="0",model_name="m"} 1000
vllm:num_preemptions_total{engine="0",model_name="m"} 2
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 500
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 5
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1
"""
SCRAPE_AFTER = """
vllm:generation_tokens_total{engine="0",model_name="m"} 3000
vllm:num_preemptions_total{engine="0",model_name="m"} 5
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 900
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 300
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 110
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 88
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 55
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4
vllm:num_requests_waiting{engine="0",model_name="m"} 3
"""


def test_the_server_view_keeps_vllm_names_deltas_gauges_and_acceptance_per_position():
    before, after = metrics.parse(SCRAPE_BEFORE), metrics.parse(SCRAPE_AFTER)
    view = telemetry.server_view(before, after, [before, after], client_tokens=1990, concurrency=4)
    assert view["deltas"][metrics.GENERATION_TOKENS] == 2000 and view["deltas"][metrics.PREEMPTIONS] == 3
    assert view["deltas"][metrics.PREFIX_QUERIES] == 400 and view["deltas"][metrics.PREFIX_HITS] == 200
    assert view["accepted_per_position"] == [0.8, 0.5]
    assert view["gauges"][metrics.KV_CACHE_USAGE] == {"mean": pytest.approx(0.25), "max": 0.4}
    assert view["gauges"][metrics.REQUESTS_WAITING]["max"] == 3
    assert not view["tokens_disagree"] and view["token_bound"] == pytest.approx(4 * 32 + 0.02 * 1990)


def test_a_token_count_beyond_the_cut_request_bound_flags_the_window():
    before, after = metrics.parse(SCRAPE_BEFORE), metrics.parse(SCRAPE_AFTER)
    assert telemetry.server_view(before, after, [], client_tokens=1500, concurrency=4)["tokens_disagree"]
    unscraped = telemetry.server_view(before, None, [], client_tokens=1500, concurrency=4)
    assert not unscraped["scraped"] and not unscraped["tokens_disagree"]  # nothing to compare is no disagreement


# ---------------------------------------------------------------- the spec's [telemetry]

SPEC = """[sweep]
name = "t"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
[[checkpoints]]
name = "a"
model = "a"
quant = "nvfp4"
[matrix]
moe_backend = ["marlin"]
concurrency = [1]
[telemetry]
{telemetry}
"""


def _spec(tmp_path: Path, telemetry_table: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(digest="ab" * 32, telemetry=telemetry_table))
    return path


def test_the_telemetry_table_is_read_and_reaches_the_cells_playbook_vars(tmp_path):
    spec = load_spec(_spec(tmp_path, "interval_s = 0.5\nthrottle_threshold = 10\nrequired = true\ncool_to_c = 60"))
    assert spec.telemetry.interval_s == 0.5 and spec.telemetry.throttle_threshold == 10.0
    assert spec.telemetry.required and spec.telemetry.cool_to_c == 60.0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("interval_s = 0", "'interval_s' must be > 0 seconds, got 0"),
        ("interval_s = -2.5", "'interval_s' must be > 0 seconds"),
        ("throttle_threshold = 101", "'throttle_threshold' is a share of the window, 0 to 100 (%), got 101"),
        ("throttle_threshold = -1", "'throttle_threshold' is a share of the window"),
        ("required = 1", "'required' in [telemetry] must be bool"),
        ("sample_rate = 2", "unknown key 'sample_rate' in [telemetry]"),
    ],
)
def test_a_bad_telemetry_setting_is_one_line_naming_file_and_line(tmp_path, line, message):
    path = _spec(tmp_path, line)
    with pytest.raises(UserError) as caught:
        load_spec(path)
    text = str(caught.value)
    assert "\n" not in text and f"{path}:13:" in text and message in text


# ---------------------------------------------------------------- host data


def _window_with_telemetry() -> dict:
    samples = h200_samples()
    tele = telemetry.summarize(samples, 0.0, samples[-1].t + 0.5, 1000, 0.5, 5.0)
    before, after = metrics.parse(SCRAPE_BEFORE), metrics.parse(SCRAPE_AFTER)
    return {
        "concurrency": 4,
        "repeat": 1,
        "ok": True,
        "output_throughput": 100.0,
        "total_output_tokens": 2000,
        "telemetry": tele,
        "warmup_telemetry": telemetry.summarize([], 0, 1, -1, 0.5, 5.0, "no GPU telemetry: x"),
        "server": telemetry.server_view(before, after, [before, after], 2000, 4),
    }


def test_host_data_keeps_the_telemetry_and_server_tables():
    window = _window_with_telemetry()
    checked = hostdata.run_result(window, "c004-r1.json")
    assert checked["telemetry"] == window["telemetry"] and checked["server"] == window["server"]
    assert checked["warmup_telemetry"]["note"] == "no GPU telemetry: x"
    assert "telemetry" not in hostdata.run_result({"concurrency": 1, "repeat": 1, "ok": True}, "old.json")


@pytest.mark.parametrize(
    "damage",
    [
        lambda w: w["telemetry"].update(power_max_w=math.inf),
        lambda w: w["telemetry"].update(throttle_reasons=["$(reboot)"]),
        lambda w: w["telemetry"]["timeline"].update(t_s=[0.0] * 5000),
        lambda w: w["server"]["deltas"].update({"bad key!": 1.0}),
        lambda w: w["server"].update(gauges={"vllm:x": {"max": "high"}}),
    ],
)
def test_host_data_refuses_a_damaged_telemetry_table(damage):
    window = _window_with_telemetry()
    damage(window)
    with pytest.raises(hostdata.BadHostData):
        hostdata.run_result(window, "c004-r1.json")


# ---------------------------------------------------------------- the simulated GPU


def test_the_simulated_gpu_follows_load_and_throttles_on_demand():
    model = gpu.GpuModel(throttle_after=5.0)
    idle = model.step(1.0, 0)
    assert idle["power_w"] == pytest.approx(model.cal["idle_w"], abs=0.5) and idle["reasons"] == 1
    for _ in range(4):
        busy = model.step(1.0, 8)
    assert busy["power_w"] > 60 and busy["reasons"] == 0 and busy["sm_mhz"] == model.cal["sm_clock_mhz"]
    for _ in range(2):
        hot = model.step(1.0, 8)
    assert model.throttled and hot["reasons"] == 0x60 and hot["sm_mhz"] == model.cal["throttled_sm_clock_mhz"]
    assert not gpu.GpuModel(throttle_after=None).step(100.0, 8).get("reasons")


# ---------------------------------------------------------------- report and export


@pytest.fixture
def hot_tree(tmp_path):
    """Two backends; marlin's c=8 windows carry the H200's throttled capture, cutlass's its idle part."""
    root = tmp_path / "results"
    hot = write_cell(root, backend="marlin", values={8: [300.0, 305.0, 302.0]})
    cool = write_cell(root, backend="cutlass", values={8: [200.0, 201.0, 199.0]})
    samples = h200_samples()
    for folder, chosen in ((hot, samples), (cool, samples[:16])):
        for path in sorted(folder.glob("c008-r*.toml")):
            run = read_toml(path)
            end = chosen[-1].t + 0.5
            run["telemetry"] = telemetry.summarize(chosen, 0.0, end, run["total_output_tokens"], 0.5, 5.0)
            before, after = metrics.parse(SCRAPE_BEFORE), metrics.parse(SCRAPE_AFTER)
            run["server"] = telemetry.server_view(before, after, [before, after], 2000, 8)
            atomic_write_toml(path, run)
    return root


def test_the_report_flags_the_throttled_point_and_cautions_the_recommendation(hot_tree):
    data = report.build(judged_cells(hot_tree))
    text = report.render_markdown(data, report.render_plots(data))
    throttling = text.split("## Throttling", 1)[1].split("\n## ", 1)[0]
    assert "**THROTTLED** spark-1 · uns-fast · marlin c=8: 3 of 3 window(s)" in throttling
    assert "sw_power_cap" in throttling.replace("\\_", "_") and "cutlass" not in throttling
    what_to_run = text.split("## What to run", 1)[1].split("\n## ", 1)[0]
    assert "**Run marlin.**" in what_to_run and "Caution: built on throttled windows" in what_to_run
    problems = text.split("## Problems", 1)[1].split("\n## ", 1)[0]
    assert "**1** throttled point(s)" in problems, "the page leads with the problems, throttling among them"
    assert text.index("## Problems") < text.index("## Medians")
    medians = text.split("## Medians", 1)[1].split("\n## ", 1)[0]
    assert [line for line in medians.splitlines() if "THROTTLED" in line] == [
        line for line in medians.splitlines() if "| marlin |" in line
    ]
    energy = text.split("## Energy and the server's view", 1)[1].split("\n## ", 1)[0]
    assert "J/token" in energy and "KV max" in energy and "preemptions" in energy
    assert "YES (sw_power_cap)" in energy.replace("\\_", "_")
    assert any(name.startswith("telemetry-") for name in report.render_plots(data))


def test_a_point_is_throttled_only_when_a_successful_window_was():
    tele = telemetry.summarize(h200_samples(), 0.0, 52.0, 10, 0.5, 5.0)
    runs = [{"concurrency": 1, "repeat": 1, "ok": False, "telemetry": tele}]
    assert not tj.point_telemetry(1, runs).throttled
    runs.append({"concurrency": 1, "repeat": 2, "ok": True, "telemetry": tele})
    assert tj.point_telemetry(1, runs).throttled


def test_export_carries_the_telemetry_and_server_fields(hot_tree):
    rows = export.rows(judged_cells(hot_tree))
    table = list(csv.DictReader(io.StringIO(export.to_csv(rows))))
    marlin = [r for r in table if r["backend"] == "marlin"]
    assert marlin and all(r["telemetry.throttled"] == "True" for r in marlin)
    assert all(float(r["telemetry.joules_per_output_token"]) > 0 for r in marlin)
    assert marlin[0]["server.vllm:num_preemptions_total"] == "3.0"
    assert marlin[0]["server.vllm:kv_cache_usage_perc.max"] == "0.4"
    assert "telemetry.timeline" not in table[0]


def test_cells_without_telemetry_still_report(tmp_path):
    root = tmp_path / "results"
    write_cell(root, backend="marlin", values={1: [10.0, 11.0]})
    summaries = summary.summarize_cells(judged_cells(root))
    assert tj.cell_telemetry(summaries[0].cell)[1].no_telemetry.startswith("no telemetry recorded")
    data = report.build(judged_cells(root))
    assert "No window carries GPU telemetry." in report.render_markdown(data, [])
