"""agent.reporting.markdown and `spark-agent report`: the content of report.md / report.html, the plots, the terminal table,
and the HTML rendered by a real headless Chromium."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from agent.cli import main
from agent.judging.correctness import judged_cells
from agent.reporting import markdown as report
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

C = [1, 2, 4, 8, 16]
DEEP_GEMM_ASSERT = 'assert cached is not None, "DeepGemmQuantScaleFMT oracle cache not initialized"'


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    for ck, bpt in (("nv", 2_730_000_000), ("uns-fast", 3_150_000_000)):  # 100 and 86.7 tok/s at 273 GB/s
        write_cell(
            root,
            checkpoint=ck,
            backend="marlin",
            values={c: [60.0 * c, 61.0 * c, 59.0 * c] for c in C},
            checkpoint_info={"bytes_per_token": bpt},
        )
        write_cell(
            root, checkpoint=ck, backend="flashinfer_b12x", values={c: [25.0 * c, 30.0 * c, 40.0 * c] for c in C}
        )  # 2× slower, spread 50%
    fp8 = dict(checkpoint="fp8", quant="fp8", env={"VLLM_USE_DEEP_GEMM": "0"})
    write_cell(root, backend="triton", values={c: [55.0 * c, 55.5 * c, 54.5 * c] for c in C}, **fp8)
    write_cell(root, backend="marlin", values={c: [50.0 * c, 50.5 * c, "request timeout"] for c in C}, **fp8)
    write_cell(
        root,
        backend="cutlass",
        values={c: [999.0, 1000.0, 1001.0] for c in C},
        verdict="invalid",
        verdict_reasons=["moe: requested cutlass, loaded TRITON"],
        loaded="triton",
        **fp8,
    )
    write_cell(
        root,
        backend="deep_gemm",
        values={},
        status="failed",
        verdict="failed",
        failure_class="deep_gemm_assert",
        failure_evidence=[DEEP_GEMM_ASSERT],
        **fp8,
    )
    assert main(["report", str(root)]) == 0
    return root


def section(md: str, title: str) -> str:
    start = md.index(title)
    end = md.find("\n## ", start + len(title))
    return md[start : end if end > 0 else None]


def test_what_to_run_names_the_winner_per_format_with_margin(tree):
    md = (tree / "report.md").read_text()
    nvfp4 = section(md, "### gb10 · nvfp4")
    # the two checkpoints measured the same: the backend is decided, the checkpoint is not
    assert "**Run marlin; checkpoint undecided.**" in nvfp4
    assert "#### checkpoint: **undecided**" in nvfp4 and "Held equal: backend" in nvfp4
    assert "Margin: 2.00× over the runner-up, flashinfer_b12x" in nvfp4
    assert "measured slower: **flashinfer_b12x**, 2.0× slower" in nvfp4  # 60 / 30 at every point
    assert "vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4" in nvfp4 and "--moe-backend marlin" in nvfp4
    assert "CUTE_DSL_ARCH=sm_121a vllm serve" in nvfp4
    fp8 = section(md, "### gb10 · fp8")
    # triton leads by 9% on one server start each: inside what a restart can move, so not named (test_starts.py)
    assert "**Undecided.** triton leads marlin by 9.5%, under 25% on 2 of 2 cells with fewer than 2" in fp8
    assert "1 more start each measures it (2 starts × 4.0 min = 8 min)" in fp8  # the cells' elapsed_s: 240 s each
    assert "Noise floor: between server starts unknown" in fp8
    assert "**Run triton.**" not in fp8 and "measured slower" not in fp8.split("### gb10 · nvfp4")[0]
    assert "cutlass" not in fp8.split("Not ranked")[0]  # the INVALID cell is never the winner nor a loser
    assert "- failed to start: deep_gemm on fp8 (class `deep_gemm_assert`)" in fp8
    assert "- INVALID: cutlass on fp8 (moe: requested cutlass, loaded TRITON)" in fp8


def test_unstable_failed_and_invalid_are_listed_apart_with_evidence(tree):
    md = (tree / "report.md").read_text()
    unstable = section(md, "## Unstable points")
    assert "nv/flashinfer_b12x c=8: spread 50.0% > 10%; repeats 200.0, 240.0, 320.0 tok/s" in unstable
    assert "marlin" not in unstable
    failed_runs = section(md, "## Failed runs")
    assert "fp8/marlin c=16 repeat 3: request timeout" in failed_runs
    invalid = section(md, "## INVALID cells")
    assert "fp8/cutlass" in invalid and "requested cutlass, loaded TRITON" in invalid
    failed = section(md, "## Failed cells")
    assert "class `deep_gemm_assert`" in failed and DEEP_GEMM_ASSERT in failed


def test_medians_table_and_provenance(tree):
    md = (tree / "report.md").read_text()
    assert "| spark-1 | uns-fast | marlin | valid | 4 | 240.0 | 3.3% | 236.0–244.0 |" in md
    assert "| spark-1 | fp8 | marlin | valid | 2 | 100.5 | 1.0% | 100.0–101.0 |" in md  # failed run left out
    assert "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32 in md
    assert "vLLM version (from the server log): 0.24.0" in md
    assert "fingerprint a1b2c3d4" in md
    assert "6 valid, 1 INVALID, 1 failed" in md


def test_percent_of_bandwidth_ceiling_at_c1(tree):
    md = (tree / "report.md").read_text()
    ceiling = section(md, "## Single stream vs the bandwidth ceiling")
    assert "gb10 · marlin: 273 GB/s" in ceiling
    assert "| nv | 2,730,000,000 | 100.0 | 60.0 | 60.0 |" in ceiling  # 1000 / median TPOT at c=1
    assert "| uns-fast | 3,150,000,000 | 86.7 | 60.0 | 69.2 |" in ceiling
    assert "uns-fast vs nv: bytes predict -13.3%, measured +0.0%: not explained by bytes" in ceiling
    assert "flashinfer_b12x" not in ceiling  # no checkpoint_info on those cells


def test_plots_are_real_pngs_with_content(tree):
    for name in report.PLOTS:
        img = _read_png(tree / name)
        assert img.shape[0] > 200 and img.shape[1] > 400
        assert _non_white(img) > 0.01


def test_terminal_table_shows_medians_spreads_verdicts(tree):
    from rich.console import Console

    console = Console(width=220, record=True)
    console.print(report.terminal_table(judged_cells(tree)))
    text = console.export_text()
    assert "240.0 (3.3%)" in text and "240.0 (50.0%) !" in text
    assert "INVALID" in text and "failed: deep_gemm_assert" in text
    assert "gb10·nvfp4: marlin" in text and "gb10·fp8: undecided" in text


def test_missing_folder_is_a_user_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such results folder" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed")
def test_html_renders_in_headless_chromium_with_plots(tree, tmp_path):
    html = (tree / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(report.PLOTS)
    assert "Run marlin; checkpoint undecided." in html and "<table>" in html
    shot = tmp_path / "shot.png"
    cmd = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--hide-scrollbars",
        "--window-size=1300,5000",
        f"--screenshot={shot}",
        (tree / "report.html").as_uri(),
    ]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    img = _read_png(shot)
    assert _non_white(img) > 0.02
    # Only the plots have saturated colour (lines, markers); the page's own styles are black, grey and pastel.
    assert _colourful(img) > 1e-3


def _read_png(path: Path) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(str(path))[..., :3]


def _non_white(img: np.ndarray) -> float:
    return float((img.min(axis=2) < 0.9).mean())


def _colourful(img: np.ndarray) -> float:
    hi, lo = img.max(axis=2), img.min(axis=2)
    return float((((hi - lo) / np.maximum(hi, 1e-6) > 0.5) & (hi > 0.3)).mean())
