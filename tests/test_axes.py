"""Any server-side axis in [matrix] (issue 15, section 1): the spec reads it, the plan makes the product minus the
exclusions (or the explicit combinations), ids cover every axis, and the report ranks each axis within the others
held equal and names every axis the data separates in "what to run"."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from agent.cli import main
from agent.errors import UserError
from agent.hostside import facts
from agent.judging import stats, summary
from agent.judging.correctness import judged_cells
from agent.planning import matrix
from agent.planning.spec import load_spec
from agent.reporting import compare
from agent.reporting import markdown as report
from tests.test_report_fixtures import write_cell, write_starts

pytestmark = pytest.mark.unit

DIGEST_A = "nvcr.io/nvidia/vllm@sha256:" + "0f" * 32
DIGEST_B = "nvcr.io/nvidia/vllm@sha256:" + "a1" * 32
MTP = '{"method":"mtp","num_speculative_tokens":2}'
HEAD = f"""[sweep]
name = "axes"

[image]
ref = "{DIGEST_A}"
vllm_version = "0.24.0"

[[checkpoints]]
name = "nv"
model = "nvidia/Qwen3.6-35B-A3B-NVFP4"
quant = "nvfp4"

[[checkpoints]]
name = "uns-fast"
model = "unsloth/Qwen3.6-35B-A3B-NVFP4-fast"
quant = "nvfp4"

