#!/usr/bin/env bash
# What `heaptui report` of a recording costs: a real recording of bench/stress.c (4 threads,
# malloc+free from allocations 10 calls deep) made with HEAPTUI_RECORD under the release agent,
# then replayed by the release `heaptui report REC` — default units (library, outermost),
# another query (function, inclusive: the file replayed again), and JSON. Medians of $RUNS.
#
# Usage: RUNS=3 OPS=1000000 bench/replay.sh   (figures go in BENCHMARKS.md, "Recording replay")
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
THREADS=${THREADS:-4}
OPS=${OPS:-1000000}

cargo build --release -p heaptui >&2
HEAPTUI=${CARGO_TARGET_DIR:-$PWD/target}/release/heaptui
AGENT=$("$HEAPTUI" agent-path)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -fno-omit-frame-pointer -pthread bench/stress.c -o "$work/stress"
env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/agent.log" HEAPTUI_LISTEN="unix:$work/agent.sock" \
    HEAPTUI_RECORD="$work/run.hrec" "$work/stress" "$THREADS" "$OPS" >/dev/null
bytes=$(stat -c %s "$work/run.hrec")

wall() {
    local TIMEFORMAT='%R' t
    t=$({ time "$@" >/dev/null; } 2>&1 | tail -1)
    echo "$t"
}

median() {
    sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

records=$("$HEAPTUI" report "$work/run.hrec" | awk '/^records/ { gsub(/\(/, "", $3); print $2 " records, " $3 " heap events" }')
echo "recording: $bytes bytes, $records"
for query in "" "--units function --position inclusive" "--json"; do
    # shellcheck disable=SC2086
    t=$(for ((i = 0; i < RUNS; i++)); do wall "$HEAPTUI" report "$work/run.hrec" $query; done | median)
    echo "heaptui report REC ${query:-(default)}: ${t} s (median of $RUNS)"
done
