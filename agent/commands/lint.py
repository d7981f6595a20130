"""`spark-agent lint FILE|- [--gpu ARCH | --host H [-i INV]] [--vllm-version V] [--format text|json|sarif]
[--fail-on SEVERITY] [--fix]`: check a `vllm serve` launch before anything runs.

FILE is a command line, a shell script, a docker run / docker compose file, a Kubernetes manifest or a model card's
Markdown ('-' reads stdin). Every `vllm serve` in it is checked against the rules `env` and the sweep's planner use
(agent/rules/env.toml): dead variables, VLLM_* variables the vLLM version does not read (rules/vllm_env.toml),
missing chip variables, backends that fail on the chip and quant, MTP without its draft moe_backend, conflicting settings, flags the vLLM version does not know, a tag instead of a
digest, weights that do not fit. Exit status: 0 clean, 1 findings at or above --fail-on, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.hostside import facts as hostfacts
from agent.hostside import redact
from agent.judging import lint as checks
from agent.judging.sarif import sarif_log
from agent.planning import envrules
from agent.planning import launch as launches


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lint",
        help="check a vllm serve launch (command, script, compose, k8s, model card) before it runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="the launch: a file, or '-' for stdin")
    p.add_argument("--gpu", default=None, metavar="ARCH", help="the chip, an arch of agent/rules/gpus.toml (gb10)")
    p.add_argument("--host", default=None, help="read the chip from this host's facts (with -i: over SSH)")
    p.add_argument("-i", "--inventory", default=None, help="Ansible inventory for --host")
    p.add_argument("--vllm-version", default="", metavar="V", help="the vLLM version (default: the image's tag)")
    p.add_argument("--quant", default="", choices=["", "nvfp4", "fp8", "bf16", "mxfp4"], help="override the quant")
    p.add_argument("--format", default="text", choices=["text", "json", "sarif"], help="output (default: text)")
    p.add_argument(
        "--fail-on",
        default="error",
        choices=list(checks.SEVERITIES),
        help="exit 1 when a finding is at or above this severity (default: error)",
    )
    p.add_argument("--fix", action="store_true", help="also print each launch with the fixes the rules know")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.vllm_version and envrules.parse_version(args.vllm_version) is None:
        raise UserError(f"--vllm-version {args.vllm_version!r}: write a version such as 0.24.0")
    source = "<stdin>" if args.file == "-" else args.file
    text = launches.read_text(_read(args.file), source)
    found = launches.extract(text, source)
    if not found:
        raise UserError(f"{source}: no `vllm serve` found; pass a command line, script, compose file or model card")
    arch = _arch(args)
    target = checks.target_for(arch, args.vllm_version, args.quant, args.host or "", args.inventory or "")
    results = [_lint(one, target) for one in found]
    findings = [f for r in results for f in r.findings]
    if args.format == "json":
        shown = {
            "target": {"arch": arch, "vllm_version": args.vllm_version},
            "launches": [r.as_dict() for r in results],
        }
        print(json.dumps(redact.redact(shown), indent=1))
    elif args.format == "sarif":
        print(json.dumps(redact.redact(sarif_log(findings, envrules.env_rules())), indent=1))
    else:
        _print_text(results, arch, args.fix)
    threshold = checks.SEVERITIES.index(args.fail_on)
    failing = any(checks.SEVERITIES.index(f.severity) >= threshold for f in findings)
    if args.fix:  # the exit status is the fixed text's: 0 only when what --fix wrote lints clean
        return _fix(text, source, results, args, arch, threshold)
    return 1 if failing else 0


def _fix(
    text: str, source: str, results: list[checks.Result], args: argparse.Namespace, arch: str, threshold: int
) -> int:
    """The whole text with every fix in place (last launch first: line numbers above stay true), then linted again."""
    from agent.planning import launchfix

    undone: list[str] = []
    for r in sorted(results, key=lambda r: -r.launch.line):
        if r.fixed:
            done = launchfix.apply(text, r.launch, r.fixed)
            text = done.text
            undone += [f"{source}:{r.launch.line}: could not {what}" for what in done.undone]
    text = launchfix.finish(text)
    again = [
        _lint(one, checks.target_for(arch, args.vllm_version, args.quant, args.host or "", args.inventory or ""))
        for one in launches.extract(text, source)
    ]
    remaining = [f for r in again for f in r.findings]
    left = [f for f in remaining if checks.SEVERITIES.index(f.severity) >= threshold]
    out = sys.stderr if args.format != "text" else sys.stdout
    for line in undone:
        print(f"note: {line}", file=out)
    for f in remaining:
        print(f"still: {f.severity} [{f.rule}] {f.message}", file=out)
    kept = "" if args.file == "-" else f"; {args.file} is unchanged: save this text to use it"
    print(f"--- fixed text ({_fixed_words(remaining, left, args.fail_on)}{kept}) ---", file=out)
    print(redact.redact_text(text), file=out)
    return 1 if left or undone else 0


def _lint(launch: launches.Launch, target: checks.Target) -> checks.Result:
    """judging/lint's findings, and planning/launchchecks': recipes the flags now say, --quantization against the
    checkpoint's own quant."""
    from dataclasses import replace

    from agent.planning import launchchecks

    result = checks.lint(launch, target)
    fixed = result.fixed or replace(launch, args=list(launch.args), env=dict(launch.env))
    found = launchchecks.recipes(launch, fixed, result.vllm_version, envrules.env_rules())
    if result.quant_source == "flag" and not target.quant:
        unflagged = replace(launch, args=[a for a in launch.args if not a.startswith(("--quantization", "-q"))])
        own, source = checks.quant_and_source(unflagged, None)
        found += launchchecks.quant_conflict(result.quant, own, source, launch)
    result.findings += [checks.Finding(c.rule, c.severity, c.message, launch.source, c.line, c.fix) for c in found]
    if fixed.args != launch.args or fixed.env != launch.env:
        result.fixed = fixed
    return result


