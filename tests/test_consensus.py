"""The reference no host can forge and the long-output detectors, without hosts: the consensus choice on synthetic
agreement matrices; the loop, noise and collapse detectors on real text (written for this project) that goes bad,
and on real text that does not; positions in tokens from the streamed chunks; the spec's bad long-decode input."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import probe
from agent.judging import consensus, correctness, longdecode, summary
from agent.planning.settings import CorrectnessSettings
from agent.planning.spec import load_spec
from agent.sim import answers, options
from tests.test_correctness import _run

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def _matrix(n: int, pairs: dict[tuple[int, int], float], default: float = 0.0) -> list[list[float]]:
    m = [[1.0 if i == j else default for j in range(n)] for i in range(n)]
    for (i, j), v in pairs.items():
        m[i][j] = m[j][i] = v
    return m


def test_the_consensus_is_the_cell_most_others_agree_with_across_hosts():
    # 0 and 1 on spark-a agree; 2 on spark-b agrees with 1 only; 3 on spark-c agrees with nobody
    hosts = ["spark-a", "spark-a", "spark-b", "spark-c"]
    m = _matrix(4, {(0, 1): 0.9, (1, 2): 0.8})
    choice = consensus.choose(hosts, m, m, 0.6)
    assert choice.index == 1 and sorted(choice.supporters) == [0, 2] and "across 2 hosts" in choice.how
    assert choice.suspicious == [3]


def test_many_agreeing_cells_of_one_host_lose_to_fewer_cells_agreeing_across_two():
    # a hostile host with three cells that echo each other vs two honest hosts that agree with each other
    hosts = ["evil", "evil", "evil", "spark-a", "spark-b"]
    m = _matrix(5, {(0, 1): 1.0, (0, 2): 1.0, (1, 2): 1.0, (3, 4): 0.9})
    choice = consensus.choose(hosts, m, m, 0.6)
    assert choice.index in (3, 4) and "across 2 hosts" in choice.how


def test_a_perfect_forger_that_shares_only_the_shipped_answers_is_suspicious_not_the_yardstick():
    # overall agreement is high (the task answers match) but the open-ended outputs share nothing
    hosts = ["spark-a", "spark-b", "spark-c"]
    overall = _matrix(3, {(0, 1): 0.95, (0, 2): 0.81, (1, 2): 0.81})
    open_ended = _matrix(3, {(0, 1): 0.75, (0, 2): 0.0, (1, 2): 0.0})
    choice = consensus.choose(hosts, overall, open_ended, 0.6)
    assert choice.index in (0, 1) and choice.suspicious == [2]


def test_no_consensus_when_nobody_agrees_and_the_only_cell_is_its_own_reference():
    m = _matrix(2, {(0, 1): 0.1})
    assert consensus.choose(["a", "b"], m, m, 0.6).index is None
    assert consensus.choose(["a"], [[1.0]], [[1.0]], 0.6).index == 0
    assert consensus.choose([], [], [], 0.6).index is None


def test_ties_go_to_the_callers_first_candidate():
    m = _matrix(3, {(0, 1): 0.9, (1, 2): 0.9, (0, 2): 0.9})
    assert consensus.choose(["a", "b", "c"], m, m, 0.6).index == 0


SYMBOLS = ["#", "|", "0", "}", "==", "((", "42", "%%", ";"]
PROSE = (
    "The survey ship reached the outer moon three weeks late. The engineer walked the length of the hull with a "
    "lamp, counting rivets out of habit, and found two that had worked loose in the cold. She wrote them down in "
    "the log, next to the note about the pump that hummed at night, and went to find the captain, who was asleep "
    "in the galley with a mug of cold tea beside him. In the morning they argued about the landing site: the "
    "geologist wanted the ridge, where the ice was thin and the rock was old, and the pilot wanted the plain, where "
    "nothing could go wrong that he had not already seen go wrong somewhere else. "
)


def _row(text: str, tokens_per_chunk: int = 1) -> dict:
    """A long output as a server without token ids streams it: one chunk per word."""
    words = text.split(" ")
    pieces = [w + " " for w in words]
    chunk_tokens, chunk_chars, chars = [], [], 0
    for i, p in enumerate(pieces, 1):
        chars += len(p)
        chunk_tokens.append(i * tokens_per_chunk)
        chunk_chars.append(chars)
    return {"id": "long-1", "path": "c1", "text": "".join(pieces), "token_ids": [], "chunk_tokens": chunk_tokens,
            "chunk_chars": chunk_chars, "error": "", "seconds": 1.0}  # fmt: skip


@pytest.mark.parametrize(
    ("tail", "kind"),
    [
        (" ".join(["and then the engineer walked the length of the hull again."] * 20), "loop"),
        (" the" * 200, "loop"),
        ("".join(chr(c) for c in (1, 2, 0xFFFD, 3, 27, 8)) * 120, "noise"),
        ("雨が降っている。今日は静かな日です。船は港に停まっている。" * 20, "collapse"),
        (" ".join(map(random.Random(3).choice, [SYMBOLS] * 500)), "collapse"),
    ],
)
def test_real_text_that_goes_bad_is_caught_where_it_turns(tail, kind):
    clean = PROSE * 3
    row = longdecode.summarize(_row(clean + tail), 64)
    assert row["degenerate"] == kind
    words_before = len(clean.split())
    assert abs(row["degenerate_at"] - words_before) <= 12, (row["degenerate_at"], words_before)
    assert row["excerpt"] and row["units"] == "words"


@pytest.mark.parametrize(
    "text",
    [
        # a paragraph said twice, then the text moves on: no loop (a loop repeats to the end, three times or more)
        PROSE * 2 + "Then the radio crackled, and the voice from the relay station asked them to wait a day.",
        PROSE * 3 + "la la la la la la la.",  # a short refrain at the end
        PROSE * 3 + "Table: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.",
        PROSE * 3 + "She said: « Nous partirons demain à l'aube », and nobody answered.",
    ],
)
def test_real_text_that_stays_text_is_not_degenerate(text):
    assert longdecode.summarize(_row(text), 64)["degenerate"] == ""


def test_positions_are_tokens_from_the_streamed_counts_and_divergence_is_found():
    # two tokens per word: the onset is reported in tokens, not words
    clean = PROSE * 3
    row = longdecode.summarize(_row(clean + " the" * 200, tokens_per_chunk=2), 64)
    assert abs(row["degenerate_at"] - 2 * len(clean.split())) <= 24
    ids = list(range(1000))
    a = longdecode.summarize({"id": "long-1", "path": "c1", "text": PROSE, "token_ids": ids}, 64)
    b = longdecode.summarize({"id": "long-1", "path": "c1", "text": PROSE, "token_ids": ids[:600] + [7] * 400}, 64)
    at, share = longdecode.first_divergence(a, b)
    assert at == 600 and share == 0.6 and b["degenerate"] == "loop" and b["degenerate_at"] == 600
    assert longdecode.verdict(b, at) == "loop" and longdecode.verdict(a, -1) == "identical"
    assert longdecode.first_divergence(a, a) == (-1, 1.0)


def test_the_simulators_faults_are_checked():
    assert answers.parse_faults("marlin:late@6000, draft:1,graph:0.5") == [
        answers.Fault("marlin", late=6000),
        answers.Fault("draft", rate=1.0),
        answers.Fault("graph", rate=0.5),
    ]
    assert answers.Fault("draft", rate=1).hits("marlin", speculative=True, eager=False)
    assert not answers.Fault("draft", rate=1).hits("marlin", speculative=False, eager=False)
    assert answers.Fault("graph", rate=1).hits("marlin", speculative=False, eager=False)
    assert not answers.Fault("graph", rate=1).hits("marlin", speculative=False, eager=True)
    for bad in ("marlin:late@0", "marlin:late@x", "draft"):
        with pytest.raises(options.UsageError):
            options.parse(["uns-fast", "--sim-wrong-output", bad])
    said = [" w"] * 10
    assert answers.gone_bad("p", 6, said, 10)[:6] == said[:6] and answers.gone_bad("p", 6, said, 10)[6:] != said[6:]
    assert answers.gone_bad("p", 60, said, 10) == said


SPEC = (REPO / "examples" / "quick.toml").read_text().replace("max_model_len = 262144", "max_model_len = 8192")


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ("long_decode = true\nlong_tokens = 8000", "long_tokens = 8000 does not fit: give 1 to 7936"),
        ('reference = { moe_backend = "cutlass" }', "matches no cell of the matrix"),
        ("long_prompts = 9", "'long_prompts' must be from 1 to 4"),
    ],
)
def test_bad_long_decode_input_names_the_spec_line(tmp_path, table, said):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC + f"\n[correctness]\n{table}\n")
    with pytest.raises(UserError) as exc:
        load_spec(path)
    line = len(SPEC.splitlines()) + 3 + (1 if table.startswith("long_decode") else 0)
    assert exc.value.exit_code == 2 and said in exc.value.message and f":{line}:" in exc.value.message, exc.value


def test_the_default_long_decode_fits_the_context(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    spec = load_spec(path)
    assert spec.correctness.long_tokens == 8192 - 256  # the default 8192 cut to what max_model_len leaves
    assert not spec.correctness.long_decode  # minutes per cell: the spec turns it on


def _long_cell(cell_id: str, host: str, extra_args: list[str], ids: list[int]) -> dict:
    """A valid probed cell with one long output alone and in a batch (token ids), and a healthy short probe."""
    run = _run()
    run["long"] = [
        {"id": "long-1", "path": path, "text": PROSE, "token_ids": ids, "chunk_tokens": [], "chunk_chars": []}
        for path in ("c1", "batch")
    ]
    return {
        "cell_id": cell_id,
        "sweep": "s",
        "host": host,
        "status": "done",
        "verdict": "valid",
        "started_at": "2026-12-01T00:00:00Z",
        "config": {"checkpoint": "nv", "image": "i", "moe_backend": "marlin", "extra_args": extra_args},
        "correctness": correctness.table(run, CorrectnessSettings(long_decode=True)),
    }


def test_a_graph_fault_is_blamed_on_cuda_graphs_when_the_eager_twin_is_clean():
    clean = list(range(2000))
    graphs = _long_cell("aaaaaaaaaaaa", "spark-a", [], clean[:1500] + [9] * 500)
    eager = _long_cell("bbbbbbbbbbbb", "spark-a", ["--enforce-eager"], clean)
    eager_b = _long_cell("cccccccccccc", "spark-b", ["--enforce-eager"], clean)
    correctness.annotate([graphs, eager, eager_b])
    g = graphs["correctness"]
    assert summary.cell_verdict(graphs) == summary.WRONG_OUTPUT and g["broke_first"] == "graphs"
    assert any("broke under CUDA graphs" in r for r in g["wrong"]) and any("after token 1500" in r for r in g["wrong"])
    [path] = [p for p in g["long_paths"] if p["path"] == "graphs"]
    assert path["first_divergence"] == 1500 and path["follows"] == "loop" and path["against"] == "bbbbbbbbbbbb"
    assert summary.cell_verdict(eager) == summary.cell_verdict(eager_b) == "valid"
    assert "across 2 hosts" in eager["correctness"]["consensus"]


def _gated(cell_id: str, host: str, wrong: int) -> dict:
    """A probed cell that answered the task set at c=8, `wrong` of its answers wrong."""
    run = _run()
    run["batch_concurrency"] = 8
    run["batch_outputs"] = [
        {"id": t["id"], "text": " x" if i < wrong else " " + t["answer"], "finish_reason": "stop", "error": "",
         "seconds": 0.01}
        for i, t in enumerate(probe.tasks())
    ]  # fmt: skip
    settings = CorrectnessSettings(task_gate=True)
    cell = {"cell_id": cell_id, "sweep": "s", "host": host, "status": "done", "verdict": "valid",
            "started_at": "2026-12-01T00:00:00Z", "config": {"checkpoint": "nv", "image": "i", "moe_backend": cell_id},
            "correctness": correctness.table(run, settings)}  # fmt: skip
    return cell


def test_the_task_gate_holds_each_cell_to_97_percent_of_the_references_accuracy_at_its_highest_concurrency():
    ref, one_off, two_off = _gated("a" * 12, "spark-a", 0), _gated("b" * 12, "spark-b", 1), _gated("c" * 12, "x", 2)
    correctness.annotate([ref, one_off, two_off])
    assert ref["correctness"]["batch_score"] == 1.0 and ref["correctness"]["batch_answered"] == 48
    assert summary.cell_verdict(one_off) == "valid"  # 47/48 = 97.9%
    assert summary.cell_verdict(two_off) == summary.WRONG_OUTPUT  # 46/48 = 95.8%
    assert any("task accuracy at c=8 95.8% (46/48)" in r for r in two_off["correctness"]["wrong"])


def test_a_twin_is_found_on_the_cells_own_host_only_and_a_replica_of_the_reference_is_not_labelled_it():
    """Issue 47.3: spark-b's kernel is broken in eager mode too; spark-a's eager copy is clean. The blame must not
    say "only with CUDA graphs" on the strength of another host's twin, and the side-by-side table labels
    "reference" the reference's own host only (replicas share the cell id)."""
    from agent.reporting.correctness import table_lines

    clean = list(range(2000))
    broken = clean[:1500] + [9] * 500
    cells = [
        _long_cell("aaaaaaaaaaaa", "spark-a", [], clean),
        _long_cell("bbbbbbbbbbbb", "spark-a", ["--enforce-eager"], clean),
        _long_cell("aaaaaaaaaaaa", "spark-b", [], broken),
        _long_cell("bbbbbbbbbbbb", "spark-b", ["--enforce-eager"], broken),
        _long_cell("aaaaaaaaaaaa", "spark-c", [], clean),
    ]
    correctness.annotate(cells)
    for wrong in cells[2:4]:
        c = wrong["correctness"]
        assert summary.cell_verdict(wrong) == summary.WRONG_OUTPUT, c
        assert not any("only with CUDA graphs" in r for r in c["wrong"]), c["wrong"]
    from tests import answers_audit

    assert not answers_audit.correctness_blame(cells)
    rows = table_lines(summary.summarize_cells(cells))
    labelled = [r for r in rows if "| reference |" in r]
    assert len(labelled) == 1 and "WRONG" not in labelled[0], rows


