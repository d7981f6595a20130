"""Lint findings as a SARIF 2.1.0 log, so CI systems and code hosts show them inline on the launch's lines.

Only what the standard requires plus rule descriptions: each rule's text is its reason in the rules file.
tests/test_lint_cli.py validates the output against the SARIF 2.1.0 JSON schema (kept in tests/data/sarif).
"""

from __future__ import annotations

from typing import Any

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "note": "note"}
_OWN_RULES = {
    "image-digest": "A launch should pin its image by digest (name@sha256:...): a tag can move to another build.",
    "checkpoint-memory": "The checkpoint's weights must fit in the chip's memory at the launch's utilization.",
    "vllm-version-unknown": "Without the vLLM version, flags cannot be checked against it.",
    "speculative-config": "--speculative-config must be a JSON object.",
}


def sarif_log(findings: list[Any], rules: dict[str, Any]) -> dict[str, Any]:
    """A SARIF log of one run: the tool, the rules the findings name, and one result per finding."""
    reasons = {entry["id"]: entry.get("reason", "") for table in rules.values() if isinstance(table, list)
               for entry in table if isinstance(entry, dict) and "id" in entry}  # fmt: skip
    reasons.update(_OWN_RULES)
    ids = sorted({f.rule for f in findings})
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "spark-agent lint",
                        "informationUri": "https://github.com/spark-agent/spark-agent",
                        "rules": [
                            {"id": rule, "shortDescription": {"text": reasons.get(rule) or rule}} for rule in ids
                        ],
                    }
                },
                "results": [_result(f, ids) for f in findings],
            }
        ],
    }


def _result(finding: Any, ids: list[str]) -> dict[str, Any]:
    text = finding.message + (f" Fix: {finding.fix}." if finding.fix else "")
    location = {"artifactLocation": {"uri": _uri(finding.source)}, "region": {"startLine": max(finding.line, 1)}}
    return {
        "ruleId": finding.rule,
        "ruleIndex": ids.index(finding.rule),
        "level": _LEVEL[finding.severity],
        "message": {"text": text},
        "locations": [{"physicalLocation": location}],
    }


def _uri(source: str) -> str:
    """A relative URI reference as code hosts expect (the path as given; stdin has none of its own)."""
    return "stdin" if source == "<stdin>" else source.replace("\\", "/")
