"""The project stands alone: nothing it ships or documents points at files outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
OUTSIDE = re.compile(r"shared/background|/work/(?:main|shared|\.library)|\.\./shared/")


def test_no_tracked_file_points_outside_the_repo() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in files:
        if name == "tests/test_standalone.py" or not name.endswith(
            (".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".cfg")
        ):
            continue
        text = (REPO / name).read_text(errors="replace")
        offenders += [f"{name}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert offenders == []


def test_the_docs_the_code_cites_exist() -> None:
    for doc in ("docs/vllm-notes.md", "docs/gb10-study.md"):
        assert (REPO / doc).is_file(), doc
