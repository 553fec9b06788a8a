#!/usr/bin/env bash
# The crates as crates.io would serve them:
#   1. `cargo package -p <each publishable crate>`: every crate but the `publish = false`
#      ones (the testkit and the examples), in dependency order (cargo serves the ones
#      already packaged to the next from a local registry; path dependencies are
#      replaced by their versions).
#   2. A throwaway consumer workspace, outside this one, that names the crates by
#      version only: `[patch.crates-io]` points each meshline crate at its .crate file
#      unpacked (never at the workspace's folders). One member depends on every
#      publishable library and is checked (`cargo check`: each library compiles from
#      its package); the other is the README's "Use it" program, taken from README.md
#      as written, with the README's dependencies: built and run against a
#      `tc-server`, it must print the transaction's XID and `Committed`. The CLI (a
#      binary only), its package a third member, is checked with `libs`. The workspace's
#      profiles are the consumer's too (scripts/toml-profiles.py).
# Why not `cargo package`'s own verification: it builds every crate from its package in
# a target of its own, each dependent again with its own features (meshline-registry-core
# was compiled 9 times), 3 minutes of a fresh run; and it could not share the
# workspace's target, where cargo treats a crate from that local registry as immutable
# by name and version and reused an older build of the same version. The consumer's
# crates are path patches (checked by their sources, never stale), so it shares the
# workspace's target: the crates.io dependencies it has in common are not rebuilt.
# Run from anywhere; scripts/test.sh runs it. TC_SERVER: a built `tc-server` binary to
# use (default: built here from meshline-example-tc). PACKAGE_CHECK_IDLE=1: its
# compiles run at idle priority (scripts/test.sh runs it beside tests that wait on
# servers or on timers; the tc-server and the program run at normal priority).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The compiles (cargo package, check, build): at idle priority with PACKAGE_CHECK_IDLE.
build() {
  if [ -n "${PACKAGE_CHECK_IDLE:-}" ]; then
    chrt --idle 0 cargo "$@"
  else
    cargo "$@"
  fi
}
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac

work=$(mktemp -d)
tc_pid=""
cleanup() {
  if [ -n "$tc_pid" ]; then
    kill "$tc_pid" 2>/dev/null || true
    wait "$tc_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Publishable: every member whose manifest does not say `publish = false`. The
# test-only crates must stay out (the testkit starts servers; the examples are programs).
publishable=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print("\n".join(sorted(p["name"] for p in json.load(sys.stdin)["packages"] if p["publish"] != [])))')
for name in meshline-testkit meshline-example-support meshline-bench-support meshline-example-tc meshline-example-gateway; do
  if grep -qx "$name" <<<"$publishable"; then
    echo "package-check: $name is test-only and must say publish = false" >&2
    exit 1
  fi
done
# The publishable crates with a library (all but the CLI, a binary only).
libraries=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print("\n".join(sorted(p["name"] for p in json.load(sys.stdin)["packages"] if p["publish"] != [] and any("lib" in t["kind"] for t in p["targets"]))))')
version=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "meshline"))')

echo "== cargo package: $(echo $publishable)"
# One command for all of them, in dependency order. (`--workspace` would package the
# test-only crates too: `cargo package` ignores `publish = false`.) --allow-dirty: what
# is checked is that the crates package and build, not the git state (CI runs on a
# clean checkout anyway). --no-verify: the consumer below builds them (see the top).
pkg_args=()
for name in $publishable; do pkg_args+=(-p "$name"); done
# The packages go to a folder of their own, emptied first, so none is left from an
# earlier run.
pkgtarget="$target/package-check"
rm -rf "$pkgtarget"
# Offline first: resolving twelve packages' lock files against the registry takes ~18 s,
# from the index cache the workspace's builds left ~1 s; online when that cache lacks
# an entry (nothing built yet).
if ! CARGO_TARGET_DIR="$pkgtarget" build package "${pkg_args[@]}" --allow-dirty --no-verify \
  --quiet --offline 2>"$work/package-offline.log"; then
  echo "package-check: packaging offline failed (below); packaging online" >&2
  cat "$work/package-offline.log" >&2
  CARGO_TARGET_DIR="$pkgtarget" build package "${pkg_args[@]}" --allow-dirty --no-verify --quiet
fi
mkdir -p "$work/crates"
for name in $publishable; do
  crate="$pkgtarget/package/$name-$version.crate"
  [ -f "$crate" ] || { echo "package-check: $name was not packaged ($crate missing)" >&2; exit 1; }
  tar -xzf "$crate" -C "$work/crates"
  echo "packaged $name $version ($(du -k "$crate" | cut -f1) KiB)"
done

echo "== a consumer built from the packages: the README's \"Use it\" program, and every library"
# A workspace of two: `app`, the README's program with the README's dependencies (built
# and run below), and `libs`, which depends on every publishable library (checked: each
# compiles from its package, with its default features).
consumer="$work/consumer"
mkdir -p "$consumer/app/src" "$consumer/libs/src"
# The README's first ```rust,no_run block, as written.
awk '/^```rust,no_run$/ { inside = 1; next } inside && /^```$/ { exit } inside' README.md \
  >"$consumer/app/src/main.rs"
