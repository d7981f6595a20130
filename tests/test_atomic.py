"""hostside.atomic (whole files or none) and hostside.utc (the results tree's timestamps)."""

from __future__ import annotations

import json

import pytest

from agent.hostside import atomic, utc

pytestmark = pytest.mark.unit


def test_write_replaces_the_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "cell.toml"
    atomic.write_text(target, "old\n")
    atomic.write_bytes(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in target.parent.iterdir()] == ["cell.toml"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path):
    target = tmp_path / "server.json"
    atomic.write_json(target, {"pid": 1})
    with pytest.raises(RuntimeError), atomic.replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert json.loads(target.read_text()) == {"pid": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["server.json"]


def test_json_is_sorted_and_ends_with_a_newline(tmp_path):
    atomic.write_json(tmp_path / "c001-r1.json", {"b": 1, "a": [2]})
    assert (tmp_path / "c001-r1.json").read_text() == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'


def test_iso_is_utc_whole_seconds():
    assert utc.iso(0) == "1970-01-01T00:00:00Z"
    assert utc.iso(1764443400.9) == "2025-11-29T19:10:00Z"
    assert len(utc.iso()) == len("2026-11-29T19:10:00Z")