def _fixed_words(remaining: list[Any], left: list[Any], fail_on: str) -> str:
    """What the fixed text still has: "lints clean" only with no finding at all; below --fail-on, counted."""
    if not remaining:
        return "lints clean"
    if left:
        return f"{len(left)} finding(s) at --fail-on {fail_on} or above --fix cannot fix"
    counts: dict[str, int] = {}
    for f in remaining:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    below = ", ".join(f"{n} {s}(s)" for s, n in sorted(counts.items()))
    return f"nothing at --fail-on {fail_on} or above; {below} left that --fix cannot fix"


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read(launches.MAX_BYTES + 1)
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{path}: is a folder; pass a file holding a vllm serve launch")
    try:
        with open(p, "rb") as fh:
            return fh.read(launches.MAX_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; pass a file holding a vllm serve launch, or '-' for stdin") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}); check its permissions") from None


def _arch(args: argparse.Namespace) -> str:
    """The chip: --gpu, else --host's facts (this machine's without -i), else gb10 (what this agent is for)."""
    gpus = hostfacts.load_gpu_rules()
    if args.gpu:
        if args.gpu not in gpus:
            raise UserError(f"--gpu {args.gpu!r}: not an arch of agent/rules/gpus.toml; one of {', '.join(gpus)}")
        return str(args.gpu)
    if args.host:
        from agent.commands.env import hosts_with_facts

        args.simulate_gpu = None
        (_, facts, _), *_ = hosts_with_facts(args)
        arch = envrules.arch_of(facts)
        if not arch:
            raise UserError(f"--host {args.host}: its GPU ({facts.get('gpu_name') or 'none'}) is no arch we know")
        return arch
    return "gb10"


def _print_text(results: list[checks.Result], arch: str, fix: bool) -> None:
    total: dict[str, int] = {}
    for r in results:
        head = f"{r.launch.source}:{r.launch.line}: {r.launch.kind} launch of {r.launch.model or '?'}"
        guess = " (read from the model's name: lower confidence)" if r.quant_source == "name" else ""
        print(redact.redact_text(f"{head} on {arch}, vLLM {r.vllm_version or '?'}, quant {r.quant or '?'}{guess}"))
        for f in r.findings:
            total[f.severity] = total.get(f.severity, 0) + 1
            print(redact.redact_text(f"  {f.source}:{f.line}: {f.severity} [{f.rule}] {f.message}"))
            if f.fix:
                print(redact.redact_text(f"      fix: {f.fix}"))
        if not r.findings:
            print("  no findings")
        if fix:
            print("  fixed:" if r.fixed else "  nothing to fix")
            if r.fixed:
                print(redact.redact_text("    " + r.fixed.command()))
    summary: list[Any] = [f"{n} {s}(s)" for s, n in sorted(total.items())] or ["no findings"]
    print(f"{len(results)} launch(es): " + ", ".join(summary))
