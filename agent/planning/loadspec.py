"""The [load] settings of open-loop load, datasets and goodput, checked before anything touches a host.

Each problem is one message about one key (spec.py adds the file and line): a rate <= 0, an SLO in the wrong
form or unit, a dataset file that is missing or not ShareGPT-shaped, a context depth the server's max_model_len
cannot hold. The dataset file is read with the same code the host uses (hostside/prompts.py), and its content
hash joins the cell id, so editing the file measures again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from agent.hostside import prompts, slo

MAX_RATE = 100_000.0  # requests/s: far beyond any one server; a typo guard


def check(load: dict[str, Any], given: dict[str, Any], server: dict[str, Any], spec_dir: Path, err: Err) -> None:
    """Check (and complete: dataset_sha256) the [load] table `load`; `given` is what the spec wrote itself."""
    if "request_rate" in given and not 0 < load["request_rate"] <= MAX_RATE:
        err(
            "request_rate",
            f"'request_rate' must be > 0 and <= {MAX_RATE:g} requests/s (leave it out for a closed "
            f"loop), got {load['request_rate']!r}",
        )
    if not 0 < load["burstiness"] <= 1000:
        err("burstiness", f"'burstiness' must be > 0 (1 = Poisson, < 1 burstier), got {load['burstiness']!r}")
    if "burstiness" in given and not load["request_rate"]:
        err("burstiness", "'burstiness' shapes open-loop arrivals; give 'request_rate' too")
    if load["dataset"] not in prompts.DATASETS:
        err("dataset", f"'dataset' must be one of {', '.join(prompts.DATASETS)}, got {load['dataset']!r}")
    if not 0 <= load["range_ratio"] < 1:
        err("range_ratio", f"'range_ratio' must be from 0 to below 1, got {load['range_ratio']!r}")
    _dataset(load, spec_dir, err)
    if load["dataset"] == "prefix":
        if not 0 < load["prefix_len"] < load["prompt_len"]:
            err(
                "prefix_len",
                f"'prefix_len' must be > 0 and below prompt_len ({load['prompt_len']}) for the prefix "
                f"dataset, got {load['prefix_len']!r}",
            )
        if load["prefix_group_size"] < 1:
            err("prefix_group_size", f"'prefix_group_size' must be >= 1, got {load['prefix_group_size']!r}")
    depth = load["context_depth"]
    if depth < 0:
        err("context_depth", f"'context_depth' must be > 0 tokens (leave it out to use prompt_len), got {depth!r}")
    if depth and depth + load["output_len"] > server["max_model_len"]:
        err(
            "context_depth",
            f"context_depth {depth} + output_len {load['output_len']} exceeds max_model_len "
            f"{server['max_model_len']}; raise max_model_len in [server] or use a smaller depth",
        )
    try:
        slo.parse(load["goodput"])
    except slo.SloError as exc:
        err("goodput", str(exc))


Err = Callable[[str, str], NoReturn]


def _dataset(load: dict[str, Any], spec_dir: Path, err: Err) -> None:
    if load["dataset"] != "sharegpt":
        if load["dataset_path"]:
            err("dataset_path", "'dataset_path' is read only with dataset = \"sharegpt\"")
        return
    if not load["dataset_path"]:
        err("dataset", "dataset = \"sharegpt\" needs 'dataset_path': a ShareGPT-format JSON file")
    path = (spec_dir / load["dataset_path"]).resolve()
    try:
        prompts.load_sharegpt(str(path))
    except prompts.DatasetError as exc:
        err("dataset_path", str(exc))
    load["dataset_path"] = str(path)
    load["dataset_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
