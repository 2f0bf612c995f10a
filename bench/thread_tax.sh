#!/usr/bin/env bash
# What a single-threaded program pays for a second thread in its process (BENCHMARKS.md "Real
# programs", the thread tax). glibc skips its atomics while a process has one thread (its
# pthread mutexes, malloc's arena lock); the agent's own threads (server, watch, dump) end that
# for the whole run. Side by side, interleaved: bare, a preload that only starts one idle thread
# (bench/idle_thread.c), and the agent with stacks off, on sqlite3 inserting SQLITE_ROWS rows
# and on bench/mutex_loop.c (sqlite3's malloc-inside-a-mutex pattern).
#
#   RUNS=9 bash bench/thread_tax.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-9}
SQLITE_ROWS=${SQLITE_ROWS:-200000}
source bench/timing_lib.sh
cc -O2 -shared -fPIC bench/idle_thread.c -o "$work/idle_thread.so" -lpthread
cc -O2 bench/mutex_loop.c -o "$work/mutex_loop" -lpthread
mkdir -p "$work/sqlite"

preload_of() {
    case $1 in
        bare) echo "" ;;
        idle) echo "$work/idle_thread.so" ;;
        agent) echo "$AGENT" ;;
    esac
}

one() {
    local w=${1%%.*} config=${1#*.} so
    so=$(preload_of "$config")
    case $w in
        sqlite)
            rm -rf "$work/sqlite"/*
            (cd "$work/sqlite" && wall env ${so:+LD_PRELOAD=$so} HEAPTUI_STACK_DEPTH=0 \
                HEAPTUI_LOG="$work/agent.log" HEAPTUI_LISTEN="unix:$work/agent.sock" \
                sqlite3 -cmd ".parameter set @n $SQLITE_ROWS" db <"$OLDPWD/tests/real_programs/rows.sql")
            ;;
        loop)
            # Its own figure (ns an iteration) in both columns.
            local ns
            ns=$(env ${so:+LD_PRELOAD=$so} HEAPTUI_STACK_DEPTH=0 HEAPTUI_LOG="$work/agent.log" \
                HEAPTUI_LISTEN="unix:$work/agent.sock" "$work/mutex_loop" 5000000)
            echo "$ns,$ns"
            ;;
    esac
}

names=()
for w in sqlite loop; do
    for c in bare idle agent; do names+=("$w.$c"); done
done
interleave "${names[@]}"
echo "medians of $RUNS interleaved runs; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# table WORKLOAD TITLE: the three configurations' medians against the bare run.
table() {
    echo
    echo "$2"
    table_header 34 bare
    table_row 34 bare "$1.bare" "$1.bare"
    table_row 34 "one idle thread (idle_thread.c)" "$1.idle" "$1.bare"
    table_row 34 "agent, HEAPTUI_STACK_DEPTH=0" "$1.agent" "$1.bare"
}
table sqlite "sqlite3, $SQLITE_ROWS inserts (stacks off)"
table loop "mutex_loop.c: ns an iteration (a malloc and a free, each inside a mutex) in both columns"
