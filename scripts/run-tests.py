#!/usr/bin/env python3
"""Runs the workspace's test binaries, as `cargo test --workspace --no-fail-fast`
would, in two phases so that waiting does not add up:

1. **Shared**: the tests of the registry backends, the facade's configuration-centre
   tests, the CLI's and the testkit's. They spend their time waiting for real servers (a lease to
   expire, a push, a session to move) with bounds of seconds, so several binaries run
   at once (`--lanes`, default 3), longest first when an earlier run's durations are
   on record (`<target>/test-durations.json`).
2. **Alone**: everything else, one binary at a time as cargo runs them: the fault
   tests that measure time on test networks (any test source naming
   `meshline_testkit::net`), the rpc-client's and the examples' tests
   (timing bounds of milliseconds: probes, p99s, throughput) and the rest. Last of
   them the registry fault tests on test networks (bounds of seconds: a cut server
   left, a watch resumed, a lease kept), beside which `--background CMD` starts
   (scripts/test.sh: the compiles of its checks after the tests, at idle priority),
   so the CPU those tests leave idle is used while nothing competes with the tests of
   milliseconds.

`--background CMD`'s output is printed when it ends, after the doc tests, and its
failure fails the run. `--alongside CMD` runs a shell command (scripts/test.sh: clippy and `cargo doc`, work
for the CPU) during the shared phase, whose tests mostly wait, and waits for it before
the alone phase, so nothing competes with the tests that measure time; its output is
printed when it ends and its failure fails the run. Then the doc tests
(`cargo test --doc`). A shared binary's output is printed whole when
it ends, so outputs never interleave. Every binary runs from its package's folder with
cargo's `CARGO_MANIFEST_DIR`/`CARGO_PKG_*` variables, as under `cargo test`. Exit
status: 0 when every binary and the doc tests passed; otherwise 101 (cargo's) after
naming each failing binary.

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
# slow or lossy one): throughput and detection times under load, so it runs alone.
# (A registry test that reports a figure without a test network, such as etcd's
# frozen-server keep-alive, 2 s of timers against a 3 s bound, stays shared.)
# A test that times a stall to a fraction of a second says so with "runs alone:" in its
# source (registry-nacos's `nacos_stall`), and runs alone too.
ALONE_MARKERS = ("meshline_testkit::net", "testkit::net", "runs alone:")


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
        """The test source (None when unreadable), read once: both phases' rules ask."""
        try:
            return self.src.read_text(errors="replace")
        except OSError:
            return None

    def shared(self):
        if self.name not in SHARED_PACKAGES:
            return False
        text = self._text
        return text is not None and not any(m in text for m in ALONE_MARKERS)

    def beside_builds(self):
        """A registry's fault test on a test network (alone among the tests, bounds of
        seconds), unless its source says "runs alone:": the idle-priority builds of
        `--background` may run beside it."""
        if self.name not in SHARED_PACKAGES or self.shared():
            return False
        text = self._text
        return text is not None and "runs alone:" not in text


def build(features):
    """Builds every test binary (cargo's diagnostics go to our stderr) and lists them."""
    cmd = [
        "cargo", "test", "--workspace", "--no-fail-fast", "--no-run",
        "--message-format=json-render-diagnostics",
    ]
    if features:
        cmd += ["--features", features]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        stdout=subprocess.PIPE, text=True, check=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    root = Path(meta["workspace_root"])
    binaries = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
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
    return root, meta["target_directory"], binaries


def run_captured(b, results, lock):
    """Runs `b` with its output in a file, printed whole when it ends."""
    with tempfile.TemporaryFile(mode="w+") as out:
        start = time.monotonic()
        code = subprocess.call([b.exe], cwd=b.manifest_dir, env=b.env(),
                               stdout=out, stderr=subprocess.STDOUT)
        took = time.monotonic() - start
        out.seek(0)
        text = out.read()
    with lock:
        print(f"     Running {b.label} ({b.exe}) [{took:.1f} s, shared]", flush=True)
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


