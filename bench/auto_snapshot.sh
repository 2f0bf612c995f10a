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
    env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/$1.log" HEAPTUI_LISTEN="unix:$work/agent.sock" "${@:2}"
}

declare -A times
one() {
    case $1 in
        off) wall agent off "${STRESS[@]}" ;;
        polling) wall agent polling HEAPTUI_AUTO_SNAPSHOT=tolerance:1TiB "${STRESS[@]}" ;;
        firing) wall agent firing HEAPTUI_AUTO_SNAPSHOT="every:$EVERY" "${STRESS[@]}" ;;
    esac
}
names=(off polling firing)
for ((i = 0; i < RUNS; i++)); do
    for ((k = 0; k < 3; k++)); do
        n=${names[(i + k) % 3]}
        times[$n]+="$(one "$n") "
    done
done

med() { tr ' ' '\n' <<<"${times[$1]}" | grep . | cut -d, -f"$2" | median; }
base=$(med off 1)
base_cpu=$(med off 2)
echo "stress: $THREADS threads, $OPS operations in total; medians of $RUNS runs"
printf '| %-40s | %10s | %8s | %10s | %8s |\n' run "wall (s)" "vs off" "cpu (s)" "vs off"
printf '|%s|%s|%s|%s|%s|\n' "------------------------------------------" "------------" "----------" "------------" "----------"
for n in "${names[@]}"; do
    m=$(med "$n" 1)
    c=$(med "$n" 2)
    case $n in
        off) label="agent, rule off" ;;
        polling) label="agent, tolerance:1TiB (polls, never fires)" ;;
        firing) label="agent, every:$EVERY (snapshots)" ;;
    esac
    printf '| %-40s | %10s | %7.2fx | %10s | %7.2fx |\n' "$label" "$m" \
        "$(awk -v a="$m" -v b="$base" 'BEGIN { print a / b }')" "$c" \
        "$(awk -v a="$c" -v b="$base_cpu" 'BEGIN { print a / b }')"
done
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
