#!/usr/bin/env bash
# Screenshots of every TUI screen from a real terminal session: heaptui runs in a detached tmux
# session of 160x45 (the header and every column whole), keys are sent, each screen is captured
# with its colours (`capture-pane -e`) once nothing on it is still loading, and rendered to
# screenshots/<screen>.png by scripts/render_ansi.py; the home screen again at 80x24
# (threads-80x24.png), where the columns that matter least give way.
#
#   scripts/screenshots.sh            # `heaptui demo`: the bundled workload under the real agent
#   scripts/screenshots.sh SNAPSHOT-FILE   # `heaptui open` of a snapshot file, e.g. the fixture

# Needs tmux, python3 with Pillow (installed with pip when missing) and DejaVu Sans Mono.
set -euo pipefail
cd "$(dirname "$0")/.."

source_file=${1:-}
if [[ -n $source_file && ! -f $source_file ]]; then
    echo "screenshots.sh: no such snapshot file: $source_file" >&2
    exit 2
fi
command -v tmux >/dev/null || { echo "screenshots.sh: tmux is needed (apt-get install tmux)" >&2; exit 1; }
python3 -c 'import PIL' 2>/dev/null || python3 -m pip install --quiet pillow \
    || python3 -m pip install --quiet --break-system-packages pillow

cargo build --quiet -p heaptui
bin=$PWD/target/debug/heaptui
out=screenshots
mkdir -p "$out"
socket=heaptui-shots-$$
tmux_() { tmux -L "$socket" "$@"; }
trap 'tmux_ kill-server 2>/dev/null || true' EXIT

# Polls the pane until it shows $1 (a fixed string), up to 10 s.
wait_for() {
    local deadline=$((SECONDS + 10))
    until tmux_ capture-pane -p -t 0 | grep -qF -- "$1"; do
        if ((SECONDS > deadline)); then
            echo "screenshots.sh: waited 10 s for \"$1\"; the screen was:" >&2
            tmux_ capture-pane -p -t 0 >&2
            exit 1
        fi
        sleep 0.05
    done
}

# The terminal's size, and the size a shot is rendered at.
width=160
height=45

# Polls the pane until nothing on it says "loading…" (a list still on its way), up to 10 s.
wait_loaded() {
    local deadline=$((SECONDS + 10))
    while tmux_ capture-pane -p -t 0 | grep -qF "loading…"; do
        if ((SECONDS > deadline)); then
            echo "screenshots.sh: still loading after 10 s; the screen was:" >&2
            tmux_ capture-pane -p -t 0 >&2
            exit 1
        fi
        sleep 0.05
    done
}

shot() {
    wait_loaded
    tmux_ capture-pane -e -p -t 0 >"$out/$1.ansi"
    python3 scripts/render_ansi.py "$out/$1.ansi" "$out/$1.png" "$width" "$height"
    rm "$out/$1.ansi"
    echo "$out/$1.png"
}

# The home screen at 80x24, then back to the full size.
shot_small() {
    tmux_ resize-window -t 0 -x 80 -y 24
    width=80 height=24
    # Redrawn for 80 columns once the STATE column, the first to give way, is gone.
    local deadline=$((SECONDS + 10))
    while tmux_ capture-pane -p -t 0 | grep -qF "STATE"; do
        ((SECONDS <= deadline)) || { echo "screenshots.sh: no redraw at 80x24" >&2; exit 1; }
        sleep 0.05
    done
    shot threads-80x24
    tmux_ resize-window -t 0 -x 160 -y 45
    width=160 height=45
}

keys() { tmux_ send-keys -t 0 "$@"; }

