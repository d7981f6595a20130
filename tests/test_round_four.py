"""Issue 48, the findings that need no host: long-decode rows from a tree or the store (KeyError, zlib errors,
ValueError, compressed bombs), store strings without a length bound, and generated malformed inputs (Hypothesis)
for the timer's, pin's and the long-decode rows' readers. Each input ends in one line (exit 2), a warning naming
the skipped record, or a clean read: never a traceback, a hang or a MemoryError."""

from __future__ import annotations

import base64
import json
import shutil
import time
import tomllib
import zlib
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from agent.errors import UserError
from agent.escape import has_control
from agent.hostside import docker
from agent.judging import longdecode
from agent.results import longrows, tree
from agent.running import imageref, timer
from tests.test_malformed_inputs import SETTINGS, VALUES, capped, one_line

pytestmark = pytest.mark.unit


def _row(path: str = "c1") -> dict[str, Any]:
    """A long-decode row as an honest host's output becomes one (judging's own summarize)."""
    ids = list(range(1000, 1400))
    output = {"id": "long-1", "path": path, "text": " ".join(f"w{i}" for i in ids), "token_ids": ids,
              "chunk_tokens": list(range(1, 401)), "chunk_chars": list(range(5, 2005, 5)), "error": "", "seconds": 1.5}  # fmt: skip
    return dict(longdecode.summarize(output, 64))


