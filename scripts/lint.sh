#!/usr/bin/env bash
# Clippy (warnings are errors) and the docs (warnings are errors), with the features
# scripts/test.sh tests (FEATURES). scripts/test.sh runs this alongside the tests that
# wait on servers (scripts/run-tests.py --alongside): it is CPU work, they mostly wait.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${FEATURES:?FEATURES: the features scripts/test.sh tests}"

echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --features "$FEATURES" -- -D warnings
cargo clippy -p meshline-registry-nacos --all-targets --features tls -- -D warnings

echo "== cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --features "$FEATURES" --no-deps --quiet
# The backends' crate with no backend on: its crate docs must not link to a type a
# feature leaves out (they did, for ZooKeeper and Redis).
RUSTDOCFLAGS="-D warnings" cargo doc -p meshline-registry-others --no-deps --quiet
echo "== clippy and cargo doc: no warning"
