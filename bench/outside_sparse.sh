#!/usr/bin/env bash
# Capture from outside of a process with a large reservation it barely touches
# (src/outside/testdata/sparse.c: a 1 GiB block, one page of it written): the pause of
# `heaptui report pid:PID --json` and the target's page tables (VmPTE) before and after, three
# captures of each of RUNS fresh processes.
#
#   bash bench/outside_sparse.sh       # RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui
HEAPTUI="$PWD/target/release/heaptui"
RUNS=${RUNS:-3}
WORK="$(mktemp -d)"
PID=
cleanup() {
    [[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O1 src/outside/testdata/sparse.c -o "$WORK/sparse"
pte() { awk '/VmPTE/ { print $2 " kB" }' "/proc/$PID/status"; }
printf '| run | pause ms (3 captures) | target VmPTE before | after |\n|---:|---|---:|---:|\n'
for ((i = 1; i <= RUNS; i++)); do
    rm -f "$WORK/in"
    mkfifo "$WORK/in"
    "$WORK/sparse" <"$WORK/in" >"$WORK/out" &
    PID=$!
    exec 3>"$WORK/in"
    until grep -q ready "$WORK/out" 2>/dev/null; do sleep 0.05; done
    before=$(pte)
    pauses=""
    for _ in 1 2 3; do
        p=$("$HEAPTUI" report "pid:$PID" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pause_ms"])')
        pauses="$pauses $p"
    done
    printf '| %s |%s | %s | %s |\n' "$i" "$pauses" "$before" "$(pte)"
    echo x >&3
    exec 3>&-
    wait "$PID"
    PID=
done
