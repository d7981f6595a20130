"""What a sweep asks of `vllm serve` ([server]) and of the load ([load]): one typed definition per setting.

Each field carries, in its metadata, the TOML types a spec may give it and, for a server setting, its `vllm serve`
flag. The spec schema (spec.py), the [config] table of cell.toml and the cell id (matrix.CellConfig) and the
server's command line (matrix.CellConfig.serve_args) are all read from these fields: adding a flag is one field.

A field added later must not change the id of cells planned before it: give it `keep_default=False`, and it is
left out of the [config] table (and so of the id) while it holds its default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def setting(
    default: Any = dataclasses.MISSING,
    *,
    toml: tuple[type, ...] = (),
    flag: str = "",
    always: bool = False,
    keep_default: bool = True,
) -> Any:
    """A dataclass field with its TOML types, its `vllm serve` flag ("" = none), whether the flag is passed even
    at its default (`always`; otherwise only when set), and whether the default value is recorded."""
    return field(default=default, metadata=meta(toml=toml, flag=flag, always=always, keep_default=keep_default))


def meta(
    *, toml: tuple[type, ...] = (), flag: str = "", always: bool = False, keep_default: bool = True
) -> dict[str, Any]:
    """The metadata `setting` gives a field (for a field that needs a default_factory)."""
    return {"toml": toml, "flag": flag, "always": always, "keep_default": keep_default}


@dataclass(frozen=True)
class ServerSettings:
    """[server]: the same for every cell of a sweep. The field order is the order of the [config] table."""

    speculative: str = setting("", toml=(str, dict), flag="--speculative-config")  # "" = off, else canonical JSON
    gpu_memory_utilization: float = setting(0.85, toml=(float, int), flag="--gpu-memory-utilization", always=True)
    max_model_len: int = setting(8192, toml=(int,), flag="--max-model-len", always=True)
    max_num_seqs: int = setting(16, toml=(int,), flag="--max-num-seqs", always=True)
    extra_args: list[Any] = field(default_factory=list, metadata=meta(toml=(list,)))  # passed last, each str()
    # multi-node (issue 19): Sparks one cell spans, joined by Ray; left out of [config] at their defaults
    nodes: int = setting(1, toml=(int,), keep_default=False)
    tensor_parallel_size: int = setting(1, toml=(int,), flag="--tensor-parallel-size", keep_default=False)
    pipeline_parallel_size: int = setting(1, toml=(int,), flag="--pipeline-parallel-size", keep_default=False)
    distributed_executor_backend: str = setting(
        "", toml=(str,), flag="--distributed-executor-backend", keep_default=False
    )  # "ray" whenever nodes > 1 (matrix sets it)
    transport: str = setting("", toml=(str,), keep_default=False)  # "" = rdma when the link has it | rdma | socket
    drop_page_cache: bool = setting(False, toml=(bool,), keep_default=False)  # drop the page cache before start
    # Added with the [matrix] axes: left out of [config] (and the id) at their default, vLLM's own.
    kv_cache_dtype: str = setting("", toml=(str,), flag="--kv-cache-dtype", keep_default=False)  # "" = auto
    # True = vLLM's default (flag not passed); False passes --no-enable-prefix-caching
    enable_prefix_caching: bool = setting(True, toml=(bool,), flag="--enable-prefix-caching", keep_default=False)


@dataclass(frozen=True)
class LoadSettings:
    """[load]: what the load driver sends."""

    prompt_len: int = setting(1024, toml=(int,))
    output_len: int = setting(256, toml=(int,))
    profile: str = setting("uniform", toml=(str,))  # uniform | mixed
    seed: int = setting(0, toml=(int,))
    # Added with open-loop load, datasets and goodput (planning/loadspec.py checks them): left out of [config] (and
    # the id) at their defaults, which are today's closed loop of random words.
    request_rate: float = setting(0.0, toml=(float, int, list), keep_default=False)  # req/s, open loop; 0 = closed loop
    burstiness: float = setting(1.0, toml=(float, int), keep_default=False)  # gamma shape; 1 = Poisson arrivals
    dataset: str = setting("random", toml=(str,), keep_default=False)  # random | sharegpt | prefix
    dataset_path: str = setting("", toml=(str,), keep_default=False)  # sharegpt: JSON file, relative to the spec
    dataset_sha256: str = setting("", toml=(), keep_default=False)  # the file's content, hashed (not a spec key)
    range_ratio: float = setting(0.0, toml=(float, int), keep_default=False)  # random: lengths within +-ratio
    prefix_len: int = setting(0, toml=(int,), keep_default=False)  # prefix: shared prefix tokens
    prefix_group_size: int = setting(1, toml=(int,), keep_default=False)  # prefix: prompts per shared prefix
    context_depth: int = setting(0, toml=(int, list), keep_default=False)  # every prompt this many tokens; 0 = off
    exact_lengths: bool = setting(False, toml=(bool,), keep_default=False)  # lengths counted by /tokenize
    reset_prefix_cache: bool = setting(False, toml=(bool,), keep_default=False)  # POST /reset_prefix_cache
    goodput: list[str] = field(  # SLOs as `vllm bench serve --goodput` takes them: ["ttft:500", "tpot:50"] (ms)
        default_factory=list, metadata=meta(toml=(list,), keep_default=False)
    )
    # The load axes inside a cell (issue 15): a spec's list of two or more rates or depths lands here (loadspec.py),
    # and request_rate / context_depth keep their defaults; every (rate, depth, concurrency) is a point of the cell
    # (hostside/loadpoints.py). Not spec keys themselves; left out of [config] (and the id) while empty.
    request_rates: list[float] = field(default_factory=list, metadata=meta(keep_default=False))
    context_depths: list[int] = field(default_factory=list, metadata=meta(keep_default=False))


@dataclass(frozen=True)
class TelemetrySettings:
    """[telemetry]: how the GPU is watched during the windows (hostside/telemetry.py). Not part of the cell id:
    it changes what is recorded next to the numbers, not the numbers' configuration."""

    interval_s: float = setting(1.0, toml=(float, int))  # nvidia-smi sampling period
    throttle_threshold: float = setting(5.0, toml=(float, int))  # % of a window throttled before it is flagged
    required: bool = setting(False, toml=(bool,))  # a host without GPU telemetry fails the cell instead of a note
    cooldown_s: float = setting(0.0, toml=(float, int))  # idle pause before each cell's first window
    cool_to_c: float = setting(0.0, toml=(float, int))  # then wait until the GPU is at most this hot (0 = off)
    cool_timeout_s: float = setting(600.0, toml=(float, int))  # give up waiting (recorded) after this long


