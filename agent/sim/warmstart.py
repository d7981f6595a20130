"""Cold and warm starts of the simulated Spark: the phases of a start (calibration.toml [startup]) and the
torch.compile cache under VLLM_CACHE_ROOT, honoured like vLLM does: the first start of a model compiles and stores
its graphs; a later start with the same cache folder loads them ("Directly load the compiled graph(s) ... from the
cache"). The cache key hashes the model, its quantization and max_model_len (ASSUMPTION: the MoE kernel is a custom
op outside the traced graph, so cells that differ only in backend share it)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from . import calibration


@dataclass(frozen=True)
class Phases:
    weights_s: float
    dynamo_s: float
    compile_s: float  # cold: compiling; warm: loading from the cache
    warm: bool
    graph_capture_s: float
    profile_kv_s: float
    api_s: float
    cache_dir: str  # the backbone folder ("" when the server has no VLLM_CACHE_ROOT: always cold, nothing stored)
    range_end: int

    @property
    def compile_total_s(self) -> float:
        return self.dynamo_s + self.compile_s

    @property
    def engine_init_s(self) -> float:
        return self.compile_total_s + self.graph_capture_s + self.profile_kv_s

    @property
    def total_s(self) -> float:
        return self.weights_s + self.engine_init_s + self.api_s


MARKER = "spark-sim-graphs.json"


def cache_folder(env: dict, model: str, quant: str, max_model_len: int) -> str:
    root = env.get("VLLM_CACHE_ROOT", "")
    if not root:
        return ""
    digest = hashlib.sha256(f"{model}|{quant}|{max_model_len}".encode()).hexdigest()[:10]
    return os.path.join(root, "torch_compile_cache", digest, "rank_0_0", "backbone")


def phases(env: dict, model: str, checkpoint: str, quant: str, max_model_len: int) -> Phases:
    cal = calibration.load()
    st = cal["startup"]
    gib = cal["checkpoints"].get(checkpoint, {}).get("weights_gib", 22.0)
    folder = cache_folder(env, model, quant, max_model_len)
    warm = bool(folder) and os.path.isfile(os.path.join(folder, MARKER))
    return Phases(
        weights_s=gib / st["weights_gib_per_s"],
        dynamo_s=st["dynamo_s"],
        compile_s=st["cache_load_s"] if warm else st["compile_cold_s"],
        warm=warm,
        graph_capture_s=st["graph_capture_s"],
        profile_kv_s=st["profile_kv_s"],
        api_s=st["api_s"],
        cache_dir=folder,
        range_end=int(st["compile_range_end"]),
    )


def store(p: Phases) -> None:
    """After a cold compile: the graphs are in the cache (a marker stands for them)."""
    if p.cache_dir and not p.warm:
        Path(p.cache_dir).mkdir(parents=True, exist_ok=True)
        tmp = os.path.join(p.cache_dir, MARKER + ".tmp")
        Path(tmp).write_text('{"graphs": 1}\n')
        os.replace(tmp, os.path.join(p.cache_dir, MARKER))
