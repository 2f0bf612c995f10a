#!/usr/bin/env bash
# What a snapshot costs the target (docs/reference.md §9, BENCHMARKS.md "What a snapshot costs
# the target"), on a real heap of millions of blocks: perl building a hash (bench/hash.pl,
# KEYS keys, default 1.5M: about 4.6M blocks, 400 MB) under the release agent.
#
#   bash bench/snapshot_cost.sh          # KEYS=1500000 REPORTS=2
#   KEYS=300000 bash bench/snapshot_cost.sh
#
# For each of REPORTS `heaptui report :PORT --json` in a row: the target's resident memory
# before, at its peak during the report (sampled every 10 ms) and after, per captured object
# over the bare program's (its RSS before the first report: a kept snapshot is the agent's);
# the scan child's own memory at its peak (private pages: what the child costs beyond the
# pages it shares with the target); the agent's pause, capture and analysis times and the
# child's CPU time and the scan's part of it (its log line; on a loaded machine the CPU times
# are what compare); the report's end-to-end wall time and the client's peak RSS; where the
# last kept snapshot's bytes go; beside the time (wall and CPU) perl took to build the heap in
# the same run and the physical floor of a scan (one sequential read of the [heap] mapping,
# bench/heap_floor.c). The CPU time of the whole report, load-proof where the wall times are
# not: the scan child's, the agent's own (the target's user + system time across the report:
# its main thread sleeps, the child is counted apart) and the client's, against perl's.
# HEAPTUI_BIN / AGENT_SO: other builds to measure (a main checkout's, side by side).
#
# Then UNSAMPLED (default 2) more reports with no sampler running: their walls are the report's
# end to end. The sampler reads the scan child's /proc/PID/smaps_rollup every 10 ms, a walk of
# all its page tables (1.5 GB mapped at 4.6M blocks: about 15 ms of kernel CPU per read, so
# most of a core while the child lives) that also holds the child's mmap lock, which the
# child's own mappings wait for: the sampled reports' walls are longer by the sampler's work
# (BENCHMARKS.md "What a snapshot costs the target", 2026-11-28 14:40–15:20 UTC).
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-1500000}
REPORTS=${REPORTS:-2}
UNSAMPLED=${UNSAMPLED:-2}
cargo build --release -q -p heaptui-agent -p heaptui
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
AGENT=${AGENT_SO:-$TARGET_DIR/release/libheaptui_agent.so}
HEAPTUI=${HEAPTUI_BIN:-$TARGET_DIR/release/heaptui}
work=$(mktemp -d)
pid=
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
gcc -O2 bench/heap_floor.c -o "$work/heap_floor"
sampler=bench/memory_sampler.py

# The script's own variables (HEAPTUI_BIN, AGENT_SO) stay out of perl's environment: the agent
# reads every HEAPTUI_* variable and would log HEAPTUI_BIN as unknown.
env -u HEAPTUI_BIN -u AGENT_SO HEAPTUI_LISTEN=127.0.0.1:0 HEAPTUI_LOG="$work/agent.log" LD_PRELOAD="$AGENT" \
    perl bench/hash.pl "$KEYS" >"$work/perl.out" &
pid=$!
until grep -q '^ready' "$work/perl.out"; do
    kill -0 "$pid" 2>/dev/null || { echo "perl ended early" >&2; exit 1; }
    sleep 0.2
