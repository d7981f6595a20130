"""The [load] settings of open-loop load, datasets and goodput, checked before anything touches a host.

Each problem is one message about one key (spec.py adds the file and line): a rate <= 0, an SLO in the wrong
form or unit, a dataset file that is missing or not ShareGPT-shaped, a context depth the server's max_model_len
cannot hold. The dataset file is read with the same code the host uses (hostside/prompts.py), and its content
hash joins the cell id, so editing the file measures again.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from agent.hostside import loadpoints, prompts, slo

MAX_RATE = 100_000.0  # requests/s: far beyond any one server; a typo guard


def check(load: dict[str, Any], given: dict[str, Any], server: dict[str, Any], spec_dir: Path, err: Err) -> None:
    """Check (and complete: dataset_sha256, the load axes) the [load] table `load`; `given` is what the spec wrote
    itself."""
    rates = _axis(load, "request_rate", "request_rates", (int, float), err)
    for rate in rates if "request_rate" in given else []:
        if not MIN_RATE <= rate <= MAX_RATE:
            err(
                "request_rate",
                f"'request_rate' must be > 0 (at least {MIN_RATE:g}) and <= {MAX_RATE:g} requests/s (leave it out "
                f"for a closed loop), got {rate!r}",
            )
        if not loadpoints.names_exactly(float(rate)):
            err("request_rate", f"'request_rate' takes at most 6 significant digits, got {rate!r}")
    if not 0 < load["burstiness"] <= 1000:
        err("burstiness", f"'burstiness' must be > 0 (1 = Poisson, < 1 burstier), got {load['burstiness']!r}")
    if "burstiness" in given and not any(rates):
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
    for depth in _axis(load, "context_depth", "context_depths", (int,), err):
        if depth < 0 or (depth == 0 and load.get("context_depths")):
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

MIN_RATE = 0.001  # requests/s: one request in 17 minutes; below it a window holds no request
MAX_POINTS = 64  # values of one load axis: each is a point (x concurrency levels) against the one server


def _axis(load: dict[str, Any], key: str, list_key: str, types: tuple[type, ...], err: Err) -> list[Any]:
    """The values of a load key that may be an axis: a scalar, or a list of distinct values of the scalar's type.
    Two or more values move to `list_key` (the key keeps its default, so a scalar spec keeps its cell ids); one
    value is that scalar."""
    value = load[key]
    if not isinstance(value, list):
        return [value]
    if not value:
        err(key, f"'{key}' is an empty list; give one value, or a list of values to measure each (or remove it)")
    if len(value) > MAX_POINTS:
        err(key, f"'{key}' lists {len(value)} values; the limit is {MAX_POINTS}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, types) or (isinstance(v, float) and not math.isfinite(v)):
            want = " or ".join(t.__name__ for t in types)
            err(key, f"every value in the '{key}' list must be a {want}, got {v!r}"[:200])
    if len(set(value)) != len(value):
        err(key, f"the '{key}' list holds a value twice")
    kind = float if float in types else int
    if len(value) == 1:
        load[key] = kind(value[0])
    else:
        load[key], load[list_key] = kind(0), [kind(v) for v in value]
    return list(value)


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
