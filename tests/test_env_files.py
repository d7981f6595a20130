"""Each cell's env file on a host (hostside/serving.write_env_files, the spark_env module): owner-only, read back as
written, rewritten only when it changed, and refused when a value could not survive an env file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agent.hostside import serving

pytestmark = pytest.mark.unit

A, B = "0123456789ab", "ba9876543210"


def test_written_owner_only_and_read_back(tmp_path: Path) -> None:
    env = {"VLLM_USE_DEEP_GEMM": "0", "HF_TOKEN": "hf_secret=with=equals", "A_FIRST": 1}
    assert serving.write_env_files(str(tmp_path), [{"id": A, "env": env}, {"id": B, "env": {}}]) == [A, B]
    path = tmp_path / "env" / f"{A}.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert serving.read_env_file(str(path)) == {k: str(v) for k, v in env.items()}
    assert path.read_text().splitlines()[1].startswith("A_FIRST="), "sorted, after the header"
    assert serving.read_env_file(str(tmp_path / "env" / f"{B}.env")) == {}


def test_only_changed_files_are_written_and_check_writes_nothing(tmp_path: Path) -> None:
    cells = [{"id": A, "env": {"X": "1"}}, {"id": B, "env": {"Y": "2"}}]
    serving.write_env_files(str(tmp_path), cells)
    assert serving.write_env_files(str(tmp_path), cells) == []
    changed = [{"id": A, "env": {"X": "2"}}, cells[1]]
    assert serving.write_env_files(str(tmp_path), changed, check=True) == [A]
    assert serving.read_env_file(str(tmp_path / "env" / f"{A}.env")) == {"X": "1"}
    assert serving.write_env_files(str(tmp_path), changed) == [A]
    assert serving.read_env_file(str(tmp_path / "env" / f"{A}.env")) == {"X": "2"}


@pytest.mark.parametrize(
    "cell",
    [
        {"id": "../../etc/x", "env": {}},
        {"id": A, "env": {"BAD NAME": "1"}},
        {"id": A, "env": {"X": "two\nlines"}},
    ],
)
def test_what_an_env_file_cannot_hold_is_refused(tmp_path: Path, cell: dict) -> None:
    with pytest.raises(serving.ServeError):
        serving.write_env_files(str(tmp_path), [cell])
    assert not list(tmp_path.rglob("*.env"))
