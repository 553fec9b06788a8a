#!/usr/bin/env bash
# The crates as crates.io would serve them (issue 25 item 5):
#   1. `cargo package -p <each publishable crate>`: every crate but the `publish = false`
#      ones (the testkit and the examples), in dependency order; each is verified by
#      building it from its own .crate, the workspace crates it depends on served from a
#      local registry of the packages made before it (cargo's handling of workspace
#      members; path dependencies are replaced by their versions).
#   2. A throwaway consumer project, outside the workspace, that names `meshline` by
#      version only: `[patch.crates-io]` points each meshline crate at its .crate file
#      unpacked (never at the workspace's folders). It compiles the README's "Use it"
#      program, taken from README.md as written, and runs it against a `tc-server`: it
#      must print the transaction's XID and `Committed`.
# Run from anywhere; scripts/test.sh runs it. TC_SERVER: a built `tc-server` binary to
# use (default: built here from meshline-examples). The consumer shares the target dir,
# so the crates.io dependencies it has in common with the workspace are not rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
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

# Publishable: every member whose manifest does not say `publish = false`. The two
# test-only crates must stay out (the testkit starts servers; the examples are programs).
publishable=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print("\n".join(sorted(p["name"] for p in json.load(sys.stdin)["packages"] if p["publish"] != [])))')
for name in meshline-testkit meshline-examples; do
  if grep -qx "$name" <<<"$publishable"; then
    echo "package-check: $name is test-only and must say publish = false" >&2
    exit 1
  fi
done
version=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "meshline"))')

echo "== cargo package: $(echo $publishable) (each verified from its package)"
# One command for all of them: cargo packages them in dependency order and serves the
# ones already packaged to the next from a local registry. (`--workspace` would package
# the test-only crates too: `cargo package` ignores `publish = false`.)
# --allow-dirty: what is checked is that the crates package and build, not the git
# state (CI runs on a clean checkout anyway).
pkg_args=()
for name in $publishable; do pkg_args+=(-p "$name"); done
# A target folder of its own, emptied first: cargo treats a crate from a registry as
# immutable by name and version, so a warm target reused an older build of
# meshline-registry-core 0.1.0 (same version, older code) and verification failed.
pkgtarget="$target/package-check"
rm -rf "$pkgtarget"
CARGO_TARGET_DIR="$pkgtarget" cargo package "${pkg_args[@]}" --allow-dirty --quiet
mkdir -p "$work/crates"
for name in $publishable; do
  crate="$pkgtarget/package/$name-$version.crate"
  [ -f "$crate" ] || { echo "package-check: $name was not packaged ($crate missing)" >&2; exit 1; }
  tar -xzf "$crate" -C "$work/crates"
  echo "packaged $name $version ($(du -k "$crate" | cut -f1) KiB)"
done

echo "== a consumer built from the packages: the README's \"Use it\" program"
consumer="$work/consumer"
mkdir -p "$consumer/src"
# The README's first ```rust,no_run block, as written.
awk '/^```rust,no_run$/ { inside = 1; next } inside && /^```$/ { exit } inside' README.md \
  >"$consumer/src/main.rs"
grep -q 'TransactionManager::builder()' "$consumer/src/main.rs" ||
  { echo "package-check: no \"Use it\" program found in README.md" >&2; exit 1; }
{
  cat <<EOF
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

# Its own workspace: not a member of the one it sits under.
[workspace]

[patch.crates-io]
EOF
  for name in $publishable; do
    echo "$name = { path = \"$work/crates/$name-$version\" }"
  done
} >"$consumer/Cargo.toml"
# The workspace's lock: the consumer's crates.io dependencies resolve to the versions
# already built in the shared target dir.
cp Cargo.lock "$consumer/Cargo.lock"
# The patches of crates the consumer does not use (the CLI, the other backends) are
# reported by cargo as unused, which is expected: the build's log is shown on failure.
if ! CARGO_TARGET_DIR="$pkgtarget" cargo build --quiet --manifest-path "$consumer/Cargo.toml" \
  2>"$work/consumer-build.log"; then
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
  cargo build --quiet -p meshline-examples --bin tc-server
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
printf 'service.default.grouplist=%s\n' "$addr" >"$consumer/seata.properties"
out=$(cd "$consumer" && RUST_LOG=off timeout 60 "$pkgtarget/debug/meshline-consumer")
echo "consumer printed: $out"
# `<xid> Committed`; Seata's XID is <ip>:<port>:<transaction id>, on this TC.
if ! [[ "$out" =~ ^${addr//./\\.}:[0-9]+\ Committed$ ]]; then
  echo "package-check: expected '<xid of $addr> Committed' from the README's program, got: $out" >&2
  exit 1
fi
echo "== package-check: every publishable crate packages, and the README's program built from the packages committed a transaction"
