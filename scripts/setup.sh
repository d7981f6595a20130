#!/usr/bin/env bash
# Set up a fresh machine: system packages (apt), then a virtualenv with spark-agent and its test tools.
# Idempotent and quick when everything is already there. Sourced by test.sh (demo.sh needs none of this).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARK_AGENT_VENV:-$REPO/.venv}"

# openssh-server: real SSH test hosts; docker.io + docker-registry + busybox-static: the docker runtime tests and the
# simulator's image; chromium: the report's HTML is checked in a real browser; rsync/tar: collect; sudo: a test host's
# login user whose sudo asks for a password (tests/sshd_hosts.login_as_user); prometheus: a real Prometheus scrapes
# a sweep's live metrics (tests/test_live_metrics.py; the test starts its own, on loopback).
APT_PACKAGES=(openssh-server openssh-client docker.io docker-registry busybox-static chromium tar python3 postgresql sudo prometheus)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.spark-agent-installed"
if [ ! -f "$stamp" ] || [ "$REPO/pyproject.toml" -nt "$stamp" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q -e "$REPO[test]" >&2
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
