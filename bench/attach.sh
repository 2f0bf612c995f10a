#!/usr/bin/env bash
# TUI benchmark (BENCHMARKS.md "TUI"): from `heaptui attach` to the first full screen (the
# thread ranking drawn) against a target holding BLOCKS live blocks (default 1M) in THREADS
# threads. The first attach finds no snapshot, so it includes the capture; later attaches find
# the agent's kept snapshot. Timed from the keypress that starts heaptui in a tmux pane to the
# first capture-pane showing the ranking's rows (polled every 10 ms).
#   bench/attach.sh [RUNS]        (from the repository root; builds in release mode)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
blocks=${BLOCKS:-1000000}
threads=${THREADS:-16}
cargo build --release -q -p heaptui
bin=$PWD/target/release/heaptui
out=$(mktemp -d)
socket=heaptui-attach-$$
tmux_() { tmux -L "$socket" "$@"; }
cleanup() {
    tmux_ kill-server 2>/dev/null || true
    [[ -n ${target_pid:-} ]] && kill "$target_pid" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
cc -O2 -pthread -o "$out/target" bench/protocol_target.c
address="unix:$out/agent.sock"
mkfifo "$out/stdin"
LD_PRELOAD=$("$bin" agent-path) HEAPTUI_LISTEN=$address "$out/target" hold "$threads" "$blocks" <"$out/stdin" 2>>"$out/target.log" &
target_pid=$!
exec 3>"$out/stdin"   # keeps the target waiting until the end
until "$bin" report "$address" --format csv >/dev/null 2>&1 || ! kill -0 "$target_pid"; do sleep 0.1; done
# That report took the first snapshot; start over so run 1 measures an attach with none kept.
kill "$target_pid"; wait "$target_pid" 2>/dev/null || true
exec 3>&-; rm -f "$out/stdin" "$out/agent.sock"; mkfifo "$out/stdin"
LD_PRELOAD=$("$bin" agent-path) HEAPTUI_LISTEN=$address "$out/target" hold "$threads" "$blocks" <"$out/stdin" 2>>"$out/target.log" &
target_pid=$!
exec 3>"$out/stdin"
until [[ -S $out/agent.sock ]]; do sleep 0.05; done
sleep 1

tmux_ new-session -d -x 120 -y 36 "env PS1='ready> ' sh"
tmux_ set-option -g escape-time 0
now_ms() { date +%s%3N; }
times=()
for run in $(seq "$runs"); do
    tmux_ send-keys -t 0 -l "$bin attach $address"
    start=$(now_ms)
    tmux_ send-keys -t 0 Enter
    until tmux_ capture-pane -p -t 0 | grep -q "Threads by total · rows 1"; do
        if (( $(now_ms) - start > 30000 )); then echo "attach.sh: no ranking after 30 s" >&2; exit 1; fi
        sleep 0.01
    done
    elapsed=$(( $(now_ms) - start ))
    times+=("$elapsed")
    echo "run $run: first full screen after $elapsed ms"
    tmux_ send-keys -t 0 q
    until screen=$(tmux_ capture-pane -p -t 0) && [[ $screen != *"Threads by total"* && $screen == *"ready>"* ]]; do
        sleep 0.02
    done
    tmux_ send-keys -t 0 clear Enter
    sleep 0.3
done
sorted=$(printf '%s\n' "${times[@]:1}" | sort -n)
n=$(( runs - 1 ))
if (( n > 0 )); then
    median=$(echo "$sorted" | sed -n "$(( (n + 1) / 2 ))p")
    echo "blocks=$blocks threads=$threads: first attach (capture included) ${times[0]} ms; later attaches median ${median} ms over $n"
fi