def _bomb(inflated: int = 16 * 1024 * 1024) -> str:
    """A few tens of KB of base64 that inflate to `inflated` bytes."""
    z = zlib.compressobj(9)
    chunk = bytes(1024 * 1024)
    data = b"".join(z.compress(chunk) for _ in range(inflated // len(chunk))) + z.flush()
    return base64.b64encode(data).decode()


HOSTILE_ROWS = {
    "no seq": {k: v for k, v in _row().items() if k != "seq"},
    "seq not base64": {**_row(), "seq": "not base64!"},
    "seq not zlib": {**_row(), "seq": base64.b64encode(b"garbage").decode()},
    "seq cut short": {**_row(), "seq": base64.b64encode(zlib.compress(bytes(400))[:-6]).decode()},
    "seq of 3 bytes": {**_row(), "seq": base64.b64encode(zlib.compress(b"abc")).decode()},
    "a compressed bomb": {**_row(), "seq": _bomb()},
    "a bomb in at": {**_row(), "units": "words", "at": _bomb()},
    "units": {**_row(), "units": "../x"},
    "tokens": {**_row(), "tokens": -5},
    "seconds": {**_row(), "seconds": float("nan")},
    "excerpt": {**_row(), "excerpt": "x" * 100_000},
    "a list": ["id", "path"],
}


@pytest.mark.attack("long-decode rows: a compressed bomb, KeyError, zlib and base64 errors in a tree's cell.toml")
@pytest.mark.parametrize("case", sorted(HOSTILE_ROWS))
def test_a_hostile_long_row_in_a_tree_is_skipped_with_one_warning(tmp_path, case):
    from tests.test_report_fixtures import write_cell

    folder = write_cell(tmp_path / "results", backend="marlin", values={1: [50.0]})
    record = tomllib.loads((folder / "cell.toml").read_text())
    record["correctness"] = {"probed": True, "score": 1.0, "long": [_row("batch"), HOSTILE_ROWS[case]]}
    (folder / "cell.toml").write_text(tomli_w.dumps(record))
    warned: list[str] = []
    with capped():
        cells = tree.load_cells(tmp_path / "results", on_bad=lambda p, why: warned.append(why))
    assert cells == [] and len(warned) == 1 and "correctness.long" in warned[0], warned


def test_an_honest_long_row_is_read_and_compared():
    a, b = _row(), _row("batch")
    assert longrows.problem(a, "r") == "" and longrows.problem({**a, "units": "words", "at": a["seq"]}, "r") == ""
    assert longdecode.first_divergence(a, b) == (-1, 1.0)
    assert len(longrows.decode(a["seq"])) == 4 * 400


@pytest.fixture(scope="module")
def store_file(tmp_path_factory) -> Path:
    from agent.cli import main
    from agent.store import db
    from tests.test_store import OLD, sweep

    tmp = tmp_path_factory.mktemp("store")
    sweep(tmp / "results", "nv-2511", OLD, 1.0, "2026-11-01")
    assert main(["store", "ingest", str(tmp / "results"), "--store", f"sqlite:///{tmp / 'store.sqlite'}"]) == 0
    db.close_all()
    return tmp / "store.sqlite"


def _store_with(tmp_path: Path, store_file: Path, table: str, column: str, value: Any) -> str:
    from agent.store import db

    path = tmp_path / "store.sqlite"
    shutil.copy(store_file, path)
    url = f"sqlite:///{path}"
    with db.open_store(url).begin() as conn:
        conn.execute(
            sa.text(f"UPDATE {table} SET {column} = :v WHERE id = (SELECT min(id) FROM {table})"), {"v": value}
        )
    return url


@pytest.mark.attack("store: a 32 MiB text in a sweep's name or a cell's record makes `site` slow; a bomb in a row")
@pytest.mark.parametrize(
    ("table", "column", "what"),
    [("sweeps", "name", "huge"), ("cells", "record", "huge"), ("cells", "record", "bomb"), ("cells", "host", "huge")],
)
def test_a_huge_or_bombed_store_row_is_one_line_at_once(tmp_path, store_file, table, column, what):
    from agent.cli import main
    from agent.store import db

    huge = "x" * (32 * 1024 * 1024)
    if column == "record":
        with db.open_store(f"sqlite:///{store_file}").connect() as conn:
            record = json.loads(conn.execute(sa.text("SELECT record FROM cells ORDER BY id LIMIT 1")).scalar_one())
        db.close_all()
        if what == "huge":
            record["verdict_reasons"] = [huge]
        else:
            record["correctness"] = {"probed": True, "long": [{**_row(), "seq": _bomb()}]}
        value: Any = json.dumps(record)
    elif column == "host":
        table, column, value = "hosts", "name", huge
    else:
        value = huge
    try:
        url = _store_with(tmp_path, store_file, table, column, value)
        started = time.monotonic()
        assert main(["site", "--store", url, "--out", str(tmp_path / "site")]) == 2
        assert time.monotonic() - started < 10  # it was about 30 s, and linear in the row
    finally:
        db.close_all()


# --- generated malformed inputs (Hypothesis) ----------------------------------------------------------------------

WORDS = st.text(alphabet=st.characters(codec="utf-8"), max_size=30) | st.sampled_from(
    ["a\nb", "x\r", "\x1b[2J", "tab\there", "\u2028", "\u202e", "%h", "$HOME", '"', "\\", "#", "* * * * *"]
)


@SETTINGS
@given(argv=st.lists(WORDS, min_size=1, max_size=6), folder=WORDS)
def test_generated_timer_arguments_are_refused_or_one_line_each(tmp_path_factory, argv, folder):
    words = ["spark-agent", "watch", *argv]
    workdir = Path("/srv") / folder.replace("/", "_")
    with capped():
        try:
            timer.check_argv(words, workdir)
        except UserError as exc:
            one_line(exc)
            assert any(has_control(w) for w in [*words, str(workdir)])
            return
    assert not any(has_control(w) for w in [*words, str(workdir)])
    line = timer.cron_line("w", words, workdir, 3600)
    assert "\n" not in line and line.endswith("  # spark-agent-watch-w")
    service = timer.service_text("w", words, workdir, {"SPARK_AGENT_CONFIG": str(workdir / "w.toml")})
    assert [x.split("=", 1)[0] for x in service.splitlines() if "=" in x] == [
        "Description", "Type", "WorkingDirectory", "Environment", "ExecStart", "SuccessExitStatus",
    ]  # fmt: skip


TAG = "nvcr.io/nvidia/vllm:26.01-py3"
GOOD = "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32


def _mutations() -> st.SearchStrategy[object]:
    near = st.tuples(st.integers(0, len(GOOD)), st.integers(0, 3), WORDS).map(
        lambda t: GOOD[: t[0]] + t[2] + GOOD[t[0] + t[1] :]
    )
    return near | VALUES | st.sampled_from([GOOD + "\n", " " + GOOD, "evil.example/x@sha256:" + "ab" * 32, GOOD * 9])


@SETTINGS
@given(answer=_mutations())
def test_generated_pin_answers_are_the_exact_pinned_form_or_one_line(answer):
    with capped():
        try:
            got = imageref.checked(TAG, answer, "spark-a")
        except UserError as exc:
            one_line(exc)
            assert not has_control(exc.message)
            return
    assert got == answer and docker.is_pinned(got) and docker.same_repository(got, TAG)


@SETTINGS
@given(data=st.data(), value=VALUES)
def test_generated_long_rows_are_refused_in_one_line_or_compare(data, value):
    good = _row()
    key = data.draw(st.sampled_from([*good, "extra"]))
    packed = data.draw(
        st.binary(max_size=64).map(lambda b: base64.b64encode(zlib.compress(b)).decode())
        | st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode())
        | st.just(value)
    )
    row = {**good, key: packed if key in ("seq", "at") else value}
    with capped():
        problem = longrows.problem(row, "correctness.long[0]")
        if problem:
            assert "\n" not in problem and problem.startswith("'correctness.long[0]")
            return
        at, share = longdecode.first_divergence(good, row)
        assert 0.0 <= share <= 1.0 and longdecode.verdict(row, at)
