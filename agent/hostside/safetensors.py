"""Read a checkpoint's safetensors headers (never its tensor data) and say what is in it.

A safetensors file is an 8-byte little-endian header length, a JSON header mapping tensor names to
{dtype, shape, data_offsets}, then the raw data. Everything this module reports comes from those
headers plus config.json and any quantization config, so a 40 GB checkpoint is read in well under a
second and nothing but headers ever leaves the disk.

Standard library only: it also runs on a Spark (`python3 -m agent.hostside.safetensors PATH`).
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import sys
from typing import Any

from .contracts import CheckpointSummary, MtpSummary
from .errors import HostError

HEADER_LIMIT = 100 * 1024 * 1024  # the format's own cap; a larger length means a corrupt file
# Nothing on disk is trusted: a checkpoint folder may come from anyone. These bound the work and memory.
HEADERS_LIMIT = 1024**3  # header bytes of all shards together (real checkpoints: a few MB)
JSON_LIMIT = 64 * 1024 * 1024  # config.json, hf_quant_config.json, the index
MAX_SHARDS = 10_000
MAX_NAME = 1024  # characters of a tensor name (real ones: under 200)
MAX_DIMS = 16
MAX_JSON_DEPTH = 64  # config.json and friends are a few levels deep; deeper is corrupt or hostile

DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

ROLES = (
    "attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "embeddings",
    "norms",
    "mtp",
    "vision",
    "other",
)

# Formats, from least to most precise: a routed-expert layer "kept at higher precision" ranks above the usual.
FORMAT_RANK = {"packed_fp4": 0, "fp8": 1, "block_fp8": 1, "unquantized": 2}
KINDS = ("fp4_weights", "fp4_scales", "fp8_weights", "fp8_scales", "high_precision")
FORMAT_LABEL = {"packed_fp4": "packed FP4", "fp8": "FP8", "block_fp8": "block FP8", "unquantized": "unquantized"}

# The last name component of a module's quantization parameters; the rest of the name is the module.
PARAM_SUFFIXES = {
    "weight",
    "weight_packed",
    "bias",
    "weight_scale",
    "weight_scale_2",
    "weight_scale_inv",
    "input_scale",
    "weight_global_scale",
    "input_global_scale",
    "k_scale",
    "v_scale",
    "weight_zero_point",
    "weight_shape",
}
WEIGHT_SUFFIXES = ("weight", "weight_packed")
INPUT_SCALE_SUFFIXES = ("input_scale", "input_global_scale")

_VISION = re.compile(
    r"(^|\.)(visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|mm_projector)(\.|$)"
)
_MTP = re.compile(r"(^|\.)mtp(\.|$)")
_EMBED = re.compile(r"(^|\.)(embed_tokens|lm_head|wte|word_embeddings|tok_embeddings)(\.|$)|^output(\.weight)?$")
_LM_HEAD = re.compile(r"(^|\.)lm_head(\.|$)|^output\.weight$")
_SHARED = re.compile(r"(^|\.)(shared_experts?|shared_expert_gate|shared_mlp)(\.|$)")
_ROUTED = re.compile(r"(^|\.)experts(\.|$)")
_ROUTER = re.compile(r"(^|\.)(mlp|block_sparse_moe|feed_forward|moe)\.(gate|router)(\.|$)")
_ATTENTION = re.compile(r"(^|\.)(self_attn|linear_attn|attn|attention|cross_attn|mixer)(\.|$)")
_MLP = re.compile(r"(^|\.)(mlp|feed_forward|ffn|block_sparse_moe)(\.|$)")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_DIGITS = re.compile(r"\d+")
_EXPERT_INDEX = re.compile(r"(?:^|\.)experts\.(\d+)\.")


class CheckpointError(HostError, ValueError):
    """A path that is not a readable checkpoint. The message names the file and says what to do."""


# ---------------------------------------------------------------- reading


def read_header(path: str) -> dict:
    """The JSON header of one safetensors file, validated; reads only the header bytes."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path}: {size} bytes is too short for a safetensors file (re-download it)")
        (length,) = struct.unpack("<Q", prefix)
        if length < 2 or length > HEADER_LIMIT:
            raise CheckpointError(
                f"{path}: header length {length} is impossible (limit {HEADER_LIMIT}); "
                "the file is corrupt or not safetensors"
            )
        if length > size - 8:
            raise CheckpointError(
                f"{path}: header claims {length} bytes but the file has {size - 8} after the "
                "length; the file is truncated (re-download it)"
            )
        raw = f.read(length)
    header = _loads(path, raw, "header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is JSON but not an object; the file is not safetensors")
    _check_entries(path, header, size - 8 - length)
    return header


