#!/usr/bin/env bash
# Stop-the-world with threads that cannot be stopped, and the cost of the blocking-call
# wrappers (agent-shim/src/signals, capture/stop.rs).
#
#   bash bench/signals.sh
#
# 1. The target of the agent's test (agent-shim/tests/targets/unstoppable.c): snapshot 1 with
#    a thread that blocked every signal with the raw system call (waited the full 1 s deadline
#    the first time); snapshot 2 with a vfork parent seen for the first time (the same);
#    snapshot 3 with both again. pause_ms from the agent's log.
# 2. bench/signals_overhead.c bare and preloaded: ns per poll(NULL, 0, 0) and per select with
#    a zero timeout, per send + recv and per write + read pair, and per write + read pair made
#    through libc's own functions, past the agent's stubs (each a real system call), best of 5
#    runs of 1M calls.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui-agent
AGENT="$PWD/target/release/libheaptui_agent.so"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cat agent-shim/tests/targets/sync.h agent-shim/tests/targets/proc_state.h \
    agent-shim/tests/targets/unstoppable.c >"$WORK/unstoppable.c"
gcc -O1 -pthread "$WORK/unstoppable.c" -o "$WORK/unstoppable"
gcc -O2 bench/signals_overhead.c -o "$WORK/overhead"

HEAPTUI_DUMP="$WORK/snap" HEAPTUI_LOG="$WORK/agent.log" HEAPTUI_LISTEN="unix:$WORK/agent.sock" \
    LD_PRELOAD="$AGENT" "$WORK/unstoppable" >/dev/null
printf '| snapshot | threads that cannot be stopped | pause ms |\n|---:|---|---:|\n'
for n in 1 2 3; do
    pause=$(grep -m1 "\.$n\.hsnap:" "$WORK/agent.log" | sed -n 's/.*pause_ms=\([0-9.]*\).*/\1/p')
    case $n in
    1) what="stop signal blocked (first time)" ;;
    2) what="stop signal blocked (again); vfork parent (first time)" ;;
    3) what="stop signal blocked; vfork parent (both again)" ;;
    esac
    printf '| %s | %s | %s |\n' "$n" "$what" "$pause"
done

# Five runs of 1M calls each, bare and under the agent, interleaved; the best of each figure.
bare_runs=() agent_runs=()
for _ in 1 2 3 4 5; do
    bare_runs+=("$("$WORK/overhead" 1000000)")
    agent_runs+=("$(LD_PRELOAD="$AGENT" HEAPTUI_LOG="$WORK/o.log" HEAPTUI_LISTEN="unix:$WORK/o.sock" \
        "$WORK/overhead" 1000000)")
done
best() {
    local key=$1 best= out v
    shift
    for out in "$@"; do
        v=$(sed -n "s/\(^\|.* \)$key=\([0-9.]*\).*/\2/p" <<<"$out")
        if [[ -z $best ]] || awk -v a="$v" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$v; fi
    done
    echo "$best"
}
printf '\n| call | bare ns | under the agent ns | bare user ns | under the agent user ns |\n|---|---:|---:|---:|---:|\n'
for key in poll select send_recv syscall_getppid syscall_poll write_read libc_write_read; do
    printf '| %s | %s | %s | %s | %s |\n' "$key" \
        "$(best "${key}_ns" "${bare_runs[@]}")" "$(best "${key}_ns" "${agent_runs[@]}")" \
        "$(best "${key}_user_ns" "${bare_runs[@]}")" "$(best "${key}_user_ns" "${agent_runs[@]}")"
done
