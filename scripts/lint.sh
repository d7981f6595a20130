#!/usr/bin/env bash
# Static checks CI runs beside the tests (scripts/test.sh): ruff (lint + format), mypy over agent/, ansible-lint (production profile).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
ruff check agent tests bench playbooks
ruff format --check agent tests bench playbooks
mypy
ansible-lint -q playbooks inventory
