# What the stress benchmarks (hooks.sh, record.sh, auto_snapshot.sh) share; sourced by them
# from the repository root once THREADS, OPS and RUNS are set.
#
# bench/timing_lib.sh (the release agent $AGENT, the work directory $work, `wall`,
# `interleave`, the table rows), and bench/stress.c built with frame pointers (STRESS: the
# command line of one run).

source bench/timing_lib.sh
gcc -O2 -fno-omit-frame-pointer -pthread bench/stress.c -o "$work/stress"
STRESS=("$work/stress" "$THREADS" "$OPS")
