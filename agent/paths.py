"""Where the controller finds its own files: one definition of each path, resolved from the installed package.

A wheel carries the playbooks, inventories, examples and ansible.cfg inside the package, as `agent/data/`
(pyproject.toml maps the repository root there). A checkout (an editable install, or PYTHONPATH=.) has no
agent/data/: the same files sit at the repository root, one level above the package. Nothing else in the controller
guesses a path: every other module asks here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

# A regular (folder) package, never a zip: Ansible reads these files by path, and so do the hosts' copies.
AGENT = Path(str(resources.files("agent")))
_PACKAGED = AGENT / "data"
DATA = _PACKAGED if (_PACKAGED / "ansible.cfg").is_file() else AGENT.parent
RULES = AGENT / "rules"  # gpus.toml is hostside/facts.py's DEFAULT_GPU_RULES: hosts read it too
ENV_RULES = RULES / "env.toml"
VLLM_ENV_RULES = RULES / "vllm_env.toml"  # the VLLM_* variables each vLLM release reads (lint's unknown-env)
BACKEND_RULES = RULES / "backends.toml"  # the --moe-backend values vLLM accepts per quant (envrules.moe_backends)
MULTINODE_RULES = RULES / "multinode.toml"  # each node's env of a multi-node cell (envrules.node_env)
PLAYBOOKS = DATA / "playbooks"
ANSIBLE_CFG = DATA / "ansible.cfg"
INVENTORIES = DATA / "inventory"
DEFAULT_INVENTORY = INVENTORIES / "local.yml"  # the embedded default: the simulated Spark on localhost
EXAMPLES = DATA / "examples"
