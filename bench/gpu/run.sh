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
  if [[ -s $WORK/sweep.pid ]] && kill -0 "$(cat "$WORK/sweep.pid")" 2>/dev/null; then
    echo "a sweep is running already (pid $(cat "$WORK/sweep.pid")): bench/gpu/run.sh wait SECONDS" >&2; exit 2
  fi
  rm -f "$WORK/sweep.pid"
  { date -u +%FT%TZ; echo "cwd=$ROOT"; echo "spark-agent sweep $SPEC -i $INVENTORY --results $RESULTS --no-progress"
    git -C "$ROOT" rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  } > "$WORK/command.txt"
  # the sweep's own PID, written by the new session's leader before it execs: `$!` would be this shell's subshell,
  # which the device tool ends with the command (the 2026-12-02 run read that as "the sweep ended")
  cd "$ROOT" && setsid bash -c 'echo $$ > "$0"; exec "$@"' "$WORK/sweep.pid" \
    "$PY" -m agent.cli sweep "$SPEC" -i "$INVENTORY" --results "$RESULTS" --no-progress \
    > "$WORK/sweep.log" 2>&1 < /dev/null &
  for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -s $WORK/sweep.pid ]] && break; sleep 0.2; done
  echo "sweep started, pid $(cat "$WORK/sweep.pid")"
  ;;
wait)
  limit=${2:-500}; t0=$(date +%s); pid=$(cat "$WORK/sweep.pid")
  while kill -0 "$pid" 2>/dev/null && (( $(date +%s) - t0 < limit )); do
    sleep 10; echo "$(date -u +%T) cells done: $(grep -ac cell_done "$WORK/sweep.log"); $(grep -ao "cell_done .*" "$WORK/sweep.log" | tail -1 | cut -c1-160)"
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
