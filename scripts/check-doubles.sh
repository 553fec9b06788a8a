#!/usr/bin/env bash
# Keeps meshline's Consul and Eureka test doubles honest: each double (the
# `consul-double` / `eureka-double` binaries of meshline-testkit) is driven by an
# independent client from another ecosystem, and any answer that client does not expect
# fails this script:
#   - npm `consul` 2.x           -> scripts/check-doubles/consul.js
#   - npm `eureka-js-client` 4.x -> scripts/check-doubles/eureka.js
# The npm packages go into a temp dir (no global install). Run from anywhere; takes
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

echo "== build the doubles"
cargo build --quiet -p meshline-testkit --bin consul-double --bin eureka-double
bin="${CARGO_TARGET_DIR:-target}/debug"

echo "== install npm consul@2 and eureka-js-client@4 into $tmp"
npm install --prefix "$tmp" --prefer-offline --no-audit --no-fund --no-save --loglevel=error \
  consul@2 eureka-js-client@4 >"$tmp/npm.log" 2>&1 || {
  cat "$tmp/npm.log" >&2
  echo "check-doubles: npm install failed; the other-ecosystem clients cannot run" >&2
  exit 1
}

# Starts a double on a free port; prints its address once it is listening.
start() {
  local name=$1
  "$bin/$name" --port 0 >"$tmp/$name.addr" 2>"$tmp/$name.log" &
  pids+=($!)
  for _ in $(seq 1 100); do
    if [ -s "$tmp/$name.addr" ]; then
      head -n 1 "$tmp/$name.addr"
      return 0
    fi
    sleep 0.1
  done
  echo "check-doubles: $name did not start" >&2
  cat "$tmp/$name.log" >&2
  return 1
}

consul_addr=$(start consul-double)
eureka_addr=$(start eureka-double)

echo "== npm consul@$(node -p "require('$tmp/node_modules/consul/package.json').version") against consul-double at $consul_addr"
NODE_PATH="$tmp/node_modules" timeout 60 node scripts/check-doubles/consul.js "$consul_addr"

echo "== npm eureka-js-client@$(node -p "require('$tmp/node_modules/eureka-js-client/package.json').version") against eureka-double at $eureka_addr"
NODE_PATH="$tmp/node_modules" timeout 60 node scripts/check-doubles/eureka.js "$eureka_addr"

echo "== check-doubles: both doubles answer as the official clients expect"
