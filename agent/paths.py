"""Where the controller finds its own files: one definition of each path (the repository checkout)."""

from __future__ import annotations

from pathlib import Path

AGENT = Path(__file__).resolve().parent  # the `agent` package
REPO = AGENT.parent
RULES = AGENT / "rules"  # gpus.toml is hostside/facts.py's DEFAULT_GPU_RULES: hosts read it too
ENV_RULES = RULES / "env.toml"
VLLM_ENV_RULES = RULES / "vllm_env.toml"  # the VLLM_* variables each vLLM release reads (lint's unknown-env)
MULTINODE_RULES = RULES / "multinode.toml"  # each node's env of a multi-node cell (envrules.node_env)
PLAYBOOKS = REPO / "playbooks"
ANSIBLE_CFG = REPO / "ansible.cfg"
DEFAULT_INVENTORY = REPO / "inventory" / "local.yml"  # the embedded default: the simulated Spark on localhost
