"""The Ansible modules of playbooks/library, loaded here as plain Python to read what their code declares."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from types import ModuleType
from typing import Any

import agent.hostside
from agent.paths import PLAYBOOKS

LIBRARY = PLAYBOOKS / "library"
MODULES = sorted(p.stem for p in LIBRARY.glob("spark_*.py"))


@cache
def load(name: str) -> ModuleType:
    """Import playbooks/library/<name>.py; its `ansible.module_utils.spark_hostside` is agent.hostside, as the
    module_utils symlink makes it on a host."""
    sys.modules.setdefault("ansible.module_utils.spark_hostside", agent.hostside)
    for sub in (
        "docker",
        "errors",
        "facts",
        "loadgen",
        "logparse",
        "metrics",
        "safetensors",
        "serving",
        "share",
        "supervise",
    ):
        sys.modules.setdefault(
            f"ansible.module_utils.spark_hostside.{sub}", importlib.import_module(f"agent.hostside.{sub}")
        )
    spec = importlib.util.spec_from_file_location(f"spark_library_{name}", LIBRARY / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def argument_spec(name: str) -> dict[str, dict[str, Any]]:
    return load(name).ARGUMENT_SPEC
