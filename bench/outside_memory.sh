#!/usr/bin/env bash
# The client's memory on a capture from outside (docs/reference.md §9), at BLOCKS live blocks of
# 256 bytes over 16 threads (bench/snapshot_target.c, its `wait` mode):
# - `heaptui report pid:PID`: its peak resident memory (`/usr/bin/time -v`), RUNS times;
# - `heaptui attach pid:PID` (in tmux, 160x45): its resident memory once the Threads screen shows,
#   and its peak so far.
#
#   bash bench/outside_memory.sh                    # BLOCKS=1000000 RUNS=3, this tree's release build
#   HEAPTUI=/path/to/heaptui bash bench/outside_memory.sh   # another build, to compare
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${HEAPTUI:-}" ]]; then
    cargo build --release -q -p heaptui
    HEAPTUI="$PWD/target/release/heaptui"
fi
BLOCKS=${BLOCKS:-1000000}
RUNS=${RUNS:-3}
WORK="$(mktemp -d)"
PID=
SESSION="heaptui-outside-memory-$$"
cleanup() {
    tmux kill-session -t "$SESSION" 2>/dev/null || true
    [[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -pthread bench/snapshot_target.c -o "$WORK/target"
mkfifo "$WORK/in"
"$WORK/target" "$BLOCKS" 16 256 wait <"$WORK/in" >"$WORK/out" &
PID=$!
exec 3>"$WORK/in"
until grep -q ready "$WORK/out" 2>/dev/null; do sleep 0.05; done

for _ in $(seq "$RUNS"); do
    /usr/bin/time -v "$HEAPTUI" report "pid:$PID" >/dev/null 2>"$WORK/time"
    echo "report: peak $(awk '/Maximum resident/ { print $NF }' "$WORK/time") KiB"
done

tmux new-session -d -s "$SESSION" -x 160 -y 45 "$HEAPTUI attach pid:$PID"
until tmux capture-pane -p -t "$SESSION" | grep -q "captured from outside"; do sleep 0.2; done
# Let the first screen's answers settle before reading the figure (a measurement, not a test).
sleep 2
TUI=$(tmux list-panes -t "$SESSION" -F '#{pane_pid}')
echo "attach: $(awk '/VmRSS|VmHWM/ { printf "%s %s KiB  ", $1, $2 }' "/proc/$TUI/status")"
tmux kill-session -t "$SESSION"

echo go >&3
exec 3>&-
wait "$PID"
PID=
