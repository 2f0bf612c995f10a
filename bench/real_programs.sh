#!/usr/bin/env bash
# Real programs under the agent (BENCHMARKS.md "Real programs"): hook overhead beside
# heaptrack, and what one snapshot at the workload's peak costs.
#
#   bash bench/real_programs.sh [WORKLOAD…]      (default: perl python sqlite xz zstd)
#
# Workloads (the first three are the real-program test's, tests/real_programs/, at full size):
#   perl    perl building a hash of PERL_KEYS (1.5M) keys            tests/real_programs/hash.pl
#   python  python building a dict of PYTHON_KEYS (1.5M) keys        tests/real_programs/dict.py
#   sqlite  sqlite3 inserting SQLITE_ROWS (200k) rows, one INSERT each, then an index and
#           queries                                                  tests/real_programs/rows.sql
#   xz      xz -T2 -3 compressing COMPRESS_MIB (64) MiB of this repository's sources
#   zstd    zstd -T2 -9 -B4M on the same input
# Each runs bare, under the agent with stacks on (the default), under the agent with
# HEAPTUI_STACK_DEPTH=0 and under heaptrack, RUNS (3) times, interleaved (the order rotated
# every round); the table gives medians of wall and CPU (user + system, children included:
# heaptrack's interpreter counts) and their ratios to bare. AGENT_BEFORE=PATH adds a row for
# another build of the agent (stacks on), interleaved with the rest: a before/after comparison
# measured side by side in one run.
#
# Snapshot: one more run per workload under the agent (stacks on) with HEAPTUI_DUMP. At the
# peak (perl, python: once "keys: N" is out; sqlite: once the rows are in; compressors: half the
# input fed) the script sends SIGUSR2, waits for the snapshot file, then lets the workload go
# on. The agent's log line gives the objects, bytes, threads, pause and capture time.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
PERL_KEYS=${PERL_KEYS:-1500000}
PYTHON_KEYS=${PYTHON_KEYS:-1500000}
SQLITE_ROWS=${SQLITE_ROWS:-200000}
COMPRESS_MIB=${COMPRESS_MIB:-64}
workloads=("$@")
((${#workloads[@]})) || workloads=(perl python sqlite xz zstd)

for w in "${workloads[@]}"; do
    case $w in
        perl | xz | zstd) tool=$w ;;
        python) tool=python3 ;;
        sqlite) tool=sqlite3 ;;
        *) echo "unknown workload: $w (perl, python, sqlite, xz, zstd)" >&2; exit 2 ;;
    esac
    command -v "$tool" >/dev/null || { echo "$w: $tool not found on PATH" >&2; exit 2; }
done
command -v heaptrack >/dev/null || { echo "heaptrack not found on PATH" >&2; exit 2; }
if [[ -n "${AGENT_BEFORE:-}" ]]; then
    [[ -f "$AGENT_BEFORE" ]] || { echo "AGENT_BEFORE: no such file: $AGENT_BEFORE" >&2; exit 2; }
fi

source bench/timing_lib.sh
real=tests/real_programs
# A pyenv-style shim would put a shell between the agent and python: run the interpreter itself.
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
input="$work/input"
if [[ " ${workloads[*]} " == *" xz "* || " ${workloads[*]} " == *" zstd "* ]]; then
    git ls-files -z -- '*.rs' '*.c' '*.h' '*.md' '*.sh' | xargs -0 cat >"$work/sources"
    while (($(stat -c %s "$input" 2>/dev/null || echo 0) < COMPRESS_MIB << 20)); do
        cat "$work/sources" >>"$input"
    done
    truncate -s "$((COMPRESS_MIB << 20))" "$input"
fi

# The command line of workload $1 (its stdin comes from `stdin_of`).
command_of() {
    case $1 in
        perl) cmd=(perl "$PWD/$real/hash.pl" "$PERL_KEYS") ;;
        python) cmd=("$PYTHON" "$PWD/$real/dict.py" "$PYTHON_KEYS") ;;
        sqlite) cmd=(sqlite3 -cmd ".parameter set @n $SQLITE_ROWS" "$work/sqlite/db") ;;
        xz) cmd=(xz -T2 -3 -c) ;;
        zstd) cmd=(zstd -T2 -9 -B4M -c) ;;
    esac
}

stdin_of() {
    case $1 in
        perl | python) echo /dev/null ;;
        sqlite) echo "$PWD/$real/rows.sql" ;;
        xz | zstd) echo "$input" ;;
    esac
}

# from FILE COMMAND…: COMMAND with its stdin from FILE, in the scratch directory sqlite writes
# its database and inserts.sql to (emptied first).
from() {
    local file=$1
    shift
    (cd "$work/sqlite" && "$@" <"$file")
}

agent() {
    env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/agent.log" HEAPTUI_LISTEN="unix:$work/agent.sock" "$@"
}