# The correctness thresholds' defaults, in one place (docs/correctness.md says why each). Set them from the agreement
# real kernels reach with each other on a GPU (issue 37: triton vs deep_gemm vs marlin, graphs vs eager, spec on/off).
CORRECTNESS_DEFAULTS: dict[str, float] = {
    "min_score": 0.0,  # exact-match share a cell must reach (0 = off)
    "max_score_drop": 0.25,  # below the group's reference by more: wrong
    "min_agreement": 0.6,  # mean prefix agreement with the reference (short probe)
    "max_degenerate": 0.1,  # share of short outputs that loop, are empty or noise
    "long_tokens": 8192,  # tokens per long greedy generation (ignore_eos), cut to what max_model_len leaves
    "long_prompts": 2,  # long generations per cell (at most 4)
    "long_min_tokens": 64,  # a long output degenerates only when its bad tail is at least this long
    "min_task_accuracy": 0.97,  # task gate: at the highest concurrency, at least this share of the reference's
}


@dataclass
class CorrectnessSettings:
    """[correctness]: the probe after each cell's windows (hostside/probe.py), the long-decode check
    (hostside/longdecode.py), and when their outputs make the cell WRONG OUTPUT (judging/correctness.py). Not part
    of the cell id. Defaults: CORRECTNESS_DEFAULTS, justified in docs/correctness.md."""

    enabled: bool = setting(True, toml=(bool,))
    min_score: float = setting(CORRECTNESS_DEFAULTS["min_score"], toml=(float, int))
    max_score_drop: float = setting(CORRECTNESS_DEFAULTS["max_score_drop"], toml=(float, int))
    min_agreement: float = setting(CORRECTNESS_DEFAULTS["min_agreement"], toml=(float, int))
    max_degenerate: float = setting(CORRECTNESS_DEFAULTS["max_degenerate"], toml=(float, int))
    long_decode: bool = setting(False, toml=(bool,))  # the long-decode check after the probe (minutes per cell)
    long_tokens: int = setting(int(CORRECTNESS_DEFAULTS["long_tokens"]), toml=(int,))
    long_prompts: int = setting(int(CORRECTNESS_DEFAULTS["long_prompts"]), toml=(int,))
    long_min_tokens: int = setting(int(CORRECTNESS_DEFAULTS["long_min_tokens"]), toml=(int,))
    long_batch: bool = setting(True, toml=(bool,))  # also generate them inside a batch of the cell's highest level
    long_budget_s: float = setting(1800.0, toml=(float, int))  # the long-decode check stops asking after this
    task_gate: bool = setting(False, toml=(bool,))  # the task-accuracy set at the cell's highest concurrency
    # after each cell with CUDA graphs, a probe-only server start of it with --enforce-eager (no windows): the
    # graphs path's yardstick without an eager twin's measurements (planning/matrix.py eager_starts)
    eager_start: bool = setting(False, toml=(bool,))
    min_task_accuracy: float = setting(CORRECTNESS_DEFAULTS["min_task_accuracy"], toml=(float, int))
    # the reference cell of each checkpoint: config values it must have (e.g. {moe_backend = "marlin"}); {} = the
    # consensus of the cells (judging/consensus.py)
    reference: dict[str, Any] = field(default_factory=dict, metadata=meta(toml=(dict,)))


