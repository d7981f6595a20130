"""Every real launch in tests/data/launches is a golden test: what `launch.extract` finds in it (EXPECTED.json), that
lint reads it without error, and that `lint --fix` keeps its wrapper and image (the fixed text still holds the same
launches, each in the same kind of wrapper and image) and removes every dead variable it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.judging import lint as checks
from agent.planning import launchfix
from agent.planning.launch import extract

pytestmark = pytest.mark.unit

LAUNCHES = Path(__file__).parent / "data" / "launches"
EXPECTED = json.loads((LAUNCHES / "EXPECTED.json").read_text())
FILES = sorted(p for p in LAUNCHES.iterdir() if p.name not in ("SOURCES.md", "EXPECTED.json"))


def test_every_launch_file_has_its_expectation_and_its_source():
    sources = (LAUNCHES / "SOURCES.md").read_text()
    assert len(FILES) >= 25
    for path in FILES:
        assert path.name in EXPECTED, f"{path.name}: add what it must give to EXPECTED.json"
        assert path.name in sources, f"{path.name}: name where it came from in SOURCES.md"


def _shape(text: str, name: str) -> list[dict]:
    return [
        {"line": one.line, "kind": one.kind, "image": one.image, "model": one.model, "env": sorted(one.env)}
        for one in extract(text, name)
    ]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_launch_file_gives_its_launches(path: Path):
    assert _shape(path.read_text(), path.name) == EXPECTED[path.name]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fix_keeps_the_wrapper_and_the_image_and_drops_what_is_dead(path: Path):
    text = path.read_text()
    found = extract(text, path.name)
    results = [checks.lint(one, checks.target_for("gb10", "0.24.0")) for one in found]
    fixed = text
    for result in sorted(results, key=lambda r: -r.launch.line):
        if result.fixed:
            fixed = launchfix.apply(fixed, result.launch, result.fixed).text
    fixed = launchfix.finish(fixed)
    again = extract(fixed, path.name)
    assert [(one.kind, one.image) for one in again] == [(one.kind, one.image) for one in found]
    dead = {f.message.split(" ")[0] for r in results for f in r.findings if f.rule.startswith("dead-")}
    left = {name for one in again for name in one.env}
    assert not dead & left, f"--fix left dead variables {dead & left}"
