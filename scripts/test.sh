#!/usr/bin/env bash
# The README's test command. On a fresh Debian machine it installs what the tests need
# (scripts/install-test-deps.sh), then checks formatting, lints, runs every test and
# builds the docs. Any failure stops the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A one-off run gains nothing from incremental state, which costs gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Each step prints the time and the free disk, so a run that fails names its step and
# shows whether the disk was the cause.
step() {
  printf '\n== %s (%s, %s free)\n' "$1" "$(date -u +%H:%M:%S)" \
    "$(df -h --output=avail . | tail -1 | tr -d ' ')"
}

# Every feature of every crate (the facade's `tower` adapter included) except Nacos TLS (`nacos-tls`, registry-nacos `tls`):
# nacos-sdk's TLS switch makes every Nacos connection of the build TLS, and the test
# server (rnacos) serves plain connections only. That feature is checked on its own
# below. TLS of every other backend is in (`all-tls`), so its tests run against real
# TLS servers.
FEATURES="meshline/all-tls,meshline/rpc,meshline/tower,meshline-cli/all-tls"
FEATURES+=",meshline-examples/all-registries,meshline-examples/etcd"

step "install test dependencies"
bash scripts/install-test-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --features "$FEATURES" -- -D warnings
cargo clippy -p meshline-registry-nacos --all-targets --features tls -- -D warnings

step "cargo test"
# --no-fail-fast: one run reports every failing test binary, not only the first.
cargo test --workspace --no-fail-fast --features "$FEATURES"

step "nacos-tls: builds, and its refusals (nacos-sdk's TLS cannot be served by rnacos)"
cargo test -p meshline-registry-nacos --features tls --lib

step "the Consul and Eureka doubles against independent npm clients"
bash scripts/check-doubles.sh

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --features "$FEATURES" --no-deps --quiet
# The backends' crate with no backend on: its crate docs must not link to a type a
# feature leaves out (they did, for ZooKeeper and Redis).
RUSTDOCFLAGS="-D warnings" cargo doc -p meshline-registry-others --no-deps --quiet

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

step "done"
