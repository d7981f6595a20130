#!/usr/bin/env bash
# On the GPU machine, after install.sh: spark-agent drives the real sweep there (controller = host, local connection).
#   bash bench/gpu/run.sh start          start `spark-agent sweep` in its own session (it outlives this command)
#   bash bench/gpu/run.sh wait SECONDS   wait for it up to SECONDS; then pack what exists into $OUT; when the sweep
#                                        has ended, `spark-agent report` first
# The device tool ends a command after 10 min but not a process in its own session, so one sweep spans several
# commands while the machine stays warm; each `wait` sends back the tree as it is, in case the machine is lost.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SPEC=${SPEC:-$HERE/h200-fp8-moe.toml}
INVENTORY=${INVENTORY:-$HERE/inventory.yml}
SITE=${SITE:-/tmp/site}
WORK=${WORK:-/tmp/spark-gpu}
RESULTS=$WORK/results
NAME=$(sed -n 's/^name = "\(.*\)"/\1/p' "$SPEC" | head -1)
OUT=${OUT:-$WORK/out}
export PYTHONPATH=$SITE:$ROOT PATH=$SITE/bin:$PATH PYTHONUNBUFFERED=1 ANSIBLE_LOCAL_TEMP=$WORK/ansible-tmp
PY=${PY:-python3}
agent() { "$PY" -m agent.cli "$@"; }

case "${1:-}" in
start)
  mkdir -p "$WORK" "$RESULTS"
  { date -u +%FT%TZ; echo "cwd=$ROOT"; echo "spark-agent sweep $SPEC -i $INVENTORY --results $RESULTS --no-progress"
    git -C "$ROOT" rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  } > "$WORK/command.txt"
  cd "$ROOT" && setsid nohup "$PY" -m agent.cli sweep "$SPEC" -i "$INVENTORY" --results "$RESULTS" --no-progress \
    > "$WORK/sweep.log" 2>&1 < /dev/null &
  echo $! > "$WORK/sweep.pid"
  echo "sweep started, pid $(cat "$WORK/sweep.pid")"
  ;;
wait)
  limit=${2:-500}; t0=$(date +%s); pid=$(cat "$WORK/sweep.pid")
  while kill -0 "$pid" 2>/dev/null && (( $(date +%s) - t0 < limit )); do
    sleep 10; echo "$(date -u +%T) cells done: $(grep -c cell_done "$WORK/sweep.log"); $(grep -o "cell_done .*" "$WORK/sweep.log" | tail -1 | cut -c1-160)"
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "sweep ended"; tail -20 "$WORK/sweep.log"
    (cd "$ROOT" && agent report "$RESULTS/$NAME" > "$WORK/report.log" 2>&1; echo "report rc=$?" >> "$WORK/report.log")
    cat "$WORK/report.log" | tail -5
  else
    echo "sweep still running"
  fi
  mkdir -p "$OUT"
  tar -C "$WORK" -czf "$OUT/h200-results.tgz" --exclude='*.sock' results command.txt sweep.log $(cd "$WORK" && ls report.log 2>/dev/null)
  ls -la "$OUT"
  ;;
*) echo "usage: run.sh start | wait SECONDS" >&2; exit 2 ;;
esac
