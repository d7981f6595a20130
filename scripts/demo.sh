#!/usr/bin/env bash
# Set up, then run the demo sweep on the embedded default: the simulated Spark on this machine, no hardware.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/setup.sh"
cd "$REPO"
spark-agent sweep examples/quick.toml "$@"
spark-agent report results/quick
