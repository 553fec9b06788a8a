#!/usr/bin/env python3
"""Prints the BENCHMARKS.md tables from criterion's results (target/criterion).

Usage: python3 loadbalance/benches/summarize.py [target/criterion]
"""
import json
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"


def estimate(*bench):
    """The mean of the bench at the path `bench` below root (group, name[, size]), or None."""
    path = os.path.join(root, *bench, "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["mean"]["point_estimate"]
    except OSError:
        return None


def mean_ns(group, name, size):
    return estimate(group, name, str(size))


def fmt(ns):
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.1f} ns"


def names(group):
    d = os.path.join(root, group)
    return sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n)) and n != "report")


def table(group, sizes, peer):
    rows = [n for n in names(group) if n != peer] + [peer]
    print("| algorithm | " + " | ".join(f"n={s}" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for n in rows:
        print(f"| {n} | " + " | ".join(fmt(mean_ns(group, n, s)) for s in sizes) + " |")
    print()


def versus_pingora(group, sizes, what):
    """ConsistentHash against pingora-ketama in `group`, with the ratio, where both ran."""
    print(f"| n | ConsistentHash{what} | pingora-ketama{what} | pingora / ours |")
    print("|---|---|---|---|")
    for s in sizes:
        a, b = mean_ns(group, "ConsistentHash", s), mean_ns(group, "pingora-ketama", s)
        if a and b:
            print(f"| {s} | {fmt(a)} | {fmt(b)} | {b / a:.2f}x |")


print("### Pick (mean time per pick)\n")
table("pick", [3, 10, 100, 1000], "pingora-ketama")
print("### Ketama lookup: ours vs pingora-ketama (same keys, same run)\n")
versus_pingora("pick", [3, 10, 100, 1000], "")
print()
print("### Key hashes alone (the same ~33-byte XIDs)\n")
print("| hash | time |")
print("|---|---|")
for n in ["java_sha256", "xxh3"]:
    print(f"| {n} | {fmt(estimate('key_hash', n))} |")
print()
print("### Whole per-request path at n=100 (load picker, pick, in-flight guard, drop)\n")
print("| algorithm | time |")
print("|---|---|")
for n in names("balancer_pick"):
    print(f"| {n} | {fmt(mean_ns('balancer_pick', n, 100))} |")
print()
print("### The rpc-client's path at n=100 (pick, `into_parts`, read the key, drop both)\n")
print("| algorithm | time |")
print("|---|---|")
if os.path.isdir(os.path.join(root, "balancer_pick_parts")):
    for n in names("balancer_pick_parts"):
        print(f"| {n} | {fmt(mean_ns('balancer_pick_parts', n, 100))} |")
print()
print("### Picker rebuild (mean time per build)\n")
table("rebuild", [10, 100, 1000, 10000], "pingora-ketama")
versus_pingora("rebuild", [10, 100, 1000, 10000], " build")
