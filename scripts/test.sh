#!/usr/bin/env bash
# The README's test command. On a fresh Debian machine it installs what the tests need
# (scripts/install-test-deps.sh), then checks formatting, lints, runs every test and
# builds the docs. Any failure stops the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A one-off run gains nothing from incremental state, which costs gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Debug builds with line tables only (a failing test's backtrace keeps its files and
# lines; no variables for a debugger): about a hundred test binaries are compiled and
# linked, and full debug info is much of that time and of the target's size.
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

# Each step prints the time and the free disk, so a run that fails names its step and
# shows whether the disk was the cause.
step() {
  printf '\n== %s (%s, %s free)\n' "$1" "$(date -u +%H:%M:%S)" \
    "$(df -h --output=avail . | tail -1 | tr -d ' ')"
}

# Nothing this run starts may outlive it. Every process started from here on inherits
# TESTSH_RUN_ID (no MESHLINE_ prefix: the config loader would read that as a key), so a
# server a test forgot to stop is found even after it was re-parented to init; every
# temporary folder goes under one TMPDIR of this run's own. When the script ends, for
# any reason, a process still carrying the mark or anything left in that TMPDIR is named
# and fails the run; then the processes are killed and the folder is removed, so the
# next run starts clean.
TESTSH_RUN_ID="$$.$(date +%s%N)"
export TESTSH_RUN_ID
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshline-test-run.XXXXXX")
# Traversable (not listable) by other users: the PostgreSQL server a test starts runs
# as the `postgres` user (it refuses root) and must reach its data dir under here.
chmod 0711 "$run_tmp"
export TMPDIR="$run_tmp"
leftovers() {
  local status=$? pid d cmd
  local -a envs argv found=()
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    mapfile -d "" envs 2>/dev/null <"$d/environ" || continue
    [[ " ${envs[*]} " == *" TESTSH_RUN_ID=$TESTSH_RUN_ID "* ]] || continue
    mapfile -d "" argv 2>/dev/null <"$d/cmdline" || continue
    cmd="${argv[*]}"
    found+=("$pid")
    echo "leftover process $pid: ${cmd:0:200}" >&2
  done
  local -a files=()
  mapfile -t files < <(cd "$run_tmp" && find . -mindepth 1 -maxdepth 2 | sort)
  for f in "${files[@]}"; do
    echo "leftover temporary file or folder: $run_tmp/${f#./}" >&2
  done
  if [ ${#found[@]} -gt 0 ] || [ ${#files[@]} -gt 0 ]; then
    echo "scripts/test.sh: ${#found[@]} process(es) and ${#files[@]} temporary path(s) outlived their step (above); removing them" >&2
    kill -KILL "${found[@]}" 2>/dev/null || true
    [ "$status" -ne 0 ] || status=1
  else
    echo "scripts/test.sh: no process or temporary folder of this run is left"
  fi
  rm -rf "$run_tmp"
  exit "$status"
}
trap leftovers EXIT

# Every feature of every crate (the facade's `tower` adapter included) except Nacos TLS
# (`nacos-tls`, registry-nacos `tls`):
# nacos-sdk's TLS switch makes every Nacos connection of the build TLS, and the test
# server (rnacos) serves plain connections only. That feature is checked on its own
# below. TLS of every other backend is in (`all-tls`), so its tests run against real
# TLS servers.
FEATURES="meshline/all-tls,meshline/rpc,meshline/tower,meshline/tx-http,meshline-cli/all-tls"
FEATURES+=",meshline-example-tc/all-registries,meshline-example-tc/etcd,meshline-example-tc/tcc-example,meshline-example-gateway/all-registries"

step "the README's run command needs only a Rust toolchain (no protoc)"
# `cargo run --release -p meshline-example-tc --bin demo` is a newcomer's first command: its
# default features must not pull etcd-client, whose build script runs protoc
# (prost-build: $PROTOC, else `protoc` from PATH). Checked with protoc hidden both ways,
# in a target dir of its own so every build script of the demo's graph has run there
# without protoc (a package added to the graph runs its build script here for the
# first time). It runs before the test build, which keeps both cores busy: beside it
# nothing would be gained.
demo_graph=$(cargo tree -p meshline-example-tc -e normal,build --prefix none)
if grep -E '^(etcd-client|prost-build|tonic-prost-build) ' <<<"$demo_graph"; then
  echo "meshline-example-tc's default features pull a crate that needs protoc (above)" >&2
  exit 1
fi
noprotoc=$(mktemp -d)
printf '#!/bin/sh\necho "protoc is hidden by scripts/test.sh" >&2\nexit 127\n' >"$noprotoc/protoc"
chmod +x "$noprotoc/protoc"
PATH="$noprotoc:$PATH" PROTOC=/nonexistent/protoc CARGO_TARGET_DIR=target/no-protoc \
  cargo check --quiet -p meshline-example-tc --bin demo
rm -rf "$noprotoc"

step "install test dependencies"
bash scripts/install-test-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "the protobuf vectors are what protoc makes from Seata's own .proto files"
# rpc-client's protobuf tests compare its prost messages with these bytes; made here
# again from rpc-client/tests/seata-protos, each must be in the tests as it is.
while read -r name hex; do
  if ! grep -q "$hex" rpc-client/src/message/protobuf/tests.rs rpc-client/src/grpc/tests.rs; then
    echo "vector $name from Seata's protos is in neither rpc-client/src/message/protobuf/tests.rs nor rpc-client/src/grpc/tests.rs: $hex" >&2
    exit 1
  fi
done < <(bash scripts/seata-proto-vectors.sh)
echo "ok: $(bash scripts/seata-proto-vectors.sh | wc -l) vectors"

step "cargo test, clippy in its build; beside its tests, at idle priority: the other lints, cargo doc, the doc tests and the builds of the checks after it"
# Clippy lints the workspace as the test build compiles it: clippy-driver as cargo's
# workspace wrapper (what `cargo clippy` sets for a check), with clippy's default lints
# at warn, and run-tests.py fails the run on any warning of the build (rustc's or
# clippy's) once the tests have run: what `cargo clippy --workspace --all-targets -- -D
# warnings` holds, without checking the workspace and every dependency a second time
# (1.5-2 minutes of CPU a run). Every later cargo command that builds the workspace's
# crates keeps both variables: they are part of an artifact's hash, and a change would
# compile the workspace again (the doc tests, the file-only CLI, the Nacos TLS build).
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [ ! -x "$clippy_driver" ]; then
  echo "scripts/test.sh: clippy is not installed ($clippy_driver missing): rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS=""
# The fault tests' measured figures (meshline_testkit::figures): gathered in one file
# and printed after the tests, pass or fail, so a full run's figures are on record
# (docs/faults.md quotes them).
figures="${CARGO_TARGET_DIR:-target}/test-figures.txt"
case $figures in /*) ;; *) figures="$PWD/$figures" ;; esac
mkdir -p "$(dirname "$figures")"
: >"$figures"
# `cargo test --workspace --no-fail-fast` (one run reports every failing test binary)
# in three phases (scripts/run-tests.py says which binary runs where and why): first the
# binaries that wait on servers, three at a time, with the fault tests whose bounds are
# seconds one at a time beside them; then the tests of timers, one binary at a time; the
# CPU both leave idle goes to the lints and docs (scripts/lint.sh), the doc tests and the
# compiles of the checks after the tests (scripts/builds-beside-tests.sh), all at idle
# priority; last, once that work has ended, the tests that measure a flood of calls, one
# binary at a time with nothing beside them.
# The tc-server is the one the suite's tests ran: cargo built it for the example's
# integration tests. (`cargo build --bin tc-server` would compile it again, and much of
# what it uses: a build resolves features without the dev-dependencies, a test build
# with them.)
tc_server="${CARGO_TARGET_DIR:-target}/debug/tc-server"
case $tc_server in /*) ;; *) tc_server="$PWD/$tc_server" ;; esac
tests_status=0
TESTSH_FIGURES="$figures" python3 scripts/run-tests.py --lanes 3 --features "$FEATURES" \
  --alongside "FEATURES='$FEATURES' CLIPPY_IN_TEST_BUILD=1 bash scripts/lint.sh" \
  --background "TC_SERVER='$tc_server' bash scripts/builds-beside-tests.sh" || tests_status=$?
step "figures the fault tests measured in this run"
cat "$figures"
[ "$tests_status" -eq 0 ] || exit "$tests_status"
# The fault tests record their figures as they pass: none at all means they did not
# run (a test that cannot run fails under CI=true; this catches any other way out).
if [ ! -s "$figures" ]; then
  echo "scripts/test.sh: the fault tests recorded no figures ($figures is empty): they did not run" >&2
  exit 1
fi

step "nacos-tls: builds, and its refusals (nacos-sdk's TLS cannot be served by rnacos)"
# Its unit tests, and a plain rnacos refused at once naming the feature (what an
# --all-features build meets); built beside the tests.
cargo test -p meshline-registry-nacos --features tls --lib --test nacos_tls_build_plain_server

step "the Consul and Eureka doubles against independent npm clients"
# The doubles as the test build made them (cargo builds a package's binaries for its
# integration tests; built again by the script they would be compiled anew, as above).
DOUBLES_BIN_DIR="${CARGO_TARGET_DIR:-target}/debug" bash scripts/check-doubles.sh

step "a build without the network backends refuses each by its feature name"
# One build (file only) and every type it lacks, listed by that build itself from the
# facade's table of registry types (src/registry.rs): a new backend is checked here
# without touching this script.
types=$(cargo run --quiet -p meshline-cli --no-default-features --features file -- types --porcelain)
missing=$(awk -F'\t' '$3 == "no"' <<<"$types")
if [ "$(awk -F'\t' '$3 == "yes" { print $1 }' <<<"$types")" != "file" ] || [ -z "$missing" ]; then
  echo "expected the file-only build to have the file registry and no other, got:" >&2
  echo "$types" >&2
  exit 1
fi
while IFS=$'\t' read -r ty feature _; do
  set +e
  msg=$(cargo run --quiet -p meshline-cli --no-default-features --features file -- \
        lookup --registry "$ty" --server 127.0.0.1:1 default_tx_group 2>&1 >/dev/null)
  code=$?
  set -e
  if [ "$code" -ne 1 ] || ! grep -q "cargo feature \`$feature\`" <<<"$msg"; then
    echo "expected exit 1 naming the $feature feature for $ty, got exit $code: $msg" >&2
    exit 1
  fi
  echo "ok ($ty): $msg"
done <<<"$missing"

step "done: what the run started is gone"
# (checked by `leftovers`, on exit)
