# What the side-by-side benchmarks share (the stress ones through bench/stress_lib.sh, and
# bench/real_programs.sh); sourced from the repository root once RUNS is set.
#
# Builds the release agent ($AGENT) and a work directory ($work, removed on exit). A script then
# defines `one NAME` (one run of configuration NAME, printing its "wall,cpu" with `wall`),
# calls `interleave NAME…` and prints its table with `table_header` and `table_row`.

cargo build --release -p heaptui-agent >&2
AGENT=${CARGO_TARGET_DIR:-$PWD/target}/release/libheaptui_agent.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# "wall,cpu" seconds of one run of "$@" (output discarded); cpu = user + system of the
# process and its children. On a shared, loaded machine CPU time is the steadier figure.
wall() {
    local TIMEFORMAT='%R %U %S' t
    t=$({ time "$@" >/dev/null 2>>"$work/stderr"; } 2>&1 | tail -1)
    awk '{ printf "%.3f,%.3f\n", $1, $2 + $3 }' <<<"$t"
}

median() {
    sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# "wall,cpu" of every run so far, per configuration.
declare -A times

# interleave NAME…: RUNS rounds of `one NAME` for every NAME, the order rotated every round
# so no configuration always runs first.
interleave() {
    local names=("$@") i k n
    for ((i = 0; i < RUNS; i++)); do
        for ((k = 0; k < ${#names[@]}; k++)); do
            n=${names[(i + k) % ${#names[@]}]}
            times[$n]+="$(one "$n") "
        done
    done
}

# Median of field $2 (1 = wall, 2 = cpu) of configuration $1.
med() { tr ' ' '\n' <<<"${times[$1]}" | grep . | cut -d, -f"$2" | median; }

# table_header WIDTH BASE: the header of a table whose ratios are against BASE.
table_header() {
    printf "| %-${1}s | %10s | %8s | %10s | %8s |\n" run "wall (s)" "vs $2" "cpu (s)" "vs $2"
    printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' $(seq $(($1 + 2))))" "------------" \
        "----------" "------------" "----------"
}

# table_row WIDTH LABEL NAME BASE: configuration NAME's medians and their ratios to BASE's.
table_row() {
    local m c b bc
    m=$(med "$3" 1)
    c=$(med "$3" 2)
    b=$(med "$4" 1)
    bc=$(med "$4" 2)
    printf "| %-${1}s | %10s | %7.2fx | %10s | %7.2fx |\n" "$2" "$m" \
        "$(awk -v a="$m" -v b="$b" 'BEGIN { print a / b }')" "$c" \
        "$(awk -v a="$c" -v b="$bc" 'BEGIN { print a / b }')"
}