def start_job(cmd):
    """Starts `cmd` (a shell command) with its output in a file; (process, file, start)."""
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(["bash", "-c", cmd], stdout=out, stderr=subprocess.STDOUT)
    return proc, out, time.monotonic()


def finish_job(job, what):
    """Waits for a job of `start_job`, prints `what` with how it ended and then its
    output; returns its exit status."""
    proc, out, at = job
    code = proc.wait()
    out.seek(0)
    print(f"== {what} (exit {code}, done {time.monotonic() - at:.0f} s after its start)",
          flush=True)
    sys.stdout.write(out.read())
    sys.stdout.flush()
    out.close()
    return code


def start_background(cmd):
    print(f"== starting in the background: {cmd} ({time.strftime('%H:%M:%S')})", flush=True)
    return start_job(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lanes", type=int, default=3)
    ap.add_argument("--features", default="")
    ap.add_argument("--alongside", default="")
    ap.add_argument("--background", default="")
    args = ap.parse_args()

    root, target_dir, binaries = build(args.features)
    durations_file = Path(target_dir) / "test-durations.json"
    try:
        known = json.loads(durations_file.read_text())
    except (OSError, ValueError):
        known = {}
    shared = [b for b in binaries if b.shared()]
    alone = [b for b in binaries if not b.shared()]
    # Longest first (as last measured; unknown ones first of all, alphabetically).
    shared.sort(key=lambda b: (-known.get(b.key(), 1e9), b.label))
    # The registry fault tests last: the background builds start beside them.
    alone.sort(key=lambda b: (b.beside_builds(), b.name, b.label))

    results = {}
    lock = threading.Lock()
    queue = list(shared)
    print(f"== {len(shared)} test binaries waiting on servers, {max(1, args.lanes)} at a time "
          f"({time.strftime('%H:%M:%S')})", flush=True)
    started = time.monotonic()

    def lane():
        while True:
            with lock:
                if not queue:
                    return
                b = queue.pop(0)
            run_captured(b, results, lock)

    alongside = start_job(args.alongside) if args.alongside else None
    lanes = [threading.Thread(target=lane) for _ in range(max(1, args.lanes))]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    shared_took = time.monotonic() - started
    alongside_code = 0
    if alongside is not None:
        alongside_code = finish_job(alongside, f"alongside the shared phase: {args.alongside}")
    print(f"== shared phase: {shared_took:.0f} s; {len(alone)} test binaries one at a time "
          f"({time.strftime('%H:%M:%S')})", flush=True)
    started = time.monotonic()
    background = None
    for b in alone:
        if background is None and args.background and b.beside_builds():
            background = start_background(args.background)
        run_live(b, results)
    if background is None and args.background:
        background = start_background(args.background)
    alone_took = time.monotonic() - started

    print(f"== doc tests ({time.strftime('%H:%M:%S')})", flush=True)
    cmd = ["cargo", "test", "--workspace", "--no-fail-fast", "--doc"]
    if args.features:
        cmd += ["--features", args.features]
    doc_code = subprocess.call(cmd)

    background_code = 0
    if background is not None:
        background_code = finish_job(background, f"in the background: {args.background}")

    try:
        merged = dict(known)
        merged.update({k: round(v[1], 1) for k, v in results.items()})
        durations_file.write_text(json.dumps(merged, indent=1, sort_keys=True))
    except OSError as e:
        print(f"run-tests: could not record durations: {e}", file=sys.stderr)

    slowest = sorted(results.values(), key=lambda r: -r[1])[:10]
    print(f"== test binaries: {len(results)}; shared phase {shared_took:.0f} s, "
          f"alone {alone_took:.0f} s; slowest:")
    for code, took, label in slowest:
        print(f"   {took:6.1f} s  {label}")
    failed = [label for code, _, label in results.values() if code != 0]
    if doc_code != 0:
        failed.append("doc tests")
    if alongside_code != 0:
        failed.append(f"alongside: {args.alongside}")
    if background_code != 0:
        failed.append(f"background: {args.background}")
    if failed:
        print("error: test failed in: " + ", ".join(sorted(failed)), file=sys.stderr)
        sys.exit(101)


if __name__ == "__main__":
    main()
