"""`spark-agent site` from a SQLite store, looked at in headless Chromium (Debian's): the index links every sweep's
report and every configuration's history, the pages render with their plots, and at a laptop's width nothing
spills sideways."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from agent.cli import main
from agent.store import db
from tests.test_store import NEW, OLD, sweep

pytestmark = pytest.mark.integration
WATCH_PAGE = "20261120T101500-0123456789ab.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    root = tmp / "results"
    sweep(root, "nv-2511", OLD, 1.0, "2026-11-01")
    sweep(root, "nv-2601", NEW, 0.8, "2026-11-20")
    url = f"sqlite:///{tmp / 'store.sqlite'}"
    assert main(["store", "ingest", str(root), "--store", url]) == 0
    watched = root / "watch" / "nv"  # a page `watch` wrote, and what is not one of its pages
    watched.mkdir(parents=True)
    (watched / WATCH_PAGE).write_text("<html>what changed</html>")
    (watched / "notes.html").write_text("not a watch page")
    site_argv = ["site", "--out", str(tmp / "site"), "--store", url, "--results-root", str(root)]
    assert main(site_argv) == 0
    assert main(site_argv) == 0  # rebuilt: swapped in whole
    db.close_all()
    assert not [p for p in tmp.iterdir() if p.name.startswith(".site")]
    return tmp / "site"


def test_the_index_counts_what_the_store_and_the_tree_hold(site):
    """answers_audit: "Sweeps (N)" is the store's count of sweep runs, the store holds the tree once, no "inf"."""
    from tests import answers_audit

    store, root = site.parent / "store.sqlite", site.parent / "results"
    problems = answers_audit.site_matches_store((site / "index.html").read_text(), store)
    assert not problems + answers_audit.store_matches_tree(store, root)


def test_index_links_watch_pages(site):
    index = (site / "index.html").read_text()
    assert f'href="watch/nv/{WATCH_PAGE}"' in index and (site / "watch" / "nv" / WATCH_PAGE).is_file()
    assert "notes.html" not in index and not (site / "watch" / "nv" / "notes.html").exists()


def test_index_links_every_sweep_and_config(site):
    index = (site / "index.html").read_text()
    for name in ("nv-2511", "nv-2601"):
        assert f'href="sweeps/{name}/report.html"' in index and (site / "sweeps" / name / "report.html").is_file()
    links = [part.split('"', 1)[0] for part in index.split('href="history/')[1:]]
    assert len(links) == 2 and all((site / "history" / link).is_file() for link in links)
    assert "2 regression(s)" in index  # marlin at c=1 and c=8
    # each run's verdict counts are its judgement's (the report's Provenance): WRONG OUTPUT counted, not dropped
    heads = ["valid", "INVALID", "failed", "WRONG OUTPUT"]
    assert "".join(f"<th>{h}</th>" for h in heads) in index
    marlin = next(link for link in links if "<h1>uns-fast / marlin</h1>" in (site / "history" / link).read_text())
    page = (site / "history" / marlin).read_text()
    assert page.count("regression (0.80") == 2 and 'href="../index.html"' in page


def screenshot(url: str, out: Path, size: str, profile: Path) -> np.ndarray:
    cmd = [
        "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--hide-scrollbars", f"--window-size={size}", f"--screenshot={out}", url,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    import matplotlib.image

    return matplotlib.image.imread(str(out))[..., :3]


def colourful(img: np.ndarray) -> float:
    """Share of saturated pixels: the plots' lines and markers (the page's own styles are grey and pastel)."""
    return float(((img.max(axis=2) - img.min(axis=2)) > 0.35).mean())


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed")
@pytest.mark.parametrize("page", ["index.html", "history", "sweeps/nv-2601/report.html"])
def test_pages_render_in_headless_chromium_at_laptop_width(site, page, tmp_path):
    path = site / page if page != "history" else sorted((site / "history").glob("*.html"))[0]
    img = screenshot(path.as_uri(), tmp_path / "shot.png", "1366,1600", tmp_path / "profile")
    assert float((img.mean(axis=2) < 0.9).mean()) > 0.01  # something is drawn
    if page != "index.html":
        assert colourful(img) > 1e-3  # the plots loaded (history: a PNG file next to it; report: embedded)


@pytest.mark.attack("site: `site --out DIR` deletes whatever DIR is (a results tree and its store)")
def test_site_out_replaces_only_a_site(tmp_path, capsys):
    from tests.hostile import snapshot

    root = tmp_path / "results"
    sweep(root, "nv-2511", OLD, 1.0, "2026-11-01")
    url = f"sqlite:///{root / 'store.sqlite'}"  # the store inside the tree, as `store ingest` makes it by default
    assert main(["store", "ingest", str(root), "--store", url]) == 0
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep\n")
    link = tmp_path / "link"
    link.symlink_to(other)
    before = snapshot(tmp_path)
    for out in (root, other, link):
        capsys.readouterr()
        assert main(["site", "--out", str(out), "--store", url]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--out {out}" in err[0], err
    db.close_all()
    assert snapshot(tmp_path) == before  # nothing touched, the store included
    site = tmp_path / "site"
    site.mkdir()  # an empty folder is fine, and what it becomes is a site the next run may replace
    assert main(["site", "--out", str(site), "--store", url]) == 0
    assert main(["site", "--out", str(site), "--store", url]) == 0
    db.close_all()
    assert (site / "index.html").is_file() and (root / "store.sqlite").is_file()