grep -q 'TransactionManager::builder()' "$consumer/app/src/main.rs" ||
  { echo "package-check: no \"Use it\" program found in README.md" >&2; exit 1; }
cat >"$consumer/app/Cargo.toml" <<EOF
[package]
name = "meshline-consumer"
version = "0.0.0"
edition = "2024"
publish = false

# The README's "Dependencies" line: meshline (default features), tokio with macros and
# rt-multi-thread, tracing-subscriber for the logs.
[dependencies]
meshline = "$version"
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
tracing-subscriber = { version = "0.3", features = ["env-filter"] }
EOF
{
  cat <<EOF
[package]
name = "meshline-libs"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
EOF
  for name in $libraries; do
    echo "$name = \"$version\""
  done
} >"$consumer/libs/Cargo.toml"
: >"$consumer/libs/src/lib.rs"
# The CLI (a binary only) from its package, a member beside them: checked with `libs`,
# in one feature resolution.
members='"app", "libs"'
check_args=(-p meshline-libs)
if grep -qx meshline-cli <<<"$publishable"; then
  cp -r "$work/crates/meshline-cli-$version" "$consumer/cli"
  members+=', "cli"'
  check_args+=(-p meshline-cli)
fi
{
  cat <<EOF
# Its own workspace: not a member of the one it sits under.
[workspace]
members = [$members]
resolver = "3"

[patch.crates-io]
EOF
  for name in $publishable; do
    echo "$name = { path = \"$work/crates/$name-$version\" }"
  done
  # The workspace's profiles, as its Cargo.toml writes them: a profile's settings are
  # part of every artifact's hash (the dependencies' `debug = false` above all), so
  # with the same profiles a dependency this consumer shares with the workspace's
  # builds (same version, same features) is not compiled again. Without them every
  # dependency was, checked and built: about 100 s of a run.
  python3 scripts/toml-profiles.py Cargo.toml
} >"$consumer/Cargo.toml"
# The workspace's lock: the consumer's crates.io dependencies resolve to the versions
# already built in the shared target dir.
cp Cargo.lock "$consumer/Cargo.lock"
if ! CARGO_TARGET_DIR="$target" build check --quiet --manifest-path "$consumer/Cargo.toml" \
  "${check_args[@]}" 2>"$work/consumer-build.log"; then
  cat "$work/consumer-build.log" >&2
  echo "package-check: a packaged crate does not compile from its package" >&2
  exit 1
fi
echo "every packaged library compiles from its package"
[ ! -d "$consumer/cli" ] || echo "meshline-cli $version compiles from its package"
if ! CARGO_TARGET_DIR="$target" build build --quiet --manifest-path "$consumer/Cargo.toml" \
  -p meshline-consumer 2>>"$work/consumer-build.log"; then
  cat "$work/consumer-build.log" >&2
  echo "package-check: the README's program does not build from the packages" >&2
  exit 1
fi
# Where each crate of the consumer's graph came from: meshline from its unpacked
# package, none from the workspace's folders.
manifests=$(cargo metadata --format-version 1 --manifest-path "$consumer/Cargo.toml" \
  2>>"$work/consumer-build.log" |
  python3 -c 'import json,sys; print("\n".join(p["manifest_path"] for p in json.load(sys.stdin)["packages"]))')
if ! grep -qx "$work/crates/meshline-$version/Cargo.toml" <<<"$manifests" ||
  grep "^$root/" <<<"$manifests"; then
  echo "package-check: the consumer's meshline crates are not (all) the packaged ones (above)" >&2
  exit 1
fi

if [ -z "${TC_SERVER:-}" ]; then
  build build --quiet -p meshline-example-tc --bin tc-server
  TC_SERVER="$target/debug/tc-server"
fi
mkfifo "$work/tc.out"
"$TC_SERVER" --port 0 >"$work/tc.out" 2>"$work/tc.log" &
tc_pid=$!
exec {tc_fd}<"$work/tc.out"
line=""
if ! IFS= read -r -t 30 -u "$tc_fd" line || [[ "$line" != "tc-server "*" listening on "* ]]; then
  echo "package-check: tc-server did not start: ${line:-no output}" >&2
  cat "$work/tc.log" >&2
  exit 1
fi
addr=${line##* listening on }
echo "tc-server at $addr"
# The program reads seata.properties from its working directory: Seata's default group
# (default_tx_group -> default) with the tc-server as the cluster's grouplist.
printf 'service.default.grouplist=%s\n' "$addr" >"$consumer/app/seata.properties"
out=$(cd "$consumer/app" && RUST_LOG=off timeout 60 "$target/debug/meshline-consumer")
echo "consumer printed: $out"
# `<xid> Committed`; Seata's XID is <ip>:<port>:<transaction id>, on this TC.
if ! [[ "$out" =~ ^${addr//./\\.}:[0-9]+\ Committed$ ]]; then
  echo "package-check: expected '<xid of $addr> Committed' from the README's program, got: $out" >&2
  exit 1
fi
echo "== package-check: every publishable crate packages, and the README's program built from the packages committed a transaction"
