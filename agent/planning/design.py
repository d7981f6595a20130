"""The design of a sweep: which server-side configurations become cells.

Each axis is a list of values of one thing that changes the server: the checkpoint, the three backends, the image,
a named env variant, or any `vllm serve` setting of ServerSettings. Cells are the product of the axes, narrowed to
the spec's explicit combinations ([[matrix.include]]) when it lists some, minus its exclusions
([[matrix.exclude]]). Load-side settings are not axes here: they vary inside a cell, against one running server.

Pure: spec.py validates what the user wrote into a Design, matrix.py plans a cell per combination.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The axes every spec has, in the order cells have always been planned (the checkpoint varies slowest).
FIXED_AXES = ("checkpoint", "moe_backend", "linear_backend", "attention_backend", "image", "env")
MAX_CELLS = 4096  # per host: more is a typo (a long axis) or a design that wants exclusions


@dataclass(frozen=True)
class Design:
    """What [matrix] adds to the backends and concurrency. Empty = today's backends-only product."""

    images: list[str] = field(default_factory=list)  # [] = [image] ref alone
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # variant name -> overrides on top of [env]
    server: dict[str, list[Any]] = field(default_factory=dict)  # ServerSettings field -> its values
    include: list[dict[str, Any]] = field(default_factory=list)  # explicit combinations (axis -> value)
    exclude: list[dict[str, Any]] = field(default_factory=list)  # combinations left out (axis -> value)
    arg_names: dict[str, str] = field(default_factory=dict)  # [matrix.extra_args] list (spec.arg_key) -> its name


Axes = Sequence[tuple[str, Sequence[Any]]]


def size(axes: Axes) -> int:
    return math.prod(len(values) for _, values in axes)


def matches(combo: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    """A combination matches a rule when it has every value the rule names (values already normalised)."""
    return all(combo.get(axis) == value for axis, value in rule.items())


def combinations(axes: Axes, include: Sequence[Mapping[str, Any]], exclude: Sequence[Mapping[str, Any]]) -> list[dict]:
    """axis -> value for every cell, in product order: the included ones (all, when none are listed), minus
    the excluded ones. The caller keeps size(axes) bounded."""
    names = [name for name, _ in axes]
    out = []
    for values in itertools.product(*(values for _, values in axes)):
        combo = dict(zip(names, values, strict=True))
        if include and not any(matches(combo, rule) for rule in include):
            continue
        if any(matches(combo, rule) for rule in exclude):
            continue
        out.append(combo)
    return out


def varying(axes: Axes) -> list[str]:
    """The axes with more than one value: the ones a cell's label must name."""
    return [name for name, values in axes if len(values) > 1]
