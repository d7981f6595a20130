"""collect.finalize_cell from hand-made archives: what an honest host sends lands in the cell's folder; anything
else fails the cell as bad_host_data with the reason, and nothing outside results/<sweep>/<host>/<cell>/ changes.

Every archive is a real tar file made here (tarfile, GNU tar, or headers built by hand for what tarfile won't write).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from agent.results import tree as results
from agent.results.records import CellRecord
from agent.running import archive, collect
from agent.running.hostdata import MAX_REASON
from agent.store.db import DEFAULT_NAME as STORE
from tests.hostile import (
    CELL_ID,
    OTHER_CELL_ID,
    SCRIPT,
    add_members,
    good_files,
    make_cell,
    raw_header,
    raw_tar,
    run_json,
    snapshot,
    write_tar,
)

pytestmark = pytest.mark.unit

FACTS = {"gpu_name": "NVIDIA GB10", "arch": "gb10", "fingerprint": "0a1b2c3d"}
PATH_MAX = 4096


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A results root with a finished cell of another host and a victim file beside it, as targets to reach for."""
    root = tmp_path / "results"
    other = results.cell_dir(root, "hostile", "spark-b", OTHER_CELL_ID)
    other.mkdir(parents=True)
    (other / "cell.toml").write_text('schema = 1\ncell_id = "ba9876543210"\n')
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    return {
        "root": root,
        "other": other,
        "victim": victim,
        "tar": collect.incoming_tar(root, "hostile", "spark-a", CELL_ID),
    }


def finalize(world: dict[str, Path]) -> CellRecord:
    """finalize_cell with the filesystem around the results root snapshotted: only the cell's folder may change
    (and the incoming tar goes away)."""
    top = world["root"].parent
    cell = make_cell()
    before = snapshot(top)
    record = collect.finalize_cell(world["root"], cell, FACTS, time.time() - 5, time.time())
    after = snapshot(top)
    cell_part = str(results.cell_dir(world["root"], cell.sweep, cell.host, cell.id).relative_to(top))
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    incoming = str(world["tar"].relative_to(top))
    # allowed: the cell's folder and what is in it, the folders leading to it (created, or a new entry), the tar
    ancestors = {str(Path(x).parents[i]) for x in (cell_part, incoming) for i in range(len(Path(x).parents) - 1)}
    inside = {p for p in changed if p == cell_part or p.startswith(cell_part + os.sep)}
    # and the results store at the root, which indexes the cell as it lands (agent/store; -journal while it writes)
    store = {str((world["root"] / name).relative_to(top)) for name in (STORE, STORE + "-journal")}
    assert changed - inside - ancestors - {incoming} - store == set()
    assert all(Path(top, p).is_dir() for p in (changed & ancestors) if p in after)
    assert world["victim"].read_text() == "untouched\n"
    assert (world["other"] / "cell.toml").read_text() == 'schema = 1\ncell_id = "ba9876543210"\n'
    assert not world["tar"].exists()
    assert not list(Path(top, cell_part).glob(collect.STAGING_PREFIX + "*"))
    assert record is not None
    assert results.read_toml(Path(top, cell_part) / "cell.toml") == record.to_toml()
    return record


def assert_rejected(record: CellRecord, reason: str) -> None:
    assert record.status == "failed" and record.verdict == "failed"
    assert record.failure_class == collect.BAD_HOST_DATA
    assert record.runs_collected == 0
    assert reason in record.failure_evidence[0], record.failure_evidence
    assert len(record.failure_evidence[0]) <= MAX_REASON and "\n" not in record.failure_evidence[0]
    assert record.verdict_reasons[0].startswith("bad host data: ")


# ---------------------------------------------------------------- an honest host


def test_honest_archive_lands_in_the_cell_folder(world):
    write_tar(world["tar"], good_files())
    record = finalize(world)
    folder = results.cell_dir(world["root"], "hostile", "spark-a", CELL_ID)
    assert sorted(p.name for p in folder.iterdir()) == ["c001-r1.toml", "cell.toml", "launch.txt", "server.log"]
    assert record.status == "done" and record.failure_class == ""
    assert record.runs_collected == 1 and record.attestation["moe_backend"] == "marlin"
    assert record.launch.command.endswith("--moe-backend marlin")
    run = results.read_toml(folder / "c001-r1.toml")
    assert run["cell_id"] == CELL_ID and run["output_throughput"] == 96.0 and run["metrics_delta"]
    assert (folder / "server.log").read_bytes() == good_files()["server.log"]


