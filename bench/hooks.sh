#!/usr/bin/env bash
# Hook-overhead and agent-memory benchmark (BENCHMARKS.md "Hook overhead", "Agent memory").
#
# Runs bench/stress.c (4 threads, 2M operations in total, sizes 16..4096, 10k live blocks
# per thread, allocations 10 calls deep) side by side: bare, under the agent with
# HEAPTUI_STACK_DEPTH=0, under the agent with stacks on (default depth 16), the same program
# built with -fomit-frame-pointer bare and under the agent with stacks on (its allocation
# stacks come from DWARF CFI; NOFP=0 leaves these two out), under heaptrack and under
# valgrind memcheck. Prints the median wall time of each (RUNS runs of the first
# three, interleaved; SLOW_RUNS of heaptrack and valgrind) and its ratio to bare, the same
# for CPU time (user + system), then the
# agent's block-table bytes per tracked block from its exit summary.
#
# AGENT_BEFORE=PATH adds a row for another build of the agent (stacks off), interleaved with
# the others: a before/after comparison measured side by side in one run.
#
# Usage: bench/hooks.sh            (RUNS=5 SLOW_RUNS=1 THREADS=4 OPS=2000000 NOFP=1 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
SLOW_RUNS=${SLOW_RUNS:-1}
THREADS=${THREADS:-4}
OPS=${OPS:-2000000}

source bench/stress_lib.sh
NOFP=${NOFP:-1}
# Frame pointers kept (the agent's unwinder follows rbp frames with one cached rule each),
# and a second build without them (every frame unwound through its CFI rule).
gcc -O2 -fomit-frame-pointer -pthread bench/stress.c -o "$work/stress_nofp"
STRESS_NOFP=("$work/stress_nofp" "$THREADS" "$OPS")

# agent [VAR=VALUE…] PROGRAM…: one env(1) sets everything and execs PROGRAM directly (the
# agent takes itself out of LD_PRELOAD for exec'd children, so no wrapper may sit between).
agent() {
    env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/agent.log" HEAPTUI_LISTEN="unix:$work/agent.sock" "$@"
}

one() {
    case $1 in
        bare) wall "${STRESS[@]}" ;;
        stacks_off) wall agent HEAPTUI_STACK_DEPTH=0 "${STRESS[@]}" ;;
        stacks_on) wall agent "${STRESS[@]}" ;;
        bare_nofp) wall "${STRESS_NOFP[@]}" ;;
        stacks_on_nofp) wall agent "${STRESS_NOFP[@]}" ;;
        before_off) wall env LD_PRELOAD="$AGENT_BEFORE" HEAPTUI_LOG="$work/before.log" \
            HEAPTUI_LISTEN="unix:$work/before.sock" HEAPTUI_STACK_DEPTH=0 "${STRESS[@]}" ;;
    esac
}
names=(bare stacks_off stacks_on)
if [[ -n "${AGENT_BEFORE:-}" ]]; then
    [[ -f "$AGENT_BEFORE" ]] || { echo "AGENT_BEFORE: no such file: $AGENT_BEFORE" >&2; exit 2; }
    names+=(before_off)
fi
if ((NOFP)); then
    names+=(bare_nofp stacks_on_nofp)
fi
interleave "${names[@]}"
# The last agent run (for the memory figure) has stacks on.
one stacks_on >/dev/null
if ((SLOW_RUNS > 0)) && command -v heaptrack >/dev/null; then
    for ((i = 0; i < SLOW_RUNS; i++)); do
        times[heaptrack]+="$(wall heaptrack -o "$work/heaptrack.$i" "${STRESS[@]}") "
    done
    names+=(heaptrack)
fi
if ((SLOW_RUNS > 0)) && command -v valgrind >/dev/null; then
    for ((i = 0; i < SLOW_RUNS; i++)); do
        times[valgrind]+="$(wall valgrind --tool=memcheck -q "${STRESS[@]}") "
    done
    names+=(valgrind)
fi

echo "stress: $THREADS threads, $OPS operations in total; medians of $RUNS runs ($SLOW_RUNS for heaptrack/valgrind)"
table_header 28 bare
for n in "${names[@]}"; do
    case $n in
        bare) label="bare" ;;
        stacks_off) label="agent, HEAPTUI_STACK_DEPTH=0" ;;
        before_off) label="AGENT_BEFORE, stacks off" ;;
        stacks_on) label="agent, stacks on (depth 16)" ;;
        bare_nofp) label="bare, -fomit-frame-pointer" ;;
        stacks_on_nofp) label="agent, stacks on, -fomit-fp" ;;
        heaptrack) label="heaptrack" ;;
        valgrind) label="valgrind memcheck" ;;
    esac
    # The -fomit-frame-pointer build is compared with its own bare run.
    case $n in
        *_nofp) table_row 28 "$label" "$n" bare_nofp ;;
        *) table_row 28 "$label" "$n" bare ;;
    esac
done

# Agent memory: the last agent run's exit summary (stacks on), with every block still live.
summary=$(grep 'exit summary' "$work/agent.log" | tail -1)
get() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$summary"; }
blocks=$(get live_blocks)
table=$(get table_bytes)
echo
echo "agent memory at exit (stacks on): $blocks tracked blocks, block table $table bytes" \
    "= $(awk -v t="$table" -v b="$blocks" 'BEGIN { printf "%.1f", t / b }') bytes/block;" \
    "$(get stacks) distinct stacks; agent heap $(get agent_heap_bytes) bytes"
