#!/usr/bin/env python3
"""Runs the workspace's test binaries, as `cargo test --workspace --no-fail-fast`
would, in three phases so that waiting does not add up:

1. **Shared**: the tests that wait, with bounds of seconds. The tests of the registry
   backends, the facade's configuration-centre tests, the CLI's and the testkit's spend
   their time waiting for real servers (a lease to expire, a push, a session to move),
   so several binaries run at once (`--lanes`, default 3), longest first when an
   earlier run's durations are on record (`<target>/test-durations.json`). Beside them,
   in a lane of its own and one at a time, the fault tests on test networks whose
   bounds are of seconds too: the registries' (a cut server left, a watch resumed, a
   lease kept) and those whose source says "runs beside the shared tests:". And the
   CPU those tests leave idle goes to work that measures nothing, run at idle priority
   (`chrt --idle`): a test that wakes takes the CPU from it at once. `--alongside CMD`
   (scripts/test.sh: the lints and `cargo doc`), then the doc tests
   (`cargo test --doc`), then `--background CMD` (scripts/test.sh: the compiles of its
   checks after the tests).
2. **One at a time**: everything else, one binary at a time as cargo runs them: the
   fault tests that measure time on test networks (any test source naming
   `meshline_testkit::net`), the rpc-client's and the examples' tests (timing bounds of
   milliseconds: probes, timeouts, detection times), the tests whose source says
   "runs one at a time:" (a process frozen and thawed, timed to a fraction of a second;
   an attack's p99 against quiet spells; a slow TC's shares, where the slow path is
   100 ms and more) and the rest. The idle-priority work may still run beside them: it
   never holds a CPU a test wakes for, and these tests leave most of the CPU idle (an
   idle-priority build beside `gateway_hardening` and `slow_tc` left their figures in
   the range of runs without it), so the work gets done while they wait.
3. **Alone**: last, once that work has ended, the tests that keep both cores busy with
   a flood of calls and measure its throughput, shares or percentiles, with nothing
   beside them: their sources say "runs alone:" (a compile beside them, even at idle
   priority, takes caches and memory bandwidth from the load they measure).

The build compiles the benches too (not run): with clippy-driver as the workspace
wrapper (scripts/test.sh sets it) the build is the workspace's clippy, and any warning
of a workspace crate, rustc's or clippy's, fails the run once the tests have run (so
one run still reports every failing test).

In the first two phases a binary's output, and each command's, is printed whole when
it ends, so outputs never interleave; a failing command fails the run. Every binary runs from its
package's folder with cargo's `CARGO_MANIFEST_DIR`/`CARGO_PKG_*` variables, as under
`cargo test`. Exit status: 0 when every binary, the doc tests and the commands passed;
otherwise 101 (cargo's) after naming each failure (a warning of the build among them).

Usage: scripts/run-tests.py [--lanes N] [--features F] [--alongside CMD] [--background CMD]
(scripts/test.sh runs it)
"""

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Packages whose test binaries wait on servers rather than measure time (the testkit's
# own: its servers start and answer; its test networks' test names `testkit::net`).
SHARED_PACKAGES = {
    "meshline",
    "meshline-cli",
    "meshline-config",
    "meshline-instance",
    "meshline-registry-core",
    "meshline-registry-etcd",
    "meshline-registry-file",
    "meshline-registry-nacos",
    "meshline-registry-others",
    "meshline-tcc-fence",
    "meshline-testkit",
}
# A test source naming one of these measures a fault on a test network (a cut link, a
# slow or lossy one), so it is not among the shared lanes' tests: a registry's (bounds
# of seconds) runs in the fault-test lane beside them, any other one at a time after.
# (A registry test that reports a figure without a test network, such as etcd's
# frozen-server keep-alive, 2 s of timers against a 3 s bound, stays shared.)
# A test that keeps both cores busy with a flood of calls and measures it says so with
# "runs alone:" in its source, and runs last, with nothing beside it. A test timed to a
# fraction of a second that leaves the CPU idle (registry-nacos's `nacos_stall`) says
# "runs one at a time:" instead, and runs in the one-at-a-time phase.
ALONE_MARKER = "runs alone:"
ONE_AT_A_TIME_MARKER = "runs one at a time:"
UNSHARED_MARKERS = ("meshline_testkit::net", "testkit::net", ALONE_MARKER, ONE_AT_A_TIME_MARKER)
# A fault test outside the registries' packages whose bounds are of seconds says so with
# this in its source, and runs in the shared phase's fault-test lane.
BESIDE_MARKER = "runs beside the shared tests:"

class Binary:
    def __init__(self, art, root):
        self.src = Path(art["target"]["src_path"])
        self.exe = art["executable"]
        self.manifest_dir = Path(art["manifest_path"]).parent
        self.kind = art["target"]["kind"][0]
        self.crate = art["target"]["name"].replace("-", "_")
        self.root = root
        self.name = None  # set by the caller: the package's name
        self.version = None

    @property
    def label(self):
        try:
            src = self.src.relative_to(self.root)
        except ValueError:
            src = self.src
        kind = "unittests " if self.kind in ("lib", "bin", "proc-macro") else ""
        return f"{kind}{src}"

    def key(self):
        return f"{self.name}:{self.kind}:{self.src}"

    def env(self):
        env = dict(os.environ)
        env.update(
            CARGO_MANIFEST_DIR=str(self.manifest_dir),
            CARGO_PKG_NAME=self.name,
            CARGO_PKG_VERSION=self.version,
            CARGO_CRATE_NAME=self.crate,
        )
        return env

    @functools.cached_property
    def _text(self):
        """The test source (None when unreadable), read once: every phase's rule asks.

        A binary whose main file is `<dir>/main.rs` (a package's `tests/suite/`, whose
        test files are modules of one binary) is all the `.rs` files under `<dir>`: a
        marker in any of its modules places the whole binary, since the binary is what
        a phase runs."""
        try:
            if self.src.name != "main.rs":
                return self.src.read_text(errors="replace")
            return "\n".join(
                f.read_text(errors="replace") for f in sorted(self.src.parent.rglob("*.rs")))
        except OSError:
            return None

    def shared(self):
        if self.name not in SHARED_PACKAGES:
            return False
        text = self._text
        return text is not None and not any(m in text for m in UNSHARED_MARKERS)

    def alone(self):
        """Measures a flood of calls: runs with nothing beside it, not even idle work."""
        text = self._text
        return text is not None and ALONE_MARKER in text

    def beside(self):
        """A fault test on a test network with bounds of seconds: a registry's (unless
        its source says "runs alone:" or "runs one at a time:"), or one whose source
        says it runs beside the shared tests. It runs in the shared phase, in the
        fault-test lane."""
        if self.shared() or self.alone() or self._text is None:
            return False
        if ONE_AT_A_TIME_MARKER in self._text:
            return False
        return self.name in SHARED_PACKAGES or BESIDE_MARKER in self._text

def cargo_build(cmd):
    """Runs a `cargo ... --message-format=json` build: prints each compiler message as
    cargo would (rendered, to stderr) and returns the JSON messages and the warnings
    of the workspace's own crates (the dependencies' lints are capped)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    messages, warnings = [], []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        messages.append(msg)
        if msg.get("reason") != "compiler-message":
            continue
        diag = msg["message"]
        sys.stderr.write(diag.get("rendered") or diag.get("message", "") + "\n")
        if diag.get("level") == "warning" and diag.get("spans"):
            warnings.append(f"{msg['target']['src_path']}: {diag.get('message')}")
    sys.stderr.flush()
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    return messages, warnings


def build(features):
    """Builds every test binary, and the benches (compiled, not run: under
    `RUSTC_WORKSPACE_WRAPPER=clippy-driver` that is what lints them), and lists the
    test binaries and the workspace's warnings."""
    cmd = ["cargo", "test", "--workspace", "--no-fail-fast", "--no-run", "--message-format=json"]
    if features:
        cmd += ["--features", features]
    messages, warnings = cargo_build(cmd)
    warnings += cargo_build(cmd + ["--benches"])[1]
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        stdout=subprocess.PIPE, text=True, check=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    root = Path(meta["workspace_root"])
    binaries = []
    for msg in messages:
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        pkg = packages.get(msg["package_id"])
        if pkg is None:
            continue
        msg["manifest_path"] = pkg["manifest_path"]
        b = Binary(msg, root)
        b.name, b.version = pkg["name"], pkg["version"]
        binaries.append(b)
    return root, meta["target_directory"], binaries, warnings


def run_captured(b, results, lock, lane):
    """Runs `b` with its output in a file, printed whole when it ends."""
    with tempfile.TemporaryFile(mode="w+") as out:
        start = time.monotonic()
        code = subprocess.call([b.exe], cwd=b.manifest_dir, env=b.env(),
                               stdout=out, stderr=subprocess.STDOUT)
        took = time.monotonic() - start
        out.seek(0)
        text = out.read()
    with lock:
        print(f"     Running {b.label} ({b.exe}) [{took:.1f} s, {lane}]", flush=True)
        sys.stdout.write(text)
        sys.stdout.flush()
        results[b.key()] = (code, took, b.label)


def run_live(b, results):
    print(f"     Running {b.label} ({b.exe})", flush=True)
    start = time.monotonic()
    code = subprocess.call([b.exe], cwd=b.manifest_dir, env=b.env())
    took = time.monotonic() - start
    print(f"     ({b.label}: {took:.1f} s)", flush=True)
    results[b.key()] = (code, took, b.label)


def run_idle(what, cmd, lock):
    """Runs `cmd` (an argument list) at idle priority with its output in a file; prints
    `what`, how it ended and the output, whole, when it ends; returns its exit status."""
    with tempfile.TemporaryFile(mode="w+") as out:
        start = time.monotonic()
        code = subprocess.call(["chrt", "--idle", "0"] + cmd,
                               stdout=out, stderr=subprocess.STDOUT)
        took = time.monotonic() - start
        out.seek(0)
        text = out.read()
    with lock:
        print(f"== {what} (exit {code}, {took:.0f} s, done {time.strftime('%H:%M:%S')})",
              flush=True)
        sys.stdout.write(text)
        sys.stdout.flush()
    return code


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lanes", type=int, default=3)
    ap.add_argument("--features", default="")
    ap.add_argument("--alongside", default="")
    ap.add_argument("--background", default="")
    args = ap.parse_args()

    root, target_dir, binaries, warnings = build(args.features)
    durations_file = Path(target_dir) / "test-durations.json"
    try:
        known = json.loads(durations_file.read_text())
    except (OSError, ValueError):
        known = {}
    shared = [b for b in binaries if b.shared()]
    beside = [b for b in binaries if b.beside()]
    rest = [b for b in binaries if not b.shared() and not b.beside()]
    timed = [b for b in rest if not b.alone()]
    alone = [b for b in rest if b.alone()]
    # Longest first (as last measured; unknown ones first of all, alphabetically).
    shared.sort(key=lambda b: (-known.get(b.key(), 1e9), b.label))
    beside.sort(key=lambda b: (-known.get(b.key(), 1e9), b.label))
    timed.sort(key=lambda b: (b.name, b.label))
    alone.sort(key=lambda b: (b.name, b.label))

    results = {}
    lock = threading.Lock()
    print(f"== {len(shared)} test binaries waiting on servers, {max(1, args.lanes)} at a time, "
          f"and {len(beside)} fault tests of seconds one at a time beside them "
          f"({time.strftime('%H:%M:%S')})", flush=True)
    started = time.monotonic()

    def lane(queue, name):
        while True:
            with lock:
                if not queue:
                    return
                b = queue.pop(0)
            run_captured(b, results, lock, name)

    # The work for the CPU, in turn (each holds cargo's lock on the target directory).
    doc_cmd = ["cargo", "test", "--workspace", "--no-fail-fast", "--doc"]
    if args.features:
        doc_cmd += ["--features", args.features]
    chain = []
    if args.alongside:
        chain.append((f"at idle priority: {args.alongside}", ["bash", "-c", args.alongside]))
    chain.append(("doc tests", doc_cmd))
    if args.background:
        chain.append((f"at idle priority: {args.background}", ["bash", "-c", args.background]))
    failed_cmds = []

    def idle_work():
        for what, cmd in chain:
            if run_idle(what, cmd, lock) != 0:
                failed_cmds.append(what)

    queue = list(shared)
    lanes = [threading.Thread(target=lane, args=(queue, "shared"))
             for _ in range(max(1, args.lanes))]
    lanes.append(threading.Thread(target=lane, args=(list(beside), "fault-test lane")))
    idle = threading.Thread(target=idle_work)
    idle.start()
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    shared_took = time.monotonic() - started
    print(f"== shared phase: {shared_took:.0f} s; {len(timed)} test binaries one at a time "
          f"({time.strftime('%H:%M:%S')})", flush=True)
    started = time.monotonic()
    for b in timed:
        run_captured(b, results, lock, "one at a time")
    timed_took = time.monotonic() - started
    idle.join()
    print(f"== {len(alone)} test binaries alone ({time.strftime('%H:%M:%S')})", flush=True)
    started = time.monotonic()
    for b in alone:
        run_live(b, results)
    alone_took = time.monotonic() - started

    try:
        merged = dict(known)
        merged.update({k: round(v[1], 1) for k, v in results.items()})
        durations_file.write_text(json.dumps(merged, indent=1, sort_keys=True))
    except OSError as e:
        print(f"run-tests: could not record durations: {e}", file=sys.stderr)

    slowest = sorted(results.values(), key=lambda r: -r[1])[:10]
    print(f"== test binaries: {len(results)}; shared phase {shared_took:.0f} s, "
          f"one at a time {timed_took:.0f} s, alone {alone_took:.0f} s; slowest:")
    for code, took, label in slowest:
        print(f"   {took:6.1f} s  {label}")
    failed = [label for code, _, label in results.values() if code != 0] + failed_cmds
    if warnings:
        print(f"error: the test build warned ({len(warnings)}; rendered above the tests):",
              file=sys.stderr)
        for w in warnings:
            print(f"   {w}", file=sys.stderr)
        failed.append("the test build's warnings (rustc's, and clippy's when it is the "
                      "workspace wrapper)")
    if failed:
        print("error: test failed in: " + ", ".join(sorted(failed)), file=sys.stderr)
        sys.exit(101)


if __name__ == "__main__":
    main()