def _loads(path: str, raw: bytes, what: str) -> object:
    try:
        return json.loads(raw)
    except RecursionError:  # nesting deeper than any real header: refused, not a crash
        raise CheckpointError(f"{path}: {what} is nested too deeply; the file is corrupt") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}: {what} is not valid JSON ({str(exc)[:200]}); the file is corrupt") from None


def _check_entries(path: str, header: dict, data_len: int) -> None:
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict):
                raise CheckpointError(f"{path}: __metadata__ is not an object; the file is corrupt")
            continue
        if len(name) > MAX_NAME:
            raise CheckpointError(f"{path}: a tensor name of {len(name)} characters; the file is corrupt")
        problem = _entry_problem(entry, data_len)
        if problem:
            raise CheckpointError(f"{path}: tensor {name!r}: {problem}")


def _entry_problem(entry: Any, data_len: int) -> str:  # Any: one entry of an untrusted header
    try:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        begin, end = offsets
    except (TypeError, KeyError, ValueError):
        return "entry needs dtype, shape and two data_offsets"
    if type(dtype) is not str or type(shape) is not list or len(dtype) > 16 or len(shape) > MAX_DIMS:
        return f"bad dtype {str(dtype)[:20]!r} or shape {str(shape)[:80]}"
    count = 1
    for dim in shape:  # a plain loop: this runs for every tensor of every shard
        if type(dim) is not int or dim < 0:
            return f"bad shape {shape!r}"
        count *= dim
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end:
        return f"bad data_offsets {offsets!r}"
    if end > data_len:
        return (
            f"data ends at byte {end} but the file holds {data_len} bytes of data; "
            "the file is truncated (re-download it)"
        )
    if dtype in DTYPE_SIZES and count * DTYPE_SIZES[dtype] != end - begin:
        return f"shape {shape} of {dtype} does not match its {end - begin} data bytes"
    return ""


def read_json(path: str) -> dict:
    """A checkpoint's JSON file (config.json, an index): bounded in size and nesting; CheckpointError else."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: not a regular file")
    with open(path, "rb") as f:
        raw = f.read(JSON_LIMIT + 1)
    if len(raw) > JSON_LIMIT:
        raise CheckpointError(f"{path}: larger than {JSON_LIMIT} bytes; not a checkpoint's JSON file")
    data = _loads(path, raw, "the file")
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    if _depth(data) > MAX_JSON_DEPTH:  # what json.loads accepted may still be too deep for a recursive reader
        raise CheckpointError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels; the file is corrupt")
    return data


def _depth(value: object) -> int:
    """Nesting of a parsed JSON value, without recursion (stops counting past MAX_JSON_DEPTH)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _shards(path: str) -> tuple[list[str], dict, list[str]]:
    """(shard files, index weight_map, warnings) of a checkpoint folder or a single .safetensors file."""
    if os.path.isfile(path):
        return [path], {}, []
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: no such checkpoint folder or .safetensors file")
    indexes = sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors.index.json")))
    found = sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors")))
    if not indexes:
        if not found:
            raise CheckpointError(f"{path}: no *.safetensors files in this folder")
        for shard in found:
            _check_inside(path, shard, shard)
        return found[:MAX_SHARDS], {}, []
    weight_map = read_json(indexes[0]).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{indexes[0]}: has no weight_map; the index is corrupt")
    names = set(weight_map.values())
    if len(names) > MAX_SHARDS:
        raise CheckpointError(f"{indexes[0]}: names {len(names)} shards (limit {MAX_SHARDS}); the index is corrupt")
    for name in names:
        _check_shard_name(indexes[0], name)
    shards = [os.path.join(path, f) for f in sorted(names)]
    for shard in shards:
        _check_inside(path, shard, indexes[0])
        if not os.path.isfile(shard):
            raise CheckpointError(
                f"{indexes[0]}: names shard {os.path.basename(shard)}, which is missing (incomplete download?)"
            )
    unlisted = sorted(set(found) - set(shards))
    warnings = [f"{os.path.basename(f)} is not in the index; loaders ignore it" for f in unlisted]
    return shards, weight_map, warnings


