#!/usr/bin/env bash
# Snapshot benchmark (docs/reference.md §9): stop-the-world pause, capture time and analysis time at
# 10k/100k/1M live blocks and 8/64/256 threads, beside one sequential read of the same bytes.
#
#   bash bench/snapshot.sh            # the full matrix
#   QUICK=1 bash bench/snapshot.sh    # 10k and 100k blocks only
#
# pause_ms and capture_ms come from the agent's log line for the snapshot (world stopped:
# freeze to resume; capture: the whole capture including symbolization, graph assembly and,
# since 2026-11-28, the file's bytes, which the scanning child streams to the agent as it
# writes them); write_ms is what is left of the file write after (flush and rename: before
# 2026-11-28 it was the whole write); analysis_ms is `heaptui report --json` on the file
# (decode + attribution + JSON); read_ms is the target's own single pass over its blocks.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui-agent -p heaptui
AGENT="$PWD/target/release/libheaptui_agent.so"
HEAPTUI="$PWD/target/release/heaptui"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -pthread bench/snapshot_target.c -o "$WORK/snapshot_target"

SIZE=256
if [[ -n "${QUICK:-}" ]]; then BLOCKS=(10000 100000); else BLOCKS=(10000 100000 1000000); fi
THREADS=(8 64 256)
CASES=()
for b in "${BLOCKS[@]}"; do for t in "${THREADS[@]}"; do CASES+=("$b $t"); done; done
# The target of docs/reference.md §9: 1M blocks, 256 MiB, 16 threads.
if [[ -z "${QUICK:-}" ]]; then CASES+=("1000000 16"); fi

printf '| blocks | threads | MiB | pause ms | capture ms | write ms | analysis ms | read ms |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for c in "${CASES[@]}"; do
    read -r b t <<<"$c"
    rm -f "$WORK"/snap.* "$WORK/agent.log"
    out=$(HEAPTUI_DUMP="$WORK/snap" HEAPTUI_LOG="$WORK/agent.log" LD_PRELOAD="$AGENT" \
        "$WORK/snapshot_target" "$b" "$t" "$SIZE")
    line=$(grep -m1 'snapshot .*\.1\.hsnap' "$WORK/agent.log")
    field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
    pause=$(field pause_ms "$line")
    capture=$(field capture_ms "$line")
    write=$(field write_ms "$line")
    read_ms=$(field read_ms "$out")
    snap=$(ls "$WORK"/snap.*.1.hsnap)
    a0=$(date +%s%N)
    "$HEAPTUI" report "$snap" --json >/dev/null
    a1=$(date +%s%N)
    analysis=$(awk -v a="$a0" -v b="$a1" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')
    mib=$(awk -v b="$b" -v s="$SIZE" 'BEGIN { printf "%.0f", b * s / 1048576 }')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' \
        "$b" "$t" "$mib" "$pause" "$capture" "$write" "$analysis" "$read_ms"
done
