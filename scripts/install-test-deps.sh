#!/usr/bin/env bash
# Installs what the test suite needs on a Debian machine. Idempotent: every step checks
# first and does nothing when the tool is already there.
#   etcd-server etcd-client : real etcd for registry-etcd tests (testkit starts it)
#   zookeeper               : real ZooKeeper (java -cp /usr/share/java/zookeeper.jar)
#   redis-server            : real Redis (redis-server / redis-cli)
#   protobuf-compiler       : protoc, needed by etcd-client's build script
#   rnacos (crates.io)      : a Nacos-protocol server for registry-nacos tests; installed
#                             with `cargo install --debug` into the cargo home, so a warm
#                             machine keeps the binary and does not rebuild it
#   libprotobuf-dev         : google/protobuf/*.proto that etcd-client's protos import
#   libssl-dev pkg-config   : OpenSSL headers for the `nacos-tls` check build (nacos-sdk's
#                             TLS feature uses reqwest's native-tls for its HTTP login)
#   (the other TLS tests need nothing new: Debian's redis-server and etcd serve TLS, and
#    their certificates are generated at test time by rcgen)
#   chromium                : headless browser for examples/gateway/tests/suite/browser.rs (the
#                             gateway's WebSocket page as a real browser client)
#   iproute2 nftables       : test networks (meshline_testkit::net): hosts in their own
#                             network namespaces, links blackholed by an nftables rule
#   postgresql mariadb-server : real databases for the TCC fence (tcc-fence/tests/fence.rs;
#                             testkit starts a throwaway server of each in a temp dir; the
#                             packages' own services are not used)
#   python3                 : the gateway's second client (examples/gateway/clients/python, run
#                             by examples/gateway/tests/suite/gateway_python.rs; standard library only)
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v python3 >/dev/null 2>&1 || need+=(python3)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v mariadbd >/dev/null 2>&1 || need+=(mariadb-server)

if [ ${#need[@]} -gt 0 ]; then
  echo "install-test-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "install-test-deps: all present"
fi

# rnacos: the only Nacos-protocol server that installs here (no Java Nacos server).
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if command -v rnacos >/dev/null 2>&1 || [ -x "$cargo_bin/rnacos" ]; then
  echo "install-test-deps: rnacos present"
else
  # A debug build without debug info: 2.5 min on 2 cores instead of about 10 for the
  # release build (4 min of CPU against 18, measured; see README "What to expect"),
  # and the Nacos tests take as long against it (80 s either way): rnacos idles in
  # them. A new version or profile is a new install: remove the binary first.
  echo "install-test-deps: cargo install --debug rnacos 0.8.8 (about 3 minutes, once per machine)"
  CARGO_PROFILE_DEV_DEBUG=0 cargo install rnacos --version 0.8.8 --locked --debug --quiet
fi