def test_gnu_tar_of_the_run_folder_is_accepted(world, tmp_path):
    """GNU tar (another packer a host may use) writes the same flat regular members."""
    rundir = tmp_path / "run"
    rundir.mkdir()
    for name, data in good_files().items():
        (rundir / name).write_bytes(data)
    world["tar"].parent.mkdir(parents=True)
    names = sorted(p.name for p in rundir.iterdir())
    subprocess.run(["tar", "-C", str(rundir), "-cf", str(world["tar"])] + names, check=True)
    assert finalize(world).runs_collected == 1


def test_a_killed_load_driver_leftover_is_ignored(world):
    files = dict(good_files(), **{".tmp-abc123.json": b'{"partial'})
    write_tar(world["tar"], files)
    record = finalize(world)
    assert record.status == "done"
    folder = results.cell_dir(world["root"], "hostile", "spark-a", CELL_ID)
    assert not list(folder.glob(".tmp*"))


def test_a_fresh_rerun_replaces_the_previous_files(world):
    write_tar(world["tar"], dict(good_files(), **{"c001-r2.json": run_json(repeat=2)}))
    finalize(world)
    write_tar(world["tar"], {"server.log": b"x\n", "launch.txt": b"y\n", "serve.json": b'{"ready": false}'})
    finalize(world)
    folder = results.cell_dir(world["root"], "hostile", "spark-a", CELL_ID)
    assert sorted(p.name for p in folder.iterdir()) == ["cell.toml", "launch.txt", "server.log"]


def test_no_archive_means_nothing_came_back(world):
    assert collect.finalize_cell(world["root"], make_cell(), FACTS, 0.0, 1.0) is None


# ---------------------------------------------------------------- traversal, in every form we could find


