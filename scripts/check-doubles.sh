#!/usr/bin/env bash
# Keeps meshline's Consul and Eureka test doubles honest: each double (the
# `consul-double` / `eureka-double` binaries of meshline-testkit) is driven by an
# independent client from another ecosystem, and any answer that client does not expect
# fails this script:
#   - npm `consul` 2.x           -> scripts/check-doubles/consul.js
#   - npm `eureka-js-client` 4.x -> scripts/check-doubles/eureka.js
# The npm packages go into a temp dir (no global install). Run from anywhere
# (DOUBLES_BIN_DIR: use the binaries there instead of building them); takes
# well under a minute once the binaries are built. Exit status is non-zero on any
# mismatch or if a client cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# DOUBLES_BIN_DIR: a folder that already holds both binaries (scripts/test.sh passes
# the ones its test build made); otherwise they are built here.
if [ -n "${DOUBLES_BIN_DIR:-}" ]; then
  bin=$DOUBLES_BIN_DIR
  for b in consul-double eureka-double; do
    [ -x "$bin/$b" ] || { echo "check-doubles: no $b in DOUBLES_BIN_DIR=$bin" >&2; exit 1; }
  done
  echo "== the doubles from $bin"
else
  echo "== build the doubles"
  cargo build --quiet -p meshline-testkit --bin consul-double --bin eureka-double
  bin="${CARGO_TARGET_DIR:-target}/debug"
fi

echo "== install npm consul@2 and eureka-js-client@4 into $tmp"
npm install --prefix "$tmp" --prefer-offline --no-audit --no-fund --no-save --loglevel=error \
  consul@2 eureka-js-client@4 >"$tmp/npm.log" 2>&1 || {
  cat "$tmp/npm.log" >&2
  echo "check-doubles: npm install failed; the other-ecosystem clients cannot run" >&2
  exit 1
}

# Starts a double on a free port and sets $addr to the address it prints once it is
# listening. Not run in a command substitution: that subshell's `pids+=` never reached
# the cleanup, so both doubles outlived every run. The first line is read from a FIFO
# as it is written (no polling); the FIFO stays open until the end, so a double that
# writes more never blocks on it.
addr=""
start() {
  local name=$1 fd
  mkfifo "$tmp/$name.out"
  "$bin/$name" --port 0 >"$tmp/$name.out" 2>"$tmp/$name.log" &
  pids+=($!)
  exec {fd}<"$tmp/$name.out"
  if ! IFS= read -r -t 30 -u "$fd" addr || [ -z "$addr" ]; then
    echo "check-doubles: $name did not start (no address within 30 s)" >&2
    cat "$tmp/$name.log" >&2
    return 1
  fi
}

start consul-double
consul_addr=$addr
start eureka-double
eureka_addr=$addr

echo "== npm consul@$(node -p "require('$tmp/node_modules/consul/package.json').version") against consul-double at $consul_addr"
NODE_PATH="$tmp/node_modules" timeout 60 node scripts/check-doubles/consul.js "$consul_addr"

echo "== npm eureka-js-client@$(node -p "require('$tmp/node_modules/eureka-js-client/package.json').version") against eureka-double at $eureka_addr"
NODE_PATH="$tmp/node_modules" timeout 60 node scripts/check-doubles/eureka.js "$eureka_addr"

echo "== check-doubles: both doubles answer as the official clients expect"