if [[ -z $source_file ]]; then
    # The demo, as a newcomer runs it, with a cache of its own: its first snapshot is taken
    # once every thread runs, the runaway report thread already first.
    cache=$(mktemp -d)
    trap 'tmux_ kill-server 2>/dev/null || true; rm -rf "$cache"' EXIT
    tmux_ new-session -d -x "$width" -y "$height" "env TERM=xterm-256color XDG_CACHE_HOME=$cache $bin demo"
    tmux_ set-option -g escape-time 0
    wait_for "report-builder"
    shot threads
    shot_small

    keys Tab;   wait_for "RELEASE ALONE"
    keys Space; keys Down; keys Space; wait_for "Ending threads {"
    shot release
    keys Tab;   wait_for "Allocation sites by live"
    shot sites
    keys Enter; wait_for "Objects allocated at"
    shot objects
    keys Escape; wait_for "Allocation sites by live"
    keys Tab;   wait_for "Threads by total"

    keys /; tmux_ send-keys -t 0 -l "worker-2"; wait_for "filter /worker-2"
    shot filter
    keys Enter; keys Enter; wait_for "Frames of thread"
    # serve_request holds the request context and the shared cache. A worker spends most of
    # its time inside a request; when the snapshot caught it between two, take another.
    for attempt in 1 2 3 4 5; do
        for _ in $(seq 16); do
            tmux_ capture-pane -p -t 0 | grep -q "#[0-9]* serve_request" && break 2
            keys Down; sleep 0.05
        done
        ((attempt < 5)) || { echo "screenshots.sh: no snapshot caught worker-2 in a request" >&2; exit 1; }
        keys Escape; wait_for "Threads by total"
        keys r; wait_for "snapshot #$((attempt + 2))"
        keys Enter; wait_for "Frames of thread"
    done
    shot frames
    keys Right; keys Enter; wait_for "Group T"
    shot group
    keys Enter; wait_for "Object #"
    shot object
    keys Escape; keys Escape; keys Escape; wait_for "Threads by total"
    # The views around the core (issue 7), from the snapshots taken so far.
    keys L; wait_for "Leaks by site"; wait_for "lost in"
    shot leaks
    keys Escape; wait_for "Threads by total"
    keys w; wait_for "Growth by site ·"
    shot growth
    keys Escape; wait_for "Threads by total"
    keys A; wait_for "Ages by"
    shot ages
    keys Escape; wait_for "Threads by total"
    # Allocation units (the demo records its events): per function, innermost, so the rows
    # are the workload's functions that call malloc.
    keys u; wait_for "Allocation units · library"
    keys f; wait_for "Allocation units · function · outermost"
    keys p; wait_for "Allocation units · function · innermost"; wait_for "append_rows ("
    shot units
    keys Escape; wait_for "Threads by total"
    # The operator's cancel (issue 6): the dry run's verdict on the runaway report thread.
    # The filter still holds "worker-2" from above: erase it first.
    keys /; for _ in $(seq 8); do keys BSpace; done
    tmux_ send-keys -t 0 -l "report-builder"; wait_for "filter /report-builder"
    keys Enter; keys c; wait_for "Verdict"
    shot cancel
    keys Escape; keys Escape
    keys '?'; wait_for "Help"
    shot help
    keys Tab; wait_for "What the figures mean"
    shot help-figures
    keys q
    exit 0
fi

tmux_ new-session -d -x "$width" -y "$height" "env TERM=xterm-256color $bin open $source_file"
tmux_ set-option -g escape-time 0
wait_for "Threads by total"
shot threads
shot_small

keys Tab;   wait_for "RELEASE ALONE"
keys Space; keys Down; keys Space; wait_for "Ending threads {"
shot release
keys Tab;   wait_for "Allocation sites by live"
shot sites
keys Enter; wait_for "Objects allocated at"
shot objects
keys Escape; wait_for "Allocation sites by live"
keys Tab;   wait_for "Threads by total"

keys Enter; wait_for "Frames of thread"
shot frames
keys Enter; wait_for "Group "
shot group
keys Enter; wait_for "Object #"
shot object
keys Escape; wait_for "Group "
keys Escape; wait_for "Frames of thread"
keys Escape; wait_for "Threads by total"

keys /; tmux_ send-keys -t 0 -l "th"; wait_for "filter /th"
shot filter
keys Escape
keys '?'; wait_for "Help"
shot help
keys q
