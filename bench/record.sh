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

cargo build --release -p heaptui-agent >&2
AGENT=${CARGO_TARGET_DIR:-$PWD/target}/release/libheaptui_agent.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -fno-omit-frame-pointer -pthread bench/stress.c -o "$work/stress"
STRESS=("$work/stress" "$THREADS" "$OPS")

# "wall,cpu" seconds of one run of "$@" (output discarded).
wall() {
    local TIMEFORMAT='%R %U %S' t
    t=$({ time "$@" >/dev/null 2>>"$work/stderr"; } 2>&1 | tail -1)
    awk '{ printf "%.3f,%.3f\n", $1, $2 + $3 }' <<<"$t"
}

median() {
    sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

agent() {
    env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/agent.log" HEAPTUI_LISTEN="unix:$work/agent.sock" "$@"
}

declare -A times
one() {
    case $1 in
        bare) wall "${STRESS[@]}" ;;
        stacks_on) wall agent "${STRESS[@]}" ;;
        record) wall agent HEAPTUI_RECORD="$work/run.hrec" "${STRESS[@]}" ;;
    esac
}
names=(bare stacks_on record)
for ((i = 0; i < RUNS; i++)); do
    for ((k = 0; k < 3; k++)); do
        n=${names[(i + k) % 3]}
        times[$n]+="$(one "$n") "
        if [[ $n == record ]]; then
            bytes+=" $(stat -c %s "$work/run.hrec")"
        fi
    done
done

med() { tr ' ' '\n' <<<"${times[$1]}" | grep . | cut -d, -f"$2" | median; }
bare=$(med bare 1)
bare_cpu=$(med bare 2)
echo "stress: $THREADS threads, $OPS operations in total; medians of $RUNS runs"
printf '| %-34s | %10s | %8s | %10s | %8s |\n' run "wall (s)" "vs bare" "cpu (s)" "vs bare"
printf '|%s|%s|%s|%s|%s|\n' "------------------------------------" "------------" "----------" "------------" "----------"
for n in "${names[@]}"; do
    m=$(med "$n" 1)
    c=$(med "$n" 2)
    case $n in
        bare) label="bare" ;;
        stacks_on) label="agent, stacks on (depth 16)" ;;
        record) label="agent, stacks on, HEAPTUI_RECORD" ;;
    esac
    printf '| %-34s | %10s | %7.2fx | %10s | %7.2fx |\n' "$label" "$m" \
        "$(awk -v a="$m" -v b="$bare" 'BEGIN { print a / b }')" "$c" \
        "$(awk -v a="$c" -v b="$bare_cpu" 'BEGIN { print a / b }')"
done

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
