#!/usr/bin/env bash
# Set up, then run the whole test suite: real sshd test hosts, real Ansible, a real dockerd + registry,
# the simulated Spark, and the CPU build of vLLM (installed once into a cached venv; see tests/engine/).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/setup.sh"
cd "$REPO"
bash scripts/lint.sh   # ruff, mypy, ansible-lint: a failure stops CI before the tests
exec bash scripts/pytest.sh "$@"  # parallel workers: see there