def _member(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


TRAVERSAL = [
    ("../evil.txt", "not an expected file name"),
    ("../../victim.txt", "not an expected file name"),
    (f"../spark-b/{OTHER_CELL_ID}/cell.toml", "not an expected file name"),
    (f"../../hostile/spark-b/{OTHER_CELL_ID}/c001-r1.json", "not an expected file name"),
    ("/etc/cron.d/evil", "not an expected file name"),
    ("/tmp/c001-r1.json", "not an expected file name"),
    ("sub/server.log", "not an expected file name"),
    ("./server.log", "not an expected file name"),
    ("sub/../server.log", "not an expected file name"),
    ("..\\..\\evil.json", "not an expected file name"),
    ("c001-r1.json\\..", "not an expected file name"),
    ("cell.toml", "not an expected file name"),  # the name of a results file: never from a host
    ("c001-r1.toml", "not an expected file name"),
    (".", "not an expected file name"),
    ("..", "not an expected file name"),
    ("x" * 300 + "/server.log", "not an expected file name"),  # long: a pax path
]


@pytest.mark.parametrize(("name", "reason"), TRAVERSAL, ids=[repr(n[:40]) for n, _ in TRAVERSAL])
def test_traversal_names_are_refused(world, name, reason):
    add_members(world["tar"], [_member("server.log", b"log\n"), _member(name)])
    assert_rejected(finalize(world), reason)


def test_a_nul_in_a_pax_path_is_refused(world):
    info, data = _member("server.log")
    info.pax_headers = {"path": "server.log\x00/../../evil"}
    add_members(world["tar"], [(info, data)])
    assert_rejected(finalize(world), "not an expected file name")


def test_a_nul_in_a_ustar_name_ends_it(world):
    """The ustar name field ends at its first NUL: "server.log\\0../x" is server.log, here a second one."""
    raw_tar(world["tar"], [raw_header(b"server.log", 1), b"x", raw_header(b"server.log\x00../../evil", 1), b"y"])
    assert_rejected(finalize(world), "'server.log' appears twice")


def test_a_ustar_prefix_is_a_folder(world):
    raw_tar(world["tar"], [raw_header(b"server.log", 1, prefix=b"../.."), b"x"])
    assert_rejected(finalize(world), "ustar prefix")


def test_a_gnu_long_name_is_refused(world):
    add_members(world["tar"], [_member("../" * 60 + "server.log")], fmt=tarfile.GNU_FORMAT)
    assert_rejected(finalize(world), "GNU long name")


def test_a_non_utf8_name_is_refused(world):
    raw_tar(world["tar"], [raw_header(b"server\xff.log", 1), b"x"])
    assert_rejected(finalize(world), "not UTF-8")


# ---------------------------------------------------------------- links, devices, fifos, folders


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def _special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


LINKS = [
    ("symlink to a file outside", [_link("server.log", "../../../../victim.txt", tarfile.SYMTYPE)], "symbolic link"),
    ("symlink to /etc", [_link("c001-r1.json", "/etc/passwd", tarfile.SYMTYPE)], "symbolic link"),
    (
        "symlink then a write through it",
        [_link("launch.txt", "../../../../victim.txt", tarfile.SYMTYPE), _member("launch.txt", b"owned\n")],
        "symbolic link",
    ),
    ("hardlink to a file outside", [_link("server.log", "/etc/shadow", tarfile.LNKTYPE)], "hard link"),
    (
        "hardlink to an earlier member",
        [_member("launch.txt", b"x\n"), _link("server.log", "launch.txt", tarfile.LNKTYPE)],
        "hard link",
    ),
    ("character device", [_special("server.log", tarfile.CHRTYPE)], "character device"),
    ("block device", [_special("server.log", tarfile.BLKTYPE)], "block device"),
    ("fifo", [_special("serve.json", tarfile.FIFOTYPE)], "fifo"),
    ("directory", [_special("c001-r1.json", tarfile.DIRTYPE)], "directory"),
    ("contiguous file", [_special("server.log", tarfile.CONTTYPE)], "contiguous file"),
]


@pytest.mark.parametrize(("members", "reason"), [c[1:] for c in LINKS], ids=[c[0] for c in LINKS])
def test_links_devices_and_fifos_are_refused(world, members, reason):
    add_members(world["tar"], members)
    assert_rejected(finalize(world), reason)


def test_a_symlink_chain_longer_than_path_max_is_refused(world):
    """Links that point at links, each name long, the chain's path far beyond PATH_MAX."""
    names = [f"{i:03d}" + "l" * 250 for i in range(40)]
    members = [
        _link(a, b, tarfile.SYMTYPE) for a, b in zip(names, names[1:] + ["../" * 1000 + "victim.txt"], strict=True)
    ]
    members.append(_link("server.log", names[0], tarfile.SYMTYPE))
    assert sum(len(n) for n in names) > PATH_MAX
    add_members(world["tar"], members)
    assert_rejected(finalize(world), "symbolic link")


def test_duplicate_members_are_refused(world):
    """A second server.log would replace the first after it was checked."""
    add_members(world["tar"], [_member("server.log", b"a\n"), _member("server.log", b"b\n")])
    assert_rejected(finalize(world), "appears twice")


# ---------------------------------------------------------------- sparse and oversized


def test_gnu_sparse_member_from_gnu_tar_is_refused(world, tmp_path):
    """A real sparse file packed by GNU tar --sparse: a 1 GiB hole in a few KiB of archive."""
    rundir = tmp_path / "sparse-run"
    rundir.mkdir()
    with open(rundir / "server.log", "wb") as fh:
        fh.write(b"start\n")
        fh.truncate(1 << 30)
        fh.seek((1 << 30) - 4)
        fh.write(b"end\n")
    world["tar"].parent.mkdir(parents=True)
    subprocess.run(
        ["tar", "--sparse", "--format=gnu", "-C", str(rundir), "-cf", str(world["tar"]), "server.log"], check=True
    )
    assert world["tar"].stat().st_size < 1 << 20
    assert_rejected(finalize(world), "GNU sparse file")


def test_pax_sparse_member_from_gnu_tar_is_refused(world, tmp_path):
    rundir = tmp_path / "sparse-run"
    rundir.mkdir()
    with open(rundir / "server.log", "wb") as fh:
        fh.truncate(1 << 30)
        fh.write(b"x")
    world["tar"].parent.mkdir(parents=True)
    subprocess.run(
        ["tar", "--sparse", "--format=posix", "-C", str(rundir), "-cf", str(world["tar"]), "server.log"], check=True
    )
    assert_rejected(finalize(world), "sparse")


def test_pax_sparse_records_are_refused(world):
    info, data = _member("server.log", b"x")
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "server.log"}
    add_members(world["tar"], [(info, data)])
    assert_rejected(finalize(world), "sparse")


