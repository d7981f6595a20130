"""The steady-state rule (hostside/steady.py) on its own: the JIT and autotune wordings of real vLLM 0.24 logs, a
log read as it grows, and when warmup stops (steady, or the cap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.hostside import logparse, steady
from agent.sim import jit

pytestmark = pytest.mark.unit

LOGS = sorted((Path(__file__).parent / "data" / "logs" / "vllm-0.24-h200").glob("*.log"))
RULE = steady.Warmup(minimum=1, maximum=4, tolerance=0.05)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_every_jit_warning_of_a_real_log_is_a_jit_line(log):
    text = log.read_text(errors="replace")
    lines = text.splitlines()
    warned = [line for line in lines if "JIT compilation during inference" in line]
    assert all(steady.is_jit_line(line) for line in warned)
    assert len(warned) == logparse.parse(text)["jit_warning_count"]
    # the monitor's own announcement is no compile; nor is an ordinary request line
    assert not any(steady.is_jit_line(line) for line in lines if "JIT monitor activated" in line)
    assert not any(steady.is_jit_line(line) for line in lines if "POST /v1/completions" in line)


def test_startup_compiles_and_autotuning_read_as_jit_lines_the_cliff_does_not():
    assert steady.is_jit_line("INFO [backends.py:393] Compiling a graph for compile range (1, 8192) takes 7.09 s")
    assert steady.is_jit_line("INFO [autotuner.py:1] [AutoTuner]: Autotuning process starts ...")
    cliff = "[AutoTuner]: No tuned config covers fp4_gemm input_shapes=(1,); falling back ... to avoid this perf cliff."
    assert not steady.is_jit_line(cliff)  # a lasting fallback, counted apart (autotuner_cliff_count)
    assert steady.is_jit_line(jit.line("fused_moe_kernel"))  # the simulator's words are vLLM's


def test_a_log_watch_sees_only_what_was_written_since_it_last_looked(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("startup\n" + jit.line("startup_kernel") + "\n")
    watch = steady.LogWatch(str(log))
    assert watch.new_jit_lines() == []  # startup is before the first window
    with log.open("a") as f:
        f.write("INFO request\n" + jit.line("fused_moe_kernel") + "\nWARNING " + jit.line("_count")[:30])
    assert [line.split(": ")[1][:16] for line in watch.new_jit_lines()] == ["fused_moe_kernel"]
    with log.open("a") as f:  # the cut line's rest arrives
        f.write(jit.line("_count")[30:] + "\n")
    assert len(watch.new_jit_lines()) == 1
    assert watch.new_jit_lines() == []
    log.write_text("")  # truncated: read from its start again
    assert watch.new_jit_lines() == []
    assert steady.LogWatch(str(tmp_path / "missing.log")).new_jit_lines() == []


def test_warmup_stops_when_quiet_and_two_windows_agree():
    assert steady.settled([100.0], [0], RULE)[0] is False  # one window cannot agree with anything
    done, is_steady, why = steady.settled([100.0, 103.0], [0, 0], RULE)
    assert done and is_steady and why.startswith("steady")


def test_warmup_goes_on_while_the_log_shows_jit_even_when_windows_agree():
    assert steady.settled([100.0, 101.0], [3, 2], RULE)[0] is False
    assert steady.settled([100.0, 101.0, 101.5], [3, 2, 0], RULE)[:2] == (True, True)


def test_warmup_goes_on_while_windows_disagree_and_the_cap_holds():
    assert steady.settled([60.0, 80.0], [0, 0], RULE)[0] is False
    assert steady.settled([60.0, 80.0, 95.0], [0, 0, 0], RULE)[0] is False
    done, is_steady, why = steady.settled([60.0, 80.0, 95.0, 110.0], [0, 0, 0, 0], RULE)
    assert done and not is_steady and "warmup_max (4)" in why and "differ" in why
    done, is_steady, why = steady.settled([100.0] * 4, [0, 0, 0, 1], RULE)
    assert done and not is_steady and "JIT" in why


def test_warmup_is_the_minimum_and_zero_throughput_never_agrees():
    rule = steady.Warmup(minimum=3, maximum=5, tolerance=0.05)
    assert steady.settled([100.0, 100.0], [0, 0], rule)[0] is False
    assert steady.settled([100.0, 100.0, 100.0], [0, 0, 0], rule)[:2] == (True, True)
    assert steady.settled([0.0, 0.0], [0, 0], RULE)[0] is False
    assert not steady.Warmup(minimum=2).until_steady  # no tolerance: the fixed warmup of before
