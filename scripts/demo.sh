#!/usr/bin/env bash
# The fresh-machine demo from a checkout: a virtualenv with spark-agent, then `spark-agent demo` (the quick sweep on
# the simulated Spark on this machine; no root, docker or sshd needed for the demo itself). An installed
# spark-agent (pipx install spark-agent) needs only: spark-agent demo.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/setup.sh"
cd "$REPO"
spark-agent demo "$@"
