#!/usr/bin/env bash
# What noticing module loads would cost each hook: dl_iterate_phdr against the plain loads the
# hooks do (bench/load_counter.c; BENCHMARKS.md "Noticing module loads").
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -pthread bench/load_counter.c -o "$WORK/load_counter"
"$WORK/load_counter"
