"""`spark-agent verify BUNDLE`: every check a bundle's numbers must survive, each failure named with its file.

1. bundle: a safe archive of the layout (unpack.py), or it is refused before anything else is read;
2. signature: manifest.json signed in our namespace (signing.py), by a key of --allowed-signers when given;
3. hashes: every file is in the manifest with its SHA-256 and size, and the manifest lists nothing missing;
   -> tier "signed"
4. attestation: each server log parsed again (hostside/logparse) must give the backends, quantization, model, vLLM
   version and server arguments cell.toml records, and judging/verdict the same verdict;
5. judgement: the tree judged again (claims.py: agent.judging) must give judgement.json, and the report's
   verdicts.json the same questions;
6. plausibility: images pinned by digest; one vLLM version per image, the spec's when it states one; single-stream
   decode under the bandwidth ceiling of the checkpoint's bytes per token; timestamps in order; windows as long as
   they say (tokens / duration = throughput, the server's token count, the telemetry's span);
   -> tier "re-derived"
7. agreement (agree.py, `--against` or the store): another signer's re-derived bundle of the same spec, image and
   hardware agrees within the noise by compare's rule -> tier "reproduced".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.bundles import claims, layout, signing
from agent.bundles.unpack import BadBundle, unpack
from agent.hostside import loadpoints, logparse
from agent.judging import correctness, verdict, verdicts
from agent.judging.comparison import match_key
from agent.judging.judgement import judge
from agent.results import tree

SIGNED, REDERIVED, REPRODUCED = "signed", "re-derived", "reproduced"
NONE = "none"  # the signature or a hash failed: nothing in it can be attributed to anyone
TIERS = (NONE, SIGNED, REDERIVED, REPRODUCED)
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}")
HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_MANIFEST_BYTES = 8 * layout.MiB
# What a server log attests, compared with cell.toml's [attestation] (hostside/contracts.Attestation keys)
ATTESTED = (
    "vllm_version",
    "served_model",
    "moe_backend",
    "moe_quant",
    "quantization",
    "attention_backend",
    "linear_backend",
    "linear_kernels",
    "load_format",
    "non_default_args",
)
CLOCK_SLACK_S = 2.0  # stamps are whole seconds, written on the host


@dataclass(frozen=True)
class Finding:
    check: str  # bundle | signature | hashes | attestation | judgement | report | plausibility | agreement
    file: str  # the bundle path it is about
    why: str

    def line(self) -> str:
        return f"{self.check}: {self.file}: {self.why}"


@dataclass
class Verification:
    bundle: Path
    digest: str  # sha256 of the bundle file: its identity in the store
    tier: str = NONE
    signer: signing.Signer | None = None
    manifest: layout.Manifest | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)  # judged; their 'dir' is inside the open bundle
    sweep_started: str = ""  # the tree's sweep.toml started_at
    identity: str = ""  # spec x image x hardware: bundles that may reproduce each other share it
    reproduced_by: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def signer_name(self) -> str:
        return self.signer.name if self.signer else ""


@contextlib.contextmanager
def opened(bundle: Path, allowed_signers: Path | None = None) -> Iterator[Verification]:
    """The bundle checked, its tree in a private folder for as long as the with-block runs (then removed)."""
    with tempfile.TemporaryDirectory(prefix="spark-verify-") as tmp:
        yield check(Path(bundle), Path(tmp), allowed_signers)


def check(bundle: Path, into: Path, allowed_signers: Path | None = None) -> Verification:
    v = Verification(bundle, _sha256_file(bundle))
    try:
        members = unpack(bundle, into)
    except BadBundle as exc:
        v.findings.append(Finding("bundle", bundle.name, str(exc)))
        return v
    if not _signed(v, into, members, allowed_signers):
        return v
    v.tier = SIGNED
    assert v.manifest is not None
    sweep = into / layout.TREE / v.manifest["sweep"]
    bad: list[Finding] = []
    v.cells = correctness.judged_cells(
        sweep, on_bad=lambda p, why: bad.append(Finding("judgement", _rel(p, into), why))
    )
    v.findings += bad
    v.sweep_started = tree.run_start(sweep)
    for cell in v.cells:
        v.findings += attest(cell, into)
    v.findings += judgement(v.cells, sweep, into)
    v.findings += plausibility(v, sweep, into)
    v.identity = identity(v.cells)
    if not v.findings:
        v.tier = REDERIVED
    return v


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 16):
                h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- signature and hashes


def _signed(v: Verification, root: Path, members: dict[str, int], allowed: Path | None) -> bool:
    for name in (layout.MANIFEST, layout.SIGNATURE):
        if name not in members:
            v.findings.append(Finding("signature", name, "missing: the bundle is not signed"))
            return False
    data = (root / layout.MANIFEST).read_bytes()
    try:
        v.signer = signing.check(data, (root / layout.SIGNATURE).read_bytes(), allowed)
    except ValueError as exc:
        v.findings.append(Finding("signature", layout.SIGNATURE, str(exc)))
        return False
    problem, manifest = _manifest(data)
    if manifest is None:
        v.findings.append(Finding("signature", layout.MANIFEST, problem))
        return False
    v.manifest = manifest
    if v.signer.trusted and manifest["signer"] != v.signer.principal:
        v.notes.append(
            f"the manifest names its signer {manifest['signer']!r}; the allowed signers say {v.signer.principal!r}"
        )
    listed = manifest["files"]
    for name in sorted(set(members) - {layout.MANIFEST, layout.SIGNATURE}):
        entry = listed.get(name)
        if entry is None:
            v.findings.append(Finding("hashes", name, "is not in the signed manifest"))
            continue
        digest = _sha256_file(root / name)
        if digest != entry["sha256"] or members[name] != entry["bytes"]:
            v.findings.append(
                Finding("hashes", name, f"SHA-256 {digest[:16]}… is not the manifest's {entry['sha256'][:16]}…")
            )
    for name in sorted(set(listed) - set(members)):
        v.findings.append(Finding("hashes", name, "is in the manifest but not in the bundle"))
    prefix = f"{layout.TREE}/{manifest['sweep']}/"
    for name in sorted(n for n in members if n.startswith(layout.TREE + "/") and not n.startswith(prefix)):
        v.findings.append(Finding("hashes", name, f"lies outside the manifest's sweep {manifest['sweep']!r}"))
    if layout.CLAIMS not in members:
        v.findings.append(Finding("hashes", layout.CLAIMS, "missing: the bundle carries no judgement"))
    return not v.findings


def _manifest(data: bytes) -> tuple[str, layout.Manifest | None]:
    if len(data) > MAX_MANIFEST_BYTES:
        return "larger than a manifest may be", None
    try:
        m = json.loads(data)
    except (ValueError, RecursionError):
        return "is not JSON", None
    if not isinstance(m, dict) or m.get("format") != layout.FORMAT or m.get("schema") != layout.SCHEMA:
        return f"is not a {layout.FORMAT} manifest of schema {layout.SCHEMA}", None
    for key in ("created_at", "agent_version", "sweep", "signer"):
        if not isinstance(m.get(key), str):
            return f"'{key}' must be text", None
    if not tree.PART.fullmatch(m["sweep"]):
        return f"sweep {m['sweep'][:40]!r} is not a plain name", None
    files = m.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(e, dict)
        and isinstance(e.get("sha256"), str)
        and HEX64.fullmatch(e["sha256"])
        and isinstance(e.get("bytes"), int)
        and not isinstance(e.get("bytes"), bool)
        for e in files.values()
    ):
        return "'files' must map each path to its sha256 (64 hex) and bytes", None
    return "", layout.Manifest(**{k: m[k] for k in layout.Manifest.__annotations__})  # type: ignore[typeddict-item]


# ---------------------------------------------------------------- attestation


def attest(cell: dict[str, Any], root: Path) -> list[Finding]:
    """The cell's server log parsed again: what cell.toml says loaded, and the verdict that follows."""
    folder = Path(cell["dir"])
    log = folder / "server.log"
    where = _rel(log, root)
    if not log.is_file():
        if cell.get("status") == "done":
            return [
                Finding(
                    "attestation", _rel(folder / tree.CELL_FILE, root), "no server.log: nothing attests what loaded"
                )
            ]
        return []
    parsed = dict(logparse.parse_file(str(log)))
    recorded = cell.get("attestation", {})
    out = []
    for key in ATTESTED:
        said, kept = _plain(parsed.get(key)), _plain(recorded.get(key))
        if said != kept:
            out.append(Finding("attestation", where, f"{key}: the log says {_short(said)}, cell.toml {_short(kept)}"))
    model = cell.get("config", {}).get("model", "")
    if parsed.get("served_model") and model and parsed["served_model"] != model:
        out.append(
            Finding(
                "attestation", where, f"serves {_short(parsed['served_model'])}, the cell asked for {_short(model)}"
            )
        )
    if not cell.get("died") and not cell.get("nodes"):  # a death or a cluster adds reasons of their own
        again = verdict.judge(_requested(cell), parsed, sorted(cell.get("env", {})))["verdict"]
        if again != cell.get("verdict"):
            out.append(
                Finding("attestation", where, f"the log gives verdict {again}, cell.toml says {cell.get('verdict')}")
            )
    launch = folder / "launch.txt"
    command = str(cell.get("launch", {}).get("command", ""))
    if launch.is_file() and command and launch.read_text(errors="replace").strip() != command.strip():
        out.append(Finding("attestation", _rel(launch, root), "is not the launch command cell.toml records"))
    return out