def _check_shard_name(index: str, name: object) -> None:
    """The index names files of its own folder: relative, no `..`, a .safetensors file."""
    if (
        not isinstance(name, str)
        or not name.endswith(".safetensors")
        or len(name) > MAX_NAME
        or "\0" in name
        or os.path.isabs(name)
        or ".." in name.replace("\\", "/").split("/")
    ):
        raise CheckpointError(
            f"{index}: weight_map names {str(name)[:100]!r}; shards must be .safetensors files inside the "
            "checkpoint folder (no absolute path, no ..)"
        )


def _check_inside(folder: str, shard: str, named_by: str) -> None:
    """No symlink leads a shard out of its checkpoint folder. The one exception is the Hugging Face cache,
    whose snapshots/<rev>/ files link to the same repo's ../../blobs/."""
    real = os.path.realpath(shard)
    home = os.path.realpath(folder)
    roots = [home]
    if os.path.basename(os.path.dirname(home)) == "snapshots":
        roots.append(os.path.join(os.path.dirname(os.path.dirname(home)), "blobs"))
    if not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        raise CheckpointError(
            f"{named_by}: {os.path.basename(shard)} leads outside the checkpoint folder (to {real}); "
            "copy the shard into the folder"
        )


def _configs(path: str) -> tuple[dict, list[dict]]:
    """config.json (or {}) and a short summary of every quantization config found."""
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    config_path = os.path.join(folder, "config.json")
    config = read_json(config_path) if os.path.isfile(config_path) else {}
    quant = []
    hf_quant = os.path.join(folder, "hf_quant_config.json")
    if os.path.isfile(hf_quant):
        data = read_json(hf_quant)
        quant.append(_quant_summary("hf_quant_config.json", data.get("quantization", data), data.get("producer")))
    for holder in (config, _text_config(config)):
        if isinstance(holder.get("quantization_config"), dict):
            quant.append(_quant_summary("config.json", holder["quantization_config"], None))
            break
    return config, quant


def _quant_summary(source: str, q: dict[str, Any], producer: object) -> dict[str, Any]:
    keys = (
        "quant_method",
        "quant_algo",
        "format",
        "kv_cache_quant_algo",
        "group_size",
        "weight_block_size",
        "activation_scheme",
    )
    out: dict[str, Any] = {"source": source}
    out.update({k: q[k] for k in keys if k in q and not isinstance(q[k], dict)})
    if isinstance(producer, dict) and "name" in producer:
        out["producer"] = producer["name"]
    for k in ("exclude_modules", "ignore", "modules_to_not_convert", "ignored_layers"):
        if isinstance(q.get(k), list):
            out["excluded_modules"] = len(q[k])
    return out


