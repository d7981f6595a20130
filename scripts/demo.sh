#!/usr/bin/env bash
# The fresh-machine demo from a checkout, on Linux or macOS: a virtualenv with spark-agent (the controller only: no
# apt, no sudo, no docker, no test tools), then `spark-agent demo`: the quick sweep on the simulated Spark on this
# machine, and what to run. An installed spark-agent needs only `spark-agent demo`. Developers: scripts/setup.sh.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARK_AGENT_VENV:-$REPO/.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "demo: spark-agent needs Python 3.11 or newer; run with PYTHON=/path/to/python3.11" >&2; exit 2; }
  echo "demo: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -x "$VENV/bin/spark-agent" ]; then
  echo "demo: installing spark-agent into $VENV" >&2
  "$VENV/bin/python" -m pip install -q -e "$REPO" >&2
fi
cd "$REPO"
exec "$VENV/bin/spark-agent" demo "$@"
