"""`spark-agent attest LOGFILE [--expect AXIS=BACKEND ...] [--expect-env VAR ...] [--json]`: what a vLLM
server really loaded, read from its log, and whether that is what was asked for.

Axes: moe, linear, attention, draft_moe. Axes not given with --expect are taken from the log's own
`non-default args` (what the server was told; or a command line pasted beside the log); --expect AXIS=auto
drops that claim. The table shows both: what the log asked for, what you expected, what loaded.
Where vLLM chose by itself a backend whose choice depends on how vLLM was built (rules/env.toml [[auto]]), a
note says so: the same version picks another kernel on another build.

Exit status:
  0  valid: what loaded is what was asked for
  1  invalid: something else loaded, or a variable it was given is dead
  2  bad input: no such file, or no vLLM line in the text
  3  failed: the server never became ready (a failed start), or died while serving"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent import escape
from agent.errors import UserError
from agent.hostside import logparse
from agent.judging.verdict import AXES, attest_facts, axis_name, requested_from_args

EXIT = {"valid": 0, "invalid": 1, "failed": 3}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "attest",
        help="what a vLLM server really loaded, from its log",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "logfile",
        metavar="LOGFILE",
        help="the server log, or a pasted excerpt of it ('-' reads stdin); docker/journald/kubernetes wrapping, "
        "stripped prefixes, lost first characters and wrapped lines are fine (read with lower confidence)",
    )
    p.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="AXIS=BACKEND",
        help="the backend that should have loaded, e.g. moe=marlin (repeatable)",
    )
    p.add_argument(
        "--expect-env",
        action="append",
        default=[],
        metavar="VAR",
        help="a variable the server was given; vLLM calling it unknown makes the log invalid (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print facts, request and verdict as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    expect, env_names = parse_expectations(args.expect), _env_names(args.expect_env)
    follower = _follow(args.logfile)
    facts = follower.facts()
    result = attest_facts(facts, expect, env_names)
    result["asked_in_log"] = requested_from_args(facts)  # "requested" is what was judged: the log's, then --expect
    result["expected"] = dict(expect)
    result["build_notes"] = build_notes(facts, result["requested"])
    result["limits"] = follower.limits()
    if not _looks_like_vllm(result["facts"]):
        raise UserError(f"{args.logfile}: no vLLM log line found; pass the log of a vLLM server")
    if args.json:
        print(json.dumps(result, indent=1, ensure_ascii=False))
    else:
        _print_tables(result)
        _print_limits(result["limits"])
    return EXIT[result["verdict"]["verdict"]]


def parse_expectations(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        axis = axis_name(key)
        if not sep or not axis:
            raise UserError(
                f"--expect {item!r}: write AXIS=BACKEND with AXIS one of moe, linear, attention, "
                "draft_moe (e.g. --expect moe=marlin)"
            )
        out[axis] = value.strip()
    return out


def build_notes(facts: Mapping[str, Any], requested: Mapping[str, str]) -> list[str]:
    """A backend vLLM chose by itself where the rules say the choice depends on the build ([[auto]] build_dependent),
    or one they say auto never picks there: a note each (the log does not say which build ran)."""
    from agent.planning import envrules

    notes = []
    quant = str(facts.get("moe_quant") or "").lower()
    loaded = str(facts.get("moe_backend") or "")
    for entry in envrules.env_rules().get("auto", []):
        if entry["axis"] != "--moe-backend" or not loaded or requested.get("moe_backend"):
            continue
        if "quant" in entry and quant not in entry["quant"]:
            continue
        where = "/".join(entry.get("arch", [])) or "any GPU"
        if loaded in entry.get("build_dependent", []):
            notes.append(
                f"on {where} with {quant or 'this quant'}, auto's {loaded} depends on how vLLM was built (CUDA targets "
                f"with {entry['needs_target']} or not): the same version may pick another backend on another build; "
                f"the host's facts with the image (`python3 -m agent.hostside.facts --image IMAGE`) say its targets ({entry['reason']})"
            )
        elif loaded in entry.get("never", []):
            notes.append(f"on {where}, auto never selects {loaded}: this log's server was told to, or is no {where}")
    return notes


def _env_names(items: list[str]) -> list[str]:
    names = [n.strip() for item in items for n in item.split(",") if n.strip()]
    for name in names:
        if not name.replace("_", "").isalnum() or "=" in name:
            raise UserError(
                f"--expect-env {name!r}: give the variable's name only, e.g. --expect-env VLLM_USE_DEEP_GEMM"
            )
    return names


def _follow(path: str) -> logparse.Follower:
    """The log read as a stream: a log of any size costs bounded memory."""
    if path == "-":
        follower = logparse.Follower()
        for block in iter(lambda: sys.stdin.read(1 << 20), ""):
            follower.bytes_read += len(block)
            follower.feed_chunk(block)
        follower.flush()
        return follower
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{path}: is a folder; pass the path of a vLLM server log file")
    if not p.is_file():
        raise UserError(f"{path}: no such file; pass the path of a vLLM server log")
    try:
        return logparse.follow_file(str(p))
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}); check its permissions") from None


def _print_limits(limits: dict) -> None:
    notes = []
    if limits["lines_cut"]:
        notes.append(f"{limits['lines_cut']} line(s) longer than {logparse.MAX_LINE} characters were read cut")
    if limits["items_dropped"]:
        notes.append(f"{limits['items_dropped']} repeated name(s) or rate(s) past the parser's caps were counted only")
    if limits["stopped_early"]:
        notes.append(f"only the first {limits['bytes_read']} bytes were read (the parser's cap)")
    for note in notes:
        print(f"note: {note}")


def _looks_like_vllm(facts: dict) -> bool:
    return bool(
        facts["vllm_log_lines"]
        or facts["confidence"]
        or facts["vllm_version"]
        or facts["failure"].get("class") not in (None, "other", logparse.ENDED_BEFORE_READY)
        or facts["failure"].get("evidence")
    )


def _print_tables(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    facts, asked, v = result["facts"], result["requested"], result["verdict"]
    console = Console()
    table = Table(title="What loaded", show_header=True)
    expected = result.get("expected") or {}
    in_log = result.get("asked_in_log") or {}
    columns = ("", "requested", "expected", "loaded") if expected else ("", "requested", "loaded")
    for col in columns:
        table.add_column(col)
    loaded = {
        "moe_backend": f"{facts['moe_backend_raw']} ({facts['moe_quant']})" if facts["moe_backend"] else "",
        "linear_backend": ", ".join(facts["linear_kernels"]) or facts["linear_backend"],
        "attention_backend": facts["attention_backend"],
        "draft_moe_backend": facts["speculative"]["draft_moe_backend_raw"],
    }

    def row(*cells: str) -> None:  # every value is the log's (a host's) text: never rich markup
        table.add_row(*(escape.rich(c) for c in cells))

    pad = ("",) * (len(columns) - 2)  # the label rows have no request
    for axis in AXES:
        if expected:  # the log's request stays in its column; --expect in its own
            row(
                axis.replace("_backend", ""),
                in_log.get(axis) or "auto",
                expected.get(axis, "") or "-",
                loaded[axis] or "-",
            )
        else:
            row(axis.replace("_backend", ""), asked.get(axis) or "auto", loaded[axis] or "-")
    row("vLLM", *pad, facts["vllm_version"] or "-")
    row("model", *pad, facts["served_model"] or "-")
    if facts["speculative"]["method"]:
        rates = facts["spec_acceptance_rates"]
        mean = f", mean acceptance {sum(rates) / len(rates):.1%}" if rates else ""
        row(
            "speculative",
            *pad,
            f"{facts['speculative']['method']} x{facts['speculative']['num_speculative_tokens']}{mean}",
        )
    if facts["load_format"] == "dummy":
        row("weights", *pad, "dummy (--load-format dummy): speed only, quality not judged")
    elif facts["load_format"]:
        row("load format", *pad, facts["load_format"])
    if facts["unknown_env"]:
        row("unknown env", *pad, ", ".join(facts["unknown_env"]))
    if facts["model_load_gib"] >= 0:
        row("model load", *pad, f"{facts['model_load_gib']} GiB, {facts['model_load_s']} s")
    if facts["kv_cache_tokens"] >= 0:
        row("KV cache", *pad, f"{facts['kv_cache_tokens']:,} tokens")
    row("ready", *pad, "yes" if facts["startup_complete"] else "no")
    failure = facts["failure"] or facts["runtime_failure"]
    if failure.get("backend") or failure.get("requires"):  # a kernel's own error: its family and what it needs
        row("failed in", *pad, " ".join(x for x in (failure.get("backend", ""), _needs(failure)) if x))
    if facts["confidence"] == "low":
        row("confidence", *pad, "low: " + ("; ".join(facts["repairs"]) or "lines without vLLM's prefix"))
    console.print(table)
    colour = {"valid": "green", "invalid": "yellow", "failed": "red"}[v["verdict"]]
    console.print(f"[bold {colour}]{v['verdict'].upper()}[/]")
    for reason in v["reasons"]:
        console.print(f"  - {reason}", markup=False, highlight=False)
    for note in v["notes"] + result.get("build_notes", []):
        console.print(f"  note: {note}", markup=False, highlight=False)
    if v["evidence"]:
        console.print("evidence:")
        for line in v["evidence"]:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


def _needs(failure: dict[str, Any]) -> str:
    return f"(needs {failure['requires']})" if failure.get("requires") else ""