def _requested(cell: dict[str, Any]) -> dict[str, str]:
    config = cell.get("config", {})
    spec = config.get("speculative") or ""
    try:
        draft = json.loads(spec).get("moe_backend", "") if spec.startswith("{") else ""
    except ValueError:
        draft = ""
    return {**{axis: str(config.get(axis, "") or "") for axis in verdict.AXES[:3]}, "draft_moe_backend": str(draft)}


def _plain(value: Any) -> Any:
    """As TOML keeps it: no None, tuples as lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value if v is not None]
    return value


def _short(x: Any) -> str:
    return json.dumps(x, default=str, sort_keys=True)[:80]


# ---------------------------------------------------------------- judgement and report


def judgement(cells: list[dict[str, Any]], sweep: Path, root: Path) -> list[Finding]:
    margin = min(tree.equivalence_margins(sweep), default=verdicts.DEFAULT_MARGIN)
    derived = claims.of_judgement(judge(cells, equivalence=margin))
    out = []
    try:
        claimed = json.loads((root / layout.CLAIMS).read_bytes())
    except (ValueError, RecursionError):
        return [Finding("judgement", layout.CLAIMS, "is not JSON")]
    diffs = claims.differences(claimed, derived)
    out += [Finding("judgement", layout.CLAIMS, d) for d in diffs[:5]]
    if len(diffs) > 5:
        out.append(Finding("judgement", layout.CLAIMS, f"and {len(diffs) - 5} more differences"))
    report = sweep / "verdicts.json"
    if report.is_file():
        try:
            questions = json.loads(report.read_bytes()).get("questions")
        except (ValueError, RecursionError, AttributeError):
            questions = None
        said = claims.differences(questions, derived["verdicts"], "questions")
        out += [Finding("report", _rel(report, root), d) for d in said[:3]]
    return out


# ---------------------------------------------------------------- plausibility


def plausibility(v: Verification, sweep: Path, root: Path) -> list[Finding]:
    out: list[Finding] = []
    stated = _spec_version(root)
    versions: dict[str, set[str]] = {}
    for cell in v.cells:
        where = _rel(Path(cell["dir"]) / tree.CELL_FILE, root)
        image = str(cell.get("config", {}).get("image", ""))
        logged = str(cell.get("attestation", {}).get("vllm_version", ""))
        if not DIGEST.search(image):
            out.append(Finding("plausibility", where, f"image {_short(image)} is not pinned by digest"))
        if logged:
            versions.setdefault(image, set()).add(logged)
            if stated and logged != stated:
                out.append(Finding("plausibility", where, f"the log shows vLLM {logged}; the spec's image is {stated}"))
        out += _clock(cell, v, where, root)
    for image, found in versions.items():
        if len(found) > 1:
            out.append(
                Finding("plausibility", sweep.name, f"image {_short(image)} logs vLLM {', '.join(sorted(found))}")
            )
    if not stated:
        v.notes.append("no spec with [image] vllm_version in the bundle: the logged version is checked per image only")
    claimed = json.loads((root / layout.CLAIMS).read_bytes()) if (root / layout.CLAIMS).is_file() else {}
    for ceiling in claimed.get("ceilings", []) if isinstance(claimed, dict) else []:
        for row in ceiling.get("rows", []):
            if row.get("flag") == "above_ceiling_inputs_wrong":
                out.append(
                    Finding(
                        "plausibility", layout.CLAIMS, f"{ceiling.get('backend')}/{row.get('label')}: {row.get('note')}"
                    )
                )
    return out


def _spec_version(root: Path) -> str:
    spec = root / layout.SPEC
    if not spec.is_file():
        return ""
    try:
        image = tomllib.loads(spec.read_text()).get("image", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return ""
    return str(image.get("vllm_version", "")) if isinstance(image, dict) else ""


def _clock(cell: dict[str, Any], v: Verification, where: str, root: Path) -> list[Finding]:
    """Stamps in order (sweep start <= cell start <= windows <= cell finish <= the bundle), windows one after the
    other, and each window as long as it says."""
    out = []
    start, end = _t(cell.get("started_at")), _t(cell.get("finished_at"))
    sweep_start, made = _t(v.sweep_started), _t(v.manifest["created_at"] if v.manifest else "")
    if start is None or end is None or end < start:
        return [Finding("plausibility", where, "started_at / finished_at missing or out of order")]
    if sweep_start is not None and start < sweep_start - CLOCK_SLACK_S:
        out.append(Finding("plausibility", where, "started before its sweep began (sweep.toml)"))
    if made is not None and end > made + CLOCK_SLACK_S:
        out.append(Finding("plausibility", where, "finished after the bundle was made"))
    windows = sorted(((_t(r.get("started_at")), r) for r in cell.get("runs", [])), key=lambda x: x[0] or 0.0)
    previous_end = None
    for t, run in windows:
        name = _rel(Path(cell["dir"]) / (loadpoints.of_window(run).window(int(run.get("repeat", 0))) + ".toml"), root)
        duration = float(run.get("duration", 0.0))
        if t is None:
            continue
        if not (start - CLOCK_SLACK_S <= t and t + duration <= end + CLOCK_SLACK_S):
            out.append(Finding("plausibility", name, "lies outside its cell's start and finish"))
        if previous_end is not None and t < previous_end - CLOCK_SLACK_S:
            out.append(Finding("plausibility", name, "overlaps the window before it"))
        previous_end = t + duration
        out += [Finding("plausibility", name, why) for why in window_problems(run)]
    return out


def window_problems(run: dict[str, Any]) -> list[str]:
    """A window against itself: its throughput is its tokens over its duration (loadgen), the client's token count
    is the one the server cross-check used, the server's own count within the bound the host applied, and the
    telemetry sampled for as long as the window ran."""
    out: list[str] = []
    if not run.get("ok", True):
        return out
    duration, tokens = float(run.get("duration", 0.0)), int(run.get("total_output_tokens", 0))
    throughput = float(run.get("output_throughput", 0.0))
    if duration <= 0:
        return ["has no duration"]
    if abs(throughput - tokens / duration) > 1e-6 * max(1.0, throughput):
        out.append(f"output_throughput {throughput:g} is not its {tokens} tokens over {duration:g} s")
    server = run.get("server", {})
    if isinstance(server, dict) and server.get("scraped"):
        client = int(server.get("client_output_tokens", tokens))
        if client != tokens:
            out.append(f"the server cross-check counted {client} client tokens, the window says {tokens}")
        counted, bound = float(server.get("server_generation_tokens", -1.0)), float(server.get("token_bound", 0.0))
        if counted >= 0 and (abs(counted - client) > bound) != bool(server.get("tokens_disagree", False)):
            out.append(f"the server generated {counted:g} tokens, which does not match the {client} it says")
    telemetry = run.get("telemetry", {})
    if isinstance(telemetry, dict) and telemetry.get("available") and telemetry.get("samples", 0) > 1:
        span = float(telemetry.get("duration_s", 0.0))
        if abs(span - duration) > 0.1 * duration + CLOCK_SLACK_S:
            out.append(f"lasted {duration:g} s by its own account, {span:g} s by its telemetry")
    return out


def _t(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def identity(cells: list[dict[str, Any]]) -> str:
    """The spec (every configuration, image included), and the hardware (host fingerprints): what two bundles must
    share to reproduce each other."""
    configs = sorted({match_key(c, with_host=False, with_image=True) for c in cells})
    hardware = sorted({str(c.get("facts", {}).get("fingerprint", "")) for c in cells})
    return hashlib.sha256(json.dumps([configs, hardware]).encode()).hexdigest()[:32]


def lines(v: Verification) -> list[str]:
    """What verify prints: each failed check with its file, the notes, then the tier and who signed."""
    out = [f.line() for f in v.findings] + [f"note: {n}" for n in v.notes]
    said = f"{v.bundle}: tier {v.tier}"
    if v.signer:
        said += f", signed by {v.signer_name}" + ("" if v.signer.trusted else " (no allowed-signers file names it)")
    if v.reproduced_by:
        said += f"; reproduced by {', '.join(v.reproduced_by)}"
    return [*out, said]
