"""Issue 40: hostile input, round three. Each test tries one attack the third review reproduced against main: the
store steering the site's writes, store rows of the wrong type, a sweep named like the calibration, `init -o`
through a dangling link, a deep config.json, YAML alias bombs in inventories, damaged [correctness] tables and
redaction gaps. The multi-node peers and the archive fetch bound, which need hosts, are in test_round_three_hosts.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.cli import main
from agent.store import db
from agent.store.schema import cells, measurements
from tests.test_store import NEW, OLD, sweep

pytestmark = pytest.mark.unit


@pytest.fixture
def store(tmp_path: Path) -> str:
    root = tmp_path / "results"
    sweep(root, "nv-2511", OLD, 1.0, "2026-11-01")
    sweep(root, "nv-2601", NEW, 0.8, "2026-11-20")
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert main(["store", "ingest", str(root), "--store", url]) == 0
    yield url
    db.close_all()


def _set(url: str, table: sa.Table, **values: object) -> None:
    """Raw SQL, as anyone with the file or the database would write it (no SQLAlchemy type on the way)."""
    with db.open_store(url).begin() as conn:
        for column, value in values.items():
            raw = value if isinstance(value, str | int | float | bytes) else json.dumps(value)
            conn.execute(sa.text(f"UPDATE {table.name} SET {column} = :v"), {"v": raw})


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


# --- 1. the store steers the site ----------------------------------------------------------------------------


@pytest.mark.attack("store: a row's config_key is a path and `site` writes .html and .png outside --out")
@pytest.mark.parametrize("key", ["../../escaped", "/tmp/abs-escape", "..", "a/b", "x\x00y", "0123456789abcdef/.."])
def test_site_never_writes_outside_out(store, tmp_path, capsys, key):
    _set(store, cells, config_key=key)
    before = _files(tmp_path)
    out = tmp_path / "deep" / "site"
    out.parent.mkdir()
    assert main(["site", "--out", str(out), "--store", store]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config_key" in err[0] and "cells row" in err[0]
    assert _files(tmp_path) == before and list(out.parent.iterdir()) == []


def test_the_site_hashes_a_name_of_another_shape_and_guards_every_write(tmp_path):
    from agent.reporting import site

    assert site.page_name("0123456789abcdef") == "0123456789abcdef"
    for key in ("../x", "/etc/passwd", "..", ""):
        name = site.page_name(key)
        assert name.startswith("config-") and "/" not in name and ".." not in name
    root = tmp_path / "site"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    for path in (root / ".." / "x.html", root / "link" / "x.html", Path("/tmp/x.html"), root):
        with pytest.raises(ValueError):
            site.inside(root, path)
    assert site.inside(root, root / "history" / "a.html") == root / "history" / "a.html"


@pytest.mark.attack("store: a file that is not a database gives an internal error")
def test_a_file_that_is_no_database_is_one_line(tmp_path, capsys):
    bogus = tmp_path / "store.sqlite"
    bogus.write_bytes(b"this is not SQLite\n" * 100)
    for argv in (
        ["history", "--store", f"sqlite:///{bogus}"],
        ["site", "--out", str(tmp_path / "s"), "--store", f"sqlite:///{bogus}"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "store" in err and "internal error" not in err


@pytest.mark.attack(
    "store: a row of the wrong type (text for a number, a record that is no table) is an internal error"
)
@pytest.mark.parametrize(
    ("table", "values", "readers"),
    [
        (measurements, {"output_throughput": "fast"}, ("history", "site")),
        (measurements, {"concurrency": "many"}, ("history", "site")),
        (measurements, {"output_throughput": 1e400}, ("history", "site")),
        (cells, {"started_at": b"\xff2026"}, ("history", "site")),
        (cells, {"record": ["not", "a", "table"]}, ("report", "site")),
        (cells, {"record": {"cell_id": 7, "host": "h", "config": {}}}, ("report", "site")),
        (cells, {"record": "{not json"}, ("report", "site")),
        (measurements, {"data": {"concurrency": "x"}}, ("report", "site")),
    ],
)
def test_a_wrong_typed_row_is_one_line_and_exit_2(store, tmp_path, capsys, table, values, readers):
    _set(store, table, **values)
    argv = {
        "history": ["history", "--store", store],
        "site": ["site", "--out", str(tmp_path / "s"), "--store", store],
        "report": ["report", "sweep=nv-2511", "--out", str(tmp_path / "r"), "--store", store],
    }
    for reader in readers:
        code = main(argv[reader])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and " row " in err[0] and "internal error" not in err[0], (reader, err)


# --- 3. a sweep named like the calibration -------------------------------------------------------------------


@pytest.mark.attack("calibrate: a sweep named `calibrate` becomes the fleet's calibration for a week")
@pytest.mark.parametrize("name", ["calibrate", "Calibrate", "CALIBRATE"])
def test_a_sweep_may_not_take_the_calibrations_name(tmp_path, capsys, name):
    from agent.paths import EXAMPLES

    spec = tmp_path / "spec.toml"
    spec.write_text((EXAMPLES / "quick.toml").read_text().replace('name = "quick"', f'name = "{name}"'))
    missing = str(tmp_path / "no-inventory.yml")  # were the name taken, nothing could reach a host either
    assert main(["sweep", str(spec), "-i", missing, "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{spec}:4" in err[0] and "reserved" in err[0]
    assert not (tmp_path / "results").exists()


# --- 4. init -o through a link ------------------------------------------------------------------------------


@pytest.mark.attack("init: `init -o FILE` writes through a dangling symlink to wherever it points")
def test_init_never_writes_through_a_link(tmp_path, capsys):
    target = tmp_path / "elsewhere" / "authorized_keys"
    target.parent.mkdir()
    out = tmp_path / "inv.yml"
    out.symlink_to(target)
    assert main(["init", "127.0.0.1", "-o", str(out), "--no-trust"]) == 2
    assert "exists" in capsys.readouterr().err and not target.exists() and out.is_symlink()
    # --force replaces the link itself (a temp file renamed over it); the target is never created
    assert main(["init", "127.0.0.1", "-o", str(out), "--no-trust", "--force"]) == 0
    assert not target.exists() and not out.is_symlink() and "spark-1" in out.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- 5. lint on a deep config.json ----------------------------------------------------------------------------


@pytest.mark.attack("lint: a model folder's config.json nested 100000 deep ends lint in a RecursionError")
@pytest.mark.parametrize("depth", [100_000, 900])
def test_lint_reads_config_json_bounded(tmp_path, capsys, depth):
    model = tmp_path / "model"
    model.mkdir()
    nested = "[" * depth + "]" * depth
    (model / "config.json").write_text(
        '{"quantization_config": {"quant_method": "fp8", "weight_block_size": ' + nested + "}}"
    )
    launch = tmp_path / "launch.sh"
    launch.write_text(f"vllm serve {model} --moe-backend marlin\n")
    code = main(["lint", str(launch), "--gpu", "gb10"])
    err = capsys.readouterr().err
    assert code in (0, 1) and "internal error" not in err and "Recursion" not in err


# --- 6. YAML alias bombs in inventories ------------------------------------------------------------------------


def _bomb(levels: int = 12) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTS = "all:\n  hosts:\n    spark-1: {ansible_host: 127.0.0.1}\n"


@pytest.mark.attack("inventory: a YAML alias bomb (inventory, group_vars, host_vars) hangs every command that reads it")
@pytest.mark.parametrize("where", ["inventory", "group_vars/all", "group_vars/all.yml", "host_vars/spark-1/vars.yml"])
def test_an_inventory_alias_bomb_is_refused_in_bounded_time(tmp_path, capsys, where):
    inv = tmp_path / "inv"
    (inv / where).parent.mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(_bomb() + HOSTS if where == "inventory" else HOSTS)
    if where != "inventory":
        (inv / where).write_text(_bomb())
    start = time.monotonic()
    assert main(["check", "-i", str(inv / "hosts.yml")]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "aliases" in err[0] and ("hosts.yml" if where == "inventory" else where) in err[0]


# --- 7. the [correctness] table of cell.toml --------------------------------------------------------------------


def _probed(root: Path, backend: str, **override: object) -> Path:
    import tomllib

    import tomli_w

    from tests.test_report_fixtures import write_cell

    folder = write_cell(root, backend=backend, values={1: [50.0, 51.0, 52.0]})
    record = tomllib.loads((folder / "cell.toml").read_text())
    record["correctness"] = {
        "probed": True, "set_version": 1, "prompts": 1, "answered": 1, "exact": 1, "score": 1.0, "degenerate": 0,
        "errors": 0, "seconds": 1.0, "thresholds": {"min_score": 0.0, "max_score_drop": 0.25, "min_agreement": 0.6,
        "max_degenerate": 0.1}, "reference": {},
        "outputs": [{"id": "a1", "kind": "arithmetic", "text": "4", "error": "", "exact": True, "degenerate": ""}],
    }  # fmt: skip
    for dotted, value in override.items():
        table = record["correctness"]
        *parents, last = dotted.split(".")
        for p in parents:
            table = table[int(p)] if isinstance(table, list) else table[p]
        table[last] = value
    (folder / "cell.toml").write_text(tomli_w.dumps(record))
    return folder


@pytest.mark.attack("records: a damaged [correctness] table (text a number, a threshold a string, score 1e308)")
@pytest.mark.parametrize(
    "damage",
    [
        {"outputs.0.text": 4},
        {"thresholds.min_agreement": "0.6"},
        {"score": 1e308},
        {"score": -0.5},
        {"answered": -3},
        {"outputs.0.exact": "yes"},
        {"reference.moe_backend": {"nested": 1}},
        {"outputs": [1, 2]},
    ],
)
def test_a_damaged_correctness_table_skips_its_cell_with_a_warning(tmp_path, capsys, damage):
    root = tmp_path / "results"
    _probed(root, "marlin")
    bad = _probed(root, "flashinfer_b12x", **damage)
    for argv in (["report", str(root)], ["export", str(root), "-o", str(tmp_path / "x.csv")],
                 ["compare", str(root), str(root)]):  # fmt: skip
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 1) and "internal error" not in err, (argv, err)
        assert f"{bad / 'cell.toml'}" in err and "correctness" in err and "skipped" in err, (argv, err)


# --- 8. redaction gaps ---------------------------------------------------------------------------------------


@pytest.mark.attack("redaction: secrets named *_PW, MYSQL_PWD, PGPASSWORD, or split by an invisible character")
@pytest.mark.parametrize(
    "name",
    [
        "MYSQL_PWD",
        "PGPASSWORD",
        "DB_PW",
        "redisPw",
        "SMTP_PWD_2",
        "HF_TO\u00adKEN",
        "HF\u200b_TOKEN",
        "API_K\U000e0041EY",
    ],
)
def test_secret_shaped_names_are_secret(name):
    from agent.hostside import redact

    assert redact.is_secret_name(name)
    assert "hunter2hunter2" not in redact.redact_text(f"{name}=hunter2hunter2")
    assert redact.redact_env({name: "hunter2hunter2"})[name] == redact.MARKER


def test_names_near_the_short_passwords_stay_shown():
    from agent.hostside import redact

    for name in ("PWD", "OLDPWD", "PW", "COMPASS", "max_tokens"):
        assert not redact.is_secret_name(name), name


@pytest.mark.attack("redaction: nvapi- keys, signed-URL signatures and tokens split by invisible characters are shown")
@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("key nvapi-" + "Ab3_" * 16, "Ab3_Ab3_Ab3_"),
        (
            "GET https://b.s3.amazonaws.com/m.bin?X-Amz-Credential=AKIDX%2F2026&X-Amz-Signature=9f8e7d6c5b4a39281706",
            "9f8e7d6c5b",
        ),
        ("https://storage.googleapis.com/b/o?X-Goog-Signature=0a1b2c3d4e5f6071&X-Goog-Date=1", "0a1b2c3d4e5f"),
        ("https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sig=Zm9vYmFyYmF6cXV4%3D&se=2026", "Zm9vYmFyYmF6"),
        (
            "https://d111.cloudfront.net/x?Expires=1&Signature=QWxhZGRpbjpvcGVu~c2VzYW1l&Key-Pair-Id=K2JCJMDEHXQW5F",
            "QWxhZGRpbjpvcGVu",
        ),
        ("token hf_\u00ad" + "Q" * 34, "QQQQQQQQQQ"),
        ("token hf_" + "Q" * 17 + "\U000e0020" + "Q" * 17, "QQQQQQQQQQ"),
        ("token gh\ufe0fp_" + "R" * 36, "RRRRRRRRRR"),
    ],
)
def test_key_shapes_and_signatures_are_masked(text, secret):
    from agent.hostside import redact

    shown = redact.redact_text(text)
    assert secret not in shown and redact.MARKER in shown


@pytest.mark.attack("escape: tag characters, soft hyphens, Hangul fillers and variation selectors reach a reader")
def test_every_invisible_character_is_kept_from_a_reader():
    from agent.reporting import escape

    for char in "\u00ad\u115f\u1160\u3164\uffa0\ufe00\ufe0f\U000e0001\U000e0041\U000e007f\U000e0100\u180e\u034f":
        for shown in (escape.plain(f"a{char}b"), escape.md(f"a{char}b"), escape.html(f"a{char}b")):
            assert char not in shown, (repr(char), shown)


# --- 2. the peers of a multi-node cell -----------------------------------------------------------------------


@pytest.mark.attack("multinode: a Spark of another owner (another ansible_user) joins a cell and shares its token")
def test_hosts_of_different_owners_never_share_a_cell_unless_the_spec_says_so(tmp_path):
    from agent.errors import UserError
    from agent.planning import multinode
    from agent.planning.spec import load_spec
    from tests.test_multinode_plan import sim, spec_file

    facts = {h: sim(f"127.0.9.{11 + i}") for i, h in enumerate("abcd")}
    owners = {"a": {"ansible_user": "alice"}, "b": {"ansible_user": "bob"}}
    spec = load_spec(spec_file(tmp_path))
    with pytest.raises(UserError) as err:
        multinode.choose(spec, ["a", "b"], facts, owners)
    assert "different owners (alice, bob)" in err.value.message and "one_trust_domain" in err.value.message
    # four hosts, two owners: each set stays within one owner
    four = {**owners, "c": {"ansible_user": "alice"}, "d": {"spark_owner": "bob", "ansible_user": "nvidia"}}
    sets = multinode.choose(spec, list("abcd"), facts, four).sets
    assert sorted(s.hosts for s in sets) == [["a", "c"], ["b", "d"]]
    # the spec says they are one trust domain: a and b may serve one cell
    trusted = spec_file(tmp_path)
    trusted.write_text(trusted.read_text().replace("[sweep]\n", "[sweep]\none_trust_domain = true\n"))
    assert [s.hosts for s in multinode.choose(load_spec(trusted), ["a", "b"], facts, owners).sets] == [["a", "b"]]


@pytest.mark.attack("spec: a [correctness] reference that matches no cell is ignored without a word")
def test_a_reference_no_cell_matches_is_refused(tmp_path, capsys):
    from agent.paths import EXAMPLES

    spec = tmp_path / "spec.toml"
    text = (EXAMPLES / "quick.toml").read_text()
    spec.write_text(text + '\n[correctness]\nreference = {moe_backend = "triton"}\n')
    assert main(["env", str(spec), "-i", str(tmp_path / "no-inventory.yml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matches no cell" in err[0] and str(spec) in err[0]
    spec.write_text(text + '\n[correctness]\nreference = {moe_backend = "marlin"}\n')
    from agent.planning.spec import load_spec

    assert load_spec(spec).correctness.reference == {"moe_backend": "marlin"}


@pytest.mark.attack("multinode: a Ray task in a node's container reads the cell's env file (its HF token), as root")
def test_a_ray_nodes_container_is_not_root_and_mounts_only_its_cell_folder(tmp_path):
    from agent.hostside import raynode

    env_file = "/home/nvidia/.spark-agent/env/0123456789ab.env"
    temp = str(raynode.cell_temp_dir("/tmp/spark-agent-ray", "0123456789ab"))
    pinned = "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32
    argv = raynode.container_argv(pinned, "n", "0123456789ab", env_file, temp, True, (1000, 1001), temp + "/auth_token")
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a in ("--volume", "-v", "--mount")]
    assert mounts == [f"{temp}:{temp}"]  # the env file is read by the docker CLI on the host, never mounted
    assert not env_file.startswith(temp) and not any(a.startswith("--privileged") or a == "--pid" for a in argv)
    assert argv[argv.index("--user") + 1] == "1000:1001" and argv[argv.index("--workdir") + 1] == f"{temp}/home"
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert f"HOME={temp}/home" in envs and not any("TOKEN=" in e for e in envs)  # the token by its file's path only
    with pytest.raises(raynode.RayError, match="mounts"):  # an env file inside the mounted folder is refused
        raynode.container_argv(pinned, "n", "0123456789ab", f"{temp}/x.env", temp, True, (1000, 1001))
    # never root in the container: a root login must name a non-root user; a non-root login keeps its own uid
    for spec in ("0:0", "root", "1000", "-1:5", "1000:x", "99999999999:1"):
        with pytest.raises(raynode.RayError):
            raynode.container_user(spec)
    if os.getuid() == 0:
        with pytest.raises(raynode.RayError, match="root"):
            raynode.container_user("")
        assert raynode.container_user("65534:65534") == (65534, 65534)
    else:
        assert raynode.container_user("") == (os.getuid(), os.getgid())