def _probed(cell_id: str, host: str, backend: str, say=None) -> dict:
    from tests.test_correctness import _cell

    cell = _cell(cell_id, backend, _run(say))
    cell["host"] = host
    return cell


def _forger(p: dict) -> str:
    """Every shipped answer right, its own continuations: sane on its own, shared with no honest host."""
    return p["answer"] if p.get("answer") else " ".join(["the", "forged", "tale", "goes", "on"] * 4)


@pytest.mark.attack("correctness: one host, the only one its outputs agree with, is everyone's yardstick")
def test_one_hosts_word_marks_nothing_wrong_on_another_host():
    """Issue 48.2: two hosts that disagree (the hostile one with more, self-agreeing cells), and a named reference
    configuration that runs on the hostile host only: the honest hosts' cells are never WRONG OUTPUT on that one
    host's word; the judgement says the reference is not independent and keeps the disagreement as advisory."""
    honest = _probed("a" * 12, "spark-a", "marlin")
    forged = [_probed(c * 12, "evil", b, _forger) for c, b in (("b", "marlin"), ("c", "triton"), ("d", "cutlass"))]
    correctness.annotate([honest, *forged])
    assert summary.cell_verdict(honest) == "valid", honest["correctness"]["wrong"]
    assert correctness.NOT_INDEPENDENT in honest["correctness"]["consensus"]
    assert honest["correctness"]["advisory"], honest["correctness"]

    # the spec names the reference; only the hostile host ran that configuration; two honest hosts agree
    named = {"moe_backend": "triton"}
    cells = [_probed("e" * 12, "spark-a", "marlin"), _probed("e" * 12, "spark-b", "marlin")]
    cells.append(_probed("f" * 12, "evil", "triton", _forger))
    for c in cells:
        c["correctness"]["reference"] = named
    correctness.annotate(cells)
    assert [summary.cell_verdict(c) for c in cells[:2]] == ["valid", "valid"], [c["correctness"] for c in cells]
    assert "named by the spec" in cells[0]["correctness"]["consensus"]
    assert correctness.NOT_INDEPENDENT in cells[0]["correctness"]["consensus"]
    # with three hosts agreeing across two, a forger is still caught (the consensus is independent)
    third = [_probed("g" * 12, "spark-a", "marlin"), _probed("h" * 12, "spark-b", "triton")]
    third.append(_probed("i" * 12, "evil", "cutlass", _forger))
    correctness.annotate(third)
    assert summary.cell_verdict(third[2]) == summary.WRONG_OUTPUT and not third[2]["correctness"]["advisory"]