[load]
prompt_len = 512
output_len = 128
"""
GB10 = facts.classify_gpu({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}, facts.load_gpu_rules())


def plan(tmp_path: Path, matrix_toml: str, head: str = HEAD) -> list[matrix.Cell]:
    path = tmp_path / "spec.toml"
    path.write_text(head + "\n" + matrix_toml)
    return matrix.plan_cells(load_spec(path), "spark-1", GB10, {"spark_runtime": "docker"})


def spec_error(tmp_path: Path, matrix_toml: str, head: str = HEAD) -> str:
    with pytest.raises(UserError) as exc:
        plan(tmp_path, matrix_toml, head)
    return exc.value.message


# ---------------------------------------------------------------- planning


def test_every_server_axis_env_variant_and_exclusion_make_the_cells(tmp_path):
    cells = plan(
        tmp_path,
        f"""[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [1, 4]
max_num_seqs = [8, 16]
speculative = ["off", {{ method = "mtp", num_speculative_tokens = 2 }}]
kv_cache_dtype = ["auto", "fp8"]

[matrix.env]
rules = {{}}
no-dg = {{ VLLM_USE_DEEP_GEMM = "1" }}

[[matrix.exclude]]
moe_backend = "flashinfer_b12x"
speculative = '{MTP}'
""",
    )
    # 2 checkpoints x 2 backends x 2 env x 2 max_num_seqs x 2 speculative x 2 kv = 64, less b12x+mtp (16)
    assert len(cells) == 48
    assert len({c.id for c in cells}) == 48  # every axis is in the id
    assert not [c for c in cells if c.config.moe_backend == "flashinfer_b12x" and c.config.server.speculative]
    one = next(
        c
        for c in cells
        if c.config.env_variant == "no-dg"
        and c.config.server.max_num_seqs == 8
        and c.config.server.kv_cache_dtype == "fp8"
        and c.config.server.speculative
    )
    assert one.env["VLLM_USE_DEEP_GEMM"] == "1"  # the variant's override, recorded as such
    assert any(p["name"] == "VLLM_USE_DEEP_GEMM" and p["action"] == "set" for p in one.provenance)
    assert one.argv[one.argv.index("--max-num-seqs") + 1] == "8"
    assert one.argv[one.argv.index("--kv-cache-dtype") + 1] == "fp8"
    assert json.loads(one.argv[one.argv.index("--speculative-config") + 1])["method"] == "mtp"
    table = one.config.to_dict()
    assert table["env_variant"] == "no-dg" and table["kv_cache_dtype"] == "fp8"
    assert "env=no-dg" in one.label and "max_num_seqs=8" in one.label and "spec=mtp" in one.label


def test_settings_at_their_defaults_keep_todays_ids(tmp_path):
    """A kv_cache_dtype of "" and prefix caching on are vLLM's defaults: left out of [config], the id unchanged."""
    base = plan(tmp_path, '[matrix]\nmoe_backend = ["marlin"]\nconcurrency = [1]\n')
    same = plan(tmp_path, '[matrix]\nmoe_backend = ["marlin"]\nconcurrency = [1]\nkv_cache_dtype = [""]\n')
    assert [c.id for c in base] == [c.id for c in same]
    assert "kv_cache_dtype" not in base[0].config.to_dict() and "env_variant" not in base[0].config.to_dict()


def test_prefix_caching_axis_passes_the_boolean_flags(tmp_path):
    cells = plan(
        tmp_path, '[matrix]\nmoe_backend = ["marlin"]\nconcurrency = [1]\nenable_prefix_caching = [true, false]\n'
    )
    on, off = (c for c in cells if c.config.checkpoint == "nv")
    assert "--no-enable-prefix-caching" in off.argv and "--enable-prefix-caching" not in off.argv
    assert "prefix" not in " ".join(on.argv)  # vLLM's default: nothing passed, and the id as before
    assert on.config.to_dict().get("enable_prefix_caching") is None


def test_includes_list_a_sparse_design_and_images_and_checkpoints_are_axes(tmp_path):
    head = HEAD.replace(f'ref = "{DIGEST_A}"\n', "")  # with an image axis, [image] ref may be left out
    cells = plan(
        tmp_path,
        f"""[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [1]
checkpoint = ["uns-fast"]
image = ["{DIGEST_A}", "{DIGEST_B}"]

[[matrix.include]]
moe_backend = "marlin"

[[matrix.include]]
image = "{DIGEST_B}"
""",
        head,
    )
    got = sorted((c.config.checkpoint, c.config.moe_backend, c.config.image[-4:]) for c in cells)
    assert got == [
        ("uns-fast", "flashinfer_b12x", "a1a1"),
        ("uns-fast", "marlin", "0f0f"),
        ("uns-fast", "marlin", "a1a1"),
    ]
    assert all("image=sha256:" in c.label for c in cells)


@pytest.mark.parametrize(
    ("matrix_toml", "line", "says"),
    [
        ("max_num_seq = [8, 16]", 5, "unknown key 'max_num_seq' in [matrix]"),
        ("kv_cache_dtype = []", 5, "the 'kv_cache_dtype' axis in [matrix] is empty"),
        ('kv_cache_dtype = ["fp8", "fp8"]', 5, "lists a value twice"),
        ("max_num_seqs = [2]", 5, "max_num_seqs 2 is below concurrency 4"),
        ("max_model_len = [256]", 5, "max_model_len 256 is below prompt_len + output_len (640)"),
        ("gpu_memory_utilization = [0.5, 1.5]", 5, "must be in (0, 1]"),
        ('checkpoint = ["uns"]', 5, "names 'uns', not a [[checkpoints]] name: nv, uns-fast"),
        ('image = ["nvcr.io/nvidia/vllm:25.11-py3"]', 5, "pin it with: spark-agent pin"),
        ("env = {}", 5, "the 'env' axis in [matrix] is empty"),
        ('env = { "a b" = {} }', 5, "env variant names must be"),
        ('\n[[matrix.exclude]]\ncheckpoint = "nv"\n[[matrix.exclude]]\ncheckpoint = "uns-fast"', 6, "remove every"),
        ('\n[[matrix.exclude]]\nmoe = "marlin"', 7, "'moe' in [[matrix.exclude]] is not an axis of [matrix]"),
        ('\n[[matrix.include]]\nmoe_backend = "triton"', 7, "'triton' is not a value of the 'moe_backend' axis"),
        ('speculative = ["off"]\n[[matrix.include]]\nspeculative = "{bad"', 7, "speculative must be JSON"),
    ],
)
def test_bad_axes_name_the_line(tmp_path, matrix_toml, line, says):
    text = '[matrix]\nmoe_backend = ["marlin"]\nconcurrency = [1, 4]\n' + matrix_toml + "\n"
    message = spec_error(tmp_path, text)
    first = len((HEAD + "\n").splitlines())
    assert f"spec.toml:{first + line - 1}:" in message, message
    assert says in message and "\n" not in message


def test_an_axis_and_a_server_setting_of_the_same_name_is_refused(tmp_path):
    head = HEAD + "\n[server]\nmax_num_seqs = 16\n"
    message = spec_error(
        tmp_path, '[matrix]\nmoe_backend = ["marlin"]\nconcurrency = [1]\nmax_num_seqs = [8, 16]\n', head
    )
    assert "is set in [server] and is an axis in [matrix]" in message


def test_an_env_variant_value_is_never_echoed(tmp_path):
    secret = "hf_SeCrEt0123456789abcdef"
    message = spec_error(
        tmp_path,
        f'[matrix]\nmoe_backend = ["marlin"]\nconcurrency = [1]\n[matrix.env]\nt = {{ HF_TOKEN = "{secret}\\n" }}\n',
    )
    assert secret not in message and "env override 'HF_TOKEN'" in message


# ---------------------------------------------------------------- ranking any axis

C = [1, 2, 4, 8]


def test_two_checkpoints_on_one_backend_name_the_checkpoint(tmp_path):
    """The new user's case from the issue: 6-8% apart at every level, spreads under 2%, two interleaved server
    starts each (under 25% apart one start is not enough: test_starts.py): the checkpoint ranks."""
    write_starts(tmp_path, checkpoint="nv", backend="marlin", values={c: [93.0 * c, 93.5 * c, 92.6 * c] for c in C})
    write_starts(
        tmp_path, checkpoint="uns-fast", backend="marlin", values={c: [100.0 * c, 101.0 * c, 99.5 * c] for c in C}
    )
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert [q.axis for q in rec.questions] == ["checkpoint"]
    assert rec.winner == "uns-fast" and rec.choice == {"checkpoint": "uns-fast"}
    assert rec.questions[0].versus[0].backend == "nv" and rec.questions[0].versus[0].beaten_at == 4
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "**Run uns-fast.** uns-fast wins 4 of 4 head-to-head points" in text
    assert "measured slower: **nv**, 7% slower" in text


def test_each_axis_is_ranked_with_the_others_held(tmp_path):
    spec_on = {"speculative": MTP}
    for ck, k in (("nv", 1.0), ("uns-fast", 1.08)):
        for backend, b in (("marlin", 1.0), ("flashinfer_b12x", 0.5)):
            for extra, m in (({}, 1.0), (spec_on, 1.3)):
                v = 100.0 * k * b * m
                write_starts(
                    tmp_path,
                    checkpoint=ck,
                    backend=backend,
                    config=extra,
                    values={c: [v * c, v * c * 1.01, v * c * 0.99] for c in C},
                )
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert [q.axis for q in rec.questions] == ["backend", "checkpoint", "speculative"]
    assert rec.choice == {"backend": "marlin", "checkpoint": "uns-fast", "speculative": "mtp"}
    assert rec.winner == "marlin · uns-fast · speculative=mtp"
    by_axis = {q.axis: q for q in rec.questions}
    assert by_axis["checkpoint"].held == ["backend", "speculative"]
    assert len(by_axis["checkpoint"].matchups) == 4 * len(C)  # one pair per (backend, speculative)
    [cell] = rec.winner_cells
    assert (cell.checkpoint, cell.backend, cell.config["speculative"]) == ("uns-fast", "marlin", MTP)
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "#### checkpoint: **uns-fast**" in text and "Held equal: backend, speculative" in text
    assert "speculative=mtp" in text  # the medians table tells the cells apart


def test_an_undecided_axis_is_said_and_the_decided_one_still_named(tmp_path):
    for ck in ("nv", "uns-fast"):
        write_cell(tmp_path, checkpoint=ck, backend="marlin", values={c: [100.0 * c, 104.0 * c, 97.0 * c] for c in C})
        write_cell(
            tmp_path, checkpoint=ck, backend="flashinfer_b12x", values={c: [50.0 * c, 51.0 * c, 49.0 * c] for c in C}
        )
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner == "marlin" and [q.axis for q in rec.undecided] == ["checkpoint"]
    assert len(rec.winner_cells) == 2  # one command per checkpoint: the data cannot choose
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "**Run marlin; checkpoint undecided.**" in text


def test_the_env_rule_shows_its_effect_and_auto_is_what_it_loaded(tmp_path):
    """The FP8 default with and without the DeepGEMM rule: dies without it, runs with it (triton loaded)."""
    fp8 = dict(checkpoint="fp8", quant="fp8")
    rules, no_rule = {"env_variant": "rules"}, {"env_variant": "no-deep-gemm-rule"}
    write_starts(tmp_path, backend="triton", config=rules, values={c: [55.0 * c, 55.5 * c, 54.5 * c] for c in C}, **fp8)
    write_starts(tmp_path, backend="marlin", config=rules, values={c: [50.0 * c, 50.5 * c, 49.5 * c] for c in C}, **fp8)
    write_starts(
        tmp_path,
        backend="auto",
        config=rules,
        loaded="triton",
        values={c: [55.2 * c, 55.0 * c, 54.6 * c] for c in C},
        **fp8,
    )
    write_cell(
        tmp_path,
        backend="auto",
        config=no_rule,
        values={},
        status="failed",
        verdict="failed",
        failure_class="deep_gemm_assert",
        env={"VLLM_USE_DEEP_GEMM": "1"},
        **fp8,
    )
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner == "triton"  # auto loaded triton: the same choice, never ranked against it
    assert rec.questions[0].same == {"auto": "triton"} and [v.backend for v in rec.versus] == ["marlin"]
    [effect] = rec.effects
    assert effect.startswith("env_variant: with no-deep-gemm-rule the server failed to start (deep_gemm_assert)")
    assert "where rules ran" in effect
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "Effect on startup" in text and "auto loaded triton: the same choice" in text
    assert "failed to start: auto env_variant=no-deep-gemm-rule on fp8" in text


def test_rank_by_goodput_ranks_the_goodput_and_says_so(tmp_path):
    """Throughput favours marlin, goodput under the SLOs favours b12x: the ranking follows --rank-by."""
    for backend, tput, good in (("marlin", 100.0, 1.0), ("flashinfer_b12x", 50.0, 2.0)):
        folder = write_cell(
            tmp_path, backend=backend, values={c: [tput * c, tput * c * 1.01, tput * c * 0.99] for c in C}
        )
        for run in folder.glob("c*-r*.toml"):
            table = tomllib.loads(run.read_text())
            table["request_goodput"] = good * (1 + 0.01 * table["repeat"])
            run.write_text(tomli_w.dumps(table))
    assert main(["report", str(tmp_path), "--rank-by", "goodput"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "**Run flashinfer_b12x.**" in text and "Ranked by: goodput" in text and "`request_goodput`" in text
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "**Run marlin.**" in text and "Ranked by: output throughput" in text


def test_rank_by_goodput_without_slos_says_why_it_cannot_rank(tmp_path):
    write_cell(tmp_path, backend="marlin", values={c: [100.0, 101.0, 99.0] for c in C})
    write_cell(tmp_path, backend="flashinfer_b12x", values={c: [50.0, 51.0, 49.0] for c in C})
    summaries = summary.summarize_cells(judged_cells(tmp_path), metric="request_goodput")
    [rec] = stats.recommend(summaries, metric="request_goodput")
    assert rec.winner is None and "no window records request_goodput" in rec.reason


def test_a_sparse_design_that_left_the_winning_combination_out_says_so(tmp_path):
    """nv wins the checkpoint at MTP off, MTP wins on uns-fast; nv with MTP was never measured."""
    write_starts(tmp_path, checkpoint="nv", backend="marlin", values={c: [108.0 * c, 109.0 * c, 107.0 * c] for c in C})
    write_starts(
        tmp_path, checkpoint="uns-fast", backend="marlin", values={c: [100.0 * c, 101.0 * c, 99.0 * c] for c in C}
    )
    write_starts(
        tmp_path,
        checkpoint="uns-fast",
        backend="marlin",
        config={"speculative": MTP},
        values={c: [130.0 * c, 131.0 * c, 129.0 * c] for c in C},
    )
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.choice == {"checkpoint": "nv", "speculative": "mtp"} and rec.winner_cells == []
    assert rec.winner is None  # never offered to run: nv with MTP never ran
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "**No measured configuration to run.**" in text and "**Run " not in text
    assert "(nv · speculative=mtp) were never measured together" in text and "Command (" not in text


def test_compare_keeps_an_image_axis_apart(tmp_path):
    """Two trees that each swept an image axis: every (image, backend) is compared with its own twin, none lost."""
    for side, k in (("a", 1.0), ("b", 0.8)):
        for image in (DIGEST_A, DIGEST_B):
            write_cell(tmp_path / side, backend="marlin", image=image, values={1: [100.0 * k, 101.0 * k, 99.0 * k]})
    cmp = compare.compare(judged_cells(tmp_path / "a"), judged_cells(tmp_path / "b"))
    assert len(cmp.diffs) == 2 and not cmp.only_a and not cmp.only_b
    assert {d.status for d in cmp.diffs} == {compare.REGRESSION}
    assert len({d.label for d in cmp.diffs}) == 2  # the labels name the image


def _reference_ci(a, b, seed, resamples=2000, confidence=0.95):
    """The bootstrap as first written (rng.choices + statistics.median): the fast one must give the same numbers."""
    import math
    import random
    import statistics

    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        mb = statistics.median(rng.choices(b, k=len(b)))
        ma = statistics.median(rng.choices(a, k=len(a)))
        ratios.append(ma / mb if mb else math.inf)
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    return ratios[int(tail * (resamples - 1))], ratios[math.ceil((1.0 - tail) * (resamples - 1))]


@pytest.mark.parametrize("seed", range(12))
def test_the_fast_bootstrap_gives_the_reference_numbers(seed):
    import random

    rng = random.Random(1000 + seed)
    a = [rng.uniform(0, 100) for _ in range(rng.randint(1, 7))]
    b = [rng.uniform(0, 100) for _ in range(rng.randint(1, 7))]
    if seed % 4 == 0:
        b[0] = 0.0  # a zero median somewhere: the ratio is inf, as before
        b = [0.0] * len(b)
    assert stats.bootstrap_ratio_ci(a, b, seed=seed) == _reference_ci(a, b, seed)
    assert stats.bootstrap_ratio_ci(a, b, seed=seed, resamples=501, confidence=0.9) == _reference_ci(
        a, b, seed, 501, 0.9
    )


def test_the_fast_random_stream_is_randoms_own():
    import random

    fast = stats._randoms(random.Random(42), 1000).tolist()
    slow_rng = random.Random(42)
    assert fast == [slow_rng.random() for _ in range(1000)]


def test_export_rows_name_every_axis(tmp_path):
    from agent.reporting import export

    write_cell(tmp_path, backend="marlin", config={"env_variant": "no-dg", "max_num_seqs": 8}, values={1: [1.0, 2.0]})
    [row, _] = export.rows(judged_cells(tmp_path))
    assert row["env_variant"] == "no-dg" and row["max_num_seqs"] == 8 and row["kv_cache_dtype"] == ""
