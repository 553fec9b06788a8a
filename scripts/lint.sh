#!/usr/bin/env bash
# Clippy (warnings are errors) and the docs (warnings are errors), with the features
# scripts/test.sh tests (FEATURES). CLIPPY_IN_TEST_BUILD=1 (scripts/test.sh): clippy
# lints the workspace in the test builds instead (scripts/test.sh says why).
# scripts/test.sh runs this alongside the tests that wait on servers
# (scripts/run-tests.py --alongside): it is CPU work, they mostly wait.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${FEATURES:?FEATURES: the features scripts/test.sh tests}"

echo "== comments say why the code is as it is now: none cites an issue"
# History belongs in git: a comment that names an issue ("Issue #13 item 4: ...")
# rots as issues are renumbered and closed.
if grep -rnE '//.*\b[Ii]ssue ?#?[0-9]+' --include='*.rs' \
     --exclude-dir=target --exclude-dir=.git . ; then
  echo "scripts/lint.sh: the comments above cite issue numbers; say the reason instead" >&2
  exit 1
fi
# Nor a numbered fault of some review ("Fault 8: the backoff was reset..."): a test's
# doc says what it holds now.
if grep -rnE '//.*\bFault [0-9]+:' --include='*.rs' \
     --exclude-dir=target --exclude-dir=.git . ; then
  echo "scripts/lint.sh: the comments above number a fault; say what the test holds instead" >&2
  exit 1
fi

echo "== file and function sizes"
python3 scripts/check-sizes.py

echo "== targets that cargo test skips hold no test"
python3 scripts/check-untested.py

# The checks below build nothing that a test build shares: without the clippy wrapper
# scripts/test.sh exports for its test build, they check the workspace's crates
# without clippy's lints, which is quicker and is all they are for.
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS

echo "== cargo doc (warnings are errors)"
# With the examples: their docs are checked too, and documenting them resolves the
# dependencies' features with the dev-dependencies, as clippy's --all-targets does, so
# the dependencies checked here serve the clippy and feature checks below.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --features "$FEATURES" --no-deps --lib --bins --examples --quiet
# The backends' crate with no backend on: its crate docs must not link to a type a
# feature leaves out (they did, for ZooKeeper and Redis).
RUSTDOCFLAGS="-D warnings" cargo doc -p meshline-registry-others --no-deps --quiet

echo "== cargo clippy -D warnings"
if [ -n "${CLIPPY_IN_TEST_BUILD:-}" ]; then
  # The Nacos TLS build too: scripts/builds-beside-tests.sh builds its tests with the
  # same wrapper and fails on a warning.
  echo "linted in scripts/test.sh's test builds (clippy-driver as the workspace wrapper)"
else
  cargo clippy --workspace --all-targets --features "$FEATURES" -- -D warnings
  cargo clippy -p meshline-registry-nacos --all-targets --features tls -- -D warnings
fi

echo "== every backend feature builds alone, without a warning"
python3 scripts/check-features.py
echo "== clippy and cargo doc: no warning"