def test_an_oversized_member_is_refused_before_its_data_is_read(world):
    """The header claims 300 MiB of server.log; the archive is a sparse file of that size (no disk used)."""
    size = archive.MAX_LOG_BYTES + 1
    raw_tar(world["tar"], [raw_header(b"server.log", size)], end=False)
    os.truncate(world["tar"], 512 + size + 1024)
    assert_rejected(finalize(world), f"is {size} bytes, more than {archive.MAX_LOG_BYTES}")


@pytest.mark.parametrize("name", ["launch.txt", "serve.json", "c001-r1.json"])
def test_small_files_have_a_small_cap(world, name):
    data = b" " * (archive.MAX_FILE_BYTES + 1)
    write_tar(world["tar"], {name: data})
    assert_rejected(finalize(world), "more than")


def test_an_oversized_archive_is_refused_unread(world):
    write_tar(world["tar"], good_files())
    os.truncate(world["tar"], archive.MAX_ARCHIVE_BYTES + 1)  # a sparse file: fast, no disk used
    assert_rejected(finalize(world), "more than")


def test_too_many_members_are_refused(world):
    blocks = [raw_header(f"c001-r{i}.json".encode(), 0) for i in range(1, archive.MAX_MEMBERS + 2)]
    raw_tar(world["tar"], blocks)
    assert_rejected(finalize(world), f"more than {archive.MAX_MEMBERS} members")


def test_a_huge_pax_header_is_refused_unread(world):
    size = archive.MAX_PAX_BYTES + 1
    raw_tar(world["tar"], [raw_header(b"././@PaxHeader", size, kind=b"x")], end=False)
    os.truncate(world["tar"], 512 + (1 << 20))
    assert_rejected(finalize(world), "pax header of")


@pytest.mark.parametrize(
    ("blocks", "reason"),
    [
        ([raw_header(b"server.log", 10)], "truncated"),
        ([raw_header(b"server.log", 0)[:300] + b"\xff" * 212], "checksum"),
        ([raw_header(b"server.log", 0, size_field=b"\x80" + bytes(10) + b"\x01")], "base-256"),
        ([raw_header(b"server.log", 0, size_field=b"12345678901z")], "octal"),
        ([b"not a tar at all" * 32], "checksum"),
        ([raw_header(b"p", 12, kind=b"x"), b"99 path=x\n"], "malformed"),
    ],
    ids=["truncated", "checksum", "base256", "octal", "garbage", "bad-pax"],
)
def test_damaged_archives_are_refused(world, blocks, reason):
    raw_tar(world["tar"], blocks, end=False)
    assert_rejected(finalize(world), reason)


def test_the_incoming_tar_may_not_be_a_link(world):
    """fetch writes a regular file; a link there (planted by anyone) is not followed."""
    world["tar"].parent.mkdir(parents=True)
    write_tar(world["tar"].parent / "real.tar", good_files())
    world["tar"].symlink_to("real.tar")
    assert collect.finalize_cell(world["root"], make_cell(), FACTS, 0.0, 1.0) is None


# ---------------------------------------------------------------- the content of the files


