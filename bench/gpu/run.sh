#!/usr/bin/env bash
# On the GPU machine, after install.sh: spark-agent drives the real sweeps there (controller = host, local connection).
#   bash bench/gpu/run.sh start          start the session in its own process session (it outlives this command):
#                                        `spark-agent sweep` of each spec in $SPECS in turn (the word `crosscheck`
#                                        there: the load driver against `vllm bench serve` on the first spec's cell)
#   bash bench/gpu/run.sh wait SECONDS   wait for it up to SECONDS; then pack what exists into $OUT; when the session
#                                        has ended, `spark-agent report` of each sweep first
# The device tool ends a command after 10 min but not a process in its own session, so one sweep spans several
# commands while the machine stays warm; each `wait` sends back the tree as it is, in case the machine is lost.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# in this order, what matters most first (the session's device time may run out); "crosscheck": the load driver
# against `vllm bench serve` on the first sweep's first valid cell
SPECS=${SPECS:-"$HERE/h200-qwen3-fp8.toml crosscheck $HERE/h200-qwen3-nvfp4.toml $HERE/h200-qwen3-fp8-more.toml"}
CROSSCHECK_FLAGS=${CROSSCHECK_FLAGS:-"--levels 1,8,32 --repeats 3 --window 8 --prompt-len 512 --output-len 128"}
INVENTORY=${INVENTORY:-$HERE/inventory.yml}
SITE=${SITE:-/tmp/site}
WORK=${WORK:-/tmp/spark-gpu}
RESULTS=$WORK/results
name_of() { sed -n 's/^name = "\(.*\)"/\1/p' "$1" | head -1; }
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
  { date -u +%FT%TZ; echo "cwd=$ROOT"; for spec in $SPECS; do
      if [[ $spec == crosscheck ]]; then echo "python3 bench/gpu/crosscheck_server.py <first valid cell.toml> crosscheck.json $CROSSCHECK_FLAGS"
      else echo "spark-agent sweep $spec -i $INVENTORY --results $RESULTS --no-progress"; fi; done
    git -C "$ROOT" rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  } > "$WORK/command.txt"
  # the session's own PID, written by the new session's leader before it execs: `$!` would be this shell's subshell,
  # which the device tool ends with the command (the 2026-12-02 run read that as "the sweep ended")
  cd "$ROOT" && SPECS="$SPECS" setsid bash -c 'echo $$ > "$0"; exec "$@"' "$WORK/sweep.pid" \
    bash "$HERE/run.sh" session > "$WORK/sweep.log" 2>&1 < /dev/null &
  for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -s $WORK/sweep.pid ]] && break; sleep 0.2; done
  echo "session started, pid $(cat "$WORK/sweep.pid")"
  ;;
session)  # in the background session started by `start`
  first=$(name_of "${SPECS%% *}")
  for spec in $SPECS; do
    if [[ $spec == crosscheck ]]; then
      # the load driver against `vllm bench serve`, on the first sweep's first valid cell, served again as it was
      cell=$(grep -l '^verdict = "valid"' "$RESULTS/$first"/*/*/cell.toml 2>/dev/null | head -1)
      echo "$(date -u +%T) crosscheck on ${cell:-no valid cell}"
      rc=skipped
      # shellcheck disable=SC2086
      [[ -n $cell ]] && { "$PY" "$HERE/crosscheck_server.py" "$cell" "$WORK/crosscheck.json" $CROSSCHECK_FLAGS \
        > "$WORK/crosscheck.log" 2>&1; rc=$?; }
      echo "$(date -u +%T) crosscheck ended rc=$rc"
      continue
    fi
    echo "$(date -u +%T) sweep $(name_of "$spec") starts"
    agent sweep "$spec" -i "$INVENTORY" --results "$RESULTS" --no-progress; rc=$?
    echo "$(date -u +%T) sweep $(name_of "$spec") ended rc=$rc"
  done
  echo "$(date -u +%T) session ended"
  ;;
wait)
  limit=${2:-500}; t0=$(date +%s); pid=$(cat "$WORK/sweep.pid")
  while kill -0 "$pid" 2>/dev/null && (( $(date +%s) - t0 < limit )); do
    sleep 10; echo "$(date -u +%T) cells done: $(grep -ac cell_done "$WORK/sweep.log"); $(grep -ao "cell_done .*\|sweep .* ended.*\|crosscheck .*" "$WORK/sweep.log" | tail -1 | cut -c1-160)"
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "session ended"; tail -20 "$WORK/sweep.log"
    : > "$WORK/report.log"
    for spec in $SPECS; do
      [[ $spec != crosscheck && -d $RESULTS/$(name_of "$spec") ]] || continue
      (cd "$ROOT" && agent report "$RESULTS/$(name_of "$spec")" >> "$WORK/report.log" 2>&1; rc=$?; echo "report $(name_of "$spec") rc=$rc" >> "$WORK/report.log")
    done
    tail -30 "$WORK/report.log"
  else
    echo "session still running"
  fi
  mkdir -p "$OUT"
  tar -C "$WORK" -czf "$OUT/h200-results.tgz" --exclude='*.sock' results command.txt sweep.log \
    $(cd "$WORK" && ls report.log crosscheck.json crosscheck.log crosscheck.server.log 2>/dev/null)
  ls -la "$OUT"
  ;;
stop)  # the session and everything it started, by the PIDs recorded: before the machine's last call
  pid=$(cat "$WORK/sweep.pid" 2>/dev/null) && kill -INT -- "-$pid" 2>/dev/null; sleep 15
  kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid"; echo "stopped $pid"
  ;;
*) echo "usage: run.sh start | wait SECONDS | stop" >&2; exit 2 ;;
esac
