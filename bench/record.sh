#!/usr/bin/env bash
# Recording benchmark (BENCHMARKS.md "Recording (HEAPTUI_RECORD)").
#
# Runs bench/stress.c (the hook-overhead workload: THREADS threads, OPS malloc+free operations
# in total, allocations 10 calls deep) side by side: bare, under the agent with stacks on,
# and under the agent with stacks on and HEAPTUI_RECORD. Prints the median wall and CPU time
# of each (RUNS runs, interleaved) with the ratio to bare, then, for the recorded runs, the
# heap events written, the events lost (the ring was full: the writer fell behind) and the
# file's bytes per written event.
#
# Usage: bench/record.sh            (RUNS=5 THREADS=4 OPS=2000000 by default)
#        THREADS=1 bench/record.sh  (one program thread: the writer has a core of its own)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
THREADS=${THREADS:-4}
OPS=${OPS:-2000000}

source bench/stress_lib.sh

agent() {
    env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/agent.log" HEAPTUI_LISTEN="unix:$work/agent.sock" "$@"
}

one() {
    case $1 in
        bare) wall "${STRESS[@]}" ;;
        stacks_on) wall agent "${STRESS[@]}" ;;
        record)
            wall agent HEAPTUI_RECORD="$work/run.hrec" "${STRESS[@]}"
            stat -c %s "$work/run.hrec" >>"$work/recording-bytes"
            ;;
    esac
}
interleave bare stacks_on record
bytes=$(tr '\n' ' ' <"$work/recording-bytes")

echo "stress: $THREADS threads, $OPS operations in total; medians of $RUNS runs"
table_header 34 bare
table_row 34 "bare" bare bare
table_row 34 "agent, stacks on (depth 16)" stacks_on bare
table_row 34 "agent, stacks on, HEAPTUI_RECORD" record bare

# The recorded runs' exit lines: "recording FILE: N heap events, M lost".
echo
read -ra sizes <<<"$bytes"
i=0
grep -o 'recording [^ ]*: [0-9]* heap events, [0-9]* lost' "$work/agent.log" | while read -r _ _ written _ _ lost _; do
    size=${sizes[$i]}
    total=$((written + lost))
    echo "recorded run $((i + 1)): $written heap events written, $lost lost" \
        "($(awk -v l="$lost" -v t="$total" 'BEGIN { printf "%.1f", 100 * l / t }')% of $total)," \
        "$size bytes = $(awk -v s="$size" -v w="$written" 'BEGIN { printf "%.1f", s / w }') bytes/written event"
    i=$((i + 1))
done
