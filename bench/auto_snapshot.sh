#!/usr/bin/env bash
# Automatic-snapshot benchmark (BENCHMARKS.md "Automatic snapshots (HEAPTUI_AUTO_SNAPSHOT)").
#
# What the agent's watch thread costs: it reads the live counters every 5 ms while a rule is
# on (never on the allocation path). Runs bench/stress.c (THREADS threads, OPS malloc+free
# operations in total) under the release agent, side by side and interleaved: rule off, a rule
# that polls but never fires (tolerance:1TiB), and one that snapshots (every:SIZE of allocation,
# EVERY=256MiB by default). Prints the median wall and CPU time of each (RUNS runs) with the
# ratio to "rule off", and the automatic snapshots the firing runs took. Then an idle program
# (sleep 5 s) with the rule polling: the CPU the polling costs by itself.
#
# Usage: bench/auto_snapshot.sh      (RUNS=5 THREADS=4 OPS=2000000 EVERY=256MiB by default)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
THREADS=${THREADS:-4}
OPS=${OPS:-2000000}
EVERY=${EVERY:-256MiB}

source bench/stress_lib.sh

agent() {
    env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/$1.log" HEAPTUI_LISTEN="unix:$work/agent.sock" "${@:2}"
}

one() {
    case $1 in
        off) wall agent off "${STRESS[@]}" ;;
        polling) wall agent polling HEAPTUI_AUTO_SNAPSHOT=tolerance:1TiB "${STRESS[@]}" ;;
        firing) wall agent firing HEAPTUI_AUTO_SNAPSHOT="every:$EVERY" "${STRESS[@]}" ;;
    esac
}
interleave off polling firing

echo "stress: $THREADS threads, $OPS operations in total; medians of $RUNS runs"
table_header 40 off
table_row 40 "agent, rule off" off off
table_row 40 "agent, tolerance:1TiB (polls, never fires)" polling off
table_row 40 "agent, every:$EVERY (snapshots)" firing off
echo
echo "automatic snapshots in the $RUNS firing runs: $(grep -c '(automatic)' "$work/firing.log" || true)"
grep -E '\(automatic\)' "$work/firing.log" | head -3 || true

# The polling alone: CPU of an idle program over 5 s, rule off and on.
idle() {
    local TIMEFORMAT='%U %S' t
    t=$({ time agent idle "$@" sleep 5 >/dev/null 2>>"$work/stderr"; } 2>&1 | tail -1)
    awk '{ printf "%.3f", $1 + $2 }' <<<"$t"
}
echo
echo "idle 5 s, cpu (s): rule off $(idle) / polling every 5 ms $(idle HEAPTUI_AUTO_SNAPSHOT=tolerance:1TiB)"
