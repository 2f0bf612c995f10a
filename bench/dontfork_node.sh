#!/usr/bin/env bash
# What lifting MADV_DONTFORK for the scan child costs (docs/reference.md §3, BENCHMARKS.md
# "Mapped memory as a root"): node holding a Map of ENTRIES entries (tests/real_programs/map.js;
# V8 marks its heap pages MADV_DONTFORK), captured at its peak through HEAPTUI_DUMP's SIGUSR2.
# Medians of RUNS (5) runs of pause_ms, dontfork_ms (smaps read inside the pause, the lift and
# the put-back), dontfork_mappings, fork_ms, mapped_ms and mapped_bytes from the agent's log
# line for the snapshot.
#
#   bash bench/dontfork_node.sh            # ENTRIES="100000 1000000" RUNS=5
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui-agent
AGENT="$PWD/target/release/libheaptui_agent.so"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RUNS=${RUNS:-5}
ENTRIES=${ENTRIES:-"100000 1000000"}

median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
field() { sed -n "s/.*[ (]$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "node $(node --version), $(uname -r)"
printf '| entries | objects | pause ms | dontfork ms | mappings | fork ms | mapped ms | mapped MiB read |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for n in $ENTRIES; do
    for f in pause dontfork mappings fork mapped bytes objects; do : >"$WORK/$f"; done
    for _ in $(seq "$RUNS"); do
        rm -f "$WORK"/snap.* "$WORK/agent.log" "$WORK/in" "$WORK/out"
        mkfifo "$WORK/in"
        HEAPTUI_DUMP="$WORK/snap" HEAPTUI_LOG="$WORK/agent.log" LD_PRELOAD="$AGENT" \
            node tests/real_programs/map.js "$n" <"$WORK/in" >"$WORK/out" &
        pid=$!
        exec 7>"$WORK/in"
        until grep -q '^entries:' "$WORK/out" 2>/dev/null; do sleep 0.1; done
        kill -USR2 "$pid"
        until grep -q 'snapshot .*\.1\.hsnap' "$WORK/agent.log" 2>/dev/null; do sleep 0.1; done
        exec 7>&-
        wait "$pid"
        line=$(grep -m1 'snapshot .*\.1\.hsnap' "$WORK/agent.log")
        sed -n 's/.*hsnap: \([0-9]*\) objects.*/\1/p' <<<"$line" >>"$WORK/objects"
        field pause_ms "$line" >>"$WORK/pause"
        field dontfork_ms "$line" >>"$WORK/dontfork"
        field dontfork_mappings "$line" >>"$WORK/mappings"
        field fork_ms "$line" >>"$WORK/fork"
        field mapped_ms "$line" >>"$WORK/mapped"
        field mapped_bytes "$line" >>"$WORK/bytes"
    done
    printf '| %s | %s | %s | %s | %s | %s | %s | %.1f |\n' "$n" "$(median <"$WORK/objects")" \
        "$(median <"$WORK/pause")" "$(median <"$WORK/dontfork")" "$(median <"$WORK/mappings")" \
        "$(median <"$WORK/fork")" "$(median <"$WORK/mapped")" \
        "$(echo "$(median <"$WORK/bytes") / 1048576" | bc -l)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
