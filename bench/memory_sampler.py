#!/usr/bin/env python3
"""Memory of a target and of its children (the agent's scan child), sampled, for
bench/snapshot_cost.sh.

  memory_sampler.py sample PID OUT   samples every 10 ms until SIGTERM, then writes OUT (JSON):
                                     the target's peak VmRSS and RssAnon, and the peak private
                                     memory (smaps_rollup Private_Clean + Private_Dirty) and
                                     RSS of any child it had meanwhile
  memory_sampler.py now PID          prints the target's VmRSS, RssAnon and RssFile (kB) now
  memory_sampler.py floor PID        reads the target's heap mappings ([heap] and anonymous
                                     read-write ones) once from /proc/PID/mem, sequentially,
                                     and prints "bytes seconds": the physical floor of a scan
"""
import json
import signal
import sys
import time


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def private_kb(pid):
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def children(pid):
    kids = []
    try:
        import os
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return kids


def sample(pid, out_path):
    peak = {"VmRSS": 0, "RssAnon": 0, "child_private": 0, "child_rss": 0, "samples": 0}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        try:
            s = status(pid)
        except OSError:
            break
        peak["VmRSS"] = max(peak["VmRSS"], s.get("VmRSS", 0))
        peak["RssAnon"] = max(peak["RssAnon"], s.get("RssAnon", 0))
        for kid in children(pid):
            try:
                peak["child_private"] = max(peak["child_private"], private_kb(kid))
                peak["child_rss"] = max(peak["child_rss"], status(kid).get("VmRSS", 0))
            except OSError:
                pass
        peak["samples"] += 1
        time.sleep(0.01)
    with open(out_path, "w") as f:
        json.dump(peak, f)


def floor(pid):
    regions = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            start, end = (int(x, 16) for x in parts[0].split("-"))
            perms = parts[1]
            name = parts[5] if len(parts) > 5 else ""
            if perms.startswith("rw") and name in ("", "[heap]"):
                regions.append((start, end))
    total = 0
    began = time.perf_counter()
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        for start, end in regions:
            at = start
            while at < end:
                n = min(len(buf), end - at)
                mem.seek(at)
                try:
                    got = mem.readinto(view[:n])
                except OSError:
                    got = 0
                total += got or 0
                at += n
    print(total, f"{time.perf_counter() - began:.3f}")


if __name__ == "__main__":
    mode, pid = sys.argv[1], int(sys.argv[2])
    if mode == "sample":
        sample(pid, sys.argv[3])
    elif mode == "now":
        s = status(pid)
        print(s.get("VmRSS", 0), s.get("RssAnon", 0), s.get("RssFile", 0))
    elif mode == "floor":
        floor(pid)
    else:
        sys.exit(f"unknown mode {mode}")