done
built=$(sed -n 's/^built \([0-9.]*\) s/\1/p' "$work/perl.out")
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/agent.log" | head -1)
# perl's CPU time (user + system) so far: the build's cost however loaded the machine is.
ticks=$(getconf CLK_TCK)
built_cpu=$(awk -v t="$ticks" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$pid/stat")
echo "perl bench/hash.pl $KEYS (pid $pid): heap built in $built s ($built_cpu s CPU); agent on :$port; load $(cut -d' ' -f1-3 /proc/loadavg)"

kb() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }
per_object() { awk -v k="$1" -v n="$2" 'BEGIN { printf "%.0f", k * 1024 / n }'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"; }

agent_cpu() { awk -v t="$ticks" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$pid/stat"; }
read -r bare _ _ < <(python3 "$sampler" now "$pid")

# The table's header: the target's memory columns only when the memory sampler runs ($1).
header() {
    local memory="" rules="" more="---:|---:|---:|---:|"
    if [[ $1 == sampled ]]; then
        memory=" RSS before MiB | peak MiB (B/object over the bare program) | after MiB (B/object over the bare program) | child private peak MiB (B/object) |"
        rules=$more
    fi
    printf '| report | objects |%s pause ms | capture ms | analysis ms | child CPU ms (scan CPU ms; index, blocks wall ms) | report wall s | client peak MiB (B/object) | CPU s: child + agent + client = all |\n' "$memory"
    printf '|---:|---:|%s---:|---:|---:|---:|---:|---:|---:|\n' "$rules"
}

# Report number $1 and its row of the table, with the target's memory sampled every 10 ms
# when $2 is "sampled" (see the top); its log lines go to stderr.
report_row() {
    local r=$1 sampled=$2 before after peak child sampler_pid agent_before agent_s line objects
    local wall client client_user client_sys child_s client_s all_s memory=""
    if [[ $sampled == sampled ]]; then
        read -r before _ _ < <(python3 "$sampler" now "$pid")
        python3 "$sampler" sample "$pid" "$work/peak.json" &
        sampler_pid=$!
    fi
    agent_before=$(agent_cpu)
    /usr/bin/time -f '%e %M %U %S' -o "$work/time" "$HEAPTUI" report ":$port" --json >"$work/report.json"
    if [[ $sampled == sampled ]]; then
        kill -TERM "$sampler_pid"
        wait "$sampler_pid"
        read -r after _ _ < <(python3 "$sampler" now "$pid")
    fi
    agent_s=$(awk -v a="$(agent_cpu)" -v b="$agent_before" 'BEGIN { printf "%.2f", a - b }')
    read -r wall client client_user client_sys <"$work/time"
    line=$(grep "snapshot $r[: ]" "$work/agent.log" | tail -1)
    objects=$(sed -n 's/.*snapshot [0-9]*[^:]*: \([0-9]*\) objects.*/\1/p' <<<"$line")
    if [[ $sampled == sampled ]]; then
        peak=$(python3 -c "import json; print(json.load(open('$work/peak.json'))['VmRSS'])")
        child=$(python3 -c "import json; print(json.load(open('$work/peak.json'))['child_private'])")
        memory=$(printf ' %s | %s (%s) | %s (%s) | %s (%s) |' "$(kb "$before")" \
            "$(kb "$peak")" "$(per_object $((peak - bare)) "$objects")" \
            "$(kb "$after")" "$(per_object $((after - bare)) "$objects")" \
            "$(kb "$child")" "$(per_object "$child" "$objects")")
    fi
    child_s=$(awk -v m="$(field child_cpu_ms "$line")" 'BEGIN { printf "%.2f", m / 1000 }')
    client_s=$(awk -v u="$client_user" -v s="$client_sys" 'BEGIN { printf "%.2f", u + s }')
    all_s=$(awk -v a="$child_s" -v b="$agent_s" -v c="$client_s" 'BEGIN { printf "%.2f", a + b + c }')
    printf '| %s | %s |%s %s | %s | %s | %s (%s; %s, %s) | %s | %s (%s) | %s + %s + %s = %s |\n' \
        "$r" "$objects" "$memory" \
        "$(field pause_ms "$line")" "$(field capture_ms "$line")" "$(field analysis_ms "$line")" \
        "$(field child_cpu_ms "$line")" "$(field scan_cpu_ms "$line")" "$(field index_ms "$line")" "$(field blocks_ms "$line")" \
        "$wall" "$(kb "$client")" "$(per_object "$client" "$objects")" \
        "$child_s" "$agent_s" "$client_s" "$all_s"
    echo "$line" >&2
    # The child's analysis pass by pass (wall / CPU of all its threads / CPU of its first;
    # graph_columns_sent_beside: wall / CPU of the third thread, when there is one).
    # (Builds before 2026-11-28 12:30 UTC do not log it.)
    { grep "analysis by pass" "$work/agent.log" || true; } | sed -n "${r}p" | sed 's/.*): /passes: /' >&2
}

header sampled
for ((r = 1; r <= REPORTS; r++)); do
    report_row "$r" sampled
done
# The same report with no sampler: the end-to-end figure (see the top).
if ((UNSAMPLED > 0)); then
    printf '\nunsampled (no memory sampler running):\n'
    header unsampled
fi
for ((u = 1; u <= UNSAMPLED; u++)); do
    report_row $((REPORTS + u)) unsampled
done
echo "the last kept snapshot, bytes per object by part: $(grep 'kept bytes per object' "$work/agent.log" | tail -1 | sed 's/.*): //')"
read -r bytes copy_s read_s < <("$work/heap_floor" "$pid")
echo "floor: one sequential read of the [heap] mapping ($(kb $((bytes / 1024))) MiB): ${read_s} s (copying it out of the target first: ${copy_s} s)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
