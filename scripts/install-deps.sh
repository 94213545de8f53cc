#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks for courier's tests and demos:
# PostgreSQL server binaries, etcd, nats-server, protoc (for the etcd client
# crate), Chromium with its driver (browser tests), and cargo-nextest.
# Idempotent: installs only what is missing.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
pg_ok() { have initdb || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }

pg_ok || need+=(postgresql)
have etcd || need+=(etcd-server)
have etcdctl || need+=(etcd-client)
have nats-server || need+=(nats-server)
have protoc || need+=(protobuf-compiler)
have chromium || need+=(chromium)
have chromedriver || need+=(chromium-driver)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# PostgreSQL refuses to run as root; courier runs it as 'postgres' then.
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi
echo "dependencies ready: $(initdb --version 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb | head -1), $(etcd --version 2>/dev/null | head -1), $(nats-server --version 2>/dev/null), $(protoc --version)"
