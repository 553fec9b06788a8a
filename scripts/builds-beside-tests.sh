#!/usr/bin/env bash
# What scripts/test.sh checks after the tests, started by scripts/run-tests.py
# (--background) beside the tests that wait on servers and the tests of timers: they
# leave most of the CPU idle. Every compile here runs at idle priority
# (`chrt --idle 0`: it gets a CPU only when no test wants one); what runs (the package
# check's tc-server and program) runs at normal priority.
#   - the Nacos TLS build's tests, built and linted (scripts/test.sh runs them after);
#   - the file-only CLI, built (likewise);
#   - scripts/package-check.sh, whole.
# TC_SERVER: the tc-server the test build made (scripts/test.sh passes it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "${TC_SERVER:-}" ] || {
  echo "builds-beside-tests: TC_SERVER='${TC_SERVER:-}' is not a built tc-server" >&2
  exit 1
}

echo "== nacos-tls: its tests built, and linted"
# Under scripts/test.sh, clippy-driver is the workspace wrapper (RUSTC_WORKSPACE_WRAPPER):
# this build is the Nacos TLS build's clippy, and a warning fails it as `cargo clippy
# -- -D warnings` would.
out=$(chrt --idle 0 cargo test --quiet -p meshline-registry-nacos --features tls --lib \
  --test nacos_tls_build_plain_server --no-run 2>&1) || { echo "$out" >&2; exit 1; }
[ -z "$out" ] || echo "$out" >&2
if grep -q '^warning' <<<"$out"; then
  echo "builds-beside-tests: the Nacos TLS build warned (above)" >&2
  exit 1
fi
echo "== the file-only CLI built"
chrt --idle 0 cargo build --quiet -p meshline-cli --no-default-features --features file
echo "== every publishable crate packages; a consumer built from the packages runs the README's program"
PACKAGE_CHECK_IDLE=1 bash scripts/package-check.sh