def _text_config(config: dict) -> dict:
    for key in ("text_config", "language_config", "llm_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return {}


def _config_value(config: dict[str, Any], *keys: str) -> int | float | None:
    for holder in (_text_config(config), config):
        for key in keys:
            if isinstance(holder.get(key), (int, float)) and not isinstance(holder.get(key), bool):
                return holder[key]
    return None


# ---------------------------------------------------------------- classifying


def role_of(name: str, num_hidden_layers: int | None = None) -> str:
    """The role of a tensor, from its name (Qwen3-MoE/Qwen3-Next, DeepSeek and Llama naming)."""
    if _VISION.search(name):
        return "vision"
    if _MTP.search(name) or _is_deepseek_mtp_layer(name, num_hidden_layers):
        return "mtp"
    if _EMBED.search(name):
        return "embeddings"
    module_tail = module_of(name).rsplit(".", 1)[-1]
    if "norm" in module_tail or module_tail.startswith("ln_"):
        return "norms"
    if _SHARED.search(name):
        return "shared_experts"
    if _ROUTED.search(name):
        return "routed_experts"
    if _ROUTER.search(name):
        return "router"
    if _ATTENTION.search(name):
        return "attention"
    if _MLP.search(name):
        return "dense_mlp"
    return "other"


class _RoleCache:
    """role_of() for many tensors: names that differ only in their numbers share a role, so the
    regexes run once per name pattern (a few dozen), not once per tensor (tens of thousands)."""

    def __init__(self, num_hidden_layers: int | None):
        self.layers = num_hidden_layers
        self.by_module: dict = {}
        self.by_pattern: dict = {}

    def __call__(self, module: str) -> str:
        role = self.by_module.get(module)
        if role is None:
            pattern = _DIGITS.sub("#", module)
            role = self.by_pattern.get(pattern) or self.by_pattern.setdefault(pattern, role_of(pattern))
            if role not in ("vision", "mtp") and _is_deepseek_mtp_layer(module, self.layers):
                role = "mtp"
            self.by_module[module] = role
        return role


def _is_deepseek_mtp_layer(name: str, num_hidden_layers: int | None) -> bool:
    # DeepSeek stores its MTP module as extra decoder layers numbered from num_hidden_layers on.
    match = _LAYER.search(name)
    return bool(match and num_hidden_layers is not None and int(match.group(1)) >= num_hidden_layers)


def module_of(name: str) -> str:
    head, _, tail = name.rpartition(".")
    return head if head and tail in PARAM_SUFFIXES else name


def _module_format(params: dict) -> str:
    """params: {suffix: (dtype, shape, bytes)} of one module."""
    weight = next((params[s] for s in WEIGHT_SUFFIXES if s in params), None)
    if weight is None:
        return "unquantized"
    if weight[0] in ("U8", "I8") and "weight_scale" in params:
        return "packed_fp4"
    if weight[0].startswith("F8_"):
        return "block_fp8" if "weight_scale_inv" in params else "fp8"
    return "unquantized"


# ---------------------------------------------------------------- summarising


def inspect_checkpoint(path: str) -> CheckpointSummary:
    """A JSON-serialisable summary of a checkpoint folder (or one .safetensors file), from headers only.

    Keys: path, name, shards, tensors, total_bytes, total_gib, dtypes {dtype: {tensors, bytes}},
    kinds {fp4_weights|fp4_scales|fp8_weights|fp8_scales|high_precision: {tensors, bytes}},
    roles {role: {tensors, bytes, formats {format: modules}, activation}}, packed_fp4_tensors,
    high_precision_weights, activation_scales, expert_format, high_precision_expert_layers
    [{first, last, format, text}], mtp {present, quantized, tensors, bytes, formats}, moe {num_experts,
    num_experts_per_tok}, bytes_per_token, bytes_per_token_parts, quant_configs, warnings.

    A module is a weight with its quantization parameters (weight_scale, weight_scale_2, input_scale,
    weight_scale_inv, ...). packed_fp4_tensors counts packed FP4 weights; high_precision_weights counts
    unquantized weights of two or more dimensions outside the MTP module and the vision tower.
    Activation scales are static when a quantized module carries input_scale, else dynamic.
    """
    path = os.path.abspath(os.path.expanduser(path))  # ~ is the host user's home, as in the spec
    shards, weight_map, warnings = _shards(path)
    config, quant_configs = _configs(path)
    layers = _config_value(config, "num_hidden_layers", "n_layer", "num_layers")
    role = _RoleCache(int(layers) if layers is not None else None)
    tensors = []  # (name, dtype, shape, bytes, role, module)
    header_bytes = 0
    for shard in shards:
        header = read_header(shard)
        header_bytes += _header_length(shard)
        if header_bytes > HEADERS_LIMIT:
            raise CheckpointError(
                f"{path}: the shards' headers exceed {HEADERS_LIMIT} bytes together; not a checkpoint"
            )
        base = os.path.basename(shard)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if weight_map and weight_map.get(name, base) != base:
                warnings.append(f"{name} is in {base} but the index says {weight_map[name]}")
            size = entry["data_offsets"][1] - entry["data_offsets"][0]
            module = module_of(name)
            tensors.append((name, entry["dtype"], entry["shape"], size, role(module), module))
    missing = len(set(weight_map) - {t[0] for t in tensors})
    if missing:
        warnings.append(f"{missing} tensor(s) named in the index are in no shard (incomplete download?)")
    modules = _modules(tensors)
    mass = _mass(tensors)
    formats = _formats(modules, mass["roles"])
    experts = _expert_layers(modules)
    mtp = _mtp(tensors, modules)
    per_token = _bytes_per_token(tensors, config, warnings)
    return CheckpointSummary(
        path=path,
        name=os.path.basename(path.rstrip("/")),
        shards=len(shards),
        tensors=len(tensors),
        quant_configs=quant_configs,
        total_bytes=mass["total_bytes"],
        total_gib=mass["total_gib"],
        dtypes=mass["dtypes"],
        roles=mass["roles"],
        kinds=formats["kinds"],
        packed_fp4_tensors=formats["packed_fp4_tensors"],
        high_precision_weights=formats["high_precision_weights"],
        activation_scales=formats["activation_scales"],
        expert_format=experts["expert_format"],
        high_precision_expert_layers=experts["high_precision_expert_layers"],
        mtp=mtp,
        moe=per_token["moe"],
        bytes_per_token=per_token["bytes_per_token"],
        bytes_per_token_parts=per_token["bytes_per_token_parts"],
        warnings=warnings,
    )


def _header_length(path: str) -> int:
    with open(path, "rb") as f:
        prefix = f.read(8)
    return struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else 0


def _modules(tensors: list) -> dict:
    """module name -> {"role", "format", "params": {suffix: (dtype, shape, bytes)}}."""
    modules: dict = {}
    for name, dtype, shape, _size, role, module in tensors:
        entry = modules.setdefault(module, {"role": role, "params": {}})
        suffix = name[len(module) + 1 :] if module != name else "weight"
        entry["params"][suffix] = (dtype, shape, _size)
    for entry in modules.values():
        entry["format"] = _module_format(entry["params"])
    return modules


def _mass(tensors: list) -> dict:
    dtypes: dict = {}
    roles = {role: {"tensors": 0, "bytes": 0} for role in ROLES}
    for _name, dtype, _shape, size, role, _module in tensors:
        row = dtypes.setdefault(dtype, {"tensors": 0, "bytes": 0})
        row["tensors"] += 1
        row["bytes"] += size
        roles[role]["tensors"] += 1
        roles[role]["bytes"] += size
    total = sum(row["bytes"] for row in dtypes.values())
    return {
        "total_bytes": total,
        "total_gib": round(total / 2**30, 3),
        "dtypes": dict(sorted(dtypes.items())),
        "roles": {r: v for r, v in roles.items() if v["tensors"]},
    }


def _formats(modules: dict, roles: dict) -> dict:
    """Adds formats {format: modules} and activation (static | dynamic | mixed | none) to each role row."""
    kinds = {kind: {"tensors": 0, "bytes": 0} for kind in KINDS}
    packed = high_precision = 0
    activations: dict = {role: set() for role in roles}
    for module in modules.values():
        fmt = module["format"]
        formats = roles[module["role"]].setdefault("formats", {})
        formats[fmt] = formats.get(fmt, 0) + 1
        weight = next((module["params"][s] for s in WEIGHT_SUFFIXES if s in module["params"]), None)
        if fmt == "packed_fp4":
            packed += 1
        elif fmt == "unquantized" and weight and len(weight[1]) >= 2 and module["role"] not in ("vision", "mtp"):
            high_precision += 1
        if fmt != "unquantized":
            static = any(s in module["params"] for s in INPUT_SCALE_SUFFIXES)
            activations[module["role"]].add("static" if static else "dynamic")
        for suffix, (_dtype, _shape, size) in module["params"].items():
            kind = _kind(fmt, suffix)
            kinds[kind]["tensors"] += 1
            kinds[kind]["bytes"] += size
    for role, row in roles.items():
        row["formats"] = dict(sorted(row.get("formats", {}).items()))
        row["activation"] = _activation(set(activations[role]))
    return {
        "kinds": {k: v for k, v in kinds.items() if v["tensors"]},
        "packed_fp4_tensors": packed,
        "high_precision_weights": high_precision,
        "activation_scales": _activation(set().union(*activations.values())),
    }


def _kind(fmt: str, suffix: str) -> str:
    if fmt == "unquantized":
        return "high_precision"
    prefix = "fp4" if fmt == "packed_fp4" else "fp8"
    return f"{prefix}_weights" if suffix in WEIGHT_SUFFIXES else f"{prefix}_scales"


def _activation(kinds: set) -> str:
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _expert_layers(modules: dict) -> dict:
    """The usual routed-expert format, and the layers whose experts are kept more precise than that."""
    per_layer: dict = {}
    for name, module in modules.items():
        match = _LAYER.search(name) if module["role"] == "routed_experts" else None
        if match:
            counts = per_layer.setdefault(int(match.group(1)), {})
            counts[module["format"]] = counts.get(module["format"], 0) + 1
    if not per_layer:
        return {"expert_format": "", "high_precision_expert_layers": []}
    totals: dict = {}
    for counts in per_layer.values():
        for fmt, n in counts.items():
            totals[fmt] = totals.get(fmt, 0) + n
    usual = max(totals, key=lambda f: (totals[f], -FORMAT_RANK[f]))
    raised = {
        layer: max(counts, key=lambda f: FORMAT_RANK[f])
        for layer, counts in per_layer.items()
        if max(FORMAT_RANK[f] for f in counts) > FORMAT_RANK[usual]
    }
    return {"expert_format": usual, "high_precision_expert_layers": _ranges(raised)}


def _ranges(layer_formats: dict) -> list:
    ranges: list = []
    for layer in sorted(layer_formats):
        fmt = layer_formats[layer]
        if ranges and ranges[-1]["last"] == layer - 1 and ranges[-1]["format"] == fmt:
            ranges[-1]["last"] = layer
        else:
            ranges.append({"first": layer, "last": layer, "format": fmt})
    for r in ranges:
        span = f"layers {r['first']}–{r['last']}" if r["last"] > r["first"] else f"layer {r['first']}"
        r["text"] = f"{span} experts {FORMAT_LABEL[r['format']]}"
    return ranges


def _mtp(tensors: list, modules: dict) -> MtpSummary:
    rows = [t for t in tensors if t[4] == "mtp"]
    formats: dict = {}
    for module in modules.values():
        if module["role"] == "mtp":
            fmt = module["format"]
            formats[fmt] = formats.get(fmt, 0) + 1
    dtypes: dict = {}
    for row in rows:
        dtypes[row[1]] = dtypes.get(row[1], 0) + 1
    return MtpSummary(
        present=bool(rows),
        quantized=any(f != "unquantized" for f in formats),
        tensors=len(rows),
        bytes=sum(t[3] for t in rows),
        formats=dict(sorted(formats.items())),
        dtypes=dict(sorted(dtypes.items())),
    )


def _bytes_per_token(tensors: list, config: dict, warnings: list) -> dict:
    """Weight bytes read to generate one token (no speculative decoding): everything a token passes
    through, the routed experts scaled by top-k / experts, and of the input embedding only its one row
    unless it doubles as the lm_head. The MTP draft module and the vision tower are not read."""
    experts = _config_value(config, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    top_k = _config_value(config, "num_experts_per_tok", "moe_top_k", "num_experts_per_token", "top_k")
    if experts is None:
        indices = {m.group(1) for t in tensors if t[4] == "routed_experts" for m in [_EXPERT_INDEX.search(t[0])] if m}
        experts = len(indices) or None
    has_lm_head = any(_LM_HEAD.search(t[0]) for t in tensors if t[4] == "embeddings")
    parts = {"always": 0, "routed_experts_active": 0, "embeddings": 0}
    routed = 0
    for name, _dtype, shape, size, role, _module in tensors:
        if role in ("mtp", "vision"):
            continue
        if role == "routed_experts":
            routed += size
        elif role == "embeddings":
            one_row = has_lm_head and not _LM_HEAD.search(name) and len(shape) >= 2 and shape[0]
            parts["embeddings"] += size // shape[0] if one_row else size
        else:
            parts["always"] += size
    moe = {"num_experts": experts, "num_experts_per_tok": top_k}
    if routed:
        if not (experts and top_k):
            warnings.append("config.json gives no num_experts_per_tok (or expert count): bytes per token unknown")
            return {"moe": moe, "bytes_per_token": None, "bytes_per_token_parts": parts}
        parts["routed_experts_active"] = round(routed * top_k / experts)
    return {"moe": moe, "bytes_per_token": sum(parts.values()), "bytes_per_token_parts": parts}


# ---------------------------------------------------------------- comparing


def compare(a: CheckpointSummary, b: CheckpointSummary) -> dict[str, Any]:
    """What differs between two inspect_checkpoint() summaries, with the article's headline:
    "byte-twins: 30841 vs 30840 packed FP4 tensors, the same 180 high-precision weights"."""
    differences = _format_differences(a, b) + _expert_differences(a, b) + _mtp_differences(a, b)
    if a["activation_scales"] != b["activation_scales"]:
        differences.append(f"activation scales: {a['activation_scales']} vs {b['activation_scales']}")
    dtype_counts = {
        d: [a["dtypes"].get(d, {}).get("tensors", 0), b["dtypes"].get(d, {}).get("tensors", 0)]
        for d in sorted(set(a["dtypes"]) | set(b["dtypes"]))
    }
    for dtype, (na, nb) in dtype_counts.items():
        if na != nb:
            differences.append(f"{dtype} tensors: {na} vs {nb}")
    change = _pct(a["bytes_per_token"], b["bytes_per_token"])
    twins = (
        abs(_pct(a["total_bytes"], b["total_bytes"]) or 0) <= 1.0
        and a["high_precision_weights"] == b["high_precision_weights"]
        and a["expert_format"] == b["expert_format"]
        and [r["text"] for r in a["high_precision_expert_layers"]]
        == [r["text"] for r in b["high_precision_expert_layers"]]
        and a["mtp"]["quantized"] == b["mtp"]["quantized"]
    )
    return {
        "a": a["name"],
        "b": b["name"],
        "twins": twins,
        "headline": _headline(a, b, twins, change),
        "differences": differences,
        "total_gib": [a["total_gib"], b["total_gib"]],
        "bytes_per_token": [a["bytes_per_token"], b["bytes_per_token"]],
        "bytes_per_token_change_pct": change,
        "packed_fp4_tensors": [a["packed_fp4_tensors"], b["packed_fp4_tensors"]],
        "high_precision_weights": [a["high_precision_weights"], b["high_precision_weights"]],
        "dtype_counts": dtype_counts,
    }


def _pct(old: float | None, new: float | None) -> float | None:
    return None if not old or new is None else round((new / old - 1) * 100, 2)


def _headline(a: CheckpointSummary, b: CheckpointSummary, twins: bool, change: float | None) -> str:
    fp4 = f"{a['packed_fp4_tensors']} vs {b['packed_fp4_tensors']} packed FP4 tensors"
    hp_a, hp_b = a["high_precision_weights"], b["high_precision_weights"]
    hp = f"the same {hp_a} high-precision weights" if hp_a == hp_b else f"{hp_a} vs {hp_b} high-precision weights"
    if twins:
        return f"byte-twins: {fp4}, {hp}"
    per_token = "" if change is None else f", bytes per token {change:+.1f}%"
    return f"different: {size_text(a['total_bytes'])} vs {size_text(b['total_bytes'])}{per_token}; {fp4}, {hp}"


def _format_differences(a: CheckpointSummary, b: CheckpointSummary) -> list[str]:
    out = []
    for role in (r for r in ROLES if r != "mtp"):  # the MTP module gets its own line
        fa = a["roles"].get(role, {}).get("formats", {})
        fb = b["roles"].get(role, {}).get("formats", {})
        if set(fa) != set(fb):
            out.append(f"{role}: {_formats_text(fa)} vs {_formats_text(fb)}")
    return out


def _formats_text(formats: dict) -> str:
    return " + ".join(f"{n} {FORMAT_LABEL[f]}" for f, n in formats.items()) or "absent"


def _expert_differences(a: CheckpointSummary, b: CheckpointSummary) -> list[str]:
    ta = "; ".join(r["text"] for r in a["high_precision_expert_layers"]) or "none"
    tb = "; ".join(r["text"] for r in b["high_precision_expert_layers"]) or "none"
    if ta == tb:
        return []
    delta = b["roles"].get("routed_experts", {}).get("bytes", 0) - a["roles"].get("routed_experts", {}).get("bytes", 0)
    return [f"high-precision experts: {ta} vs {tb} (routed experts {size_text(delta, signed=True)})"]


def size_text(size: int, signed: bool = False) -> str:
    """Bytes for people: GiB down to 0.01 GiB, then MiB or KiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale / 100 or unit == "KiB":
            return f"{size / scale:{'+' if signed else ''}.2f} {unit}"
    return ""


def _mtp_differences(a: CheckpointSummary, b: CheckpointSummary) -> list[str]:
    def text(m: MtpSummary) -> str:
        if not m["present"]:
            return "absent"
        dtypes = ", ".join(f"{n} {d}" for d, n in m["dtypes"].items())
        return f"{m['tensors']} tensors, {'quantized' if m['quantized'] else 'unquantized'} ({dtypes})"

    ta, tb = text(a["mtp"]), text(b["mtp"])
    return [] if ta == tb else [f"MTP module: {ta} vs {tb}"]


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python3 -m agent.hostside.safetensors CHECKPOINT [CHECKPOINT_B]", file=sys.stderr)
        return 2
    try:
        summaries = [inspect_checkpoint(p) for p in argv]
    except (CheckpointError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result: object = (
        summaries[0]
        if len(summaries) == 1
        else {"a": summaries[0], "b": summaries[1], "comparison": compare(summaries[0], summaries[1])}
    )
    json.dump(result, sys.stdout, indent=1, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
