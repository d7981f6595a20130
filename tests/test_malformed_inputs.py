"""Malformed inputs generated from the contracts' types (Hypothesis), not listed by hand: a spec, an inventory's
host vars and a cell.toml each get one value replaced by a value of another type or out of range. Every input
must end in one line (UserError: exit 2) or a warning naming the skipped record, never a traceback or a hang; each
runs under a time cap (SIGALRM) and a memory cap (tracemalloc's peak). Small by design: tens of seconds in CI.
"""

from __future__ import annotations

import contextlib
import math
import signal
import tomllib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.errors import UserError
from agent.paths import EXAMPLES
from agent.results import tree

pytestmark = pytest.mark.unit

SECONDS = 10  # per input: anything slower is a hang
PEAK_BYTES = 256 * 1024 * 1024  # per input: Python allocations at their peak
SETTINGS = settings(
    max_examples=15,
    deadline=None,  # the time cap is capped()'s, per input
    derandomize=True,  # the same inputs on every run: CI is reproducible
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@contextlib.contextmanager
def capped() -> Iterator[None]:
    def hang(signum: int, frame: Any) -> None:
        raise TimeoutError(f"an input took more than {SECONDS} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(SECONDS)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < PEAK_BYTES, f"an input took {peak} bytes at its peak"
    finally:
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# Values of every TOML/YAML type, the hostile ones included: another type than the contract's, NaN, infinities,
# 1e308, huge and negative numbers, control characters, deep nesting.
_SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -1.0, 1e-320]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["", "../../etc/passwd", "a\x00b", "x\ny", "\u202e\u00ad", "{{ lookup('pipe','id') }}"]),
)
VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def leaves(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value of a nested table (tables and lists included, so whole tables get replaced too)."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += leaves(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += leaves(v, (*prefix, i))
    return out


def replaced(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    import copy

    out = copy.deepcopy(data)
    holder = out
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return out


def toml_value(value: Any) -> bool:
    """What a TOML file can hold (no None; keys are text)."""
    try:
        tomli_w.dumps({"v": value})
    except (TypeError, ValueError):
        return False
    return True


def one_line(exc: UserError) -> None:
    assert exc.message and "\n" not in exc.message and "Traceback" not in exc.message, exc.message


# --- specs -----------------------------------------------------------------------------------------------------

SPEC = tomllib.loads((EXAMPLES / "quick.toml").read_text())
SPEC_PATHS = leaves(SPEC)


@SETTINGS
@given(path=st.sampled_from(SPEC_PATHS), value=VALUES.filter(toml_value))
def test_a_malformed_spec_is_one_line_or_loads(tmp_path_factory, path, value):
    from agent.planning.spec import load_spec

    spec = tmp_path_factory.mktemp("spec") / "spec.toml"
    spec.write_text(tomli_w.dumps(replaced(SPEC, path, value)))
    with capped():
        try:
            load_spec(spec)
        except UserError as exc:
            one_line(exc)
            assert str(spec) in exc.message


# --- inventories -------------------------------------------------------------------------------------------------

HOST_VARS = ["ansible_host", "ansible_port", "ansible_user", "spark_runtime", "spark_port", "spark_workdir",
             "spark_serve_env", "spark_bind_host", "spark_ray_port", "spark_host_scope", "ansible_ssh_private_key_file"]  # fmt: skip


@SETTINGS
@given(var=st.sampled_from(HOST_VARS), value=VALUES)
def test_a_malformed_inventory_is_one_line_or_loads(tmp_path_factory, var, value):
    from agent.planning.inventory import load_inventory

    inv = tmp_path_factory.mktemp("inv") / "hosts.yml"
    host = {"ansible_host": "127.0.0.1", "ansible_connection": "local", var: value}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"spark-1": host}}}, allow_unicode=True))
    with capped():
        try:
            load_inventory(inv)
        except UserError as exc:
            one_line(exc)


# --- records (cell.toml) --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict[str, Any]:
    from tests.test_report_fixtures import write_cell

    folder = write_cell(tmp_path_factory.mktemp("cell"), backend="marlin", values={1: [50.0, 51.0]})
    return tomllib.loads((folder / "cell.toml").read_text())


@SETTINGS
@given(data=st.data(), value=VALUES.filter(toml_value))
def test_a_malformed_record_is_skipped_with_a_warning_or_read(tmp_path_factory, record, data, value):
    from agent.reporting import markdown

    path = data.draw(st.sampled_from(leaves(record)))
    root = tmp_path_factory.mktemp("results")
    folder = root / "s" / "h" / "0123456789ab"
    folder.mkdir(parents=True)
    (folder / "cell.toml").write_text(tomli_w.dumps(replaced(record, path, value)))
    warned: list[tuple[Path, str]] = []
    with capped():
        cells = tree.load_cells(root, on_bad=lambda p, why: warned.append((p, why)))
        assert len(cells) + len(warned) == 1 and all(p.name == "cell.toml" for p, _ in warned)
        try:
            markdown.render_markdown(
                markdown.build(cells)
            )  # the report's judgement and text (no plots: they cost seconds)
        except UserError as exc:
            one_line(exc)


# --- store rows ------------------------------------------------------------------------------------------------

STORE_COLUMNS = [
    ("cells", "config_key"), ("cells", "record"), ("cells", "config"), ("cells", "verdict"), ("cells", "started_at"),
    ("cells", "source"), ("measurements", "concurrency"), ("measurements", "ok"), ("measurements", "window"),
    ("measurements", "output_throughput"), ("measurements", "data"), ("sweeps", "name"), ("sweeps", "ingested_by"),
]  # fmt: skip


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


@settings(SETTINGS, max_examples=8)
@given(column=st.sampled_from(STORE_COLUMNS), value=VALUES, raw=st.booleans())
def test_a_malformed_store_row_is_one_line_or_read(tmp_path_factory, store_file, column, value, raw):
    import json
    import shutil

    import sqlalchemy as sa

    from agent.store import db, history, select

    path = tmp_path_factory.mktemp("copy") / "store.sqlite"
    shutil.copy(store_file, path)
    url = f"sqlite:///{path}"
    stored = value if raw and isinstance(value, str | int | float | bool) else json.dumps(value, allow_nan=True)
    try:
        with capped():
            engine = db.open_store(url)
            with engine.begin() as conn:
                table, name = column  # one row: a unique column stays unique
                conn.execute(
                    sa.text(f"UPDATE {table} SET {name} = :v WHERE id = (SELECT min(id) FROM {table})"), {"v": stored}
                )
            try:
                select.load(engine, select.Selection())
                history.query(engine, select.Selection())
            except UserError as exc:
                one_line(exc)
    finally:
        db.close_all()