def toml_schema(cls: type[DataclassInstance]) -> dict[str, tuple[tuple[type, ...], bool, Any]]:
    """key -> (accepted TOML types, required, default) of a settings dataclass, for spec validation."""
    # a field without TOML types is filled in by the loader, never written in a spec
    return {f.name: (f.metadata["toml"], _required(f), _default(f)) for f in fields(cls) if f.metadata.get("toml")}


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def flat_items(obj: Any) -> Iterator[tuple[dataclasses.Field[Any], Any]]:
    """(field, value) of a dataclass in order, the fields of a nested settings dataclass in its place."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from flat_items(value)
        else:
            yield f, value


def flat_dict(obj: Any) -> dict[str, Any]:
    """The flat table of a dataclass (lists copied); a `keep_default=False` field at its default is left out."""
    out: dict[str, Any] = {}
    for f, value in flat_items(obj):
        if not f.metadata.get("keep_default", True) and value == _default(f):
            continue
        out[f.name] = list(value) if isinstance(value, list) else value
    return out


def from_flat(cls: type[T], table: Mapping[str, Any]) -> T:
    """The dataclass `cls` from its flat table (nested settings read from the same table). A key that is missing
    takes the field's default; a missing key without a default, or a key `cls` does not know, is a ValueError."""
    unknown = set(table) - set(flat_names(cls))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))}")
    return _build(cls, table)


def flat_fields(cls: type[DataclassInstance]) -> list[dataclasses.Field[Any]]:
    """The fields of a dataclass in order, those of a nested settings dataclass in its place."""
    out: list[dataclasses.Field[Any]] = []
    for f in fields(cls):
        nested = _nested_type(cls, f)
        out += flat_fields(nested) if nested else [f]
    return out


def flat_names(cls: type[DataclassInstance]) -> list[str]:
    names: list[str] = []
    for f in fields(cls):
        nested = _nested_type(cls, f)
        names += flat_names(nested) if nested else [f.name]
    return names


def _build(cls: type[T], table: Mapping[str, Any]) -> T:
    values: dict[str, Any] = {}
    for f in fields(cls):
        nested = _nested_type(cls, f)
        if nested:
            values[f.name] = _build(nested, table)
        elif f.name in table:
            value = table[f.name]
            values[f.name] = list(value) if isinstance(value, list) else value
        elif _required(f):
            raise ValueError(f"missing key {f.name}")
    return cls(**values)


_NESTED: dict[str, type[DataclassInstance]] = {"ServerSettings": ServerSettings, "LoadSettings": LoadSettings}


def _nested_type(cls: type, f: dataclasses.Field[Any]) -> type[DataclassInstance] | None:
    """The settings dataclass a field holds (annotations are strings here: resolved by name)."""
    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return _NESTED.get(name)
