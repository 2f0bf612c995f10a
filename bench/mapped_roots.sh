#!/usr/bin/env bash
# What scanning mapped memory as a root costs (docs/reference.md §3, BENCHMARKS.md "Mapped memory
# as a root"): the exit-time capture (HEAPTUI_DUMP) of bench/mapped_roots_target.c, 100k malloc
# blocks, without a big mapping and with a 4 GiB anonymous mapping of which nothing, 64 MiB, then 1 GiB
# are touched, and 64 MiB again with the mapping marked MADV_DONTFORK (lifted for the scan
# child's fork: dontfork_ms is that, inside the pause). Medians of RUNS (5) runs of pause_ms, capture_ms, mapped_ms and mapped_bytes from
# the agent's log line for the snapshot.
#
#   bash bench/mapped_roots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui-agent
AGENT="$PWD/target/release/libheaptui_agent.so"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
gcc -O2 bench/mapped_roots_target.c -o "$WORK/target"
RUNS=${RUNS:-5}
BLOCKS=100000

median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
field() { sed -n "s/.*[ (]$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| mapping | touched | pause ms | dontfork ms | capture ms | mapped ms | mapped MiB read |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|\n'
for c in "0 0" "4096 0" "4096 64" "4096 64 dontfork" "4096 1024"; do
    read -r map touch mark <<<"$c"
    : >"$WORK/pause"; : >"$WORK/dontfork"; : >"$WORK/capture"; : >"$WORK/mapped"; : >"$WORK/bytes"
    for _ in $(seq "$RUNS"); do
        rm -f "$WORK"/snap.* "$WORK/agent.log"
        # shellcheck disable=SC2086 # $mark: no argument when empty
        HEAPTUI_DUMP="$WORK/snap" HEAPTUI_LOG="$WORK/agent.log" LD_PRELOAD="$AGENT" \
            "$WORK/target" "$BLOCKS" "$map" "$touch" $mark >/dev/null
        line=$(grep -m1 'snapshot .*\.1\.hsnap' "$WORK/agent.log")
        field pause_ms "$line" >>"$WORK/pause"
        field dontfork_ms "$line" >>"$WORK/dontfork"
        field capture_ms "$line" >>"$WORK/capture"
        field mapped_ms "$line" >>"$WORK/mapped"
        field mapped_bytes "$line" >>"$WORK/bytes"
    done
    printf '| %s MiB%s | %s MiB | %s | %s | %s | %s | %.2f |\n' "$map" "${mark:+, $mark}" "$touch" \
        "$(median <"$WORK/pause")" "$(median <"$WORK/dontfork")" "$(median <"$WORK/capture")" \
        "$(median <"$WORK/mapped")" "$(echo "$(median <"$WORK/bytes") / 1048576" | bc -l)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
