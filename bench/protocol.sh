#!/bin/sh
# Protocol benchmark (BENCHMARKS.md "Protocol"): ranking latency with 256 threads, paging
# through 1M objects, and a subscribed client's effect on the target's malloc throughput.
# Usage: bench/protocol.sh   (from the repository root; builds in release mode)
set -eu
cd "$(dirname "$0")/.."
cargo build --release -q -p heaptui-agent
cargo build --release -q --example protocol_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -pthread -o "$out/protocol_target" bench/protocol_target.c
target/release/examples/protocol_bench "$PWD/target/release/libheaptui_agent.so" "$out/protocol_target"
