#!/usr/bin/env bash
# Capture from outside (docs/reference.md §9): the same process captured by `heaptui report
# pid:PID` without the agent (ptrace, from outside), with the agent, and dumped by `gcore` as the
# anchor, at 10k, 100k and 1M live blocks of 256 bytes over 16 threads (bench/snapshot_target.c).
#
#   bash bench/outside.sh           # RUNS=3 rounds, the three ways interleaved in each
#
# pause_ms, capture_ms and analysis_ms are the report's own (`--json`); wall_ms is the whole
# `heaptui report` command. gcore stops the process for all of its run: its pause is its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui
HEAPTUI="$PWD/target/release/heaptui"
AGENT="$("$HEAPTUI" agent-path)"
RUNS=${RUNS:-3}
THREADS=16
SIZE=256
WORK="$(mktemp -d)"
PID=
cleanup() {
    [[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -pthread bench/snapshot_target.c -o "$WORK/target"
command -v gcore >/dev/null || { echo "bench/outside.sh needs gcore (apt-get install gdb)" >&2; exit 1; }

now_ms() { date +%s%N | awk '{ printf "%.1f", $1 / 1e6 }'; }

# start BLOCKS [agent]: the target, holding its blocks and waiting on a FIFO (fd 3).
start() {
    rm -f "$WORK/in" "$WORK/out"
    mkfifo "$WORK/in"
    if [[ "${2:-}" == agent ]]; then
        LD_PRELOAD="$AGENT" HEAPTUI_LISTEN="unix:$WORK/agent.sock" HEAPTUI_LOG="$WORK/agent.log" \
            "$WORK/target" "$1" "$THREADS" "$SIZE" wait <"$WORK/in" >"$WORK/out" &
    else
        "$WORK/target" "$1" "$THREADS" "$SIZE" wait <"$WORK/in" >"$WORK/out" &
    fi
    PID=$!
    exec 3>"$WORK/in"
    until grep -q ready "$WORK/out" 2>/dev/null; do sleep 0.05; done
    if [[ "${2:-}" == agent ]]; then
        until [[ -S "$WORK/agent.sock" ]]; do sleep 0.05; done
    fi
}

stop() {
    echo go >&3
    exec 3>&-
    wait "$PID"
    PID=
}

# "pause capture analysis wall" of one `heaptui report pid:PID --json`.
report() {
    local t0 t1
    t0=$(now_ms)
    "$HEAPTUI" report "pid:$PID" --json >"$WORK/report.json" 2>/dev/null
    t1=$(now_ms)
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["pause_ms"], r["capture_ms"], r["analysis_ms"], round(float(sys.argv[3]) - float(sys.argv[2]), 1))' \
        "$WORK/report.json" "$t0" "$t1"
}

gcore_ms() {
    local t0 t1
    t0=$(now_ms)
    gcore -o "$WORK/core" "$PID" >/dev/null 2>&1
    t1=$(now_ms)
    rm -f "$WORK"/core.*
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '| blocks | MiB | way | pause ms | capture ms | analysis ms | report wall ms |\n'
printf '|---:|---:|---|---:|---:|---:|---:|\n'
for b in 10000 100000 1000000; do
    : >"$WORK/outside" && : >"$WORK/agent" && : >"$WORK/gcore"
    for ((i = 0; i < RUNS; i++)); do
        start "$b"
        report >>"$WORK/outside"
        gcore_ms >>"$WORK/gcore"
        stop
        start "$b" agent
        report >>"$WORK/agent"
        stop
    done
    mib=$(awk -v b="$b" -v s="$SIZE" 'BEGIN { printf "%.0f", b * s / 1048576 }')
    for way in outside agent; do
        col() { awk -v k="$1" '{ print $k }' "$WORK/$way" | median; }
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$b" "$mib" "$way" \
            "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)"
    done
    g=$(median <"$WORK/gcore")
    printf '| %s | %s | gcore | %s | %s | - | - |\n' "$b" "$mib" "$g" "$g"
done
