# Python building a dict of N keys (heaptui's real-program test and benchmark:
# tests/real_programs.rs, bench/real_programs.sh). At its peak it prints "keys: N" and reads
# one line from stdin, where the driver takes its snapshot (a closed or empty stdin goes on at
# once); then a pass over the values, and it ends when stdin does.
import sys

n = int(sys.argv[1])
d = {f"key{i}": [i, f"value{i}"] for i in range(1, n + 1)}
print("keys:", len(d), flush=True)
sys.stdin.readline()
print("sum:", sum(v[0] for v in d.values()), "value bytes:", sum(len(v[1]) for v in d.values()))
sys.stdout.flush()
sys.stdin.read()
