#!/usr/bin/env bash
# Set up, then run the whole test suite: real sshd test hosts, real Ansible, a real dockerd + registry,
# the simulated Spark, and the CPU build of vLLM (installed once into a cached venv; see tests/engine/).
# The static checks (scripts/lint.sh: ruff, mypy, ansible-lint) run beside the tests: they need a minute of CPU
# while the first tests mostly wait on sshd and the simulator. Either failing fails the run; lint's output comes last.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/setup.sh"
cd "$REPO"
lint_log="$(mktemp)"
trap 'rm -f "$lint_log"' EXIT
nice -n 10 bash scripts/lint.sh >"$lint_log" 2>&1 &  # the controller's priority, as the tests' (tests/priority.py)
lint_pid=$!
tests=0
bash scripts/pytest.sh "$@" || tests=$?  # parallel workers: see there
if [ "$tests" -eq 130 ]; then  # Ctrl-C: the checks are not waited for
  kill "$lint_pid" 2>/dev/null || true
  exit 130
fi
lint=0
wait "$lint_pid" || lint=$?
cat "$lint_log"
if [ "$lint" -ne 0 ]; then
  echo "test.sh: the static checks failed (scripts/lint.sh, exit $lint)" >&2
fi
if [ "$tests" -ne 0 ]; then exit "$tests"; fi
exit "$lint"