one() {
    local w=${1%%.*} config=${1#*.}
    command_of "$w"
    rm -rf "$work/sqlite" "$work"/heaptrack.*
    mkdir -p "$work/sqlite"
    case $config in
        bare) wall from "$(stdin_of "$w")" "${cmd[@]}" ;;
        stacks_on) wall from "$(stdin_of "$w")" agent "${cmd[@]}" ;;
        stacks_off) wall from "$(stdin_of "$w")" agent HEAPTUI_STACK_DEPTH=0 "${cmd[@]}" ;;
        before) wall from "$(stdin_of "$w")" env LD_PRELOAD="$AGENT_BEFORE" \
            HEAPTUI_LOG="$work/before.log" HEAPTUI_LISTEN="unix:$work/before.sock" "${cmd[@]}" ;;
        heaptrack) wall from "$(stdin_of "$w")" heaptrack -o "$work/heaptrack.out" "${cmd[@]}" ;;
    esac
}

# snapshot WORKLOAD: the table row of one run under the agent with a snapshot at the peak.
snapshot() {
    local w=$1 marker='' before after pid snap line
    command_of "$w"
    rm -rf "$work/sqlite" "$work"/snap.*
    mkdir -p "$work/sqlite"
    before="$work/before"
    after="$work/after"
    case $w in
        perl | python)
            marker='^keys: '
            : >"$before"
            echo go >"$after"
            ;;
        sqlite)
            marker='^rows\|'
            sed '/^-- peak$/,$d' "$real/rows.sql" >"$before"
            sed '1,/^-- peak$/d' "$real/rows.sql" >"$after"
            ;;
        xz | zstd)
            head -c "$((COMPRESS_MIB << 19))" "$input" >"$before"
            tail -c +"$(((COMPRESS_MIB << 19) + 1))" "$input" >"$after"
            ;;
    esac
    cd "$work/sqlite"
    # The compressors' output is not read here: to /dev/null, so they never wait on this script.
    if [[ -n $marker ]]; then
        coproc WORKLOAD { exec env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/snap.log" \
            HEAPTUI_LISTEN="unix:$work/snap.sock" HEAPTUI_DUMP="$work/snap" "${cmd[@]}"; }
    else
        coproc WORKLOAD { exec env LD_PRELOAD="$AGENT" HEAPTUI_LOG="$work/snap.log" \
            HEAPTUI_LISTEN="unix:$work/snap.sock" HEAPTUI_DUMP="$work/snap" "${cmd[@]}" >/dev/null; }
    fi
    cd - >/dev/null
    pid=$WORKLOAD_PID
    local in=${WORKLOAD[1]} out=${WORKLOAD[0]}
    cat "$before" >&"$in"
    if [[ -n $marker ]]; then
        while IFS= read -r line <&"$out"; do
            [[ $line =~ $marker ]] && break
        done
    fi
    snap="$work/snap.$pid.1.hsnap"
    kill -USR2 "$pid"
    until [[ -e $snap ]]; do sleep 0.05; done
    cat "$after" >&"$in"
    exec {in}>&-
    cat <&"$out" >/dev/null
    wait "$pid"
    line=$(grep -m1 "\.$pid\.1\.hsnap:" "$work/snap.log")
    # "snapshot FILE: N objects, B bytes, T threads; pause_ms=P capture_ms=C write_ms=…"
    sed -E 's/.*: ([0-9]+) objects, ([0-9]+) bytes, ([0-9]+) threads; pause_ms=([0-9.]+) capture_ms=([0-9.]+).*/\1 \2 \3 \4 \5/' <<<"$line" |
        awk -v w="$w" '{ printf "| %-8s | %10d | %10.1f | %7d | %9.1f | %10.1f |\n", w, $1, $2 / 1048576, $3, $4, $5 }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
names=()
for w in "${workloads[@]}"; do
    for config in bare stacks_on stacks_off heaptrack ${AGENT_BEFORE:+before}; do
        names+=("$w.$config")
    done
done
interleave "${names[@]}"

echo "medians of $RUNS interleaved runs; load average before: $load_before, at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in "${workloads[@]}"; do
    case $w in
        perl) what="perl, hash of $PERL_KEYS keys" ;;
        python) what="python, dict of $PYTHON_KEYS keys" ;;
        sqlite) what="sqlite3, $SQLITE_ROWS inserts + index + queries" ;;
        xz) what="xz -T2 -3, $COMPRESS_MIB MiB" ;;
        zstd) what="zstd -T2 -9 -B4M, $COMPRESS_MIB MiB" ;;
    esac
    echo
    echo "$what"
    table_header 30 bare
    table_row 30 "bare" "$w.bare" "$w.bare"
    table_row 30 "agent, stacks on (depth 16)" "$w.stacks_on" "$w.bare"
    if [[ -n "${AGENT_BEFORE:-}" ]]; then
        table_row 30 "AGENT_BEFORE, stacks on" "$w.before" "$w.bare"
    fi
    table_row 30 "agent, HEAPTUI_STACK_DEPTH=0" "$w.stacks_off" "$w.bare"
    table_row 30 "heaptrack" "$w.heaptrack" "$w.bare"
done

echo
echo "one snapshot at the peak, agent with stacks on"
printf '| %-8s | %10s | %10s | %7s | %9s | %10s |\n' workload objects "live MiB" threads "pause ms" "capture ms"
printf '|%s|%s|%s|%s|%s|%s|\n' ---------- ------------ ------------ --------- ----------- ------------
for w in "${workloads[@]}"; do
    snapshot "$w"
done