CONTENT = [
    ("serve.json not JSON", {"serve.json": b"{ready: yes"}, "not valid JSON"),
    ("serve.json NaN", {"serve.json": b'{"ready": true, "startup_s": NaN}'}, "NaN is not a number"),
    ("serve.json a list", {"serve.json": b"[1, 2]"}, "expected an object"),
    ("serve.json ready is a string", {"serve.json": b'{"ready": "yes"}'}, "expected true or false"),
    (
        "serve.json failure class markup",
        {"serve.json": json.dumps({"ready": False, "failure": {"class": SCRIPT}}).encode()},
        "not a valid value",
    ),
    ("serve.json deep nesting", {"serve.json": b"[" * 100_000 + b"]" * 100_000}, "not valid JSON"),
    ("launch.txt not UTF-8", {"launch.txt": b"vllm serve \xff\xfe"}, "not UTF-8"),
    ("run file concurrency mismatch", {"c001-r1.json": run_json(concurrency=8)}, "holds concurrency 8"),
    ("run file infinite throughput", {"c001-r1.json": run_json(output_throughput=1e400)}, "Infinity is not a number"),
    ("run file absurd throughput", {"c001-r1.json": run_json(output_throughput=1e300)}, "not a finite number in"),
    ("run file negative tokens", {"c001-r1.json": run_json(total_output_tokens=-5)}, "not in"),
    ("run file error is a dict", {"c001-r1.json": run_json(error={"x": 1})}, "expected a string"),
    ("run file huge error", {"c001-r1.json": run_json(error="e" * 5000)}, "more than 4096"),
    ("run file ok missing", {"c001-r1.json": b'{"concurrency": 1, "repeat": 1}'}, "missing ok"),
    ("run file metrics key markup", {"c001-r1.json": run_json(metrics_delta={"<b>": 1.0})}, "not a valid value"),
]


@pytest.mark.parametrize(("files", "reason"), [c[1:] for c in CONTENT], ids=[c[0] for c in CONTENT])
def test_bad_content_is_refused(world, files, reason):
    write_tar(world["tar"], dict(good_files(), **files))
    record = finalize(world)
    assert_rejected(record, reason)
    folder = results.cell_dir(world["root"], "hostile", "spark-a", CELL_ID)
    assert sorted(p.name for p in folder.iterdir()) == ["cell.toml"], "nothing of a refused archive is kept"


def test_the_reason_is_one_bounded_line(world):
    name = "\n".join(["line"] * 400) + "\x1b[31m"
    add_members(world["tar"], [_member(name)])
    record = finalize(world)
    assert_rejected(record, "not an expected file name")
    assert "\x1b" not in record.failure_evidence[0]


def test_markup_in_a_log_is_kept_as_data(world):
    """Script in server.log is the log's business: stored as is (escaped where shown, see test_escape)."""
    files = good_files()
    files["server.log"] += f"ERROR {SCRIPT} [bold]x[/bold]\n".encode()
    write_tar(world["tar"], files)
    finalize(world)
    folder = results.cell_dir(world["root"], "hostile", "spark-a", CELL_ID)
    assert SCRIPT.encode() in (folder / "server.log").read_bytes()


# ---------------------------------------------------------------- the path parts themselves


@pytest.mark.parametrize(
    ("sweep", "host", "cell_id"),
    [
        ("..", "spark-a", CELL_ID),
        ("hostile", "../spark-b", CELL_ID),
        ("hostile", "spark-a/../../x", CELL_ID),
        ("hostile", "/etc", CELL_ID),
        ("hostile", ".hidden", CELL_ID),
        ("hostile", "spark-a", "../" + OTHER_CELL_ID),
        ("hostile", "spark-a", "0123456789AB"),
        ("hostile", "spark-a", "0123456789abc"),
        ("hostile", "spark-a", ""),
    ],
)
def test_path_parts_cannot_escape(world, sweep, host, cell_id):
    with pytest.raises(ValueError):
        collect.incoming_tar(world["root"], sweep, host, cell_id)
    with pytest.raises(ValueError):
        results.cell_dir(world["root"], sweep, host, cell_id)


def test_record_bad_host_data_writes_only_the_cell(world):
    top = world["root"].parent
    before = snapshot(top)
    record = collect.record_bad_host_data(world["root"], make_cell(), FACTS, "serve result: bad", 0.0, 1.0)
    assert record.failure_class == collect.BAD_HOST_DATA
    new = set(snapshot(top)) - set(before) - {os.path.join("results", STORE)}  # the store indexes it
    assert all(p.startswith(os.path.join("results", "hostile", "spark-a")) for p in new), new
